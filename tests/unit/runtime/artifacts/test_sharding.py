"""Sharded exports (``mesh=``, ``in_specs=``, ``out_specs=``): spec checks, the build, and the
loaded functions on 4 and 8 simulated CPU devices against the source under the same mesh.

The device checks run ``sharding_checks.py`` in fresh processes with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``; see that file for each check.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from conftest import TESTS, export_into_copy, run

from hatch_jaxexport import ArtifactError, SpecError, exportable
from hatch_jaxexport.bake.export.exporter import tasks_for
from hatch_jaxexport.formats.manifest_reader import mesh_from_record, parse_manifest
from hatch_jaxexport.formats.mesh import PSpec, mesh_record
from hatch_jaxexport.runtime.artifacts.placement import CallMesh, select_variant

HERE = TESTS  # the support modules beside conftest.py
ROOT = HERE.parent
MESH = {"data": 2, "model": 2}
TWO_BY_TWO = (("data", 2), ("model", 2))


# --------------------------------------------------------------------------------------------
# Decoration: specs checked at once, naming the function and the argument


def _decorate(**options):
    def f(x, w, mode="a"):
        return x

    return exportable({"x": ("2*n, 8", "float32"), "w": ("8, 4", "float32")}, **options)(f)


def test_mesh_dict_bakes_the_single_device_and_the_sharded_variant():
    fn = _decorate(mesh=MESH, in_specs={"x": ("data", None), "w": (None, "model")},
                   out_specs=("data", "model"))
    assert fn.export_spec.mesh == (None, TWO_BY_TWO)
    assert fn.export_spec.in_specs == ({"x": PSpec(("data", None)), "w": PSpec((None, "model"))},)
    ids = [task.id for task in tasks_for(fn, ("cpu",))]
    assert ids == [f"{fn.name}/0/cpu", f"{fn.name}/0/cpu@data=2,model=2"]


def test_mesh_list_names_the_variants_exactly():
    fn = _decorate(mesh=[MESH, {"data": 2}], in_specs={"x": "data"})
    assert fn.export_spec.mesh == (TWO_BY_TWO, (("data", 2),))
    assert [t.mesh for t in tasks_for(fn, ("cpu",))] == [
        {"axes": ["data", "model"], "sizes": [2, 2]}, {"axes": ["data"], "sizes": [2]}]
    # arguments left out of in_specs are replicated
    assert fn.export_spec.in_specs[0]["w"] == PSpec(())


def test_in_specs_match_pytree_arguments_by_prefix():
    def g(params, batch):
        return params

    params = {"w": ("8, 4", "float32"), "b": ("4,", "float32")}
    batch = (("2*n, 8", "float32"), ("2*n,", "int32"))
    fn = exportable({"params": params, "batch": batch}, mesh=MESH,
                    in_specs={"params": {"w": (None, "model")}, "batch": ("data", "data")})(g)
    (specs,) = fn.export_spec.in_specs
    assert specs["params"] == {"w": PSpec((None, "model")), "b": PSpec(())}
    assert specs["batch"] == (PSpec(("data",)), PSpec(("data",)))


@pytest.mark.parametrize(("options", "message"), [
    ({"in_specs": {"x": "data"}}, "in_specs and out_specs need a mesh"),
    ({"mesh": {"data": 0}}, "axis 'data' must have an int size >= 1, got 0"),
    ({"mesh": "data"}, "mesh must be a dict of axis sizes"),
    ({"mesh": [None]}, "mesh=[None] declares no mesh"),
    ({"mesh": [MESH, MESH]}, "mesh lists mesh data=2 x model=2 twice"),
    ({"mesh": MESH, "in_specs": {"y": "data"}}, "in_specs names 'y', which is not an argument"),
    ({"mesh": MESH, "in_specs": {"x": "rows"}},
     "argument 'x': P('rows') names axis 'rows', which mesh data=2 x model=2 lacks"),
    ({"mesh": MESH, "in_specs": {"x": ("data", "data")}}, "splits over 'data' more than once"),
    ({"mesh": MESH, "in_specs": {"w": (None, None, "model")}},
     "argument 'w': P(None, None, 'model') has 3 entries but the array float32[8, 4] has "
     "rank 2"),
    ({"mesh": MESH, "in_specs": {"w": ("data", "model")}, "static": {"mode": ["a"]}}, None),
    ({"mesh": {"data": 4}, "in_specs": {"x": "data"}},
     "argument 'x': axis 0 (2 * n) is split over data (4 devices on mesh data=4), but 2 * n "
     "is not always a multiple of 4; write it as a multiple, e.g. '4*n'"),
    ({"mesh": MESH, "in_specs": {"mode": "data"}, "static": {"mode": ["a"]}},
     "in_specs names 'mode', a static argument"),
    ({"mesh": MESH, "out_specs": ("data", 3)}, "out_specs[1]: expected a PartitionSpec"),
    ({"mesh": MESH, "out_specs": ("rows",)}, "names axis 'rows'"),
])
def test_bad_sharding_specs_fail_at_decoration_naming_function_and_argument(options, message):
    if message is None:
        _decorate(**options)  # valid: 8 and 4 split over 2
        return
    with pytest.raises(SpecError) as caught:
        _decorate(**options)
    assert message in str(caught.value)
    assert "test_sharding" in str(caught.value)  # the function's module:qualname


def test_a_symbolic_dimension_split_over_devices_must_be_a_multiple():
    with pytest.raises(SpecError, match=r"axis 0 \(n\) is split over data .* e.g. '2\*n'"):
        exportable({"x": ("n, 8", "float32")}, mesh=MESH, in_specs={"x": "data"})(lambda x: x)


# --------------------------------------------------------------------------------------------
# Variant selection and the manifest (no devices needed)


def test_the_call_mesh_picks_the_variant_with_readable_reasons():
    both = (None, TWO_BY_TWO)
    assert select_variant(both, CallMesh(None)) == (None, "")
    assert select_variant(both, CallMesh(TWO_BY_TWO, "the mesh set with jax.set_mesh")) == (
        TWO_BY_TWO, "")
    variant, reason = select_variant(both, CallMesh((("data", 4),), "the arguments' mesh"))
    assert variant is None and reason == (
        "its artifacts need mesh data=2 x model=2 (or a single device, without a mesh), but the "
        "call runs on mesh data=4 (the arguments' mesh)")
    variant, reason = select_variant((TWO_BY_TWO,), CallMesh(None))
    assert variant is None and reason.startswith(
        "its artifacts need mesh data=2 x model=2, and the call has no mesh")
    assert "jax.set_mesh(jax.make_mesh((2, 2), ('data', 'model')))" in reason
    # axis order matters: the same sizes under other names or in another order do not match
    assert select_variant(both, CallMesh((("model", 2), ("data", 2)), "x"))[0] is None


def test_manifest_records_the_mesh_in_axis_order_and_checks_it(tmp_path):
    assert mesh_record((("model", 4), ("data", 2))) == {"axes": ["model", "data"],
                                                        "sizes": [4, 2]}
    assert mesh_from_record({"axes": ["model", "data"], "sizes": [4, 2]}) == (("model", 4),
                                                                              ("data", 2))
    for bad in ({"axes": ["a"], "sizes": [0]}, {"axes": ["a", "a"], "sizes": [1, 1]},
                {"axes": ["a"]}, {"axes": ["a b"], "sizes": [2]}):
        with pytest.raises(ValueError):
            mesh_from_record(bad)


def test_manifest_without_mesh_fields_still_reads_and_bad_meshes_are_corrupt(sharded_site):
    path = sharded_site / "jxe_sharded" / "_jaxexport" / "manifest.json"
    raw = json.loads(path.read_text())
    meshes = {json.dumps(r["mesh"], sort_keys=True) for r in raw["artifacts"]}
    assert meshes == {"{}", '{"axes": ["data", "model"], "sizes": [2, 2]}',
                      '{"axes": ["data"], "sizes": [8]}'}
    old = json.loads(path.read_text())  # a manifest written before sharding existed
    old["artifacts"] = [r for r in old["artifacts"] if not r["mesh"]]
    for record in old["artifacts"]:
        del record["mesh"]
    assert len(parse_manifest(json.dumps(old).encode()).artifacts) == 9
    sharded = next(r for r in raw["artifacts"] if r["mesh"])
    sharded["mesh"] = {"axes": ["data"], "sizes": [-2]}
    with pytest.raises(ArtifactError, match="corrupt manifest: bad mesh of jxe_sharded"):
        parse_manifest(json.dumps(raw).encode())


# --------------------------------------------------------------------------------------------
# The build and the loaded functions on simulated devices


@pytest.fixture(scope="module")
def sharded_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_into_copy(tmp_path_factory.mktemp("sharded-site"), "jxe_sharded", jobs=2)


@pytest.fixture(scope="module", params=[4, 8], ids=["4-devices", "8-devices"])
def checks(request: pytest.FixtureRequest, sharded_site: Path) -> dict:
    proc = run([sys.executable, HERE / "sharding_checks.py"], env={
        "PYTHONPATH": str(sharded_site), "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={request.param}",
        "HATCH_JAXEXPORT_WARNINGS": "1"})  # the checks count the notices as warnings
    out = json.loads(proc.stdout)
    assert "crash" not in out, out["crash"]
    assert out["devices"] == request.param
    return out


def _ran_artifact(entry: dict) -> None:
    assert "error" not in entry, entry["error"]
    assert entry["warnings"] == [] and entry["traced"] == 0, entry
    assert entry["equal"], "loaded and source results differ"


SHARDED_2X2 = {"mesh": {"data": 2, "model": 2}, "spec": ["data", "model"]}


def test_committed_arguments_run_the_sharded_artifact_with_declared_output_sharding(checks):
    entry = checks["layer_committed"]
    _ran_artifact(entry)
    assert entry["sharding"] == SHARDED_2X2
    assert entry["from_artifact"]["(0, '{}', 'cpu', 'data=2,model=2')"] is True


def test_without_a_mesh_the_single_device_artifact_runs(checks):
    entry = checks["layer_numpy_no_mesh"]
    _ran_artifact(entry)
    assert entry["sharding"] == "SingleDeviceSharding"
    assert entry["from_artifact"] == {"(0, '{}', 'cpu', '')": True}


@pytest.mark.parametrize("case", ["layer_numpy_set_mesh", "layer_numpy_with_mesh",
                                  "layer_jit_set_mesh"])
def test_numpy_inputs_are_placed_onto_the_current_mesh(checks, case):
    entry = checks[case]
    _ran_artifact(entry)
    assert entry["sharding"] == SHARDED_2X2


def test_grad_jvp_and_vmap_of_a_sharded_function_use_its_companions(checks):
    for case in ("layer_grad_set_mesh", "layer_jvp_set_mesh", "layer_vmap_set_mesh"):
        _ran_artifact(checks[case])
    grad_x, grad_w = checks["layer_grad_set_mesh"]["sharding"]
    assert grad_x == {"mesh": {"data": 2, "model": 2}, "spec": ["data"]}  # like x
    assert grad_w == {"mesh": {"data": 2, "model": 2}, "spec": [None, "model"]}  # like w
    assert checks["layer_jvp_set_mesh"]["sharding"] == [SHARDED_2X2, SHARDED_2X2]
    assert checks["layer_vmap_set_mesh"]["sharding"] == {
        "mesh": {"data": 2, "model": 2}, "spec": [None, "data", "model"]}


def test_native_vjp_pytree_outputs_and_statics_on_the_mesh(checks):
    for case in ("loss_set_mesh", "loss_grad_set_mesh", "stats_set_mesh",
                 "sharded_only_set_mesh"):
        _ran_artifact(checks[case])
    assert checks["stats_set_mesh"]["sharding"] == {
        "scaled": {"mesh": {"data": 2, "model": 2}, "spec": ["data"]},
        "total": {"mesh": {"data": 2, "model": 2}, "spec": []}}
    assert checks["stats_set_mesh"]["from_artifact"] == {
        "(0, '{\"scale\":3.0}', 'cpu', 'data=2,model=2')": True}


def test_no_mesh_for_a_sharded_only_function_falls_back_saying_what_it_needs(checks,
                                                                             maintainer_warnings):
    entry = checks["sharded_only_no_mesh"]
    assert entry["traced"] == 1 and entry["equal"]
    assert entry["warnings"] == [
        "jxe_sharded.funcs:sharded_only: no usable baked artifact, tracing the source instead: "
        "its artifacts need mesh data=2 x model=2, and the call has no mesh (the arguments are "
        "not placed on one and none is set with jax.set_mesh); set one with "
        "jax.set_mesh(jax.make_mesh((2, 2), ('data', 'model'))) or place the arguments with "
        "jax.device_put and a NamedSharding"]
    strict = checks["sharded_only_no_mesh_strict"]
    assert strict["traced"] == 0
    assert strict["error"].startswith(
        "ArtifactError: jxe_sharded.funcs:sharded_only: no usable baked artifact "
        "(HATCH_JAXEXPORT_STRICT is set): its artifacts need mesh data=2 x model=2, and the "
        "call has no mesh")


def test_another_mesh_falls_back_saying_which_mesh_it_needs_and_found(checks, maintainer_warnings):
    entry = checks["sharded_only_other_mesh"]
    assert entry["traced"] == 1 and entry["equal"]
    assert entry["warnings"] == [
        "jxe_sharded.funcs:sharded_only: no usable baked artifact, tracing the source instead: "
        "its artifacts need mesh data=2 x model=2, but the call runs on mesh data=4 (the "
        "arguments' mesh)"]
    assert checks["layer_other_mesh"]["warnings"] == [
        "jxe_sharded.funcs:layer: no usable baked artifact, tracing the source instead: its "
        "artifacts need mesh data=2 x model=2 (or a single device, without a mesh), but the "
        "call runs on mesh data=4 (the mesh set with jax.set_mesh)"]


def test_eight_devices_run_the_2x2_artifact_on_any_four_and_the_8_way_variant(checks):
    if checks["devices"] < 8:
        pytest.skip("needs 8 devices")
    _ran_artifact(checks["layer_last_devices"])
    assert checks["layer_last_devices"]["sharding"] == SHARDED_2X2
    for case in ("loss_data8", "loss_grad_data8"):
        _ran_artifact(checks[case])
    assert checks["loss_data8"]["from_artifact"]["(0, '{}', 'cpu', 'data=8')"] is True


def test_inspect_shows_the_mesh_of_each_artifact(sharded_site):
    shown = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_sharded"],
                env={"PYTHONPATH": str(sharded_site)}).stdout
    lines = shown.splitlines()
    assert lines[1].split() == ["function", "structure", "static", "platform", "mesh", "member",
                                "vjp", "bytes"]
    rows = sorted(re.search(r" cpu +(-|\S+=\d+(?: x \S+=\d+)*) +(\S+) +(\d) +[\d,]+$", line)
                  .groups() for line in lines[2:] if line.startswith("jxe_sharded.funcs:loss"))
    # jax's own VJP for one device; the sharded variants get companions instead (see docs)
    assert rows == [("-", "primal", "1"),
                    ("data=2 x model=2", "jvp", "0"), ("data=2 x model=2", "primal", "1"),
                    ("data=2 x model=2", "vjp", "0"),
                    ("data=8", "jvp", "0"), ("data=8", "primal", "1"), ("data=8", "vjp", "0")]
    assert "data=2 x model=2" in shown
    assert "jxe_sharded: 4 function(s), 24 artifact(s)" in lines[0]


# --------------------------------------------------------------------------------------------
# The release check (fresh sharded export vs bundled) and example_pkg's training step

PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "jxe-sharded"
version = "1.0.0"

[tool.hatch.build.targets.wheel]
packages = ["jxe_sharded"]
artifacts = ["jxe_sharded/_jaxexport/*"]
"""


