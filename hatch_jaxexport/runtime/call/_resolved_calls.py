"""What one ``@exportable`` function has resolved so far, and the fast path that reuses it.

Each ``ExportableFunction`` owns one ``ResolvedCalls``. The loader resolves a call once per
(structure, static values, platform[, mesh]) to a target, an artifact or the traced source, and
hands the settled executable back through the methods here; later calls skip the checks:

- ``hot``: the compiled executable of the last settled call (a ``HotCall``), tried first on a
  call with as many positional values and the same keyword names in the same order. In its
  common forms it takes the call's values as given (``f(x, y)``, ``f(x=x, y=y)``, a function
  exported with keyword arguments): no Python work beyond those two comparisons. Otherwise its
  trailing values are statics (strings, numbers, ``None``) compared by type and value, and
  scalars the full path converted (``0.5`` to a float32 array) follow as constants. jax's C++
  dispatcher checks its argument types itself and raises ``TypeError``/``ValueError`` before
  running on a mismatch (and on a tracer), so trying it first costs nothing when it fits. After
  ``HOT_MISS_LIMIT`` refusals (calls of many signatures) it is dropped and the keyed cache
  serves them.
- the keyed cache: ``fast_key`` of a call of plain arrays and scalars, positional or by
  keyword -> (call, route): which of the call's values the executable takes, in its order,
  with the scalars the full path converted held as constants (``route_of``).

All state is written here, by this class's methods; nothing else assigns to it.
"""

import operator
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from hatch_jaxexport.runtime.call.inlining import INLINING_THREADS
from hatch_jaxexport.runtime.jaxcompat import concrete_array_type, x64_flag

#: After this many calls that the hot executable refused, a function stops trying it.
HOT_MISS_LIMIT = 16
#: The keyed cache is emptied when it holds this many signatures.
FAST_CACHE_LIMIT = 512
#: Python values a fast-path key holds by value (static arguments).
SCALARS = (str, int, float, bool, type(None))
#: What ``fast_path`` and ``ResolvedCalls.call_keyed`` return when no cached target fits the call.
MISS = object()

#: (jax's concrete array type, numpy's ndarray, jax's x64 state), known once jax is imported:
#: ``prime_fast_path`` fills it on the first resolved call; until then no key is computed.
_FAST_TYPES: list[Any] = []


def prime_fast_path() -> None:
    """Learn the types ``fast_key`` compares (imports jax; the loader calls it)."""
    if not _FAST_TYPES:
        import numpy as np

        _FAST_TYPES[:] = [concrete_array_type(), np.ndarray, x64_flag()]


def fast_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A cheap key for calls of plain arrays and scalars, positional or by keyword (no
    pytrees, tracers, or arrays committed to a device); ``None`` otherwise.

    Two calls with equal keys pass the same checks and resolve to the same target, with the
    same keyword names in the same order, so the full checks run once per key. The one key
    function of the fast path: the loader stores targets under it, ``ResolvedCalls.call_keyed``
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


def route_of(wanted: tuple[Any, ...], values: tuple[Any, ...], keywords: int = 0
             ) -> tuple[Any, ...] | None:
    """How to make ``wanted`` (what the resolved executable took) from ``values`` (the call's,
    positional then ``keywords`` by keyword) on any call with the same ``fast_key``: each
    wanted value's position among ``values`` (by identity), or a ``Constant``. ``None`` where
    that is not provably right: a constant is only a scalar-shaped value made while every array
    of the call is taken as it is (so it came from the scalars the key holds by value); one
    object passed twice in a call with keywords (``f(y=a, x=a)``) could have gone to either
    slot, so it routes nothing."""
    if keywords and ambiguous(values):
        return None
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


def ambiguous(values: tuple[Any, ...]) -> bool:
    """Whether one array is among ``values`` twice (by identity): then identity cannot tell
    which of its slots the executable took it from, once keywords reorder them."""
    arrays = [id(value) for value in values if type(value) not in SCALARS]
    return len(set(arrays)) != len(arrays)


