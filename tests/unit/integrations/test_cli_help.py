"""The command line's help reads well: every sub-command has a description and exits 0."""

from __future__ import annotations

import sys

import pytest
from conftest import run

COMMANDS = ["export", "inspect", "verify", "warmup", "portable"]


def test_top_level_help_lists_every_command():
    out = run([sys.executable, "-m", "hatch_jaxexport", "--help"]).stdout
    assert out.startswith("usage: jaxexport")
    for command in COMMANDS:
        assert f"\n    {command} " in out


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_help(command):
    out = run([sys.executable, "-m", "hatch_jaxexport", command, "--help"]).stdout
    assert out.startswith(f"usage: jaxexport {command}")
    assert "package" in out.lower()
    assert len(out.splitlines()) >= 6


def test_a_wrong_command_is_one_clear_line():
    proc = run([sys.executable, "-m", "hatch_jaxexport", "exprot"], check=False)
    assert proc.returncode == 2
    assert "invalid choice: 'exprot'" in proc.stderr and "Traceback" not in proc.stderr
