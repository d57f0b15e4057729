"""Precompiled executables end to end: ``executables = true`` in the hook's table, a real isolated
``python -m build``, the wheel installed into a fresh virtual environment, first calls in a
fresh process that compile nothing; the same wheel with a manifest naming another jaxlib still
runs correctly (from the StableHLO)."""

from __future__ import annotations

import hashlib
import json
import platform
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from _buildkit import copy_project, hatch_pyproject, links_env, python_m_build, wheel_tag
from conftest import COUNT_COMPILES, FIXTURES, make_venv, run

from hatch_jaxexport.formats.cpu_targets import default_targets, machine_name

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(platform.machine() != "x86_64",
                                 reason="compares the two x86-64 targets")]

CALLS = COUNT_COMPILES + """
out = {"chain": np.asarray(m.chain(np.ones((8, 4), f32), np.full(4, 0.5, f32))["a"]).tolist(),
       "solve": np.asarray(m.solve(np.eye(6, dtype=f32) * 3 + 1,
                                   np.arange(6, dtype=f32))).tolist(),
       "grad": np.asarray(jax.grad(m.loss)(np.linspace(-1, 1, 4).astype(f32),
                                          np.ones((3, 4), f32))).tolist(),
       "native_grad": np.asarray(jax.grad(m.native_loss)(np.linspace(-1, 1, 4).astype(f32),
                                                        np.ones((3, 4), f32))).tolist()}
out["compiles"] = len(compiles)
out["tiers"] = sorted(t for name in ("chain", "solve") for c in tiered_calls(getattr(m, name))
                      for t in c.tiers.values())
out["native_tiers"] = sorted(t for c in tiered_calls(m.native_loss) for t in [
    *c.tiers.values(), *c.jitted.backward_call.tiers.values()])
out["traced"] = m.TRACES["count"]
out["module"] = m.__file__
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, project_wheel: Path) -> Path:
    """jxe_exec built with ``python -m build`` (isolated), executables for this builder."""
    root = tmp_path_factory.mktemp("exec-project")
    copy_project(FIXTURES / "jxe_exec", root / "jxe_exec")
    (root / "pyproject.toml").write_text(hatch_pyproject("jxe-exec", """
        require-runtime-dependencies = true
        executables = true
        """))
    proc = run(python_m_build("--wheel", "--outdir", root / "dist", root),
               env=links_env(project_wheel.parent), timeout=900)
    assert "precompiled executable(s) for x86_64-avx2, x86_64-avx512" in proc.stdout + proc.stderr
    (wheel,) = (root / "dist").glob("jxe_exec-*.whl")
    return wheel


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory, built: Path,
                project_wheel: Path) -> Path:
    return make_venv(tmp_path_factory.mktemp("exec-venv") / "venv", project_wheel, built,
                     f"jax=={version('jax')}", f"jaxlib=={version('jaxlib')}")


def calls(python: Path, cwd: Path, **env: str) -> dict:
    proc = run([python, "-c", CALLS], cwd=cwd, env={"HATCH_JAXEXPORT_CACHE": "0",
                                                    "HATCH_JAXEXPORT_STRICT": "1",
                                                    "PYTHONPATH": "", **env})
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_wheel_is_pure_and_carries_each_executable_with_its_record(built):
    assert wheel_tag(built) == "py3-none-any"
    with zipfile.ZipFile(built) as archive:
        manifest = json.loads(archive.read("jxe_exec/_jaxexport/manifest.json"))
        files = {n.rsplit("/", 1)[1]: archive.read(n) for n in archive.namelist()
                 if n.endswith(".xla")}
    records = manifest["executables"]
    assert sorted(files) == sorted(r["file"] for r in records)
    assert {r["target"] for r in records} == set(default_targets(machine_name(platform.machine())))
    for record in records:
        assert hashlib.sha256(files[record["file"]]).hexdigest() == record["sha256"]
        assert record["jaxlib_version"] == version("jaxlib")
    functions = {r["artifact"].split("/")[0] for r in records}
    assert "jxe_exec:unsized" not in functions and "jxe_exec:opted_out" not in functions
    assert {"jxe_exec:chain", "jxe_exec:solve", "jxe_exec:loss"} <= functions


def test_a_fresh_process_runs_them_and_compiles_nothing(venv_python, tmp_path):
    shipped = calls(venv_python, tmp_path)
    assert "site-packages" in shipped["module"] and shipped["traced"] == 0
    assert shipped["tiers"] == ["shipped", "shipped"]
    off = calls(venv_python, tmp_path, HATCH_JAXEXPORT_EXECUTABLES="0")
    assert off["tiers"] == ["compiled", "compiled"]
    # jax.grad of a vjp_order function: the artifact's and its serialized VJP's executables
    assert shipped["native_tiers"] == ["shipped", "shipped"]
    assert off["native_tiers"] == ["compiled", "compiled"]
    for key in ("chain", "solve", "grad", "native_grad"):
        assert shipped[key] == off[key], key
    # jax.grad's own small operations (its 1.0 seed) compile; none of the artifacts' do
    assert shipped["compiles"] <= off["compiles"] - 6, (shipped["compiles"], off["compiles"])


def test_a_wheel_with_executables_of_another_jaxlib_runs_from_the_stablehlo(venv_python,
                                                                           tmp_path):
    site = Path(run([venv_python, "-c", "import jxe_exec, os; print(os.path.dirname("
                     "jxe_exec.__file__))"], cwd=tmp_path).stdout.strip())
    manifest_path = site / "_jaxexport" / "manifest.json"
    saved = manifest_path.read_bytes()
    manifest = json.loads(saved)
    for record in manifest["executables"]:
        record["jaxlib_version"] = "0.9.2"  # as a wheel built for another jaxlib says
    try:
        manifest_path.write_text(json.dumps(manifest))
        other = calls(venv_python, tmp_path)
    finally:
        manifest_path.write_bytes(saved)
    reference = calls(venv_python, tmp_path, HATCH_JAXEXPORT_EXECUTABLES="0")
    assert other["tiers"] == ["compiled", "compiled"] and other["traced"] == 0
    for key in ("chain", "solve", "grad", "native_grad"):
        assert other[key] == reference[key], key


def other_jax() -> str:
    """A jax release beside this one that installs on this Python (both on 3.11 and 3.12+:
    the suite's slow tests run on the default interpreter, jax 0.10.x)."""
    return "0.10.1" if version("jaxlib") != "0.10.1" else "0.10.2"


def test_one_wheel_serves_several_jaxlib_versions(tmp_path_factory, project_wheel):
    from conftest import export_into_copy

    other = other_jax()
    site = export_into_copy(tmp_path_factory.mktemp("two-jaxlibs"), "jxe_exec",
                            executables=["x86_64-avx2"], executable_jaxlibs=[other])
    manifest = json.loads((site / "jxe_exec" / "_jaxexport" / "manifest.json").read_text())
    by_version: dict[str, set[str]] = {}
    for record in manifest["executables"]:
        by_version.setdefault(record["jaxlib_version"], set()).add(record["artifact"])
    assert set(by_version) == {version("jaxlib"), other}
    assert by_version[other] == by_version[version("jaxlib")]  # the same artifacts, twice
    python = make_venv(tmp_path_factory.mktemp("other-jax") / "venv", project_wheel,
                       f"jax=={other}", f"jaxlib=={other}")
    cwd = tmp_path_factory.mktemp("calls")
    shipped = calls(python, cwd, PYTHONPATH=str(site))
    reference = calls(python, cwd, PYTHONPATH=str(site), HATCH_JAXEXPORT_EXECUTABLES="0")
    assert shipped["tiers"] == ["shipped", "shipped"] and shipped["traced"] == 0
    assert reference["tiers"] == ["compiled", "compiled"]
    for key in ("chain", "solve", "grad"):
        assert shipped[key] == reference[key], key
