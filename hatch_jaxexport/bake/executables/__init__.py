"""Bake room 3, executables: precompiled XLA executables for the machines a build targets.

``compiling`` (which executables a build compiles, and compiling them, one process per
target, ``_compiler``) and ``merge`` (the executables several builders compiled, merged into one
wheel). It may import the layers below and nothing else of the build.
"""

__all__ = ["compiling", "merge"]
