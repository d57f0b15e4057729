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


class CallMismatch(Exception):
    """A call refused before anything runs: its arguments fit no exported structure, or not the
    function's signature. The message names the function, the argument (its path in a pytree),
    what was expected and what was given. Catch this to catch every kind; each kind is one
    subclass, which also is the builtin exception that kind raised before (``TypeError``,
    ``ValueError``), so existing ``except`` clauses keep working."""

    #: Whether the source refuses the call too (its arguments do not bind to the function's
    #: signature): no structure or recording could serve it, and strict mode's refusal says so
    #: instead of suggesting one.
    source_refuses: bool = False


class SignatureMismatch(CallMismatch, TypeError):
    """Arguments that do not bind to the function's signature (missing, unknown, too many, a
    keyword-only one given by position, ``*args``), or a value for an argument the structure
    leaves out."""


class StaticValueMismatch(CallMismatch, ValueError):
    """A static argument's value that was not baked; the message lists the baked values."""


class PytreeMismatch(CallMismatch, TypeError):
    """An argument whose pytree differs from the structure's: another container type, other
    dict keys or fields, another static field value, ``None`` where an array is expected or a
    non-array (a list, a string, an object) where a leaf is."""


class DtypeMismatch(CallMismatch, TypeError):
    """An array (or Python scalar) of another dtype than the leaf's, after jax's dtype
    canonicalization, or a 64-bit leaf called with ``jax_enable_x64`` off."""


class ShapeMismatch(CallMismatch, TypeError, ValueError):
    """A wrong rank (a ``TypeError`` before), a wrong fixed size or expression, a symbol with
    two sizes, a symbol below 1, a violated constraint or a dimension beyond int32 (each a
    ``ValueError`` before): both builtins, so either ``except`` still catches it."""


class FallbackWarning(UserWarning):
    """The loader runs the source because no baked artifact fits the call.

    Issued only where the maintainer asks (``HATCH_JAXEXPORT_WARNINGS=1``, never while
    recording); by default the same notice is a record of the ``hatch_jaxexport`` logger, so an
    end user's process sees nothing new (``runtime.notices``)."""


class TieredCompileWarning(RuntimeWarning):
    """The background optimized compile failed; the quick tier stays in use. A ``WARNING``
    record of the ``hatch_jaxexport`` logger; a warning only with ``HATCH_JAXEXPORT_WARNINGS=1``."""


class CacheWarning(UserWarning):
    """A cache folder cannot be written (read-only, full, a file in its place): calls still
    run, compiling what the cache would have served. Told at most once per process, as a
    ``WARNING`` record of the ``hatch_jaxexport`` logger; a warning only with
    ``HATCH_JAXEXPORT_WARNINGS=1``."""


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


__all__ = ["ArtifactError", "CacheWarning", "CallMismatch", "CheckError", "ConfigError",
           "DtypeMismatch", "ExportError", "FallbackWarning", "NotPortable", "PytreeMismatch",
           "ShapeMismatch", "SignatureMismatch", "SpecError", "StaticValueMismatch",
           "TieredCompileWarning"]
