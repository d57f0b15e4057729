"""Handing a served call to the fast path: what later calls of the same kind run directly.

After a first call ran (``loader``), its executable is handed to the function's fast path
(``_resolved_calls``): the keyed cache for calls of plain arrays and scalars, by position or
keyword, and the hot executable for positional calls whose trailing arguments are static
strings. ``settle_artifact_call`` does it for an artifact's call, ``settle_traced_call`` for
the source's trace of a call no artifact serves (later calls like it cost what ``jax.jit`` of
the source costs). Each works out how the executable takes the call's values (``route_of``,
``hot_form``) and hands it over only where that is exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hatch_jaxexport.runtime.call._resolved_calls import (
    SCALARS,
    Constant,
    ambiguous,
    hot_call,
    route_of,
)
from hatch_jaxexport.runtime.jaxcompat import compiled_dispatch

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

# Imported in functions: the source's calls, only after the source ran (a call no artifact
# serves), which imported them: a call an artifact serves never needs them.


def positions_of(call_args: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[int, ...] | None:
    """Positions of ``call_args`` within ``args`` (by identity, in order), or ``None``."""
    picks = []
    position = 0
    for value in call_args:
        while position < len(args) and args[position] is not value:
            position += 1
        if position == len(args):
            return None
        picks.append(position)
        position += 1
    return tuple(picks)


def same_leaves(call_args: tuple[Any, ...], args: tuple[Any, ...]) -> bool:
    """Whether ``call_args`` are the leading ``args`` as trees: the same structure and the
    very same leaves (the input checks may rebuild containers, never arrays they accept)."""
    from jax import tree_util

    head = args[:len(call_args)]
    leaves, tree = tree_util.tree_flatten(call_args)
    head_leaves, head_tree = tree_util.tree_flatten(head)
    return tree == head_tree and len(leaves) == len(head_leaves) and \
        all(a is b for a, b in zip(leaves, head_leaves, strict=True))


def settle_traced_call(fn: FunctionRecord, taken: tuple[tuple[Any, ...], dict[str, Any]],
                         given: tuple[tuple[Any, ...], dict[str, Any]], fast: Any) -> None:
    """Hand the source's trace of a call (``taken``: the arguments the source ran with, made
    from the caller's ``given``) to the fast path: the keyed cache and the hot executable."""
    from hatch_jaxexport.runtime.call._source_calls import source_calls

    traced = source_calls(fn).traced_call(*taken) if fast is not None else None
    if traced is None:
        return
    args, kwargs = given
    values = (*args, *kwargs.values())
    route = route_of(tuple(traced[1]), values, len(kwargs))
    if route is not None:
        plain = route == tuple(range(len(values))) and not kwargs
        fn.calls.remember_fast(fast, traced[0], None if plain else route)
    hot = hot_form(tuple(traced[1]), values, False, len(kwargs))
    if hot is not None and not hot[1]:  # jax's executable of this trace: it refuses
        # other types and tracers in C++, as a shipped one does (the jit would retrace)
        compiled = traced[0].lower(*traced[1]).compile()  # jax's caches: no compile
        fn.calls.remember_hot(hot_call(compiled_dispatch(compiled), args, kwargs, hot[0]))


def settle_artifact_call(fn: FunctionRecord, target: Any,
            taken: tuple[tuple[Any, ...], dict[str, Any]],
            given: tuple[tuple[Any, ...], dict[str, Any]], fast: Any) -> None:
    """Hand a call's settled executable to the function's fast path: the keyed cache for
    calls of plain arrays and scalars (``fast``, by position or keyword), the hot executable
    for positional calls whose trailing arguments are static strings (pytrees too)."""
    (call_args, call_kwargs), (args, kwargs) = taken, given
    settled = getattr(target.call, "settled", None)
    call = settled(call_args, call_kwargs) if settled is not None else target.call
    if call is None:  # a quick tier is in use, the optimized one pending
        return
    if fast is not None:
        values = (*args, *kwargs.values())
        route = route_of((*call_args, *call_kwargs.values()), values, len(kwargs))
        if route is not None:
            plain = route == tuple(range(len(values))) and not kwargs and not call_kwargs
            fn.calls.remember_fast(fast, call, None if plain else route, tuple(call_kwargs),
                                   compiled=settled is not None)
    if settled is None:
        return
    wanted = (*call_args, *call_kwargs.values())
    hot = hot_form(wanted, (*args, *kwargs.values()),
                    not kwargs and not call_kwargs and same_leaves(call_args, args), len(kwargs))
    if hot is None:
        return
    keywords = tuple(call_kwargs)
    by_position = getattr(target.call, "settled_by_position", None)
    if keywords and hot == ((), ()) and by_position is not None:
        twin = by_position(call_args, call_kwargs)  # ``export_with_kwargs``: no keyword binding
        if twin is not None:
            call, keywords = twin, ()
    fn.calls.remember_hot(hot_call(call, args, kwargs, *hot, keywords))


def hot_form(wanted: tuple[Any, ...], values: tuple[Any, ...], same_trees: bool,
              keywords: int) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """How the hot path makes ``wanted`` (what the settled executable took) from a call's
    ``values`` (positional, then keyword), as ``(tail, constants)``: it takes the values before
    the tail as given, then the constants; the tail, scalars only, is compared on each call.
    ``None`` where the executable takes them otherwise (reordered, rebuilt, an array dropped).
    ``same_trees``: the executable took the call's leading pytrees, rebuilt by the checks with
    the very same leaves; ``keywords``: how many of ``values`` came by keyword (``ambiguous``)."""
    if keywords and ambiguous(values):
        return None
    split = len(wanted)
    picks = positions_of(wanted, values)
    if picks is None and same_trees:
        picks = tuple(range(split))
    constants: tuple[Any, ...] = ()
    if picks != tuple(range(split)):  # scalars the full path converted, taken as constants?
        route = route_of(wanted, values, keywords)
        split = next((i for i, step in enumerate(route or ()) if type(step) is not int), split)
        if route is None or route[:split] != tuple(range(split)) or \
                not all(isinstance(step, Constant) for step in route[split:]):
            return None
        constants = tuple(step.value for step in route[split:])
    tail = values[split:]
    if not all(type(value) in SCALARS for value in tail):
        return None
    return tail, constants


__all__ = ["hot_form", "positions_of", "same_leaves", "settle_artifact_call", "settle_traced_call"]
