"""Calls staged into a caller's trace: how a library is used under ``jax.jit``, ``vmap``, ``grad``.

``call_report()`` lists first *eager* calls: a signature's executable, found or compiled, and
run. A library used inside its callers' ``jax.jit``, ``jax.vmap``, ``jax.pmap`` or ``jax.grad``
is mostly called with tracers instead: each such call stages the artifact (``call_exported``,
or the family's primitive) into the caller's trace, or, where no artifact serves it, traces
the source there. Those calls are counted here, per function, transformation and outcome, and
listed by ``staged_report()`` (``StagedCall`` rows); ``HATCH_JAXEXPORT_REPORT=1`` prints one
line the first time a (transformation, outcome, reason) occurs for a function, never one per
trace.

Cost: a call reaches ``staged_call`` only from the full path (a tracer never takes the fast
path: its key is ``None`` and a compiled executable refuses it), and only when a trace is
active (``jaxcompat.evaluating_eagerly`` is false: one attribute read and one ``isinstance``
for an eager call of the full path, nothing at all for an eager call of the fast path).

The transformation is read from the tracers' types, innermost first, and written as the caller
wrote it (``jax.vmap(jax.grad(f))`` is ``vmap(grad)``). jax stages ``jax.pmap``, ``lax.scan``,
``lax.cond`` and ``jax.checkpoint`` bodies like ``jax.jit``, with the same tracer: they are all
``jit``. ``jax.grad``, ``jax.vjp`` and ``jax.linearize`` are ``grad``; forward mode
(``jax.jvp``, ``jax.jacfwd``) is ``jvp``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.formats.records import Record
from hatch_jaxexport.formats.settings import call_report_wanted

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

# Imported in functions: the source's calls and the inlining state, only once a call is made
# inside a trace (an eager call never imports this module).

#: jax's tracer classes by name, and the transformation each stands for.
TRANSFORMATIONS = {
    "DynamicJaxprTracer": "jit",  # jax.jit, pmap, scan/cond/while bodies, checkpoint, eval_shape
    "BatchTracer": "vmap",
    "LinearizeTracer": "grad",  # jax.grad, vjp, linearize
    "JVPTracer": "jvp",  # jax.jvp, jacfwd
    "JaxprTracer": "partial_eval",
}
#: The attributes a tracer keeps the value it wraps under (the next transformation out).
_WRAPPED = ("primal", "val")
#: How many nested transformations are read from one tracer.
_DEPTH = 8
#: The reason of a call inlined into a caller's export with symbolic sizes.
SYMBOLIC = ("inside an export with symbolic sizes: the source is inlined into the caller's "
            "module (no artifact can be picked for sizes that are not integers)")


class StagedCall(Record):
    """How often calls of a function were staged into a caller's trace under one
    transformation (``ExportableFunction.staged_report``).

    ``tier`` is ``served`` (the artifact was staged into the caller's trace: the caller's
    compile holds the baked module, not the source) or ``traced`` (no artifact serves it: the
    source was traced there, for ``reason``).
    """

    __slots__ = ()

    function: str
    #: ``jit``, ``vmap``, ``grad``, ``jvp``..., nested as written: ``jit(vmap)``.
    transformation: str
    tier: str
    #: Calls staged so far (each trace of the caller's function counts once).
    count: int
    #: Why the source was traced (``traced``); ``None`` for ``served``.
    reason: str | None = None

    def line(self) -> str:
        """``hatch-jaxexport: mypkg:f staged under vmap: served``; a ``traced`` one ends with
        why the source was traced."""
        why = f" ({self.reason})" if self.reason else ""
        return (f"hatch-jaxexport: {self.function} staged under {self.transformation}: "
                f"{self.tier}{why}")


def _nesting(leaf: Any, tracer: type) -> list[str]:
    """The transformations a tracer stands for, innermost first (``[]`` for a plain value)."""
    kinds: list[str] = []
    while isinstance(leaf, tracer) and len(kinds) < _DEPTH:
        name = type(leaf).__name__
        kinds.append(TRANSFORMATIONS.get(name) or name.removesuffix("Tracer").lower())
        leaf = next((getattr(leaf, attr) for attr in _WRAPPED if hasattr(leaf, attr)), None)
    return kinds


def transformation_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The transformation a call is staged under, as the caller wrote it (``vmap(grad)``);
    ``None`` where no argument is a tracer (an eager call, even inside a trace)."""
    import jax

    tracer = jax.core.Tracer
    deepest: list[str] = []
    for leaf in jax.tree_util.tree_leaves((args, kwargs)):
        if isinstance(leaf, tracer):
            kinds = _nesting(leaf, tracer)
            if len(kinds) > len(deepest):
                deepest = kinds
    if not deepest:
        return None
    text = deepest[0]
    for outer in deepest[1:]:
        text = f"{outer}({text})"
    return text


def staged_call(fn: FunctionRecord, serve: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
    """``serve(fn, args, kwargs)`` for a call made while a trace is active, counted as staged
    (served, or traced with the reason the source ran) when an argument is a tracer. A call
    inlined into an export in progress in this thread (the build's) is not the library's use:
    it is not counted; a call that raises is not counted either."""
    from hatch_jaxexport.runtime.call._source_calls import source_runs
    from hatch_jaxexport.runtime.call.inlining import exporting, runs_inline

    kind = None if exporting() else transformation_of(args, kwargs)
    if kind is None:
        return serve(fn, args, kwargs)
    symbolic = runs_inline(args, kwargs)
    before = source_runs()
    result = serve(fn, args, kwargs)
    after = source_runs()
    reason = SYMBOLIC if symbolic else after[1] if after[0] != before[0] else None
    _count(fn, kind, reason)
    return result


def _count(fn: FunctionRecord, kind: str, reason: str | None) -> None:
    """Count one staged call; print its line the first time, when ``HATCH_JAXEXPORT_REPORT``
    asks."""
    tier = "served" if reason is None else "traced"
    if fn.calls.count_staged((kind, tier, reason)) and call_report_wanted():
        print(StagedCall(fn.name, kind, tier, 1, reason).line(), file=sys.stderr, flush=True)


def staged_report(fn: FunctionRecord) -> list[StagedCall]:
    """The function's staged calls so far: one ``StagedCall`` per (transformation, tier,
    reason), in the order each first occurred."""
    return [StagedCall(fn.name, kind, tier, count, reason)
            for (kind, tier, reason), count in fn.calls.staged_counts()]


__all__ = ["SYMBOLIC", "TRANSFORMATIONS", "StagedCall", "staged_call", "staged_report",
           "transformation_of"]
