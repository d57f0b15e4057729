"""``scripts/accelerator_check.sh``, the check a device machine runs, works as written: run here
on the CPU (``--platform cpu``) with this project's and example_pkg's wheels installed with
``--no-index --no-deps --target`` into a folder put on ``PYTHONPATH``: every step of two rows
(``tiny``, and ``grad`` with the transformations) in fresh processes, strict, equal to the
source, jax's cache warm for the second process, one table and the JSON; asking for a platform
the machine lacks fails after one process; a budget skips what would not fit and says so."""

from __future__ import annotations

import json
import re
import sys

from conftest import ROOT, run

SCRIPT = ROOT / "scripts" / "accelerator_check.py"


def test_the_accelerator_check_runs_offline_on_the_cpu(tmp_path, project_wheel, example_wheel):
    site = tmp_path / "site"
    keep = tmp_path / "work"
    proc = run(["bash", ROOT / "scripts" / "accelerator_check.sh", "--site", site,
                project_wheel, example_wheel, "--", "--platform", "cpu", "--runs", "1",
                "--workloads", "tiny,grad", "--json", tmp_path / "cpu.json",
                "--out", tmp_path / "out", "--keep", keep], cwd=tmp_path,
               env={"PYTHON": sys.executable})
    out = proc.stdout
    assert out.rstrip().endswith("result: OK"), out
    assert f"hatch_jaxexport from {site}" in out, out  # the wheel's, not this checkout's
    rows = {line.split("|")[1].strip().split(":")[0]: line for line in out.splitlines()
            if line.startswith("| ")}
    assert re.search(r"\| [0-9.]+x \|$", rows["tiny"]), rows["tiny"]
    assert re.match(r"\| tiny \| \w+; cached", rows["tiny"]), rows["tiny"]
    assert re.search(r"\| [0-9.,]+ / [0-9.,]+ \|", rows["tiny"]), rows["tiny"]  # the compiles
    doc = json.loads((tmp_path / "cpu.json").read_text())
    assert doc["table"] == (tmp_path / "out" / "accelerator_check.md").read_text().rstrip()
    assert doc["environment"]["backend"] == "cpu"
    for name in ("tiny", "grad"):
        row = doc["rows"][name]
        assert row["errors"] == [] and row["max_diff"] <= 1e-3, row
        for step in ("source_cold", "baked_cold", "source_warm", "baked_warm",
                     "baked_warm_imported", "floor"):
            assert len(row[step]) == 1, (name, step)
        # step 5: the modules step 4's call imported, imported before its clock, then served
        # as step 4 was (from the executable cache)
        assert row["imports_ms"][0] > 0 and row["baked_warm_imported_served"] == \
            row["baked_warm_served"], row
        assert f"{name}, 2nd process with the call path's modules imported first" in out
        assert row["source_cold_jax_cache_hits"] == [0]
        # the XLA compile's own time beside each cold call, on both sides (part of a call
        # that compiles once; an eager gradient's two compiles overlap, so only > 0 there)
        for step in ("source_cold", "baked_cold"):
            assert row[f"{step}_compile_ms"][0] > 0, (name, step, row)
            assert name == "grad" or row[f"{step}_compile_ms"][0] < row[step][0], (step, row)
        assert row["source_warm_jax_cache_hits"][0] >= 1, row  # the second process's cache
        assert "traced" not in str(row["baked_cold_served"] + row["baked_warm_served"])
        assert set(row["hot"]) == ({"forward", "jit_grad"} if name == "grad" else {"forward"})
    grad = doc["rows"]["grad"]
    assert grad["cotangent_ms"][0] > 0 and "floor of an eager first call" in out  # its floor
    if grad["baked_warm_compiles"][0]:  # step 6: jax's own compiles, from jax's cache
        assert grad["baked_warm_jax_compiles"] == [0], grad
        assert grad["baked_warm_jax_jax_cache_hits"][0] >= 1, grad
        assert "jax's cache on in both" in out
    else:
        assert "baked_warm_jax" not in grad
    listed = json.loads((keep / "tiny" / "call-path-modules-0.json").read_text())
    assert "hatch_jaxexport.runtime.call.loader" in listed  # what its first call imported
    assert not any(name.startswith("jax") for name in listed)  # ours only
    transforms = doc["rows"]["grad"]["transforms"]
    assert sorted(transforms) == ["grad_ad_order", "jacfwd", "jit_grad", "vmap"]
    assert all(t["max_diff"] <= 1e-3 for t in transforms.values()), transforms


def test_a_platform_the_machine_lacks_fails_after_one_process(tmp_path):
    proc = run([sys.executable, SCRIPT, "--platform", "tpu", "--workloads", "tiny,grad",
                "--json", tmp_path / "tpu.json"], cwd=tmp_path, check=False)
    assert proc.returncode == 1 and proc.stdout.rstrip().endswith("result: FAILED"), proc.stdout
    assert "failed: no tpu backend here" in proc.stdout
    doc = json.loads((tmp_path / "tpu.json").read_text())
    assert doc["rows"]["tiny"]["errors"] and doc["rows"]["grad"]["errors"] == []


def test_steps_runs_only_the_steps_named(tmp_path, project_wheel, example_wheel):
    proc = run(["bash", ROOT / "scripts" / "accelerator_check.sh", project_wheel, example_wheel,
                "--", "--platform", "cpu", "--runs", "1", "--workloads", "tiny",
                "--steps", "source_cold,baked_cold", "--json", tmp_path / "cpu.json"],
               cwd=tmp_path, env={"PYTHON": sys.executable})
    row = json.loads((tmp_path / "cpu.json").read_text())["rows"]["tiny"]
    assert len(row["source_cold"]) == len(row["baked_cold"]) == 1, row
    assert not {"source_warm", "baked_warm", "floor"} & set(row), row
    assert "2 processes, one at a time" in proc.stdout, proc.stdout
    bad = run([sys.executable, SCRIPT, "--platform", "cpu", "--steps", "cold"], check=False)
    assert bad.returncode == 2 and "unknown steps ['cold']" in bad.stderr, bad.stderr


def test_a_budget_skips_what_would_not_fit_and_says_so(tmp_path):
    proc = run([sys.executable, SCRIPT, "--platform", "cpu", "--budget-seconds", "0",
                "--workloads", "tiny"], cwd=tmp_path, check=False)
    assert "--budget-seconds: 9 process(es) skipped (tiny: 9)" in proc.stdout, proc.stdout
    assert proc.returncode == 1 and "failed: nothing was measured" in proc.stdout


def test_without_wheels_or_options_it_says_how_to_run_it(project_wheel):
    for args in ([], [project_wheel]):
        proc = run(["bash", ROOT / "scripts" / "accelerator_check.sh", *args], check=False)
        assert proc.returncode == 2 and "usage:" in proc.stderr
