"""hatch-jaxexport: bake ``jax.export`` artifacts into wheels at build time, load them at run time.

Importing this package is light: it imports neither hatchling, setuptools nor pytest.
"""

from __future__ import annotations

from hatch_jaxexport.runtime.decorator import ExportableFunction, exportable

from .errors import ArtifactError, ExportError, FallbackWarning, SpecError

__version__ = "0.1.0"

__all__ = [
    "ArtifactError",
    "ExportError",
    "ExportableFunction",
    "FallbackWarning",
    "SpecError",
    "__version__",
    "exportable",
]
