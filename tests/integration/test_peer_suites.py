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
def test_tinygp_fast_subset_passes_baked_as_it_passes_plain(tmp_path):
    """CI's subset: tinygp's distance and Kalman tests (about 2 minutes with fresh venvs).
    dm-pix and the whole suites run by the command (``python benchmarks/peer_suites.py``):
    dm-pix's TensorFlow files and 1,400 tests would take CI past its time."""
    out = tmp_path / "figures.json"
    run([sys.executable, SCRIPT, "--fast", "--library", "tinygp", "--cache",
         tmp_path / "sdists", "--json", out], timeout=1800)
    figures = json.loads(out.read_text())
    assert sorted(figures) == ["tinygp"]
    for library, result in figures.items():
        assert result["plain"]["passed"] > 0, library
        lost = {c: r["example"] for c, r in result["causes"].items()}
        assert result["baked"]["passed"] == result["plain"]["passed"], (library, lost)
        assert result["lost"] == 0, (library, lost)
        assert result["wheel_bytes"] > result["plain_wheel_bytes"], library
        # strict mode refuses only calls no artifact covers, each with a refusal and the fix
        assert result["strict_other_count"] == 0, (library, result["strict_other"])
