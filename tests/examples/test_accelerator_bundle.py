"""``scripts/accelerator_bundle.sh``, what the TPU machine is given, works as written on this
CPU-only machine: example_pkg's wheel carries TPU v5e executables compiled here, without a
TPU (``tpu-targets = ["v5e"]``), with the lent chip's platform version, and no build path."""

from __future__ import annotations

import json
import sys
import zipfile

from _buildkit import leaks
from conftest import ROOT, run

#: The lent TPU v5e's libtpu build (FIELD-NOTES "A real TPU"), which libtpu 0.0.42.1 reports
#: for a described host too.
V5E_VERSION = ("PJRT C API\nTFRT TPU v5 lite\nBuilt on Jun 17 2026 11:08:48 (1781719728) "
               "cl/933746096")


def test_the_bundle_carries_tpu_v5e_executables_made_without_a_tpu(tmp_path):
    out = tmp_path / "wheels"
    proc = run(["bash", ROOT / "scripts" / "accelerator_bundle.sh", out, "cpu,tpu",
                "--worktree"], cwd=tmp_path, env={"PYTHON": sys.executable})
    (wheel,) = out.glob("example_pkg-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        manifest = json.loads(archive.read("example_pkg/_jaxexport/manifest.json"))
    tpu = [e for e in manifest["executables"] if e.get("device_kind") == "TPU v5 lite"]
    assert len(tpu) >= 20, len(tpu)
    assert {(e["target"], e["platform_version"], e["host_device_count"], e["topology"])
            for e in tpu} == {("tpu-v5-lite", V5E_VERSION, 1, "v5e:1x1")}
    assert f"{len(tpu)} executable(s) for tpu-v5-lite (TPU v5 lite; PJRT C API / TFRT TPU v5 " \
        "lite" in proc.stdout, proc.stdout
    assert leaks(wheel, [str(ROOT), str(tmp_path), "_compiler.py"]) == []
