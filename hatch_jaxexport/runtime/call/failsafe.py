"""The default mode's fail-safe line: the one place where the artifact side's failures end.

A decorated function is a drop-in for its source. Whatever a call of it does on the artifact
side (reading the manifest, matching, choosing, reading a blob, loading or compiling an
executable, a cache entry, running it) may fail: a damaged install, a manifest its own build
got wrong, an executable that does not fit this process's devices, a bug of ours. None of that
is the caller's business. ``serve`` runs a call's whole artifact side (``loader`` for a function
with structures, ``recorded_calls`` for a spec-less one) inside one ``try``; an exception that
comes out of it is sorted here, once:

- **the source's own** (marked by ``runtime.source_errors``: the source refused the call, or a
  library's replayed warning became an error) passes through unchanged: it is what the plain
  library's caller would see;
- **any other**, in default mode, becomes the source's result (``run_source``): reported as a
  ``traced`` entry of ``call_report()`` (and the ``HATCH_JAXEXPORT_REPORT`` line), logged on
  the ``hatch_jaxexport`` logger with its traceback at ``DEBUG``, and settled: the resolution
  key the call reached runs the source from now on (or, where the failure came before any key,
  the whole function), so the next call does not try again. One line reaches stderr only for
  a damaged install (an ``ArtifactError``: the logger's ``WARNING``, once per package and
  reason); a bug of ours or an executable that does not fit is ``INFO``;
- in **strict mode** (``HATCH_JAXEXPORT_STRICT=1``) it is raised instead: the refusals strict
  mode makes on purpose as they are, anything else as an ``ArtifactError`` naming the function
  and chained to the original.

Nothing else in the call path catches a failure to run the source instead; the places that
still catch one do it to serve the call another way (a concrete size the dispatch does not
hold, forward mode a concrete-size artifact has no rule for), never to hide it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.errors import ArtifactError, CallMismatch
from hatch_jaxexport.runtime.call.targets import Attempt, source_target

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

# Imported in functions: the loader and the recorded calls (each function takes one of the
# two); the source's mark, strict mode's setting, the package's artifacts, the notices, the
# source's calls and the refusals only once a call failed on the artifact side (a first call
# a shipped executable or the executable cache serves imports none).

#: (package, what was read of it, reason) of a damaged install already told on the logger's
#: ``WARNING`` (stderr where no handler is set): one line per package and reason, not one per
#: function; again once the package is read again (``forget_package``).
_DAMAGE_TOLD: set[tuple[str, int, str]] = set()
_DAMAGE_LOCK = threading.Lock()


def serve(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The result of a call the fast path did not take: its artifact side's (``_artifact_side``),
    or, where that fails, the source's (default mode; strict mode raises)."""
    if fn.calls.faulted:  # a call like one whose artifact side failed: the source, at once
        reason = fn.calls.faulted.get(_signature(args, kwargs))
        if reason is not None:
            return _run_source(fn, (args, kwargs), reason)
    attempt = Attempt()
    try:
        return _artifact_side(fn, args, kwargs, attempt)
    except Exception as err:
        from hatch_jaxexport.runtime.source_errors import is_source_error

        if is_source_error(err):
            raise
        return _fall_back(fn, (args, kwargs), attempt, err)


def _artifact_side(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any],
                   attempt: Attempt) -> Any:
    """Everything a call does before and besides the source: the loader's walk for a
    function with structures, the recorded calls for a spec-less one."""
    if not fn.export_spec.structures:
        from hatch_jaxexport.runtime.call.recorded_calls import call_unstructured

        return call_unstructured(fn, args, kwargs)
    from hatch_jaxexport.runtime.call.loader import call_exportable

    return call_exportable(fn, args, kwargs, attempt)


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A call's signature for ``ResolvedCalls.faulted``: its tree, each array leaf's type, shape
    and dtype, every other leaf's type and value; ``None`` where that cannot be hashed."""
    from jax import tree_util

    try:
        leaves, tree = tree_util.tree_flatten((args, kwargs))
        parts: list[Any] = []
        for leaf in leaves:
            shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
            parts.append((type(leaf), tuple(shape), str(dtype)) if shape is not None and
                         dtype is not None else (type(leaf), leaf))
        signature = (tree, tuple(parts))
        hash(signature)
    except Exception:  # an unhashable static value, a tree whose aux data is one, or a leaf
        return None  # whose shape is no tuple: such calls are not settled, never refused
    return signature


