"""jax's own serialized VJP (``vjp_order`` without the family): an eager ``jax.grad`` of a loaded
function runs the wheel's executables of the primal and of the VJP, or the executable cache, and
compiles none of them; traced gradients keep jax's own rule."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import COUNT_COMPILES, run

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the fixture compiles the x86-64 targets")

SCRIPT = COUNT_COMPILES + """
w, x = np.array([0.5, -1.0, 2.0, 0.25], f32), np.linspace(-1, 1, 12, dtype=f32).reshape(3, 4)
jax.block_until_ready(jax.grad(lambda v: v)(f32(1.0)))  # jax's own eager seed, compiled once
before = len(compiles)
grad = jax.grad(m.native_loss, argnums=(0, 1))(w, x)
out = {"eager_compiles": len(compiles) - before,
       "grad": [np.asarray(g).tolist() for g in grad],
       "tiers": sorted(t for c in tiered_calls(m.native_loss) for t in c.tiers.values()),
       "vjp_tiers": sorted(t for c in tiered_calls(m.native_loss) if c.jitted.backward_call
                           for t in c.jitted.backward_call.tiers.values())}
out["jit_grad"] = np.asarray(jax.jit(jax.grad(m.native_loss))(w, x)).tolist()
value, vjp = jax.vjp(m.native_loss, w, x)
out["vjp"] = [float(value), np.asarray(vjp(f32(2.0))[0]).tolist()]
out["pair"] = np.asarray(jax.grad(lambda v: m.native_pair(v)[0])(np.arange(5, dtype=f32))).tolist()
try:
    jax.grad(jax.grad(m.native_loss))(w, x)
    out["second_order"] = "ran"
except Exception as err:
    out["second_order"] = type(err).__name__ + ": " + str(err)[:200]
out["traced"] = m.TRACES["count"]
print(json.dumps(out))
"""


def run_grads(site: Path, **env: str) -> dict:
    proc = run([sys.executable, "-c", SCRIPT], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_TIERED": "0",
        "HATCH_JAXEXPORT_CACHE": "0", **env})
    return json.loads(proc.stdout.splitlines()[-1])


def source_grads() -> dict:
    """What the Python bodies give, traced in this process."""
    import jax

    sys.path.insert(0, str(Path(__file__).parents[3] / "fixtures"))
    try:
        import jxe_exec
    finally:
        sys.path.pop(0)
    f32 = np.float32
    w, x = np.array([0.5, -1.0, 2.0, 0.25], f32), np.linspace(-1, 1, 12, dtype=f32).reshape(3, 4)
    loss = jxe_exec.native_loss.__wrapped__
    pair = jxe_exec.native_pair.__wrapped__
    return {"grad": jax.grad(loss, argnums=(0, 1))(w, x), "jit_grad": jax.grad(loss)(w, x),
            "vjp_value": loss(w, x), "vjp": jax.vjp(loss, w, x)[1](f32(2.0))[0],
            "pair": jax.grad(lambda v: pair(v)[0])(np.arange(5, dtype=f32))}


def assert_like_source(found: dict) -> None:
    want = source_grads()
    for got, expected in zip(found["grad"], want["grad"], strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    for name in ("jit_grad", "pair"):
        np.testing.assert_allclose(found[name], want[name], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(found["vjp"][0], want["vjp_value"], rtol=1e-6)
    np.testing.assert_allclose(found["vjp"][1], want["vjp"], rtol=1e-5, atol=1e-6)
    assert found["traced"] == 0  # no Python body ran: every path used the artifacts


def test_the_wheel_ships_executables_of_the_serialized_vjp(exec_site):
    exec_manifest_json = json.loads(
        (exec_site / "jxe_exec" / "_jaxexport" / "manifest.json").read_text())
    vjp = [e for e in exec_manifest_json["executables"] if e["native_vjp"]]
    assert {e["artifact"] for e in vjp} == {"jxe_exec:native_loss/0/cpu"}
    assert {e["target"] for e in vjp} == {"x86_64-avx2", "x86_64-avx512"}
    (record,) = [e for e in vjp if e["target"] == "x86_64-avx2"]
    # primal inputs, then the output's cotangent; out: the inputs' cotangents
    assert record["inputs"] == [[[4], "float32"], [[3, 4], "float32"], [[], "float32"]]
    assert record["outputs"] == [[[4], "float32"], [[3, 4], "float32"]]
    assert ".vjp." in record["file"]
    primal = [e for e in exec_manifest_json["executables"]
              if e["artifact"] == record["artifact"] and not e["native_vjp"]]
    assert len(primal) == 2  # and the primal's own, per target
    pair = [e for e in exec_manifest_json["executables"]
            if e["artifact"].startswith("jxe_exec:native_pair/")]
    assert [e["native_vjp"] for e in pair] == [0, 0]  # float0 cotangent: no VJP executable


def test_eager_grad_runs_the_shipped_executables_and_compiles_nothing(exec_site):
    found = run_grads(exec_site)
    assert found["eager_compiles"] == 0
    assert found["tiers"] == ["shipped"] and found["vjp_tiers"] == ["shipped"]
    assert_like_source(found)
    assert "second_order" in found and found["second_order"] != "ran"  # vjp_order=1 only


def test_without_shipped_executables_a_second_process_compiles_nothing(exec_site, tmp_path):
    cache = str(tmp_path / "cache")
    first = run_grads(exec_site, HATCH_JAXEXPORT_EXECUTABLES="0", HATCH_JAXEXPORT_CACHE=cache)
    assert first["eager_compiles"] == 2  # the primal and the VJP, once each
    assert first["tiers"] == ["compiled"] and first["vjp_tiers"] == ["compiled"]
    second = run_grads(exec_site, HATCH_JAXEXPORT_EXECUTABLES="0", HATCH_JAXEXPORT_CACHE=cache)
    assert second["eager_compiles"] == 0
    assert second["tiers"] == ["cached"] and second["vjp_tiers"] == ["cached"]
    assert_like_source(first)
    assert_like_source(second)


OVERLAP = COUNT_COMPILES + """
import threading
w, x = np.array([0.5, -1.0, 2.0, 0.25], f32), np.linspace(-1, 1, 12, dtype=f32).reshape(3, 4)
value, pullback = jax.vjp(m.native_loss, w, x)  # the forward pass only
for thread in threading.enumerate():
    if thread.name == "hatch-jaxexport-vjp":
        thread.join()
