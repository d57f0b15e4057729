"""Traced calls' plans kept by their types (``traced_plans``), on real exports of ``jxe_demo``.

An eager ``jax.grad`` calls the function with new tracers on every step; the match of the
first step is kept and rebuilt for the next ones from their leaves. These tests check that it
is kept where the rebuild is exact, not kept where it would not be, and that every step's
result is the source's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import import_baked

from hatch_jaxexport.runtime.call.matching import plan_call
from hatch_jaxexport.runtime.call.traced_plans import PLAN_LIMIT, plan_key, template_of


@pytest.fixture
def dense(demo):
    demo.dense.clear_cache()
    return demo.dense


def _params(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((4, 3)).astype(np.float32),
            "b": rng.standard_normal(3).astype(np.float32)}


def _loss(fn, x):
    return lambda params: jnp.sum(fn(params, x) ** 2)


def test_an_eager_grad_step_reuses_the_first_steps_plan(dense):
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    for seed in range(4):  # new tracers and new values each step
        params = _params(seed)
        got = jax.grad(_loss(dense, x))(params)
        want = jax.grad(_loss(dense.__wrapped__, x))(params)
        for name in ("w", "b"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    assert len(dense.calls.plans) == 1
    jax.grad(_loss(dense, x[:1]))(_params(0))  # another batch size: another plan
    assert len(dense.calls.plans) == 2
    (first, second) = dense.calls.plans.values()
    assert (first.sizes, second.sizes) == ({"i": 4, "o": 3, "n": 2}, {"i": 4, "o": 3, "n": 1})
    dense.clear_cache()
    assert dense.calls.plans == {}


def test_the_rebuilt_plan_holds_this_calls_leaves(dense):
    x = jnp.ones((2, 4), jnp.float32)
    seen = []

    def loss(params):
        _, leaves = plan_key((params, x), {})
        plan = plan_call(dense, (params, x), {})
        template = template_of(plan, leaves)
        rebuilt = template.plan(leaves)
        seen.append(rebuilt.values["params"]["w"] is params["w"]
                    and rebuilt.values["x"] is x and rebuilt.sizes == plan.sizes)
        return jnp.sum(dense(params, x))

    jax.grad(loss)(_params(1))
    assert seen == [True]


def test_a_tracer_passed_twice_keeps_no_plan(demo):
    combine = demo.combine  # x * y + 1, y by keyword
    combine.clear_cache()
    for value in (1.0, 2.0):
        x = jnp.full((3,), value, jnp.float32)
        got = jax.grad(lambda v: jnp.sum(combine(v, y=v)))(x)
        np.testing.assert_allclose(got, 2 * x)
    assert combine.calls.plans == {}  # a later call may pass two different tracers there
    x = jnp.ones((3,), jnp.float32)
    got = jax.grad(lambda v: jnp.sum(combine(v, y=2 * v)))(x)  # two tracers: kept
    np.testing.assert_allclose(got, 4 * x)
    assert len(combine.calls.plans) == 1


def test_static_values_are_part_of_the_key(demo):
    poly = demo.poly  # x * 2 ("fast") or x**3 - 1 ("exact")
    poly.clear_cache()
    x = jnp.arange(1.0, 4.0, dtype=jnp.float32)
    for mode, want in (("fast", 2 * np.ones(3)), ("exact", 3 * np.asarray(x) ** 2),
                       ("fast", 2 * np.ones(3))):
        np.testing.assert_allclose(jax.grad(lambda v, m=mode: jnp.sum(poly(v, mode=m)))(x),
                                   want, rtol=1e-6)
    assert len(poly.calls.plans) == 2


def test_calls_without_a_key_are_matched_in_full(dense):
    params = _params(2)
    committed = jax.device_put(np.ones((2, 4), np.float32), jax.devices()[0])
    assert plan_key((params, committed), {}) is None  # no tracer
    got = jax.grad(lambda p: jnp.sum(dense(p, committed)))(params)
    want = jax.grad(lambda p: jnp.sum(dense.__wrapped__(p, committed)))(params)
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-5, atol=1e-6)
    assert dense.calls.plans == {}  # its device picks a platform: never keyed

    def keyed(p):
        assert plan_key((p, committed), {}) is None
        assert plan_key((p, object()), {}) is None
        return jnp.sum(p["w"])

    jax.grad(keyed)(params)


def test_a_full_cache_starts_over(dense):
    for _ in range(2):
        for rows in range(1, 4):
            x = np.ones((rows, 4), np.float32)
            jax.grad(_loss(dense, x))(_params(rows))
    assert len(dense.calls.plans) == 3 <= PLAN_LIMIT
    dense.calls.remember_plan("other", None, 3)  # at the limit: emptied first
    assert list(dense.calls.plans) == ["other"]


def test_a_scalar_the_match_converts_is_part_of_the_key(scalars_site, monkeypatch):
    scaled = import_baked(scalars_site, "jxe_scalars", monkeypatch).scaled  # x * scale + 1
    scaled.clear_cache()
    x = jnp.arange(4.0, dtype=jnp.float32)
    for scale in (2.0, 3.0, 2.0):  # a Python float, converted to a float32 array by the match
        got = jax.jit(lambda v, s=scale: scaled(v, s))(x)  # traced anew each time
        np.testing.assert_allclose(got, np.asarray(x) * scale + 1)
    assert len(scaled.calls.plans) == 2  # one per value: the converted scalar is a constant
    (template, _) = scaled.calls.plans.values()
    assert any(type(route) is tuple for route in template.routes)