def fault_reason(fn: FunctionRecord, err: Exception) -> str:
    """Why the source serves a call whose artifact side raised ``err``: a ``NeedsFix`` (the
    logger's ``WARNING``) for a damaged install, a drop-in's reason otherwise."""
    from hatch_jaxexport.runtime.artifacts.package_artifacts import (
        UnreadableArtifact,
        read_package_artifacts,
        unusable_reason,
    )
    from hatch_jaxexport.runtime.notices import NeedsFix

    if isinstance(err, UnreadableArtifact):  # jax refused a blob: another jax's, or damaged
        try:
            package = read_package_artifacts(fn.package)
        except ArtifactError:
            package = None
        if package is not None:
            return unusable_reason(package, err)
    if isinstance(err, ArtifactError):  # a manifest or blob that fails its checks
        return NeedsFix(f"the installed artifacts of {fn.package} are damaged: {err}")
    return (f"the artifact side failed ({type(err).__name__}: {err}); the source served the "
            "call (the hatch_jaxexport logger has the traceback at DEBUG)")


def _strict_refusal(fn: FunctionRecord, err: Exception) -> bool:
    """Whether ``err`` is a refusal strict mode makes on purpose (raised as it is): a call no
    structure accepts, or an ``ArtifactError`` that already names the function."""
    return isinstance(err, CallMismatch) or (
        isinstance(err, ArtifactError) and str(err).startswith(f"{fn.name}:"))


def _fall_back(fn: FunctionRecord, given: tuple[tuple[Any, ...], dict[str, Any]],
               attempt: Attempt, err: Exception) -> Any:
    """The source's result for a call whose artifact side raised ``err`` (default mode),
    reported, logged and settled; in strict mode ``err`` raised, naming the function."""
    from hatch_jaxexport.formats.settings import strict_mode
    from hatch_jaxexport.runtime.call.refusals import no_artifact
    from hatch_jaxexport.runtime.notices import LOGGER

    if strict_mode() and _strict_refusal(fn, err):
        raise err
    try:
        reason = fault_reason(fn, err)
    except Exception:  # the bookkeeping of a failure never fails the call itself
        reason = f"the artifact side failed ({type(err).__name__}: {err})"
    try:
        no_artifact(fn, reason)  # strict mode: ArtifactError naming the function
    except ArtifactError as refusal:
        raise refusal from err
    LOGGER.debug("%s: the artifact side of a call failed; the source serves it", fn.name,
                 exc_info=err)
    try:
        _settle(fn, given, attempt, reason)
    except Exception:  # not settled: the next call tries again, and falls back again
        LOGGER.debug("%s: a failed call could not be settled", fn.name, exc_info=True)
    return _run_source(fn, given, reason)


def _settle(fn: FunctionRecord, given: tuple[tuple[Any, ...], dict[str, Any]],
            attempt: Attempt, reason: str) -> None:
    """Make the next call like this one run the source without trying the artifact side: the
    resolution key the call reached, else the call's signature."""
    if attempt.key is not None:
        fn.calls.replace_target(attempt.key, source_target(fn, reason))
        return
    signature = _signature(*given)
    if signature is not None:
        fn.calls.settle_fault(signature, reason)


def _run_source(fn: FunctionRecord, given: tuple[tuple[Any, ...], dict[str, Any]],
                reason: str) -> Any:
    """The source's result for ``given`` (its own error, marked, where it refuses), told once
    (a damaged install once per package), and handed to the fast path."""
    from hatch_jaxexport.runtime.artifacts.package_artifacts import read_generation
    from hatch_jaxexport.runtime.call._resolved_calls import fast_key
    from hatch_jaxexport.runtime.call._source_calls import run_source
    from hatch_jaxexport.runtime.call.fast_path import settle_traced_call
    from hatch_jaxexport.runtime.call.refusals import no_artifact_notice
    from hatch_jaxexport.runtime.notices import NeedsFix

    notice = no_artifact_notice(fn, reason)
    if isinstance(reason, NeedsFix):
        damage = (fn.package, read_generation(fn.package), str(reason))
        with _DAMAGE_LOCK:
            told = damage in _DAMAGE_TOLD
            _DAMAGE_TOLD.add(damage)
        notice = "" if told else notice
    result = run_source(fn, given, reason, notice)
    try:  # later calls like it at jax.jit's cost; the result is the caller's either way
        settle_traced_call(fn, given, given, fast_key(*given))
    except Exception:
        pass
    return result


__all__ = ["Attempt", "fault_reason", "serve"]
