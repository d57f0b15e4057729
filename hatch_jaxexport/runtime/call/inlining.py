"""Whether a call of an ``@exportable`` function runs its source inline, in an outer trace.

A call inside an export (the build's, the release check's, a user's symbolic ``jax.export``)
must put the inner function's current source into the outer program: its symbolic sizes cannot
pick an artifact, and the build may not have baked it yet (``_source_calls`` says more). The
state lives here, at the bottom of the call room, because the fast path reads it on every
call (``INLINING_THREADS``) and the build sets it (``sources_inlined``).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any

_EXPORTING = threading.local()

#: How many threads are inlining now (one item, read by the fast path): while any is, calls
#: skip the hot executable, which would embed an artifact in the trace (it takes tracers and
#: cannot see this thread's state); the full path then checks the thread's own.
INLINING_THREADS = [0]
_INLINING_LOCK = threading.Lock()


@contextmanager
def sources_inlined() -> Any:
    """While exporting: calls of ``@exportable`` functions in this thread run their source."""
    depth = getattr(_EXPORTING, "depth", 0)
    _EXPORTING.depth = depth + 1
    with _INLINING_LOCK:
        INLINING_THREADS[0] += 1
    try:
        yield
    finally:
        _EXPORTING.depth = depth
        with _INLINING_LOCK:
            INLINING_THREADS[0] -= 1


def exporting() -> bool:
    """Whether an export is in progress in this thread (its calls run their source inline)."""
    return bool(getattr(_EXPORTING, "depth", 0))


def _symbolic_tracer(leaf: Any, tracer: type) -> bool:
    """Whether ``leaf`` is a tracer with a symbolic size, itself or in the value it wraps (a
    ``vmap`` tracer's per-example shape is concrete where its batch is symbolic)."""
    while isinstance(leaf, tracer):
        if any(type(d) is not int for d in leaf.aval.shape):
            return True
        leaf = getattr(leaf, "val", None) if hasattr(leaf, "val") else \
            getattr(leaf, "primal", None)
    return False


def runs_inline(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call must run its source inline: an export is in progress in this thread, or
    an argument is a tracer with a symbolic size (a user's symbolic ``jax.export``)."""
    if getattr(_EXPORTING, "depth", 0):
        return True
    from jax import core, tree_util

    return any(_symbolic_tracer(leaf, core.Tracer)
               for leaf in tree_util.tree_leaves((args, kwargs)))


__all__ = ["INLINING_THREADS", "exporting", "runs_inline", "sources_inlined"]
