"""What one ``@exportable`` function has resolved so far, and the fast path that reuses it.

Each ``ExportableFunction`` owns one ``ResolvedCalls``. The loader resolves a call once per
(structure, static values, platform[, mesh]) to a target, an artifact or the traced source, and
hands the settled executable back through the methods here; later calls skip the checks:

- ``hot``: the compiled executable of the last settled plain call. jax's C++ dispatcher checks
  its argument types itself and raises ``TypeError``/``ValueError`` before running on a
  mismatch, so trying it first costs nothing when it fits. After ``HOT_MISS_LIMIT`` refusals
  (calls of many signatures) it is dropped and the keyed cache serves them.
- the keyed cache: ``fast_key`` of a call of plain arrays and scalars -> (call, picks).

All state is written here, by this class's methods; nothing else assigns to it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

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
    """A cheap key for calls of positional plain arrays and scalars (no keywords, pytrees,
    tracers, or arrays committed to a device); ``None`` otherwise.

    Two calls with equal keys pass the same checks and resolve to the same target, so the full
    checks run once per key. The one key function of the fast path: the loader stores targets
    under it, ``ResolvedCalls.call_fast`` looks them up with it.
    """
    if kwargs or not _FAST_TYPES:
        return None
    jax_array, np_array, x64 = _FAST_TYPES
    key: list[Any] = []
    for arg in args:
        kind = type(arg)
        if kind is jax_array:
            if arg.committed:
                return None
            key.append((arg.shape, arg.dtype))
        elif kind is np_array:
            key.append((arg.shape, arg.dtype))
        elif kind in SCALARS:
            key.append((kind, arg))
        else:
            return None
    return tuple(key), x64.value


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
        #: (executable, how many leading arguments it takes, the trailing static strings)
        self.hot: tuple[Callable[..., Any], int, tuple[Any, ...]] | None = None
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

    def remember_fast(self, key: Any, call: Callable[..., Any],
                      picks: tuple[int, ...] | None) -> None:
        """Serve later calls with this ``fast_key`` by ``call`` (on ``picks`` of the args)."""
        if len(self.fast) >= FAST_CACHE_LIMIT:
            self.fast.clear()
        self.fast[key] = (call, picks)

    def remember_hot(self, call: Callable[..., Any], split: int, tail: tuple[Any, ...]) -> None:
        """Try ``call`` first on later calls whose arguments after ``split`` equal ``tail``."""
        if self.hot_misses < HOT_MISS_LIMIT:
            self.hot = (call, split, tail)

    def call_fast(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run a call through the hot executable or the keyed cache; ``MISS`` if neither fits."""
        hot = self.hot
        if hot is not None and not kwargs:
            call, split, tail = hot
            try:
                if args[split:] == tail:  # the same trailing static strings (often none)
                    return call(*args[:split])
            except (TypeError, ValueError):  # other types, a tracer, another device: resolve
                if not _traced(args):
                    self.hot_misses += 1
                    if self.hot_misses >= HOT_MISS_LIMIT:
                        self.hot = None  # calls of many signatures: the keyed cache serves them
        key = fast_key(args, kwargs)
        if key is not None:
            entry = self.fast.get(key)
            if entry is not None:
                target, picks = entry
                return target(*args) if picks is None else target(*[args[i] for i in picks])
        return MISS


def _traced(args: tuple[Any, ...]) -> bool:
    """Whether any argument is a tracer (a transformation of the function, not a new type)."""
    from jax import tree_util
    from jax.core import Tracer

    return any(isinstance(leaf, Tracer) for leaf in tree_util.tree_leaves(args))
