"""The getting-started page's commands, as written, in a fresh folder (the docs stay true)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run

PAGE = ROOT / "docs" / "getting-started.md"


def bash_blocks(markdown: str) -> list[str]:
    """The ```bash fenced blocks of a Markdown page, in order."""
    return re.findall(r"^```bash\n(.*?)^```$", markdown, flags=re.M | re.S)


def test_the_page_has_the_steps():
    blocks = bash_blocks(PAGE.read_text())
    assert len(blocks) >= 6
    assert any("python -m build" in b for b in blocks)
    assert any("--jaxexport-check mypkg" in b and "--jaxexport-source mypkg/src" in b
               for b in blocks)


@pytest.mark.slow
def test_getting_started_commands_succeed_as_written(tmp_path, project_wheel):
    script = "set -euo pipefail\n" + "\n".join(bash_blocks(PAGE.read_text()))
    (tmp_path / "steps.sh").write_text(script)
    python_dir = str(Path(sys.executable).parent)
    env = {
        # hatch-jaxexport comes from this checkout's wheel (it is not on a package index here);
        # everything else (jax, hatchling, build) from the index, as for a user
        "PIP_FIND_LINKS": str(project_wheel.parent),
        "PATH": os.pathsep.join([python_dir, os.environ.get("PATH", "")]),
        "PYTHONPATH": "", "VIRTUAL_ENV": "",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    proc = run(["bash", str(tmp_path / "steps.sh")], cwd=tmp_path, env=env, timeout=1200)
    out = proc.stdout
    assert "mypkg: 6 artifact(s)" in out
    assert "[0.09003057 0.24472848 0.66524094]" in out
    assert "(2, 4)" in out
    assert "tracing softmax" not in out
    assert re.search(r"\d+ passed", out)
    # step 6 compares the wheel with the source tree, not with the installed copy
    assert re.search(r"source: \S+/mypkg/src/mypkg \(a source tree without artifacts, not the "
                     r"installed copy\)", out), out[-3000:]
