"""Calls that run the source instead of an artifact: inlined into an outer trace, or traced.

Every call that runs the source for want of an artifact goes through ``run_source``: a
structure's call with no usable artifact, a call no structure accepts, a spec-less call that
was not recorded, a concrete-size miss. It runs the source first and tells after (the
``hatch_jaxexport`` logger, ``call_report()``, ``HATCH_JAXEXPORT_REPORT``; a warning only when
the maintainer asks: ``runtime.notices``), so the source's own error is always what the caller
sees, with ours as a note.

Two kinds of call of an ``@exportable`` function never look for an artifact:

- **Inlined** (``inlining.runs_inline``): a call inside an export (the build's, the release
  check's, or a user's ``jax.export`` with symbolic shapes). The outer export must hold the inner
  function's current source as one module: its symbolic sizes cannot pick an artifact (there is
  no integer to match), the build may not have baked the inner artifact yet, and XLA optimizes
  across the two once they are one program. At run time the outer artifact is called, so
  nothing traces.
- **Uncovered** (``SourceCalls``): a call no baked structure accepts (another dtype, rank,
  pytree form, static value, a keyword the specs do not name). A decorated function is a
  drop-in for its source, so it runs the source (the ``@exportable`` functions it calls
  inlined, as above) the way ``equinox.filter_jit`` would: the
  arrays (jax, numpy) are traced, every other value (Python numbers, strings, tuples, enums,
  configs) is held static, because the source may use it as a Python value (a size, a mode,
  a tolerance in an ``if``) that ``jax.jit`` would turn into a tracer. A call whose static
  part cannot be hashed, or whose source needs concrete array values (Python control flow on
  an array), runs the source eagerly, op by op: the result is the source's either way.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.runtime.call.inlining import sources_inlined
from hatch_jaxexport.runtime.call.refusals import no_artifact_notice, tell_traced
from hatch_jaxexport.runtime.source_errors import mark_source_error

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

# Imported in functions: the family's source call, only where a structure's source runs.

#: A function's traced source is forgotten when it holds this many static parts.
STATIC_PARTS_LIMIT = 256

#: Per thread: how many calls ``run_source`` completed, and the reason of the last one (what
#: ``staging`` reads around a staged call to tell a served call from a traced one).
_RUNS = threading.local()


def source_runs() -> tuple[int, str | None]:
    """(calls the source completed in this thread for want of an artifact, the last one's
    reason)."""
    return getattr(_RUNS, "count", 0), getattr(_RUNS, "reason", None)


def _dynamic(leaf: Any) -> bool:
    """Leaves traced in an uncovered call: arrays (jax's, numpy's), as ``eqx.filter_jit``."""
    import jax
    import numpy as np

    return isinstance(leaf, jax.Array | np.ndarray | np.generic)


def _concrete_value_errors(jax: Any) -> tuple[type[Exception], ...]:
    """jax's errors of a trace that needed concrete array values the plain source had."""
    errors = jax.errors
    return (errors.ConcretizationTypeError, errors.TracerIntegerConversionError,
            errors.TracerArrayConversionError, errors.NonConcreteBooleanIndexError)


class _StaticPart:
    """The hashable part of an uncovered call: its tree and its non-array leaves (with their
    types, so that ``1``, ``1.0`` and ``True`` never share a trace)."""

    __slots__ = ("hash", "key", "static")

    def __init__(self, treedef: Any, mask: tuple[bool, ...], static: tuple[Any, ...]) -> None:
        self.static = static
        self.key = (treedef, mask, static, tuple(type(v) for v in static))
        self.hash = hash(self.key)  # TypeError for an unhashable static value

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _StaticPart) and self.key == other.key


