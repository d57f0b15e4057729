"""Bake room 2, sized: artifacts at fixed sizes, where a symbolic export is impossible or not
wanted.

``concrete`` (concrete-size artifacts of a structure, and recorded calls of a spec-less
function), ``static_shapes`` (static-shape StableHLO of primal artifacts for named or recorded
sizes), ``portable_export`` (static-shape variants for non-JAX compilers) and
``portable_bundle`` (an installed package's portable variants, checked and bundled). It may
import ``export`` and ``executables`` of the build, and the layers below.
"""

__all__ = ["concrete", "portable_bundle", "portable_export", "static_shapes"]
