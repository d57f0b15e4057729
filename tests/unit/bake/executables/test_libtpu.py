"""Where a build's TPU targets get libtpu: the installers tried, in order, and the folder."""

from __future__ import annotations

import sys
from pathlib import Path

from hatch_jaxexport.bake.executables.libtpu import _installers


def test_uv_comes_first_then_pip_of_this_python_each_with_no_dependencies(tmp_path):
    commands = _installers(tmp_path / "libtpu", "libtpu==0.0.42.*")
    assert commands, "at least this Python's pip"
    kinds = [("uv" if Path(c[0]).name == "uv" else "pip") for c in commands]
    assert kinds == sorted(kinds, key=lambda k: k != "uv")  # every uv before every pip
    assert [sys.executable, "-m", "pip"] == next(c[:3] for c in commands if c[1] == "-m")
    for command in commands:
        assert command[-4:] == ["--no-deps", "--target", str(tmp_path / "libtpu"),
                                "libtpu==0.0.42.*"]
        assert Path(command[0]).exists()
