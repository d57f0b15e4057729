"""Pytree node types from other distributions: optax's optimizer state (NamedTuples in optax's
private modules), and a stand-in library's namedtuples, dataclasses and ``register_pytree_node``
classes, as inputs, outputs and nested nodes, baked and called in strict mode without tracing."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FIXTURES

from hatch_jaxexport.bake import export_package

optax = pytest.importorskip("optax")


@pytest.fixture(scope="module")
def foreign_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``jxe_optax`` and ``jxe_foreign`` (beside its stand-in library) with baked artifacts."""
    site = tmp_path_factory.mktemp("foreign-site")
    shutil.copytree(FIXTURES / "jxe_optax" / "jxe_optax", site / "jxe_optax")
    for name in ("jxe_foreign", "jxe_foreign_lib"):
        shutil.copytree(FIXTURES / name, site / name, ignore=shutil.ignore_patterns("__pycache__"))
    export_package("jxe_optax", site / "jxe_optax" / "_jaxexport", search_path=[site])
    export_package("jxe_foreign", site / "jxe_foreign" / "_jaxexport", search_path=[site],
                   on_error="skip")
    return site


@pytest.fixture
def baked(foreign_site: Path, monkeypatch: pytest.MonkeyPatch):
    """Import a package of ``foreign_site`` in this process, strict mode on."""
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    monkeypatch.syspath_prepend(str(foreign_site))
    return importlib.import_module


def _manifest(site: Path, package: str) -> dict:
    return json.loads((site / package / "_jaxexport" / "manifest.json").read_text())


def test_optax_state_types_are_recorded_in_the_manifest(foreign_site: Path) -> None:
    records = {r["function"]: r for r in _manifest(foreign_site, "jxe_optax")["artifacts"]}
    assert sorted(records) == ["jxe_optax:scheduled_step", "jxe_optax:train_step"]
    assert records["jxe_optax:train_step"]["pytree_types"] == [
        "optax._src.base:EmptyState", "optax._src.transform:ScaleByAdamState"]
    assert records["jxe_optax:scheduled_step"]["pytree_types"] == [
        "optax._src.base:EmptyState", "optax._src.transform:ScaleByAdamState",
        "optax._src.transform:ScaleByScheduleState"]


