"""What one ``@exportable`` function has resolved so far, and the fast path that reuses it.

Each ``ExportableFunction`` owns one ``ResolvedCalls``. The loader resolves a call once per
(structure, static values, platform[, mesh]) to a target, an artifact or the traced source, and
hands the settled executable back through the methods here; later calls skip the checks:

- ``hot``: the compiled executable of the last settled call whose values it takes as given, in
  order (positional or by keyword, with the same keyword names), and whose other values are
  trailing static strings. jax's C++ dispatcher checks its argument types itself and raises
  ``TypeError``/``ValueError`` before running on a mismatch, so trying it first costs nothing
  when it fits. After ``HOT_MISS_LIMIT`` refusals
  (calls of many signatures) it is dropped and the keyed cache serves them.
- the keyed cache: ``fast_key`` of a call of plain arrays and scalars, positional or by
  keyword -> (call, route): which of the call's values the executable takes, in its order,
  with the scalars the full path converted held as constants (``route_of``).

All state is written here, by this class's methods; nothing else assigns to it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hatch_jaxexport.runtime.call._source_calls import INLINING_THREADS

#: After this many calls that the hot executable refused, a function stops trying it.
HOT_MISS_LIMIT = 16
#: The keyed cache is emptied when it holds this many signatures.
FAST_CACHE_LIMIT = 512
#: Python values a fast-path key holds by value (static arguments).
SCALARS = (str, int, float, bool, type(None))
#: What ``ResolvedCalls.call_fast`` returns when no cached target fits the call.
MISS = object()

#: (jax's concrete array type, numpy's ndarray, jax's x64 state), known once jax is imported:
#: ``prime_fast_path`` fills it on the first resolved call; until then no key is computed.
_FAST_TYPES: list[Any] = []


def prime_fast_path() -> None:
    """Learn the types ``fast_key`` compares (imports jax; the loader calls it)."""
    if not _FAST_TYPES:
        import numpy as np

        from hatch_jaxexport.runtime._jaxcompat import concrete_array_type, x64_flag

        _FAST_TYPES[:] = [concrete_array_type(), np.ndarray, x64_flag()]


def fast_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A cheap key for calls of plain arrays and scalars, positional or by keyword (no
    pytrees, tracers, or arrays committed to a device); ``None`` otherwise.

    Two calls with equal keys pass the same checks and resolve to the same target, with the
    same keyword names in the same order, so the full checks run once per key. The one key
    function of the fast path: the loader stores targets under it, ``ResolvedCalls.call_fast``
    looks them up with it.
    """
    if not _FAST_TYPES:
        return None
    jax_array, np_array, x64 = _FAST_TYPES
    key: list[Any] = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        kind = type(value)  # one loop, no call per value: this runs on every call
        if kind is jax_array:
            if value.committed:
                return None
            key.append((value.shape, value.dtype))
        elif kind is np_array:
            key.append((value.shape, value.dtype))
        elif kind in SCALARS:
            key.append((kind, value))
        else:  # a pytree, a tracer, another array type
            return None
    return tuple(key), tuple(kwargs), x64.value