#: The forms of a ``HotCall``, cheapest first: how ``fast_path`` checks a call and passes it.
POSITIONAL = 0  # ``f(x, y)``: every value as given, none by keyword
SPREAD = 1  # ``f(x=x, y=y)``: the keyword values (same names, same order) after the positional
BY_KEYWORD = 2  # ``f(x, y=y)`` of an executable that takes ``y`` by keyword: passed as given
STATIC_KEYWORDS = 3  # ``f(x, mode="max")``: positional values as given, string statics by keyword
STATIC_POSITIONAL = 4  # ``f(x, "max")``: leading values as given, then string statics
GENERAL = 5  # trailing statics compared by type and value, then constants (converted scalars)


# This module does not postpone its annotations (``from __future__ import annotations``):
# typing.NamedTuple would compile each field's annotation text when the class is created,
# as a package of exportables is imported (``formats.manifest`` says the same of its records).


class HotCall(NamedTuple):
    """The executable ``fast_path`` tries first, and the calls it serves: those with ``arity``
    positional values and the keyword names ``names``, in that order."""

    call: Callable[..., Any]
    arity: int
    form: int
    names: tuple[str, ...]
    #: ``SPREAD`` of two names or more: takes the keyword values in the executable's order
    #: (any order in the call).
    pick: Callable[[dict[str, Any]], Any] | None
    #: ``STATIC_KEYWORDS``: the call's keyword arguments, every one a string static.
    static_kwargs: dict[str, str] | None
    #: ``GENERAL``: the call's trailing values it takes as statics, compared by value (and
    #: by type unless all are strings), then the values it takes after the call's leading
    #: ones (converted scalars), from ``cut`` on by ``keywords``, under jax's x64 state ``x64``.
    tail: tuple[Any, ...]
    tail_types: tuple[type, ...] | None
    constants: tuple[Any, ...]
    cut: int
    keywords: tuple[str, ...]
    x64: bool | None


def hot_call(call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             tail: tuple[Any, ...], constants: tuple[Any, ...] = (),
             keywords: tuple[str, ...] = ()) -> HotCall:
    """The ``HotCall`` of a settled call of ``args`` and ``kwargs``: the executable takes all
    but the last ``len(tail)`` of their values, then ``constants``, its last
    ``len(keywords)`` by keyword."""
    names = tuple(kwargs)
    strings = all(type(value) is str for value in tail)
    form = GENERAL
    if not tail and not constants:
        form = POSITIONAL if not names and not keywords else \
            SPREAD if not keywords else BY_KEYWORD if keywords == names else GENERAL
    elif strings and not constants and not keywords:
        form = STATIC_KEYWORDS if len(tail) == len(names) else \
            STATIC_POSITIONAL if not names else GENERAL
    if constants:  # on the device once: a NumPy constant would be copied on every call
        import jax

        constants = tuple(jax.device_put(value) for value in constants)
    taken = len(args) + len(names) - len(tail) + len(constants)
    # one name: itemgetter would give the value itself, not a tuple (``fast_path`` reads it)
    pick = operator.itemgetter(*names) if form == SPREAD and len(names) > 1 else None
    return HotCall(call, len(args), form, names, pick,
                   dict(kwargs) if form == STATIC_KEYWORDS else None, tail,
                   None if strings else tuple(map(type, tail)), constants,
                   taken - len(keywords), keywords,
                   _FAST_TYPES[2].value if _FAST_TYPES else None)


