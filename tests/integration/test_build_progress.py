"""Build progress through a real front end: ``python -m build --wheel`` of a package with 60
``@exportable`` functions, through the Hatch hook in an isolated environment (hatch-jaxexport
from the local wheel). The hook's function lines must arrive while the build runs, one at a
time as functions finish, not all at once at the end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from _buildkit import hatch_pyproject, links_env, write_project

FUNCTIONS = 60

#: One function's progress line: ``  jxe_many:f_07: 1 structure(s), ... [12/60, 3.1 s elapsed...``
PROGRESS = re.compile(r"^  jxe_many:f_\d\d: 1 structure\(s\), platforms cpu, 1 artifact\(s\), "
                      r"[0-9.]+ [kB]+, [0-9.]+ s \[(\d+)/(\d+), [0-9.]+ s elapsed")


def _many_module() -> str:
    """60 tiny functions, one structure each. Each trace sleeps 50 ms, so the exports span
    over a second on any machine (on a fast one, 60 bare exports took 0.5 s, and streamed
    lines could not be told from batched ones by their arrival times)."""
    lines = ["import time", "", "from hatch_jaxexport import exportable", ""]
    for i in range(FUNCTIONS):
        lines += ["", '@exportable({"x": ("n", "float32")})', f"def f_{i:02d}(x):",
                  "    time.sleep(0.05)", f"    return x * {i} + 1", ""]
    return "\n".join(lines)


def _timed_lines(cmd: list[str], env: dict[str, str]) -> tuple[list[tuple[float, str]], float,
                                                                int]:
    """Run ``cmd``; each output line with the seconds after the start it arrived, the exit time
    and the exit code."""
    start = time.monotonic()
    timed = []
    with subprocess.Popen(cmd, env={**os.environ, **env}, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            timed.append((time.monotonic() - start, line.rstrip("\n")))
        code = proc.wait(timeout=300)
    return timed, time.monotonic() - start, code


@pytest.mark.slow
def test_function_lines_arrive_while_python_m_build_runs(tmp_path, project_wheel):
    root = write_project(tmp_path / "proj", {
        "pyproject.toml": hatch_pyproject("jxe-many", "require-runtime-dependencies = true\n"
                                          "jobs = 2\n"),
        "jxe_many/__init__.py": _many_module(),
    })
    env = {**links_env(project_wheel.parent), "HATCH_JAXEXPORT_CACHE": str(tmp_path / "cache")}
    timed, ended, code = _timed_lines(
        [sys.executable, "-m", "build", "--wheel", "-o", str(tmp_path / "dist"), str(root)], env)
    log = "\n".join(f"{at:7.2f}s  {line}" for at, line in timed) + f"\n{ended:7.2f}s  (exit)"
    (tmp_path / "build.log").write_text(log)
    print(log)  # the evidence, with -s
    assert code == 0, log[-6000:]
    progress = [(at, PROGRESS.match(line)) for at, line in timed if PROGRESS.match(line)]
    assert [(int(m[1]), int(m[2])) for _, m in progress] == \
        [(i, FUNCTIONS) for i in range(1, FUNCTIONS + 1)], log[-6000:]
    assert f"[{FUNCTIONS}/{FUNCTIONS}, " in log
    assert re.search(r"\[\d+/60, [0-9.]+ s elapsed, about [0-9.]+ s left\]", log), log[-6000:]
    first, last = progress[0][0], progress[-1][0]
    # streamed, not batched: the first line came well before the build ended, and the lines
    # came over a stretch of time as the workers finished functions
    assert ended - first > 1.0, (first, ended)
    assert last - first > 0.3, (first, last)
    arrivals = sorted({round(at, 2) for at, _ in progress})
    assert len(arrivals) >= 10, arrivals
    assert "jaxexport: jxe_many: 60 function(s), 60 artifact(s)" in log
    assert list((tmp_path / "dist").glob("jxe_many-0.1.0-*.whl"))
