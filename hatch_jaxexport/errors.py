"""The exceptions and warnings raised by hatch-jaxexport."""

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
