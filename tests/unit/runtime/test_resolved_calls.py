"""The fast path's one key function and the per-function state that only its owner writes."""

from __future__ import annotations

import numpy as np
import pytest

from hatch_jaxexport.runtime import _resolved_calls as resolved
from hatch_jaxexport.runtime._resolved_calls import (
    HOT_MISS_LIMIT,
    MISS,
    ResolvedCalls,
    fast_key,
    prime_fast_path,
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


def test_no_key_for_keywords_pytrees_or_committed_arrays() -> None:
    import jax

    x = np.zeros(3, np.float32)
    assert fast_key((x,), {"y": x}) is None
    assert fast_key(({"w": x},), {}) is None
    assert fast_key((jax.device_put(x, jax.devices()[0]),), {}) is None


def test_a_new_function_misses_then_serves_what_was_remembered() -> None:
    calls = ResolvedCalls()
    x = np.arange(3.0, dtype=np.float32)
    assert calls.call_fast((x,), {}) is MISS
    calls.remember_fast(fast_key((x,), {}), lambda a: a * 2, None)
    assert np.array_equal(calls.call_fast((x,), {}), x * 2)
    calls.remember_fast(fast_key((x, "tail"), {}), lambda a: a + 1, (0,))
    assert np.array_equal(calls.call_fast((x, "tail"), {}), x + 1)
    calls.clear()
    assert calls.call_fast((x,), {}) is MISS and calls.targets == {}


def test_the_hot_call_is_dropped_after_too_many_refusals() -> None:
    calls = ResolvedCalls()

    def refuses(_a: object) -> object:
        raise TypeError("another signature")

    calls.remember_hot(refuses, 1, ())
    for _ in range(HOT_MISS_LIMIT):
        assert calls.call_fast((np.zeros(2),), {}) is MISS
    assert calls.hot is None and calls.hot_misses == HOT_MISS_LIMIT
    calls.remember_hot(lambda a: a, 1, ())  # a function that many signatures call: stays off
    assert calls.hot is None


def test_targets_resolve_once_and_the_fallback_is_made_once() -> None:
    calls = ResolvedCalls()
    made: list[int] = []
    assert calls.target("k", lambda: made.append(1) or "target") == "target"
    assert calls.target("k", lambda: made.append(2) or "other") == "target"
    assert made == [1]
    assert calls.fallback(lambda: "jitted") == "jitted"
    assert calls.fallback(lambda: "again") == "jitted"
    assert "fallback" not in calls.targets  # the fallback is not a key among call keys
    assert resolved.FAST_CACHE_LIMIT > 0
