"""Executables compiled where the device is (``jaxexport compile-executables``), on the CPU.

This machine has no accelerator, so the device compile runs with ``--platform cpu`` standing in
for a TPU: the same command, child process, device description and wheel writing a TPU runner
uses, compiling the wheel's ``cpu`` artifacts for "the device" ``cpu``. The wheel it writes
merges with the build's own wheel (``jaxexport merge``), verifies, shows its device target in
``inspect``, and its executable serves a fresh process's first call (tier ``shipped``). A TPU
record, described as the lent v5e described itself, travels through the same merge, verify
and inspect beside it, and is never used on this CPU.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile

import pytest
from _buildkit import hatch_pyproject, inprocess_build, members, write_project
from conftest import FIXTURES, run

from hatch_jaxexport.bake.executables.merge import add_to_wheel, merge_wheels
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.manifest import ExecutableRecord, sha256_hex

MANIFEST = "jxe_scalars/_jaxexport/manifest.json"
FOLDER = "jxe_scalars/_jaxexport"
#: What the lent TPU v5e's backend said of itself (FIELD-NOTES "A real TPU").
TPU_VERSION = ("PJRT C API\nTFRT TPU v5 lite\nBuilt on Jun 17 2026 11:08:48 (1781719728) "
               "cl/933746096")
#: What the lent v5e's image sets in every process, the compiling one included.
BARRIER = "--xla_tpu_use_enhanced_launch_barrier=true"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """jxe_scalars built for cpu and tpu, without executables (a CPU machine's wheel)."""
    tmp = tmp_path_factory.mktemp("device")
    project = write_project(tmp / "project", {"pyproject.toml": hatch_pyproject(
        "jxe-scalars", 'platforms = ["cpu", "tpu"]\n')})
    shutil.copytree(FIXTURES / "jxe_scalars", project / "jxe_scalars",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (wheel,) = inprocess_build(project, tmp / "dist")
    compiled = run([sys.executable, "-m", "hatch_jaxexport", "compile-executables", wheel,
                    "--out", tmp / "device", "--platform", "cpu"],
                   env={"LIBTPU_INIT_ARGS": BARRIER})  # a TPU's options: not the CPU's
    return tmp, wheel, next((tmp / "device").glob("*.whl")), compiled


def manifest(wheel) -> dict:
    return json.loads(members(wheel)[MANIFEST])


def tpu_record(wheel) -> tuple[ExecutableRecord, bytes]:
    """A TPU executable's record as a v5e compile writes it, under the image's
    ``LIBTPU_INIT_ARGS`` (its bytes a stand-in)."""
    (artifact,) = [a for a in manifest(wheel)["artifacts"] if a["platform"] == "tpu"]
    data = b"not a real TPU executable"
    return ExecutableRecord(
        artifact=f"{artifact['function']}/0/tpu", artifact_sha256=artifact["sha256"],
        target="tpu-v5-lite", inputs=[[[4], "float32"], [[], "float32"]],
        outputs=[[[4], "float32"]], file="jxe_scalars_scaled-tpu.tpu-v5-lite.0.xla",
        sha256=sha256_hex(data), size=len(data), jax_version="0.10.2",
        jaxlib_version="0.10.2", backend="tpu", platform_version=TPU_VERSION,
        machine="x86_64", xla_flags=[], cpu_features=[], system="Linux",
        device_kind="TPU v5 lite", device_count=1, backend_flags=BARRIER), data


def test_the_device_compile_writes_the_wheel_with_its_executables(built):
    _, wheel, device, compiled = built
    assert device.name == wheel.name
    assert "with 1 executable(s) for cpu 'cpu'" in compiled.stdout, compiled.stdout
    (record,) = manifest(device)["executables"]
    assert (record["target"], record["backend"], record["device_kind"],
            record["device_count"]) == ("cpu", "cpu", "cpu", 1)
    assert record["artifact"].endswith("/cpu") and record["cpu_features"]
    assert "backend_flags" not in record
    assert manifest(device)["artifacts"] == manifest(wheel)["artifacts"]  # one StableHLO
    assert "executables" not in manifest(wheel)


def test_merge_verify_inspect_and_a_first_call_take_the_device_executables(built):
    tmp, wheel, device, _ = built
    with_tpu = add_to_wheel(device, {FOLDER: [tpu_record(wheel)]}, tmp / "tpu")
    merged = merge_wheels([wheel, with_tpu], tmp / "merged")
    again = merge_wheels([with_tpu, wheel], tmp / "merged-again")
    assert again.read_bytes() == merged.read_bytes()
    records = {e["target"]: e for e in manifest(merged)["executables"]}
    assert sorted(records) == ["cpu", "tpu-v5-lite"]
    assert records["tpu-v5-lite"]["platform_version"] == TPU_VERSION
    assert records["tpu-v5-lite"]["backend_flags"] == BARRIER
    assert "backend_flags" not in records["cpu"]
    site = tmp / "site"
    zipfile.ZipFile(merged).extractall(site)
    env = {"PYTHONPATH": str(site)}
    verified = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_scalars"], env=env)
    assert verified.stdout.startswith("jxe_scalars: OK"), verified.stdout
    shown = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_scalars"],
                env=env).stdout
    assert f"tpu-v5-lite (TPU v5 lite, 1 device, LIBTPU_INIT_ARGS '{BARRIER}')" in shown, shown
    assert "not used: compiled for tpu, this process runs no device" in shown, shown
    assert "cpu (cpu, 1 device)" in shown and "can use 1" in shown, shown
    served = run([sys.executable, "-c", "import numpy as np, jxe_scalars as m\n"
                  "print(m.scaled(np.ones(4, np.float32), 2.0).tolist(), "
                  "[(r.tier, r.not_shipped) for r in m.scaled.call_report()])"],
                 env={**env, "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_CACHE": "0",
                      "JAX_PLATFORMS": "cpu"})
    assert served.stdout.strip() == "[3.0, 3.0, 3.0, 3.0] [('shipped', None)]", served
    assert served.stderr == ""
    # the release check treats the merged wheel as any baked wheel: its checks of the installed
    # package (the TPU target among them) and every artifact against a fresh export
    checked = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   "--jaxexport-check", "jxe_scalars", "--jaxexport-source", tmp / "project",
                   "--jaxexport-only"], env={**env, "JAX_PLATFORMS": "cpu"}, check=False,
                  cwd=tmp)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-1000:]
    assert " passed" in checked.stdout and " failed" not in checked.stdout, checked.stdout


def test_a_record_that_does_not_describe_its_device_is_refused(built):
    """The read-back (``verify``'s checks, which the release check runs on the installed
    wheel) refuses a device target whose name is not its device's: nothing is written."""
    tmp, wheel, _, _ = built
    record, data = tpu_record(wheel)
    with pytest.raises(ExportError) as refused:
        add_to_wheel(wheel, {FOLDER: [(record._replace(target="tpu-v4"), data)]},
                     tmp / "wrong")
    assert "target 'tpu-v4' does not name its device ('tpu-v5-lite')" in str(refused.value)
    assert not list((tmp / "wrong").glob("*.whl"))
