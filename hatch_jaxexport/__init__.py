"""hatch-jaxexport: bake ``jax.export`` artifacts into wheels at build time, load them at run time.

Importing this package is light: it imports neither hatchling, setuptools nor pytest.
"""

from __future__ import annotations

from hatch_jaxexport.errors import (
    ArtifactError,
    CallMismatch,
    ExportError,
    FallbackWarning,
    SpecError,
)
from hatch_jaxexport.formats import __version__
from hatch_jaxexport.formats.statics import static
from hatch_jaxexport.runtime.call.decorator import ExportableFunction, exportable

__all__ = [
    "ArtifactError",
    "CallMismatch",
    "ExportError",
    "ExportableFunction",
    "FallbackWarning",
    "SpecError",
    "__version__",
    "exportable",
    "static",
]
