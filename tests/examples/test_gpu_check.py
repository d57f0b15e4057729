"""``scripts/gpu_check.sh``, the check a device machine runs, works as written: run here with
``GPU_CHECK_PLATFORM=cpu`` on example_pkg's wheel, in a fresh venv that has jax but neither
wheel, with no package index (``--no-index``): every workload served strict by its artifact,
equal to the source, a table of first calls beside the source's, ``result: OK``."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, make_venv, run


@pytest.mark.slow
def test_the_gpu_check_runs_offline_on_the_cpu(tmp_path, project_wheel, example_wheel):
    python = make_venv(tmp_path / "venv", "jax", "flatbuffers")
    proc = run(["bash", ROOT / "scripts" / "gpu_check.sh", project_wheel, example_wheel, "--",
                "--runs", "1", "--workloads", "tiny,solve,grad_vjp"], cwd=tmp_path,
               env={"PYTHON": str(python), "GPU_CHECK_PLATFORM": "cpu", "PIP_NO_INDEX": "1"})
    out = proc.stdout
    assert out.rstrip().endswith("result: OK"), out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines()
            if re.match(r"^\| (tiny|solve|grad_vjp) \|", line)}
    assert sorted(rows) == ["grad_vjp", "solve", "tiny"], out
    assert "FAILED" not in out
    assert re.search(r"\| [0-9.]+x \|$", rows["solve"]), rows["solve"]
    assert "platform cpu: jax " in out
    # on a machine without the platform asked for, the check fails, it never passes vacuously
    cuda = run([python, ROOT / "scripts" / "gpu_check.py", "--platform", "cuda", "--runs", "1",
                "--workloads", "tiny"], cwd=tmp_path, check=False)
    assert cuda.returncode == 1 and "| tiny | FAILED: " in cuda.stdout, cuda.stdout
    assert cuda.stdout.rstrip().endswith("result: FAILED")


def test_without_wheels_it_says_how_to_run_it():
    proc = run(["bash", ROOT / "scripts" / "gpu_check.sh"], check=False)
    assert proc.returncode == 2 and "usage:" in proc.stderr
