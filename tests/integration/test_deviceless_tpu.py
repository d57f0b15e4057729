"""TPU executables compiled without a TPU (``tpu-targets``), on this CPU-only machine.

Real parts: libtpu from the package index (the release this jax pins, which the build installs
once into the user's cache, about 700 MB), the Hatch hook's build, ``jaxexport verify`` and
``inspect`` and the release check on the installed wheel. The records are checked field by
field against what the lent TPU v5e said of itself (``tests/unit/formats/
test_device_targets.py``), and matched by the loader as that TPU's process would match them.
The whole run builds the same package with every other integration (setuptools, the wrapping
PEP 517 backend, ``jaxexport bake-wheel``) and merges a CPU builder's wheel with a TPU one.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from _buildkit import (
    EXECUTABLES_MODULE,
    flit_pyproject,
    hatch_pyproject,
    inprocess_build,
    leaks,
    links_env,
    python_m_build,
    setuptools_pyproject,
    write_project,
)
from conftest import run

from hatch_jaxexport.formats.device_targets import (
    DeviceDescription,
    description_mismatch,
    target_problem,
)
from hatch_jaxexport.formats.manifest_reader import parse_manifest

JAX_VERSION = version("jax")
#: The lent TPU v5e's libtpu build (FIELD-NOTES "A real TPU"), which libtpu 0.0.42.1 reports
#: for a described host too.
V5E_VERSION = ("PJRT C API\nTFRT TPU v5 lite\nBuilt on Jun 17 2026 11:08:48 (1781719728) "
               "cl/933746096")
#: What jax 0.10.2 adds to LIBTPU_INIT_ARGS when it starts a TPU backend (cloud_tpu_init).
BARRIER = "--xla_tpu_use_enhanced_launch_barrier=true"

HOOK_TABLE = '''
platforms = ["cpu", "tpu"]
executables = ["x86_64-avx2"]
tpu-targets = ["v5e", "v5e:2x2"]
'''

pytestmark = pytest.mark.skipif(sys.platform != "linux" or
                                __import__("platform").machine() != "x86_64",
                                reason="libtpu installs on Linux x86-64 only")


def project(root: Path, pyproject: str) -> Path:
    module = '"""TPU targets."""\n' + EXECUTABLES_MODULE
    return write_project(root, {"pyproject.toml": pyproject, "jxe_tpu/__init__.py": module})


def manifest_of(wheel: Path) -> tuple[bytes, dict]:
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read("jxe_tpu/_jaxexport/manifest.json")
    return data, json.loads(data)


@pytest.fixture(scope="module")
def hatch_built(tmp_path_factory):
    """jxe_tpu built by the Hatch hook (its exports and compiles in fresh processes)."""
    tmp = tmp_path_factory.mktemp("tpu-targets")
    root = project(tmp / "project", hatch_pyproject("jxe-tpu", HOOK_TABLE))
    (wheel,) = inprocess_build(root, tmp / "dist")
    return tmp, root, wheel


def tpu_records(manifest: dict) -> list[dict]:
    return [e for e in manifest.get("executables", []) if e["backend"] == "tpu"]


def by_signature(records: list[dict]) -> set[tuple]:
    """What each executable is, whoever compiled it: its target, artifact, inputs, whether it
    is the VJP, and its bytes."""
    return {(e["target"], e["artifact"], json.dumps(e["inputs"]), e["native_vjp"], e["sha256"])
            for e in records}


@pytest.mark.slow
def test_the_hatch_hook_writes_tpu_records_for_each_host_field_by_field(hatch_built):
    _, _, wheel = hatch_built
    raw, manifest = manifest_of(wheel)
    tpu = tpu_records(manifest)
    artifacts = {a.id: a for a in parse_manifest(raw).artifacts}
    cpu = [e for e in manifest["executables"] if e["backend"] == "cpu"]
    assert {e["target"] for e in tpu} == {"tpu-v5-lite", "tpu-v5-lite-x4"}
    assert {e["target"] for e in cpu} == {"x86_64-avx2"}
    for host, target, topology in ((1, "tpu-v5-lite", "v5e:1x1"),
                                   (4, "tpu-v5-lite-x4", "v5e:2x2")):
        mine = [e for e in tpu if e["target"] == target]
        # the same signatures as the CPU target's: double's one, loss's two sizes and their VJPs
        assert sorted((artifacts[e["artifact"]].function, json.dumps(e["inputs"]),
                       e["native_vjp"]) for e in mine) == \
            sorted((artifacts[e["artifact"]].function, json.dumps(e["inputs"]),
                    e["native_vjp"]) for e in cpu)
        assert len(mine) == 5
        for record in mine:
            assert artifacts[record["artifact"]].platform == "tpu"
            assert (record["backend"], record["device_kind"], record["device_count"],
                    record["host_device_count"], record["topology"]) == \
                ("tpu", "TPU v5 lite", 1, host, topology)
            assert record["platform_version"] == V5E_VERSION  # libtpu's build, as a TPU says it
            assert (record["jax_version"], record["jaxlib_version"]) == (JAX_VERSION,
                                                                         JAX_VERSION)
            assert (record["xla_flags"], record["cpu_features"], record["machine"],
                    record["system"]) == ([], [], "x86_64", "Linux")
            assert "backend_flags" not in record  # a deviceless build sets none
            assert record["file"].endswith(f".{target}.{record['file'].split('.')[-2]}.xla")
    # no build path: XLA:TPU keeps op locations in the executable, which the compile leaves out
    assert leaks(wheel, [str(hatch_built[1]), str(Path(sys.prefix)), "_compiler.py"]) == []
    # read back as the loader reads it, and matched as the lent v5e's process would match it
    read = parse_manifest(raw)
    lent = DeviceDescription("tpu", "TPU v5 lite", 1, V5E_VERSION, JAX_VERSION, JAX_VERSION,
                             BARRIER)
    host_of_4 = DeviceDescription("tpu", "TPU v5 lite", 4, V5E_VERSION, JAX_VERSION,
                                  JAX_VERSION, BARRIER)
    for record in (r for r in read.executables if r.backend == "tpu"):
        assert target_problem(record, "tpu") is None
        if record.host_device_count == 1:
            assert description_mismatch(record, lent) is None
            assert description_mismatch(record, host_of_4) == \
                "compiled for a host of 1 tpu device(s), this process has 4"
        else:
            assert description_mismatch(record, host_of_4) is None
            assert description_mismatch(record, lent) == \
                "compiled for a host of 4 tpu device(s), this process has 1"


@pytest.mark.slow
def test_verify_inspect_and_the_release_check_know_the_tpu_executables(hatch_built):
    tmp, root, wheel = hatch_built
    site = tmp / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {"PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu"}
    verified = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_tpu"], env=env)
    assert verified.stdout.startswith("jxe_tpu: OK"), verified.stdout
    shown = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_tpu"], env=env).stdout
    assert "tpu-v5-lite (TPU v5 lite, 1 device, compiled deviceless for v5e:1x1)" in shown, shown
    assert "tpu-v5-lite-x4 (TPU v5 lite, 1 device of a 4-device host, compiled deviceless " \
        "for v5e:2x2)" in shown, shown
    assert "not used: compiled for tpu, this process runs no device" in shown, shown
    served = run([sys.executable, "-c", "import numpy as np, jxe_tpu as m\n"
                  "print(m.double(np.ones(8, np.float32)).tolist(), "
                  "[(r.tier, r.not_shipped) for r in m.double.call_report()])"],
                 env={**env, "HATCH_JAXEXPORT_CACHE": "0"})
    assert served.stdout.startswith("[3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0] [('shipped'"), \
        served.stdout  # the CPU's own executable; the TPU's are never loaded here
    assert served.stderr == ""
    checked = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   "--jaxexport-check", "jxe_tpu", "--jaxexport-source", root,
                   "--jaxexport-only"], env=env, check=False, cwd=tmp)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-1000:]
    assert " passed" in checked.stdout and " failed" not in checked.stdout, checked.stdout


@pytest.mark.slow
def test_every_integration_writes_the_same_tpu_executables(hatch_built, project_wheel):
    """setuptools, the wrapping backend over flit and ``jaxexport bake-wheel`` of flit's own
    wheel, each an isolated build: the same TPU executables as the Hatch hook's, byte for
    byte (the compile order is the plans', the same in every build), which is also what makes
    two builds of one source identical."""
    tmp = hatch_built[0] / "others"
    env = {**links_env(project_wheel.parent), "SOURCE_DATE_EPOCH": "1700000000"}
    expected = by_signature(tpu_records(manifest_of(hatch_built[2])[1]))
    wheels = {}
    for name, pyproject in (("setuptools", setuptools_pyproject("jxe-tpu", "jxe_tpu",
                                                                 HOOK_TABLE)),
                            ("wrapped", flit_pyproject("jxe_tpu", HOOK_TABLE)),
                            ("flit", flit_pyproject("jxe_tpu", HOOK_TABLE,
                                                    "flit_core.buildapi"))):
        root = project(tmp / name, pyproject)
        run(python_m_build("--wheel", "-o", tmp / f"dist-{name}", root), env=env)
        (wheels[name],) = (tmp / f"dist-{name}").glob("*.whl")
    run([sys.executable, "-m", "hatch_jaxexport", "bake-wheel", wheels.pop("flit"),
         "--out", tmp / "dist-command", "--project", tmp / "flit"], env=env, cwd=tmp)
    (wheels["bake-wheel"],) = (tmp / "dist-command").glob("*.whl")
    for name, wheel in wheels.items():
        assert by_signature(tpu_records(manifest_of(wheel)[1])) == expected, name


@pytest.mark.slow
def test_a_cpu_builders_wheel_and_a_tpu_builds_merge(hatch_built, tmp_path):
    """The matrix: one builder compiles the CPU target, another (any Linux x86-64 runner) the
    TPU targets; ``jaxexport merge`` gives the one-build wheel's executables."""
    wheel = hatch_built[2]
    cpu_only = project(tmp_path / "cpu", hatch_pyproject("jxe-tpu", HOOK_TABLE.replace(
        'tpu-targets = ["v5e", "v5e:2x2"]', "")))
    tpu_only = project(tmp_path / "tpu", hatch_pyproject("jxe-tpu", HOOK_TABLE.replace(
        'executables = ["x86_64-avx2"]', "")))
    (cpu_wheel,) = inprocess_build(cpu_only, tmp_path / "dist-cpu")
    (tpu_wheel,) = inprocess_build(tpu_only, tmp_path / "dist-tpu")
    assert {e["backend"] for e in manifest_of(cpu_wheel)[1]["executables"]} == {"cpu"}
    assert {e["backend"] for e in manifest_of(tpu_wheel)[1]["executables"]} == {"tpu"}
    merged = run([sys.executable, "-m", "hatch_jaxexport", "merge", cpu_wheel, tpu_wheel,
                  "--out", tmp_path / "merged"])
    assert merged.returncode == 0
    (result,) = (tmp_path / "merged").glob("*.whl")
    one_build = manifest_of(wheel)[1]["executables"]
    assert by_signature(manifest_of(result)[1]["executables"]) == by_signature(one_build)
    shutil.rmtree(tmp_path / "merged")
