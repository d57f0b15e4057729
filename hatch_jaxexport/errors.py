"""Every exception and warning hatch-jaxexport raises, below all four layers.

Each layer imports what it raises from here, so a user catches one class whatever module raised
it, and the docs list them in one place.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A malformed ``@exportable`` spec, raised at decoration time."""


class ArtifactError(RuntimeError):
    """A baked artifact or manifest that cannot be used (corrupt, refused by jax, missing).

    Raised in strict mode (``HATCH_JAXEXPORT_STRICT=1``) where the loader would otherwise fall
    back to tracing the source, and always for a corrupt manifest.
    """


class ExportError(RuntimeError):
    """One or more exports failed during a build; ``failures`` lists each one."""

    def __init__(self, failures: list[str], headline: str | None = None) -> None:
        self.failures = list(failures)
        if len(self.failures) == 1 and headline is None:
            super().__init__(self.failures[0])
            return
        lines = "\n".join(f"  - {failure}" for failure in self.failures)
        headline = headline or f"{len(self.failures)} exports failed"
        super().__init__(f"{headline}:\n{lines}")


class FallbackWarning(UserWarning):
    """The loader traces the source because no baked artifact fits the call."""


class TieredCompileWarning(RuntimeWarning):
    """The background optimized compile failed; the quick tier stays in use."""


class ConfigError(ValueError):
    """Invalid build configuration; ``errors`` lists every problem, each with its TOML path."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        if len(self.errors) == 1:
            message = f"invalid hatch-jaxexport configuration: {self.errors[0]}"
        else:
            lines = "\n".join(f"  - {error}" for error in self.errors)
            message = f"invalid hatch-jaxexport configuration ({len(self.errors)} errors):\n{lines}"
        super().__init__(message)


class CheckError(RuntimeError):
    """The release check cannot start for a package (no installed distribution, source not
    importable)."""


class NotPortable(ValueError):
    """A variant that cannot be made portable; the message says why."""


__all__ = ["ArtifactError", "CheckError", "ConfigError", "ExportError", "FallbackWarning",
           "NotPortable", "SpecError", "TieredCompileWarning"]
