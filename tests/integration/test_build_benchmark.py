"""``benchmarks/build_time.py`` runs end to end and prints a well-formed table (no timings)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "build_time.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_time_benchmark", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _rows(output: str) -> list[list[str]]:
    """The data rows of the printed markdown table, as cells."""
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in output.splitlines() if re.match(r"^\| \d", line)]


def test_docs_section_is_appended_once_then_replaced() -> None:
    bench = _module()
    text = "# Performance\n\nSome text.\n"
    first = bench.replace_section(text, "## Build time\n\none")
    assert first.startswith(text.rstrip("\n")) and first.count(bench.START) == 1
    second = bench.replace_section(first + "\nAfter.\n", "## Build time\n\ntwo")
    assert second.count(bench.START) == 1 and second.count(bench.END) == 1
    assert "two" in second and "one" not in second and second.endswith("After.\n")


@pytest.mark.slow
def test_benchmark_prints_a_row_per_configuration(tmp_path: Path) -> None:
    docs = tmp_path / "performance.md"
    docs.write_text("# Performance\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--functions", "3", "--platforms", "2", "--jobs", "1,2",
         "--write-docs", "--docs-file", str(docs)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    rows = _rows(proc.stdout)
    assert [(int(r[0]), int(r[1]), int(r[2])) for r in rows] == \
        [(3, 2, 1), (3, 2, 2)], proc.stdout
    for cells in rows:
        functions, platforms, _, artifacts, wall, total = map(float, cells[:6])
        assert artifacts == functions * platforms, cells
        assert wall > 0 and total > 0, cells
    assert "import jax" in proc.stdout and "not measured in this run" in proc.stdout
    written = docs.read_text(encoding="utf-8")
    assert written.count("<!-- build-time:start -->") == 1 and "## Build time" in written
    assert "--functions 3 --platforms 2 --jobs 1,2" in written
    assert "--docs-file" not in written
    assert _rows(written) == rows
