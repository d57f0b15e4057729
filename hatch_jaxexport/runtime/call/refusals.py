"""Refusing, telling and reporting a call that no artifact serves: the one place that decides.

A drop-in call is never refused by default: it runs the source, and what the maintainer needs
to know is told after (the ``hatch_jaxexport`` logger, ``call_report()``,
``HATCH_JAXEXPORT_REPORT``; a warning only when asked: ``runtime.notices``). Strict mode
(``HATCH_JAXEXPORT_STRICT``) is the maintainer's opt-in to refuse instead; every refusal is
raised here, before the source runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hatch_jaxexport.errors import ArtifactError, CallMismatch, FallbackWarning
from hatch_jaxexport.formats.settings import STRICT_ENV, strict_mode
from hatch_jaxexport.runtime.artifacts.package_artifacts import stale_reason
from hatch_jaxexport.runtime.executables.entries import ServedCall
from hatch_jaxexport.runtime.notices import level_of, notify, report

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

#: What a strict refusal of an uncovered call adds: the ways to serve the call.
STRICT_FIX = (f" [{STRICT_ENV} is set: no baked artifact covers this call; to serve it, "
              "add a structure that accepts it, or record it (HATCH_JAXEXPORT_RECORD=1 while "
              f"the tests run) and rebuild; unset {STRICT_ENV} to trace the source instead]")


def no_artifact(fn: FunctionRecord, reason: str) -> str:
    """``reason`` for a call that has no usable artifact: ``ArtifactError`` in strict mode."""
    if strict_mode():
        raise ArtifactError(f"{fn.name}: no usable baked artifact ({STRICT_ENV} is set): {reason}")
    return reason


#: What a strict refusal of a call the source refuses too adds: the call is at fault.
SOURCE_REFUSES = " (the source refuses this call too: no structure or recording can serve it)"


def source_rejected(fn: FunctionRecord, err: BaseException) -> ArtifactError:
    """Strict mode's refusal of a spec-less function's call that its source rejects itself
    (``err``: the source's own exception, which a call without strict mode raises): the
    source's exception type and message first, then why no artifact will ever serve it."""
    return ArtifactError(
        f"{fn.name}: {type(err).__name__}: {err} [{STRICT_ENV} is set: the source itself "
        "rejects this call, and a recording (HATCH_JAXEXPORT_RECORD=1) never keeps a call its "
        "source rejects, so no artifact serves it and recording again changes nothing; "
        f"without {STRICT_ENV} the call raises this error, as the source does]")


def refuse_uncovered(refusal: CallMismatch) -> None:
    """In strict mode, raise ``refusal`` (a call no structure accepts) with ``STRICT_FIX``, the
    ways to serve it; or, for a call the source refuses too (it does not bind to the function's
    signature), with ``SOURCE_REFUSES``: no structure or recording would serve it."""
    if strict_mode():
        fix = SOURCE_REFUSES if refusal.source_refuses else STRICT_FIX
        refusal.args = (f"{refusal}{fix}", *refusal.args[1:])
        raise refusal


def no_artifact_notice(fn: FunctionRecord, reason: str) -> str:
    """What the logger says of a structure's call that has no usable artifact (``""`` for
    stale sources: told once for the whole package, ``load_package_artifacts``)."""
    if reason == stale_reason(fn.package):
        return ""
    return f"{fn.name}: no usable baked artifact, tracing the source instead: {reason}"


def uncovered_notice(reason: str) -> str:
    """What the logger says of a call no structure accepts (``reason``: the mismatch)."""
    return (f"{reason}; tracing the source instead (a drop-in call: set {STRICT_ENV}=1 to "
            "refuse it)")


def tell_traced(fn: FunctionRecord, reason: str, notice: str) -> None:
    """The first time a function runs its source for ``reason``: a ``traced`` entry in its
    report (``call_report()``, ``HATCH_JAXEXPORT_REPORT``) and the ``notice`` on the logger
    (a warning only where the maintainer asks), at ``WARNING`` for a ``NeedsFix`` reason."""
    if fn.calls.first_report(("traced", reason)):
        report(fn.calls.reports, ServedCall(fn.name, "-", "traced", None, reason))
        if notice:  # "": told elsewhere (stale sources: once per package)
            notify(notice, FallbackWarning, level_of(reason))


__all__ = ["SOURCE_REFUSES", "STRICT_FIX", "no_artifact", "no_artifact_notice", "refuse_uncovered",
           "source_rejected", "tell_traced", "uncovered_notice"]