def test_adam_training_step_fed_back_matches_the_source(baked) -> None:
    pkg = baked("jxe_optax")
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.standard_normal((3, 2)), jnp.float32),
              "b": jnp.zeros(2, jnp.float32)}
    x = jnp.asarray(rng.standard_normal((5, 3)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((5, 2)), jnp.float32)
    baked_params, baked_state, baked_losses = params, pkg.init(params), []
    pkg.TRACES["count"] = 0
    for _ in range(3):  # the state each step returns is the next step's input
        baked_params, baked_state, loss = pkg.train_step(baked_params, baked_state, x, y)
        baked_losses.append(float(loss))
    assert pkg.TRACES["count"] == 0, "the baked step traced its source"
    source = jax.jit(pkg.train_step.__wrapped__)
    source_params, source_state, source_losses = params, pkg.init(params), []
    for _ in range(3):
        source_params, source_state, loss = source(source_params, source_state, x, y)
        source_losses.append(float(loss))
    np.testing.assert_allclose(baked_losses, source_losses, rtol=1e-6)
    assert baked_losses[2] < baked_losses[0]
    assert isinstance(baked_state[0], optax.ScaleByAdamState)
    assert isinstance(baked_state[1], optax.EmptyState)
    assert int(baked_state[0].count) == 3
    for got, want in zip(jax.tree.leaves((baked_params, baked_state)),
                         jax.tree.leaves((source_params, source_state)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert jax.tree.structure(baked_state) == jax.tree.structure(source_state)


def _run_steps(step, init, params, x, y, steps: int) -> tuple:
    """``steps`` calls of ``step``, each fed the params and state the previous one returned."""
    state, losses = init(params), []
    for _ in range(steps):
        params, state, loss = step(params, state, x, y)
        losses.append(float(loss))
    return params, state, losses


@pytest.mark.parametrize("sizes", [(3, 2), (6, 4)], ids=["3x2", "6x4"])
def test_clipped_adamw_on_a_schedule_with_symbolic_params_fed_back(baked, sizes) -> None:
    """One artifact for params of any ``(i, o)``: the optimizer state's shapes follow the params'
    symbols; the schedule's count and clipping run from the artifact as from the source."""
    pkg = baked("jxe_optax")
    inputs, outputs = sizes
    rng = np.random.default_rng(inputs)
    params = {"w": jnp.asarray(rng.standard_normal((inputs, outputs)), jnp.float32),
              "b": jnp.zeros(outputs, jnp.float32)}
    x = jnp.asarray(rng.standard_normal((7, inputs)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((7, outputs)), jnp.float32)
    pkg.TRACES["count"] = 0
    baked_run = _run_steps(pkg.scheduled_step, pkg.scheduled_init, params, x, y, steps=8)
    assert pkg.TRACES["count"] == 0, "the baked step traced its source"
    source_run = _run_steps(jax.jit(pkg.scheduled_step.__wrapped__), pkg.scheduled_init,
                            params, x, y, steps=8)
    np.testing.assert_allclose(baked_run[2], source_run[2], rtol=1e-6)
    assert baked_run[2][-1] < baked_run[2][0]
    baked_state = baked_run[1]
    assert jax.tree.structure(baked_state) == jax.tree.structure(source_run[1])
    assert isinstance(baked_state[0], optax.EmptyState)
    adam, schedule = baked_state[1][0], baked_state[1][-1]
    assert isinstance(adam, optax.ScaleByAdamState)
    assert type(schedule).__name__ == "ScaleByScheduleState"
    assert int(adam.count) == int(schedule.count) == 8
    assert adam.mu["w"].shape == (inputs, outputs) and adam.nu["b"].shape == (outputs,)
    for got, want in zip(jax.tree.leaves(baked_run[:2]), jax.tree.leaves(source_run[:2]),
                         strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_foreign_namedtuple_and_dataclass_inputs_nested_in_outputs(baked) -> None:
    pkg = baked("jxe_foreign")
    lib = sys.modules["jxe_foreign_lib"]
    m = lib.Moments(jnp.arange(3, dtype=jnp.float32), jnp.ones(3, jnp.float32))
    pairs = [lib.Pair(jnp.ones(3, jnp.float32), jnp.full(3, 2.0, jnp.float32))]
    pkg.TRACES["count"] = 0
    out = pkg.normalize(m, pairs)
    assert pkg.TRACES["count"] == 0
    want = jax.jit(pkg.normalize.__wrapped__)(m, pairs)
    assert jax.tree.structure(out) == jax.tree.structure(want)
    assert type(out["moments"]) is lib.Moments and type(out["pairs"][0]) is lib.Pair
    for got, expected in zip(jax.tree.leaves(out), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_registered_node_with_json_aux_data_comes_back_with_its_aux(baked) -> None:
    pkg = baked("jxe_foreign")
    lib = sys.modules["jxe_foreign_lib"]
    pkg.TRACES["count"] = 0
    box, (layer,) = pkg.boxed(jnp.arange(4, dtype=jnp.float32))
    assert pkg.TRACES["count"] == 0
    assert type(box) is lib.Box and (box.label, box.sizes) == ("running sum", (2, 3))
    assert type(layer) is lib.Layer and layer.activation == "relu"
    np.testing.assert_allclose(box.value, [0, 1, 3, 6])
    np.testing.assert_allclose(layer.w, [0, 2, 4, 6])


def test_a_module_level_sentinel_in_aux_data_comes_back_as_the_same_object(baked) -> None:
    """Like equinox's ``MISSING`` in every Module's aux data: recorded by reference, resolved
    from the already imported module that defines it."""
    pkg = baked("jxe_foreign")
    lib = sys.modules["jxe_foreign_lib"]
    pkg.TRACES["count"] = 0
    slot = pkg.slotted(jnp.arange(3, dtype=jnp.float32))
    assert pkg.TRACES["count"] == 0
    assert type(slot) is lib.Slot and slot.default is lib.UNSET
    np.testing.assert_allclose(slot.value, [0, 3, 6])


def test_an_input_node_with_a_static_field_matches_only_its_baked_value(baked) -> None:
    pkg = baked("jxe_foreign")
    lib = sys.modules["jxe_foreign_lib"]
    pkg.TRACES["count"] = 0
    out = pkg.powered(lib.Scaled(jnp.arange(3, dtype=jnp.float32), 2))
    assert pkg.TRACES["count"] == 0
    assert type(out) is lib.Scaled and out.power == 3
    np.testing.assert_allclose(out.x, [0, 1, 4])
    with pytest.raises(TypeError, match=r"argument 's' expects a Scaled with static field "
                                        r"power=2, got power=3"):
        pkg.powered(lib.Scaled(jnp.arange(3, dtype=jnp.float32), 3))
    assert pkg.TRACES["count"] == 0


def test_a_node_type_the_build_cannot_serialize_is_a_build_error_with_the_way_out(
        foreign_site: Path) -> None:
    manifest = _manifest(foreign_site, "jxe_foreign")
    (skipped,) = manifest["skipped"]
    assert skipped["function"] == "jxe_foreign.opaque:wrapped"
    reason = skipped["reason"]
    assert "jxe_foreign.opaque:wrapped: cannot serialize pytree type " \
           "'jxe_foreign_lib:Opaque'" in reason, reason
    assert "is not JSON" in reason and "register_pytree_node_serialization" in reason, reason
    assert {r["function"] for r in manifest["artifacts"]} == {
        "jxe_foreign:normalize", "jxe_foreign:boxed", "jxe_foreign:slotted",
        "jxe_foreign:powered"}
    types = {t for r in manifest["artifacts"] for t in r["pytree_types"]}
    assert types == {"jxe_foreign_lib:Moments", "jxe_foreign_lib:Pair", "jxe_foreign_lib:Box",
                     "jxe_foreign_lib:Layer", "jxe_foreign_lib:Slot", "jxe_foreign_lib:Scaled"}
