"""Calls staged into a caller's trace, on real exports of ``jxe_demo``: ``fn.staged_report()``.

``call_report()`` lists first eager calls; a library used inside its callers' ``jax.jit``,
``vmap`` and ``grad`` is called with tracers, each call staging the artifact (``served``) or the
source (``traced``, with the reason) into the caller's trace. These tests count them per
transformation, check the served/traced split against the artifacts the fixture baked, and the
``HATCH_JAXEXPORT_REPORT`` line printed once per transformation and outcome, not per trace.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hatch_jaxexport.runtime.call.staging import StagedCall, transformation_of


@pytest.fixture
def fresh(demo):
    """``jxe_demo.funcs`` with every function's resolved calls and counts forgotten."""
    for name in ("scale", "dense", "gpu_only", "poly"):
        getattr(demo, name).clear_cache()
    return demo


def rows(fn) -> list[tuple[str, str, int, str | None]]:
    return [(r.transformation, r.tier, r.count, r.reason) for r in fn.staged_report()]


def test_jit_stages_the_artifact_once_per_trace(fresh):
    scale = fresh.scale
    jitted = jax.jit(lambda x: scale(x) + 1)
    x = jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4)
    np.testing.assert_allclose(jitted(x), scale.__wrapped__(x) + 1)
    jitted(x)  # jax's cache: not traced again, not counted again
    assert rows(scale) == [("jit", "served", 1, None)]
    jitted(jnp.ones((2, 5), jnp.float32))  # another shape: traced again
    assert rows(scale) == [("jit", "served", 2, None)]
    (row,) = scale.staged_report()
    assert isinstance(row, StagedCall) and row.function == "jxe_demo.funcs:scale"
    assert scale.call_report() == []  # no eager call was made


def test_vmap_and_nested_transformations_are_named_as_written(fresh):
    scale = fresh.scale
    x = jnp.ones((2, 3, 4), jnp.float32)
    np.testing.assert_allclose(jax.vmap(scale)(x), jax.vmap(scale.__wrapped__)(x))
    jax.jit(jax.vmap(scale))(x)
    assert rows(scale) == [("vmap", "served", 1, None), ("jit(vmap)", "served", 1, None)]


def test_grad_stages_the_artifact_and_eager_calls_are_not_counted(fresh):
    dense = fresh.dense
    params = {"w": jnp.ones((4, 3), jnp.float32) * 0.1, "b": jnp.zeros(3, jnp.float32)}
    x = jnp.ones((2, 4), jnp.float32)
    dense(params, x)  # eager: call_report's, not staged
    assert rows(dense) == []
    grads = jax.grad(lambda p: jnp.sum(dense(p, x) ** 2))(params)
    expected = jax.grad(lambda p: jnp.sum(dense.__wrapped__(p, x) ** 2))(params)
    np.testing.assert_allclose(grads["w"], expected["w"], rtol=1e-6)
    jax.jit(jax.grad(lambda p: jnp.sum(dense(p, x))))(params)
    assert rows(dense) == [("grad", "served", 1, None), ("jit(grad)", "served", 1, None)]
    assert any(r.label == " vjp" for r in dense.call_report())  # the eager grad's member


def test_a_call_no_artifact_serves_counts_as_traced_with_the_reason(fresh):
    gpu_only = fresh.gpu_only  # baked for cuda only: this CPU process traces its source
    x = jnp.arange(3.0, dtype=jnp.float32)
    np.testing.assert_allclose(jax.jit(gpu_only)(x), x + 1)
    np.testing.assert_allclose(jax.vmap(gpu_only)(x[None]), (x + 1)[None])
    ((kind, tier, count, reason), (vkind, vtier, _, vreason)) = rows(gpu_only)
    assert (kind, tier, count, vkind, vtier) == ("jit", "traced", 1, "vmap", "traced")
    assert reason == vreason and "cuda" in reason


def test_the_report_line_is_printed_once_per_transformation_and_outcome(fresh, monkeypatch,
                                                                           capsys):
    monkeypatch.setenv("HATCH_JAXEXPORT_REPORT", "1")
    scale = fresh.scale
    for n in (2, 3, 4):  # three traces (shapes no other test traces), one line
        jax.jit(scale)(jnp.ones((n, 7), jnp.float32))
    jax.jit(fresh.gpu_only)(jnp.ones(7, jnp.float32))
    lines = [line for line in capsys.readouterr().err.splitlines()
             if " staged under " in line]
    (reason,) = [r.reason for r in fresh.gpu_only.staged_report()]
    assert lines == ["hatch-jaxexport: jxe_demo.funcs:scale staged under jit: served",
                     f"hatch-jaxexport: jxe_demo.funcs:gpu_only staged under jit: traced "
                     f"({reason})"]
    assert rows(scale) == [("jit", "served", 3, None)]


def test_transformation_of_reads_the_tracers_innermost_first():
    seen = []

    def probe(x):
        seen.append(transformation_of((x,), {}))
        return jnp.sum(x)

    x = jnp.ones((2, 3))
    transformation_of((x,), {})  # warm: a plain array is no transformation
    jax.vmap(jax.grad(probe))(x)
    jax.jit(probe)(x)
    jax.jacfwd(probe)(x)
    assert transformation_of((x, 1.0), {"y": np.ones(2)}) is None
    assert seen == ["vmap(grad)", "jit", "jvp"]


def test_an_eager_vmap_of_a_served_call_compiles_once_per_shape(fresh):
    """``scale`` has no batched member: an eager ``jax.vmap`` (no ``jax.jit`` around it, as
    tinygp's kernels evaluate their distance) maps the member with ``lax.map``, the same jitted
    function every call, so a second call of the same shapes compiles nothing (a fresh
    ``lax.map`` compiled at every call: 10x the source's time for each of tinygp's kernels)."""
    scale = fresh.scale
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiles.append(event)
        if event.endswith("backend_compile_duration") else None)
    batched = jax.vmap(jax.vmap(scale))
    x = jnp.arange(120.0, dtype=jnp.float32).reshape(2, 3, 4, 5) / 10
    first = batched(x)
    before = len(compiles)
    again = batched(x)
    assert len(compiles) == before, compiles[before:]
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(again, jax.vmap(jax.vmap(scale.__wrapped__))(x), rtol=1e-6)
    assert {r.tier for r in scale.staged_report()} == {"served"}