class SourceCalls:
    """The traced source of one function, for the calls no artifact covers."""

    def __init__(self, source: Callable[..., Any], skip_jitting: bool) -> None:
        self.source = source
        self.skip_jitting = skip_jitting
        self._jitted: dict[_StaticPart, Callable[..., Any]] = {}
        #: Static parts whose trace needed concrete values: the source runs eagerly for them.
        self._eager_only: set[_StaticPart] = set()

    def _rebuild_and_call(self, static: _StaticPart, *dynamic: Any) -> Any:
        """The source, traced: the ``@exportable`` functions it calls run their source inline,
        as under ``jax.jit`` of the plain library. Their artifacts would save nothing (this
        trace runs once per static part) and could break the caller's transformation of the
        whole (a concrete-size artifact has no batching rule: ``jax.vmap`` of this call)."""
        from jax import tree_util

        treedef, mask, _, _ = static.key
        it_dynamic, it_static = iter(dynamic), iter(static.static)
        leaves = [next(it_dynamic) if is_dynamic else next(it_static) for is_dynamic in mask]
        args, kwargs = tree_util.tree_unflatten(treedef, leaves)
        with sources_inlined():
            return self.source(*args, **kwargs)

    def _split(self, args: tuple[Any, ...], kwargs: dict[str, Any]
               ) -> tuple[_StaticPart, list[Any]] | None:
        """The call's static part and its arrays; ``None`` where the source runs as given
        (``skip_jitting``, an unhashable static value, a trace that needed concrete values)."""
        if self.skip_jitting:
            return None
        from jax import tree_util

        leaves, treedef = tree_util.tree_flatten((args, kwargs))
        mask = tuple(_dynamic(leaf) for leaf in leaves)
        try:
            static = _StaticPart(treedef, mask, tuple(
                leaf for leaf, is_dynamic in zip(leaves, mask, strict=True) if not is_dynamic))
        except TypeError:  # an unhashable static value: the source, op by op
            return None
        if static in self._eager_only:
            return None
        return static, [leaf for leaf, is_dynamic in zip(leaves, mask, strict=True) if is_dynamic]

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The source's result for this call, traced with its non-array values static."""
        split = self._split(args, kwargs)
        if split is None:
            return self.source(*args, **kwargs)
        import jax

        static, dynamic = split
        try:
            return self._jitted_for(static)(*dynamic)
        except _concrete_value_errors(jax):
            if any(isinstance(leaf, jax.core.Tracer) for leaf in dynamic):
                raise  # under the caller's own trace: no concrete values to run eagerly
            self._eager_only.add(static)  # Python control flow on array values
            return self.source(*args, **kwargs)

    def traced_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                    ) -> tuple[Callable[..., Any], list[Any]] | None:
        """For a call that ran traced: the traced function with its static part bound, and the
        arrays it takes (the fast path serves later calls of the same key by it)."""
        split = self._split(args, kwargs)
        if split is None or split[0] not in self._jitted:
            return None
        static, dynamic = split
        return self._jitted[static], dynamic

    def _jitted_for(self, static: _StaticPart) -> Callable[..., Any]:
        """``jax.jit`` of the source with this static part bound: one per static part, so a
        call hashes nothing of its own in Python (jax's C++ dispatch keys on the arrays)."""
        jitted = self._jitted.get(static)
        if jitted is None:
            import jax

            if len(self._jitted) >= STATIC_PARTS_LIMIT:
                self._jitted.clear()
            jitted = self._jitted[static] = jax.jit(
                functools.partial(self._rebuild_and_call, static))
        return jitted


def source_calls(fn: FunctionRecord) -> SourceCalls:
    """The function's one ``SourceCalls`` (made on its first uncovered call)."""
    return fn.calls.uncovered(lambda: SourceCalls(fn.__wrapped__, fn.export_spec.skip_jitting))


def run_source(fn: FunctionRecord, given: tuple[tuple[Any, ...], dict[str, Any]],
               reason: str, notice: str, source: Callable[..., Any] | None = None) -> Any:
    """The source's result for a call no artifact serves, and then, once per reason, a
    ``traced`` entry in the function's report and the ``notice`` (``runtime.notices``).

    ``given`` are the arguments as the source takes them; ``source`` runs them (default: the
    function's ``SourceCalls``, taking ``(args, kwargs)``); another one, such as the source
    with a structure's static values bound, takes them as a call. Where the source raises,
    its own error goes to the caller, ``reason`` added as a note: a call the source refuses
    is the source's refusal, whatever the artifacts cover."""
    args, kwargs = given
    try:
        result = source_calls(fn)(args, kwargs) if source is None else source(*args, **kwargs)
    except Exception as err:
        err.add_note(f"hatch-jaxexport: {reason} (no baked artifact covers this call; the "
                     "source, run instead, refused it too)")
        mark_source_error(err)  # the caller's to see: the fail-safe line lets it through
        raise
    _RUNS.count, _RUNS.reason = getattr(_RUNS, "count", 0) + 1, reason
    tell_traced(fn, reason, notice)
    return result


def source_without_static(fn: FunctionRecord, structure_index: int, static: dict[str, Any],
                          reason: str) -> Callable[..., Any]:
    """The source, called like a structure's artifact (its static values bound, not passed),
    through ``run_source`` with ``reason`` (``refusals.no_artifact``'s: strict mode has refused
    already): what a concrete-size dispatch runs for sizes the build did not bake."""
    import jax

    from hatch_jaxexport.runtime.artifacts.family import source_call

    source = source_call(fn, structure_index, static)
    jitted = source if fn.export_spec.skip_jitting else jax.jit(source)
    notice = no_artifact_notice(fn, reason)

    def run(*args: Any, **kwargs: Any) -> Any:
        return run_source(fn, (args, kwargs), reason, notice, jitted)
    return run


__all__ = ["SourceCalls", "run_source", "source_calls", "source_runs", "source_without_static"]
