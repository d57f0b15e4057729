"""Bake room 3, executables: precompiled XLA executables for the machines a build targets.

``compiling`` (which executables a build compiles, and compiling them, one process per
target, ``_compiler``; a TPU target without a TPU, with the libtpu its jax pins: ``libtpu``),
``device_compile`` (a baked wheel's executables compiled for the device of the machine it runs
on, a TPU or GPU, in a process of its own, ``_device_compiler``), ``merge`` (the executables
several builders compiled, merged into one wheel) and ``companion_split`` (a wheel's
executables split into companion wheels, one per target, installed by the package's
extras). It may import the layers below and nothing else of the build.
"""

__all__ = ["companion_split", "compiling", "device_compile", "libtpu", "merge"]
