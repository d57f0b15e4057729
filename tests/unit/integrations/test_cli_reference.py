"""docs/cli.md's ``--help`` texts are the parser's own (``scripts/cli_reference.py`` writes them).

The texts are formatted 80 columns wide whatever the terminal, so the page is the same on every
machine; the generated output was checked identical on Python 3.11, 3.12 and 3.13.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from conftest import ROOT, run

from hatch_jaxexport.integrations.cli import help_pages

SCRIPT = ROOT / "scripts" / "cli_reference.py"


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("cli_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_matches_the_parser(reference):
    page = reference.PAGE.read_text(encoding="utf-8")
    pages = help_pages()
    text, problems = reference.render(page, pages)
    assert problems == []
    assert reference.stale_blocks(page, pages) == [], (
        "docs/cli.md differs from the parser: run python scripts/cli_reference.py")
    assert text == page


def test_every_command_is_on_the_page_portable_included():
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert set(help_pages()) == {"jaxexport", "jaxexport export", "jaxexport inspect",
                                 "jaxexport verify", "jaxexport warmup", "jaxexport portable",
                                 "jaxexport merge", "jaxexport bake-wheel", "jaxexport companions",
                                 "jaxexport compile-executables",
                                 "jaxexport cache", "jaxexport cache info",
                                 "jaxexport cache prune", "jaxexport cache clear"}
    assert re.search(r"^    portable +list a package's portable StableHLO variants", page, re.M)


def test_the_check_notices_an_edited_a_missing_and_an_unknown_block(reference):
    pages = help_pages()
    page = reference.PAGE.read_text(encoding="utf-8")
    edited = page.replace("--jobs N              parallel export workers",
                          "--jobs N              parallel workers")
    assert reference.stale_blocks(edited, pages) == ["jaxexport export"]
    assert reference.render(edited, pages) == (page, [])  # a rewrite repairs it
    missing = reference.BLOCK.sub(
        lambda m: "" if m["command"] == "jaxexport portable" else m[0], page)
    assert reference.render(missing, pages)[1] == [
        "docs/cli.md has no generated block for `jaxexport portable --help`: add the markers "
        "where it belongs ('<!-- BEGIN GENERATED: jaxexport portable --help (python "
        "scripts/cli_reference.py) -->\\n```text\\n\\n```\\n<!-- END GENERATED: jaxexport "
        "portable --help -->' shows them)"]
    extra = page + "\n" + reference.block("jaxexport gone", "usage: jaxexport gone\n")
    assert reference.render(extra, pages)[1] == [
        "docs/cli.md has a generated block for `jaxexport gone --help`, which the parser "
        "does not have: remove it"]


def test_the_script_check_exits_0_on_the_page_as_committed():
    proc = run([sys.executable, SCRIPT, "--check"], check=False)
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.parametrize("command", sorted(help_pages()))
def test_the_documented_help_is_what_an_82_column_terminal_shows(command):
    """argparse formats for COLUMNS - 2: the page is what ``--help`` prints in such a terminal."""
    proc = run([sys.executable, "-m", "hatch_jaxexport", *command.split()[1:], "--help"],
               env={"COLUMNS": "82"})
    assert proc.stdout == help_pages()[command]


def test_help_pages_refuses_a_useless_width():
    with pytest.raises(ValueError, match="help_pages: width must be at least 40 columns, got 10"):
        help_pages(width=10)