@pytest.fixture(scope="module")
def sharded_wheel_site(sharded_site: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """jxe_sharded's wheel (artifacts from ``sharded_site``) installed with dist-info."""
    tmp = tmp_path_factory.mktemp("sharded-wheel")
    project = tmp / "project"
    shutil.copytree(sharded_site / "jxe_sharded", project / "jxe_sharded",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (project / "pyproject.toml").write_text(PYPROJECT)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
         tmp / "dist", project])
    (wheel,) = (tmp / "dist").glob("jxe_sharded-*.whl")
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", tmp / "site",
         wheel])
    return tmp / "site"


@pytest.mark.parametrize("devices", [1, 4])
def test_release_check_compares_sharded_artifacts_on_a_mesh_of_their_shape(
        sharded_wheel_site, sharded_site, tmp_path, devices):
    proc = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--jaxexport-check",
                "jxe_sharded", "--jaxexport-source", sharded_site, "--jaxexport-only", "-q"],
               cwd=tmp_path, env={
                    "PYTHONPATH": str(sharded_wheel_site), "JAX_PLATFORMS": "cpu",
                    "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"})
    summary = proc.stdout.split("jaxexport release check")[1]
    if devices == 1:  # 15 sharded artifacts: compared on their fingerprint only
        assert "24 checked: 24 match (9 also run and compared numerically" in summary, summary
        assert "12 x numerics not run: sharded for mesh data=2 x model=2 (4 devices), this " \
               "process has 1" in summary, summary
        assert "3 x numerics not run: sharded for mesh data=8 (8 devices)" in summary, summary
    else:
        assert "24 checked: 24 match (21 also run and compared numerically" in summary, summary


