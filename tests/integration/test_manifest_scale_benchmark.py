"""``benchmarks/manifest_scale.py`` runs end to end and prints a well-formed table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_manifest_scale_prints_one_row_per_size() -> None:
    proc = subprocess.run([sys.executable, ROOT / "benchmarks" / "manifest_scale.py",
                           "--copies", "1,3", "--repeat", "1"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in proc.stdout.splitlines() if re.match(r"^\| \d", line)]
    assert len(rows) == 2, proc.stdout
    (functions, artifacts, *_), (functions3, artifacts3, *_) = rows
    assert int(functions3) == 3 * int(functions) and int(artifacts3) == 3 * int(artifacts)
    for row in rows:
        first, whole, full, to_whole, to_full = (float(cell) for cell in row[4:9])
        assert 0 < first and 0 < whole and 0 < full
        assert to_whole == pytest.approx(first / whole, abs=0.01)
        assert to_full == pytest.approx(first / full, abs=0.01)
