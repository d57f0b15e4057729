"""Bake room 2, concrete: concrete-size artifacts, exported at sizes known at build time, where
a symbolic export is impossible or not wanted.

``exports`` (a structure's concrete-size artifacts where its symbolic export failed, and the
recorded calls of a spec-less function), ``forms`` (the concrete-size forms of symbolic
artifacts, for the sizes a function names or was called with), ``portable_export``
(concrete-size StableHLO for compilers without jax) and ``portable_bundle`` (an installed
package's portable variants, checked and bundled). It may import ``export`` and
``executables`` of the build, and the layers below.
"""

__all__ = ["exports", "forms", "portable_bundle", "portable_export"]