backward = tiered_calls(m.native_loss)[0].jitted.backward_call
settled = sorted(backward.tiers.values())
one = jax.device_put(f32(1.0))
before = len(compiles)
cotangents = pullback(one)
print(json.dumps({"settled_before_the_backward_pass": settled,
                  "compiles_in_the_backward_pass": len(compiles) - before,
                  "tiers_after": sorted(backward.tiers.values()),
                  "grad": [np.asarray(c).tolist() for c in cotangents]}))
"""


def settled_in_the_forward_pass(script: str, site: Path, cache: Path) -> dict:
    """Run an overlap ``script`` on a cold machine (no executables shipped or cached, no
    tiering); check that the backward executable was settled during the forward pass, so that
    the backward pass compiled nothing; what the script found."""
    proc = run([sys.executable, "-c", script], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1",
        "HATCH_JAXEXPORT_TIERED": "0", "HATCH_JAXEXPORT_EXECUTABLES": "0",
        "HATCH_JAXEXPORT_CACHE": str(cache)})
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["settled_before_the_backward_pass"] == ["compiled"]
    assert found["compiles_in_the_backward_pass"] == 0
    return found


def test_the_backward_executable_is_settled_while_the_forward_pass_runs(exec_site, tmp_path):
    """On a cold machine the VJP compiles in a thread during the forward pass (the two compiles
    overlap); the backward pass then finds it and compiles nothing."""
    found = settled_in_the_forward_pass(OVERLAP, exec_site, tmp_path / "cache")
    assert found["tiers_after"] == ["compiled"]
    want = source_grads()["grad"]
    for got, expected in zip(found["grad"], want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


FAMILY_OVERLAP = COUNT_COMPILES + """
import threading
w, x = np.array([0.5, -1.0, 2.0, 0.25], f32), np.linspace(-1, 1, 12, dtype=f32).reshape(3, 4)
value, pullback = jax.vjp(m.loss, w, x)  # the forward pass only: jax linearizes the primal
for thread in threading.enumerate():
    if thread.name == "hatch-jaxexport-vjp":
        thread.join()
members = tiered_calls(m.loss)[0].member_calls()  # the family's eager calls built so far
settled = sorted(t for c in members if c.job["label"].endswith("vjp") for t in c.tiers.values())
one = jax.device_put(f32(1.0))
before = len(compiles)
cotangents = pullback(one)
in_the_backward_pass = len(compiles) - before
want = jax.vjp(m.loss.__wrapped__, w, x)[1](one)
print(json.dumps({"settled_before_the_backward_pass": settled,
                  "compiles_in_the_backward_pass": in_the_backward_pass,
                  "grad": [np.asarray(c).tolist() for c in cotangents],
                  "want": [np.asarray(c).tolist() for c in want]}))
"""


def test_a_familys_vjp_executable_is_settled_while_the_forward_pass_runs(exec_site, tmp_path):
    """The same overlap for a function baked with ``ad_order`` (its transformation family):
    jax linearizes through the primal, whose JVP rule settles the ``vjp`` member's executable
    in a thread while the primal's compiles."""
    found = settled_in_the_forward_pass(FAMILY_OVERLAP, exec_site, tmp_path / "cache")
    for got, expected in zip(found["grad"], found["want"], strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
