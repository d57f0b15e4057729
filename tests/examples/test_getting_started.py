"""The getting-started page's commands, as written, in a fresh folder (the docs stay true)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, run

PAGE = ROOT / "docs" / "getting-started.md"


def bash_blocks(markdown: str) -> list[str]:
    """The ```bash fenced blocks of a Markdown page, in order."""
    return re.findall(r"^```bash\n(.*?)^```$", markdown, flags=re.M | re.S)


def test_the_page_has_the_steps():
    blocks = bash_blocks(PAGE.read_text())
    assert len(blocks) >= 8
    assert any("./hatch-jaxexport" in b and "pip wheel" in b for b in blocks)  # before a release
    assert any("PIP_FIND_LINKS" in b and "UV_FIND_LINKS" in b for b in blocks)
    assert any("uv build" in b and "hatch build" in b and "pip wheel" in b for b in blocks)
    assert any("python -m build" in b for b in blocks)
    assert any("--jaxexport-check mypkg" in b and "--jaxexport-source mypkg/src" in b
               for b in blocks)


def checkout_copy(destination: Path) -> Path:
    """This project's source as a user's checkout would hold it (no venvs, caches or builds)."""
    shutil.copytree(ROOT, destination, ignore=shutil.ignore_patterns(
        ".git", ".venvs", "__pycache__", ".pytest_cache", ".ruff_cache", "site", "dist",
        "*.egg-info"))
    return destination


def wheel_artifacts(wheel: Path) -> dict[str, bytes]:
    """The files under ``mypkg/_jaxexport/`` in a wheel, by name."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()
                if name.startswith("mypkg/_jaxexport/")}


@pytest.mark.slow
def test_getting_started_commands_succeed_as_written(tmp_path):
    script = "set -euo pipefail\n" + "\n".join(bash_blocks(PAGE.read_text()))
    (tmp_path / "steps.sh").write_text(script)
    checkout_copy(tmp_path / "hatch-jaxexport")  # step 1 installs from a checkout
    python_dir = str(Path(sys.executable).parent)
    env = {
        # everything but hatch-jaxexport (jax, hatchling, build, uv, hatch) from the index, as
        # for a user; the page itself says where hatch-jaxexport's wheel is
        "PATH": os.pathsep.join([python_dir, os.environ.get("PATH", "")]),
        "PYTHONPATH": "", "VIRTUAL_ENV": "",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_DATA_HOME": str(tmp_path / "data"),  # hatch's environments
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache" / "uv")),
    }
    proc = run(["bash", str(tmp_path / "steps.sh")], cwd=tmp_path, env=env, timeout=1500)
    out = proc.stdout
    assert "mypkg: 1 function(s), 6 artifact(s)" in out
    assert "[0.09003057 0.24472848 0.66524094]" in out
    assert "(2, 4)" in out
    assert "tracing softmax" not in out
    assert re.search(r"\d+ passed", out)
    # step 6 compares the wheel with the source tree, not with the installed copy
    assert re.search(r"source: \S+/mypkg/src/mypkg \(a source tree without artifacts, not the "
                     r"installed copy\)", out), out[-3000:]
    # every front end of step 4 built a wheel carrying the same artifacts
    built = {front: next((tmp_path / folder).glob("mypkg-*.whl"))
             for front, folder in [("build", "dist"), ("pip", "dist-pip"), ("uv", "dist-uv"),
                                   ("hatch", "dist-hatch")]}
    reference = wheel_artifacts(built["build"])
    assert "mypkg/_jaxexport/manifest.json" in reference
    # the manifest, 6 artifacts (softmax's structures, their jvp and vjp) and each one's
    # module as text (the text form of a symbolic cpu artifact)
    manifest = json.loads(reference["mypkg/_jaxexport/manifest.json"])
    texts = [e for a in manifest["artifacts"] for e in a["sized"] if e.get("form") == "text"]
    assert len(manifest["artifacts"]) == 6 and len(reference) == 7 + len(texts) and texts
    for front, wheel in built.items():
        assert wheel_artifacts(wheel) == reference, front
    # and the page's warning is true: without the find-links variables, isolated builds cannot
    # find hatch-jaxexport (the words the page quotes)
    bare = {**env, "PIP_FIND_LINKS": "", "UV_FIND_LINKS": ""}
    uv = run([tmp_path / ".venv" / "bin" / "uv", "build", "--wheel", "mypkg", "--out-dir",
              tmp_path / "dist-bare"], cwd=tmp_path, env=bare, check=False)
    assert uv.returncode != 0
    assert "hatch-jaxexport was not found in the package registry" in uv.stdout + uv.stderr
