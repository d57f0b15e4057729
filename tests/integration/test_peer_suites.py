"""Real libraries' own suites, baked: ``benchmarks/peer_suites.py --fast`` downloads tinygp and
dm-pix, applies the patches in peers/, builds the baked wheels through isolated builds, and runs
each library's own tests against the baked and the plain install."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT, run

SCRIPT = ROOT / "benchmarks" / "peer_suites.py"


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "until calls no structure accepts trace the source (issue 35: today tinygp's kalman_gains "
    "given a Block and dm-pix's interpolation raise) and decorated functions pass "
    "inspect.isfunction (dm-pix's api_test generates its cases from it); remove then"))
def test_fast_subsets_pass_baked_as_they_pass_plain(tmp_path):
    out = tmp_path / "figures.json"
    run([sys.executable, SCRIPT, "--fast", "--cache", tmp_path / "sdists", "--json", out],
        timeout=1800)
    figures = json.loads(out.read_text())
    assert sorted(figures) == ["dm-pix", "tinygp"]
    for library, result in figures.items():
        assert result["plain"]["passed"] > 0, library
        lost = {c: r["example"] for c, r in result["causes"].items()}
        assert result["baked"]["passed"] == result["plain"]["passed"], (library, lost)
        assert result["lost"] == 0, (library, lost)
        assert result["wheel_bytes"] > result["plain_wheel_bytes"], library