class Constant:
    """A value of a fast route that is the same for every call of its key: a scalar the full
    path converted (``0.5`` to a float32 array), whose type and value the key holds."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _scalar_shaped(value: Any) -> bool:
    return type(value) in SCALARS or getattr(value, "shape", None) == ()


def route_of(wanted: tuple[Any, ...], values: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """How to make ``wanted`` (what the resolved executable took) from ``values`` (the call's,
    positional then keyword) on any call with the same ``fast_key``: each wanted value's
    position among ``values`` (by identity), or a ``Constant``. ``None`` where that is not
    provably right: a constant is only a scalar-shaped value made while every array of the call
    is taken as it is (so it came from the scalars the key holds by value)."""
    route: list[Any] = []
    taken: set[int] = set()
    for value in wanted:
        same = [i for i, given in enumerate(values) if given is value]
        # one array passed twice (``f(x, x)``) is two positions: a later call may differ
        position = next((i for i in same if i not in taken), same[0] if same else None)
        if position is None:
            if not _scalar_shaped(value):
                return None
            route.append(Constant(value))
        else:
            route.append(position)
            taken.add(position)
    arrays = {i for i, given in enumerate(values) if type(given) not in SCALARS}
    if any(isinstance(step, Constant) for step in route) and not arrays <= taken:
        return None
    return tuple(route)


class ResolvedCalls:
    """One function's resolved targets, its fallback, the keyed fast cache and the hot call."""

    __slots__ = ("_fallback", "_uncovered", "fast", "hot", "hot_misses", "lock", "targets")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: resolution key -> the loader's target (an artifact's call or the fallback's)
        self.targets: dict[Any, Any] = {}
        self._fallback: Callable[..., Any] | None = None
        self._uncovered: Callable[..., Any] | None = None
        self.fast: dict[Any, tuple[Callable[..., Any], tuple[int, ...] | None]] = {}
        #: (executable, how many leading values it takes, the trailing static strings, the
        #: keyword names of the calls it serves, the keywords it takes its last values by)
        self.hot: tuple[Callable[..., Any], int, tuple[Any, ...], tuple[str, ...],
                        tuple[str, ...]] | None = None
        self.hot_misses = 0

    def clear(self) -> None:
        """Forget everything resolved (it is resolved again on the next call)."""
        with self.lock:
            self.targets.clear()
            self._fallback = None
            self._uncovered = None
            self.fast.clear()
            self.hot = None
            self.hot_misses = 0

    def target(self, key: Any, resolve: Callable[[], Any]) -> Any:
        """The target resolved for ``key``, resolving it once (under the lock) if new."""
        found = self.targets.get(key)
        if found is None:
            with self.lock:
                found = self.targets.get(key)
                if found is None:
                    found = self.targets[key] = resolve()
        return found

    def fallback(self, make: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
        """The function's one traced fallback (``jax.jit`` of the source), made once."""
        if self._fallback is None:
            self._fallback = make()
        return self._fallback

    def uncovered(self, make: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
        """The source's calls for calls no structure accepts (``SourceCalls``), made once."""
        if self._uncovered is None:
            self._uncovered = make()
        return self._uncovered

    def remember_fast(self, key: Any, call: Callable[..., Any], route: tuple[Any, ...] | None,
                      keywords: tuple[str, ...] = ()) -> None:
        """Serve later calls with this ``fast_key`` by ``call``: on the call's values as
        given (``route`` None), else on ``route`` of them (``route_of``), the last
        ``len(keywords)`` by those keywords."""
        if len(self.fast) >= FAST_CACHE_LIMIT:
            self.fast.clear()
        self.fast[key] = (call, route, keywords)

    def remember_hot(self, call: Callable[..., Any], split: int, tail: tuple[Any, ...],
                     names: tuple[str, ...] = (), keywords: tuple[str, ...] = ()) -> None:
        """Try ``call`` first on later calls with the keyword names ``names`` (in order) whose
        values (positional, then by keyword) after ``split`` equal ``tail``: on the values
        before it, the last ``len(keywords)`` of them by those keywords."""
        if self.hot_misses < HOT_MISS_LIMIT:
            self.hot = (call, split, tail, names, keywords)

    def call_fast(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run a call through the hot executable or the keyed cache; ``MISS`` if neither fits."""
        hot = self.hot
        if hot is not None and not INLINING_THREADS[0] and \
                (tuple(kwargs) == hot[3] if kwargs else not hot[3]):
            call, split, tail, _, keywords = hot
            values = (*args, *kwargs.values()) if kwargs else args
            try:
                if values[split:] == tail:  # the same trailing static strings (often none)
                    if not keywords:
                        return call(*values[:split])
                    cut = split - len(keywords)
                    return call(*values[:cut], **dict(zip(keywords, values[cut:split],
                                                          strict=True)))
            except (TypeError, ValueError, NotImplementedError):  # other types, a tracer (a
                # concrete-size artifact refuses forward mode), another device: resolve
                if not _traced(values):
                    self.hot_misses += 1
                    if self.hot_misses >= HOT_MISS_LIMIT:
                        self.hot = None  # calls of many signatures: the keyed cache serves them
        key = fast_key(args, kwargs)
        if key is not None:
            entry = self.fast.get(key)
            if entry is not None:
                target, route, keywords = entry
                if route is None:
                    return target(*args)
                values = (*args, *kwargs.values()) if kwargs else args
                taken = [values[step] if type(step) is int else step.value for step in route]
                if not keywords:
                    return target(*taken)
                split = len(taken) - len(keywords)
                return target(*taken[:split], **dict(zip(keywords, taken[split:], strict=True)))
        return MISS


def _traced(args: tuple[Any, ...]) -> bool:
    """Whether any argument is a tracer (a transformation of the function, not a new type)."""
    from jax import tree_util
    from jax.core import Tracer

    return any(isinstance(leaf, Tracer) for leaf in tree_util.tree_leaves(args))