EXAMPLE_STEP = """
import json
import jax, numpy as np
from example_pkg import init_mlp
from example_pkg.parallel import train_step
from hatch_jaxexport.runtime.call.loader import loaded_from_artifact
params, rng = init_mlp(0), np.random.default_rng(1)
x = rng.standard_normal((16, 8)).astype(np.float32)
y = rng.standard_normal((16, 4)).astype(np.float32)
source = jax.jit(train_step.__wrapped__)
with jax.set_mesh(jax.make_mesh((2, 2), ("data", "model"))):
    baked, ref = (params, params)
    for _ in range(3):
        (baked, loss), (ref, ref_loss) = train_step(baked, x, y, 0.1), source(ref, x, y, 0.1)
        assert np.allclose(loss, ref_loss, rtol=1e-5, atol=1e-6), (loss, ref_loss)
    for a, b in zip(jax.tree.leaves(baked), jax.tree.leaves(ref)):
        assert np.allclose(a, b, rtol=1e-5, atol=1e-6)
print(json.dumps({"specs": [list(baked[0]["w"].sharding.spec), list(baked[1]["w"].sharding.spec)],
                  "loss": float(loss),
                  "used": {str(k): v for k, v in loaded_from_artifact(train_step).items()}}))
"""


def test_example_pkg_trains_data_parallel_on_a_2x2_mesh(tmp_path):
    from hatch_jaxexport.bake import export_package

    site = tmp_path / "site"
    shutil.copytree(ROOT / "example_pkg" / "src" / "example_pkg", site / "example_pkg",
                    ignore=shutil.ignore_patterns("__pycache__", "_jaxexport"))
    export_package("example_pkg", site / "example_pkg" / "_jaxexport", search_path=[site],
                   jobs=2)
    proc = run([sys.executable, "-c", EXAMPLE_STEP], cwd=tmp_path, env={
        "PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_STRICT": "1",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["used"] == {"(0, '{}', 'cpu', 'data=2,model=2')": True}
    assert out["specs"] == [[None, "model"], ["model", None]]
