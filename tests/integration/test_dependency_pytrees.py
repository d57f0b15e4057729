"""End to end: a package whose exported adam training step takes and returns optax's optimizer
state, built by the Hatch hook through an isolated ``python -m build``, installed in a fresh venv
and called in strict mode without tracing; results equal the source's, run in another process.
A second step (clipping, adamw on a warmup-cosine schedule) has params of symbolic shapes: one
artifact runs params of two sizes, its state fed back over several steps."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
from _buildkit import copy_project, links_env, metadata, python_m_build
from conftest import FIXTURES, make_venv, run

STEPS = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
import jxe_optax

rng = np.random.default_rng(0)
params = {"w": jnp.asarray(rng.standard_normal((3, 2)), jnp.float32),
          "b": jnp.zeros(2, jnp.float32)}
x = jnp.asarray(rng.standard_normal((7, 3)), jnp.float32)
y = jnp.asarray(rng.standard_normal((7, 2)), jnp.float32)
step = jxe_optax.train_step if sys.argv[1] == "artifact" else jax.jit(
    jxe_optax.train_step.__wrapped__)
state, losses = jxe_optax.init(params), []
for _ in range(3):
    params, state, loss = step(params, state, x, y)
    losses.append(float(loss))
scheduled = jxe_optax.scheduled_step if sys.argv[1] == "artifact" else jax.jit(
    jxe_optax.scheduled_step.__wrapped__)
sized = {}
for inputs, outputs in ((3, 2), (6, 4)):  # one artifact, params of two sizes
    p = {"w": jnp.asarray(rng.standard_normal((inputs, outputs)), jnp.float32),
         "b": jnp.zeros(outputs, jnp.float32)}
    xs = jnp.asarray(rng.standard_normal((7, inputs)), jnp.float32)
    ys = jnp.asarray(rng.standard_normal((7, outputs)), jnp.float32)
    s, run_losses = jxe_optax.scheduled_init(p), []
    for _ in range(8):
        p, s, loss = scheduled(p, s, xs, ys)
        run_losses.append(float(loss))
    sized[f"{inputs}x{outputs}"] = {
        "losses": run_losses, "leaves": [np.asarray(a).tolist() for a in jax.tree.leaves((p, s))],
        "shapes": [list(np.shape(a)) for a in jax.tree.leaves((p, s))]}
print(json.dumps({"traces": jxe_optax.TRACES["count"], "losses": losses,
                  "leaves": [np.asarray(a).tolist() for a in jax.tree.leaves((params, state))],
                  "state_types": [type(s).__name__ for s in state], "scheduled": sized}))
"""


@pytest.mark.slow
def test_optax_training_step_from_an_installed_wheel(tmp_path: Path, project_wheel: Path) -> None:
    source = copy_project(FIXTURES / "jxe_optax", tmp_path / "src" / "jxe_optax")
    env = {**links_env(project_wheel.parent), "HATCH_JAXEXPORT_CACHE": str(tmp_path / "cache")}
    run(python_m_build("--wheel", "-o", tmp_path / "dist", source), env=env)
    (wheel,) = (tmp_path / "dist").glob("jxe_optax-*.whl")
    assert "Requires-Dist: optax" in metadata(wheel)
    python = make_venv(tmp_path / "venv", project_wheel, f"jax=={version('jax')}",
                       "flatbuffers", wheel)
    call_env = {"JAX_PLATFORMS": "cpu", "PYTHONPATH": "", "HATCH_JAXEXPORT_STRICT": "1",
                "HATCH_JAXEXPORT_CACHE": str(tmp_path / "cache")}
    verified = run([python, "-m", "hatch_jaxexport", "verify", "jxe_optax"], env=call_env,
                   cwd=tmp_path)
    assert "jxe_optax: OK" in verified.stdout
    baked, traced = (json.loads(run([python, "-c", STEPS, mode], env=call_env, cwd=tmp_path)
                                .stdout.strip().splitlines()[-1])
                     for mode in ("artifact", "source"))
    assert baked["traces"] == 0 and traced["traces"] == 3  # the source: 1 + one per size
    assert baked["state_types"] == traced["state_types"] == ["ScaleByAdamState", "EmptyState"]
    assert baked["losses"] == pytest.approx(traced["losses"], rel=1e-6)
    assert baked["losses"][2] < baked["losses"][0]
    for got, want in zip(baked["leaves"], traced["leaves"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert sorted(baked["scheduled"]) == ["3x2", "6x4"]
    for size, want in traced["scheduled"].items():
        got = baked["scheduled"][size]
        assert got["shapes"] == want["shapes"]
        assert got["losses"] == pytest.approx(want["losses"], rel=1e-6)
        assert got["losses"][-1] < got["losses"][0]
        for mine, theirs in zip(got["leaves"], want["leaves"], strict=True):
            np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)