def _call_general(hot: HotCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A ``GENERAL`` hot call: ``MISS`` unless its keyword names, trailing statics and x64
    state are the executable's."""
    call, _, _, names, _, _, tail, tail_types, constants, cut, keywords, x64 = hot
    if tuple(kwargs) != names or (_FAST_TYPES and _FAST_TYPES[2].value != x64):
        return MISS
    values = (*args, *kwargs.values()) if kwargs else args
    split = len(values) - len(tail)
    rest = values[split:]
    if rest != tail or (tail_types is not None and tuple(map(type, rest)) != tail_types):
        return MISS
    taken = (*values[:split], *constants) if constants else values[:split]
    if not keywords:
        return call(*taken)
    return call(*taken[:cut], **dict(zip(keywords, taken[cut:], strict=False)))


class ResolvedCalls:
    """One function's resolved targets, its fallback, the keyed fast cache and the hot call."""

    __slots__ = ("_uncovered", "fast", "faulted", "hot", "hot_misses", "lock", "members",
                 "plans", "reported", "reports", "staged", "targets")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: resolution key -> the loader's target (an artifact's call or the fallback's)
        self.targets: dict[Any, Any] = {}
        self._uncovered: Callable[..., Any] | None = None
        self.fast: dict[Any, tuple[Callable[..., Any], tuple[int, ...] | None]] = {}
        self.hot: HotCall | None = None
        self.hot_misses = 0
        #: First calls served outside the eager calls (``ServedCall`` each: concrete-size and
        #: recorded artifacts, the source), in call order, and the keys already reported.
        self.reports: list[Any] = []
        self.reported: set[Any] = set()
        #: Calls whose artifact side failed before they reached a resolution key (a call no
        #: structure accepts, a spec-less call), by signature: the reason the source serves
        #: them from now on (``failsafe``).
        self.faulted: dict[Any, str] = {}
        #: Calls staged into a caller's trace (``staging``): (transformation, tier, reason)
        #: -> how many, in the order each first occurred.
        self.staged: dict[Any, int] = {}
        #: Traced calls' plans by their key (``traced_plans``): what a ``jax.grad`` step reuses.
        self.plans: dict[Any, Any] = {}

    def clear(self) -> None:
        """Forget everything resolved (it is resolved again on the next call)."""
        with self.lock:
            self.targets.clear()
            self._uncovered = None
            self.fast.clear()
            self.hot = None
            self.hot_misses = 0
            self.reports = []
            self.reported = set()
            self.faulted = {}
            self.staged = {}
            self.plans = {}

    def count_staged(self, key: Any) -> bool:
        """Count one call staged into a caller's trace under ``key`` (``staging``); whether it
        is the first of its key."""
        with self.lock:
            count = self.staged.get(key, 0)
            self.staged[key] = count + 1
        return count == 0

    def staged_counts(self) -> list[tuple[Any, int]]:
        """The staged calls counted so far: (key, count), in the order each key first came."""
        with self.lock:
            return list(self.staged.items())

    def target(self, key: Any, resolve: Callable[[], Any]) -> Any:
        """The target resolved for ``key``, resolving it once (under the lock) if new."""
        found = self.targets.get(key)
        if found is None:
            with self.lock:
                found = self.targets.get(key)
                if found is None:
                    found = self.targets[key] = resolve()
        return found

    def plan_template(self, key: Any) -> Any:
        """The template kept for a traced call's ``plan_key``, or ``None``."""
        return self.plans.get(key)

    def remember_plan(self, key: Any, template: Any, limit: int) -> None:
        """Keep a traced call's plan template (emptied when it holds ``limit``)."""
        if len(self.plans) >= limit:
            self.plans.clear()
        self.plans[key] = template

    def replace_target(self, key: Any, target: Any) -> Any:
        """Resolve ``key`` to ``target`` from now on (an artifact found unusable on first use
        gives way to the source), forgetting the fast path's entries made before."""
        with self.lock:
            self.targets[key] = target
            self.fast.clear()
            self.hot = None
        return target

    def settle_fault(self, signature: Any, reason: str) -> None:
        """Serve calls of ``signature`` by the source from now on, for ``reason`` (their
        artifact side failed before reaching a resolution key)."""
        with self.lock:
            if len(self.faulted) >= FAST_CACHE_LIMIT:
                self.faulted.clear()
            self.faulted[signature] = reason

    def uncovered(self, make: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
        """The source's calls for calls no artifact serves (``SourceCalls``), made once."""
        if self._uncovered is None:
            self._uncovered = make()
        return self._uncovered

    def remember_fast(self, key: Any, call: Callable[..., Any], route: tuple[Any, ...] | None,
                      keywords: tuple[str, ...] = (), compiled: bool = False) -> None:
        """Serve later calls with this ``fast_key`` by ``call``: on the call's values as
        given (``route`` None), else on ``route`` of them (``route_of``), the last
        ``len(keywords)`` by those keywords. ``compiled``: ``call`` is an executable's
        dispatcher, which refuses other types itself, so a positional call it serves as given
        may become the hot call (a numpy call after a jax one has the same key)."""
        if len(self.fast) >= FAST_CACHE_LIMIT:
            self.fast.clear()
        self.fast[key] = (call, route, keywords, compiled)

    def first_report(self, key: Any) -> bool:
        """Whether ``key`` (a signature, a reason) is reported for the first time now."""
        with self.lock:
            if key in self.reported:
                return False
            self.reported.add(key)
            return True

    def remember_hot(self, hot: HotCall) -> None:
        """Try ``hot`` first on later calls of its form (``hot_call``)."""
        if self.hot_misses < HOT_MISS_LIMIT:
            self.hot = hot

    def hot_refused(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The hot executable refused a call: count it unless it was a transformation's (a
        tracer), and stop trying it after ``HOT_MISS_LIMIT`` (calls of many signatures)."""
        if not _traced((*args, *kwargs.values())):
            self.hot_misses += 1
            if self.hot_misses >= HOT_MISS_LIMIT:
                self.hot = None  # the keyed cache serves them

    def call_keyed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run a call through the keyed cache; ``MISS`` if it holds no target for its key."""
        key = fast_key(args, kwargs)
        if key is not None:
            entry = self.fast.get(key)
            if entry is not None:
                target, route, keywords, compiled = entry
                if route is None:
                    hot = self.hot
                    if compiled and self.hot_misses < HOT_MISS_LIMIT and \
                            (hot is None or hot[0] is not target or hot[2] != POSITIONAL or
                             hot[1] != len(args)):  # this form is hot now
                        self.hot = hot_call(target, args, {}, ())
                    return target(*args)
                values = (*args, *kwargs.values()) if kwargs else args
                taken = [values[step] if type(step) is int else step.value for step in route]
                if not keywords:
                    return target(*taken)
                split = len(taken) - len(keywords)
                return target(*taken[:split], **dict(zip(keywords, taken[split:], strict=True)))
        return MISS


def fast_path(calls: ResolvedCalls, resolve: Callable[[tuple[Any, ...], dict[str, Any]], Any]
              ) -> Callable[..., Any]:
    """The one fast path: a function that runs a call through ``calls.hot``, else the keyed
    cache, else ``resolve(args, kwargs)`` (the full path). ``@exportable``'s function facade
    is this function's code, so a hot call costs one Python frame over jax's C++ dispatch;
    everything it reads is a closure cell (the facade runs with the source's globals)."""
    inlining, miss, general = INLINING_THREADS, MISS, _call_general

    def call(*args: Any, **kwargs: Any) -> Any:
        hot = calls.hot  # a HotCall, read by index: (call, arity, form, names, pick,
        # static_kwargs, tail, tail_types, constants, cut, keywords, x64)
        if hot is not None and len(args) == hot[1] and not inlining[0]:
            try:
                form = hot[2]
                if form == 0:  # POSITIONAL
                    if not kwargs:
                        return hot[0](*args)
                elif form == 1:  # SPREAD
                    if len(kwargs) == len(hot[3]):
                        pick = hot[4]
                        return hot[0](*args, *pick(kwargs)) if pick is not None else \
                            hot[0](*args, kwargs[hot[3][0]])
                elif form == 3:  # STATIC_KEYWORDS
                    if kwargs == hot[5]:
                        return hot[0](*args)
                elif form == 4:  # STATIC_POSITIONAL
                    cut = hot[9]
                    if not kwargs and args[cut:] == hot[6]:
                        return hot[0](*args[:cut])
                elif form == 2:  # BY_KEYWORD: jax binds the names (and refuses others)
                    if kwargs:
                        return hot[0](*args, **kwargs)
                else:  # GENERAL
                    result = general(hot, args, kwargs)
                    if result is not miss:
                        return result
            except Exception:  # other types, names, a tracer (a concrete-size artifact
                # refuses forward mode), another device; or an executable that failed: the
                # full path resolves it (and its fail-safe line serves the call)
                calls.hot_refused(args, kwargs)
        try:
            result = calls.call_keyed(args, kwargs)
        except Exception:  # a settled executable that failed: the full path decides
            result = miss
        return resolve(args, kwargs) if result is miss else result

    return call


def _traced(args: tuple[Any, ...]) -> bool:
    """Whether any argument is a tracer (a transformation of the function, not a new type)."""
    from jax import tree_util
    from jax.core import Tracer

    return any(isinstance(leaf, Tracer) for leaf in tree_util.tree_leaves(args))
