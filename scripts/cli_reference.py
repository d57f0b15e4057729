#!/usr/bin/env python3
"""Write the command line's ``--help`` texts into docs/cli.md, from the parser itself.

    python scripts/cli_reference.py           # rewrite the generated blocks of docs/cli.md
    python scripts/cli_reference.py --check   # exit 1, naming each stale block, if they differ

docs/cli.md marks each generated block with a pair of comments::

    <!-- BEGIN GENERATED: jaxexport warmup --help (python scripts/cli_reference.py) -->
    ```text
    ...
    ```
    <!-- END GENERATED: jaxexport warmup --help -->

Everything outside the markers is written by hand. The texts come from
``hatch_jaxexport.integrations.cli.help_pages``, 80 columns wide whatever the terminal, so they
are the same on every machine (and on Python 3.11 to 3.13). Every command must have its block:
a command without one, or a block for a command the parser lacks, is an error, so a new command
cannot be left out of the page. ``tests/unit/integrations/test_cli_reference.py`` runs the
check.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
BLOCK = re.compile(
    r"<!-- BEGIN GENERATED: (?P<command>[^>]+?) --help \(python scripts/cli_reference\.py\) -->\n"
    r"(?P<body>.*?)"
    r"<!-- END GENERATED: (?P=command) --help -->", re.DOTALL)


def block(command: str, help_text: str) -> str:
    """One generated block: the markers around a ``text`` code block of the help."""
    return (f"<!-- BEGIN GENERATED: {command} --help (python scripts/cli_reference.py) -->\n"
            f"```text\n{help_text.rstrip()}\n```\n"
            f"<!-- END GENERATED: {command} --help -->")


def render(page: str, pages: dict[str, str]) -> tuple[str, list[str]]:
    """``page`` with every generated block replaced by the parser's text; and the problems
    no rewrite can fix (a command without a block, a block without a command)."""
    found = [match["command"] for match in BLOCK.finditer(page)]
    problems = [f"docs/cli.md has no generated block for `{command} --help`: add the markers "
                f"where it belongs ({block(command, '')!r} shows them)"
                for command in pages if command not in found]
    problems += [f"docs/cli.md has a generated block for `{command} --help`, which the "
                 "parser does not have: remove it" for command in found if command not in pages]
    problems += [f"docs/cli.md has {found.count(c)} generated blocks for `{c} --help`; keep one"
                 for c in sorted(set(found)) if found.count(c) > 1]
    text = BLOCK.sub(lambda m: block(m["command"], pages[m["command"]])
                     if m["command"] in pages else m[0], page)
    return text, problems


def stale_blocks(page: str, pages: dict[str, str]) -> list[str]:
    """The commands whose block in ``page`` differs from what the parser prints."""
    current = {m["command"]: m[0] for m in BLOCK.finditer(page)}
    return [command for command, text in pages.items()
            if command in current and current[command] != block(command, text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if docs/cli.md differs from the parser")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from hatch_jaxexport.integrations.cli import help_pages

    pages = help_pages()
    page = PAGE.read_text(encoding="utf-8")
    text, problems = render(page, pages)
    for problem in problems:
        print(f"cli_reference: {problem}", file=sys.stderr)
    if args.check:
        for command in stale_blocks(page, pages):
            print(f"cli_reference: docs/cli.md's `{command} --help` differs from the parser: "
                  "run python scripts/cli_reference.py", file=sys.stderr)
        return 1 if problems or text != page else 0
    if text != page:
        PAGE.write_text(text, encoding="utf-8")
        print(f"cli_reference: updated {PAGE.relative_to(ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
