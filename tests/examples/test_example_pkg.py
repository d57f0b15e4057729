"""example_pkg: its specs export, its configuration is valid, and the demo runs end to end."""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest
from _buildkit import DEMO, EXAMPLE
from conftest import _uv, run

from hatch_jaxexport.bake.config import HATCHLING_HOOK_KEYS, parse_options


def test_example_configuration_is_valid():
    config = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    table = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["jaxexport"]
    options = parse_options(table, "tool.hatch.build.targets.wheel.hooks.jaxexport",
                            passthrough=HATCHLING_HOOK_KEYS)
    assert options.platforms == ("cpu", "cuda")
    assert "hatch-jaxexport" in config["build-system"]["requires"]
    assert "hatch-jaxexport" in config["project"]["dependencies"]
    assert "_jaxexport/" in (EXAMPLE / ".gitignore").read_text().splitlines()


def test_every_example_function_exports(tmp_path):
    from hatch_jaxexport.bake import export_package

    result = export_package("example_pkg", tmp_path / "out", platforms=("cpu",),
                            search_path=[EXAMPLE / "src"], jobs=2)
    records = result.manifest.artifacts
    by_function = {}
    for record in records:
        by_function.setdefault(record.function.split(":")[-1].split(".")[-1], []).append(record)
    assert sorted(by_function) == ["activate", "compound_growth", "deep_stack",
                                   "discounted_sum", "elementwise_chain", "mlp_apply",
                                   "mlp_loss", "mlp_loss_and_grad", "solve", "train_step"]
    meshes = sorted(json.dumps(r.mesh) for r in by_function["train_step"])
    assert meshes == ['{"axes": ["data", "model"], "sizes": [2, 2]}', "{}"]  # 2x2 and 1 device
    assert sorted(r.static["kind"] for r in by_function["activate"]) == ["gelu", "relu", "tanh"]
    assert {r.structure_index for r in by_function["solve"]} == {0, 1}
    assert any(r.vjp_order == 1 for r in by_function["mlp_loss"])
    assert all("float64" in r.in_avals[0] for r in by_function["compound_growth"])
    assert any("batch" in aval for r in by_function["mlp_apply"] for aval in r.in_avals)
    assert result.manifest.skipped == ()


@pytest.mark.slow
def test_demo_builds_installs_and_runs_without_tracing(tmp_path):
    env = {"PATH": os.pathsep.join([str(Path(_uv()).parent), os.environ["PATH"]])}
    proc = run([sys.executable, DEMO, "--workdir", tmp_path / "work"], env=env, timeout=900)
    out = proc.stdout
    assert out.rstrip().endswith("demo: OK"), out
    assert re.search(r"jaxexport: example_pkg: 10 function\(s\), \d+ artifact\(s\)", out), out
    assert "Requires-Dist: jax>=" in out
    assert "every call ran artifact (cpu); HATCH_JAXEXPORT_STRICT=1; function bodies that ran: " \
           "none" in out
    rows = re.findall(r"^    (mlp_apply|grad of|solve|activate|compound_growth|deep_stack).*$",
                      out, flags=re.M)
    assert len(rows) == 9
    # example_pkg names the sizes the demo calls: with its executables, no call compiles
    assert "shipped run: 9 of 9 calls served only by shipped executables" in out, out
    header = re.search(r"^ +StableHLO path +shipped +traced from source", out, flags=re.M)
    assert header, out
    assert not (EXAMPLE / "src" / "example_pkg" / "_jaxexport").exists()
