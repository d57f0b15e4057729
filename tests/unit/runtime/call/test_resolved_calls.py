"""The fast path's one key function and the per-function state that only its owner writes."""

from __future__ import annotations

import numpy as np
import pytest

from hatch_jaxexport.runtime.call import _resolved_calls as resolved
from hatch_jaxexport.runtime.call._resolved_calls import (
    HOT_MISS_LIMIT,
    MISS,
    Constant,
    ResolvedCalls,
    fast_key,
    fast_path,
    hot_call,
    prime_fast_path,
    route_of,
)


@pytest.fixture(autouse=True)
def _primed() -> None:
    prime_fast_path()


def test_plain_arrays_and_scalars_have_a_key_that_says_shape_dtype_and_value() -> None:
    import jax.numpy as jnp

    x = jnp.zeros((2, 3), jnp.float32)
    key = fast_key((x, np.ones(4, np.int32), "mode", 3), {})
    assert key is not None
    assert key == fast_key((jnp.ones((2, 3), jnp.float32), np.zeros(4, np.int32), "mode", 3), {})
    assert key != fast_key((x, np.ones(4, np.int32), "other", 3), {})
    assert key != fast_key((jnp.zeros((3, 2), jnp.float32), np.ones(4, np.int32), "mode", 3), {})


def test_keywords_are_keyed_by_name_order_and_value() -> None:
    x = np.zeros(3, np.float32)
    key = fast_key((x,), {"y": x, "mode": "max"})
    assert key is not None and key == fast_key((np.ones(3, np.float32),), {"y": x, "mode": "max"})
    assert key != fast_key((x,), {"mode": "max", "y": x})  # another order: another route
    assert key != fast_key((x,), {"y": x, "mode": "sum"})
    assert key != fast_key((x, x), {"mode": "max"})  # by position is not by keyword
    assert fast_key((x,), {"y": {"w": x}}) is None


def test_a_route_takes_values_by_identity_and_converted_scalars_as_constants() -> None:
    x, y = np.zeros(3, np.float32), np.ones(3, np.float32)
    assert route_of((x, y), (x, y)) == (0, 1)
    assert route_of((y, x), (x, "mode", y)) == (2, 0)  # keyword order is the call's
    assert route_of((x, x), (x, x)) == (0, 1)  # one array twice: two positions
    converted = np.float32(0.5)
    (step, scalar) = route_of((x, converted), (x, 0.5))
    assert step == 0 and isinstance(scalar, Constant) and scalar.value is converted
    # an array the full path replaced (a copy) is never a constant: no route
    assert route_of((x.copy(),), (x,)) is None
    # a scalar-shaped value while an array of the call is not taken as given: no route
    assert route_of((np.float32(1.0),), (np.zeros((), np.float32),)) is None


def test_no_key_for_pytrees_or_committed_arrays() -> None:
    import jax

    x = np.zeros(3, np.float32)
    assert fast_key(({"w": x},), {}) is None
    assert fast_key((jax.device_put(x, jax.devices()[0]),), {}) is None


def _call_fast(calls: ResolvedCalls, args: tuple, kwargs: dict) -> object:
    """The fast path alone: ``MISS`` where the full path would run."""
    return fast_path(calls, lambda *_: MISS)(*args, **kwargs)


def test_a_new_function_misses_then_serves_what_was_remembered() -> None:
    calls = ResolvedCalls()
    x = np.arange(3.0, dtype=np.float32)
    assert _call_fast(calls, (x,), {}) is MISS
    calls.remember_fast(fast_key((x,), {}), lambda a: a * 2, None)
    assert np.array_equal(_call_fast(calls, (x,), {}), x * 2)
    calls.remember_fast(fast_key((x, "tail"), {}), lambda a: a + 1, (0,))
    assert np.array_equal(_call_fast(calls, (x, "tail"), {}), x + 1)
    # by keyword, in the target's own order, a converted scalar as a constant
    calls.remember_fast(fast_key((), {"s": 2.0, "a": x}), lambda a, *, s: a * s,
                        (1, Constant(np.float32(2.0))), ("s",))
    assert np.array_equal(_call_fast(calls, (), {"s": 2.0, "a": x + 1}), (x + 1) * 2)
    calls.clear()
    assert _call_fast(calls, (x,), {}) is MISS and calls.targets == {}


def test_the_hot_call_is_dropped_after_too_many_refusals() -> None:
    calls = ResolvedCalls()

    def refuses(_a: object) -> object:
        raise TypeError("another signature")

    calls.remember_hot(hot_call(refuses, (None,), {}, ()))
    for _ in range(HOT_MISS_LIMIT):
        assert _call_fast(calls, (np.zeros(2),), {}) is MISS
    assert calls.hot is None and calls.hot_misses == HOT_MISS_LIMIT
    # a function that many signatures call: stays off
    calls.remember_hot(hot_call(lambda a: a, (None,), {}, ()))
    assert calls.hot is None


def test_targets_resolve_once_and_the_source_calls_are_made_once() -> None:
    calls = ResolvedCalls()
    made: list[int] = []
    assert calls.target("k", lambda: made.append(1) or "target") == "target"
    assert calls.target("k", lambda: made.append(2) or "other") == "target"
    assert made == [1]
    assert calls.uncovered(lambda: "jitted") == "jitted"
    assert calls.uncovered(lambda: "again") == "jitted"
    assert "uncovered" not in calls.targets  # the source's calls are not among call keys
    assert calls.first_report(("traced", "why")) and not calls.first_report(("traced", "why"))
    calls.clear()
    assert calls.first_report(("traced", "why"))  # cleared: reported again
    assert resolved.FAST_CACHE_LIMIT > 0
