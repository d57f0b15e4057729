"""The choices and defaults of build and check options, shared by every layer that reads them.

One definition each, so the decorator, the build configuration, the orchestrator, the command line
and the pytest plugin cannot drift apart.
"""

from __future__ import annotations

#: Platforms jax.export can lower for.
KNOWN_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
#: Platforms of a function that names none, when the build names none either.
DEFAULT_PLATFORMS = ("cpu",)
#: What a build does with a failed export: fail the build, or skip it and record why.
ON_ERROR_CHOICES = ("fail", "skip")
#: How many concrete shapes the release check runs each artifact on.
DEFAULT_CHECK_SHAPES = 3
#: A build warns when a function captures an array at least this large (16 MiB): a captured
#: value is frozen into every artifact of the function, so a big one is almost always a mistake
#: (a table or weights that should be an argument).
CAPTURED_WARN_BYTES = 16 * 2**20


__all__ = ["CAPTURED_WARN_BYTES", "DEFAULT_CHECK_SHAPES", "DEFAULT_PLATFORMS", "KNOWN_PLATFORMS",
           "ON_ERROR_CHOICES"]
