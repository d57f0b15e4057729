"""The troubleshooting page quotes messages the code really prints, and names every error type."""

from __future__ import annotations

import ast
import re

from conftest import ROOT

import hatch_jaxexport.errors as errors

PAGE = ROOT / "docs" / "troubleshooting.md"
#: Messages the page quotes from other tools (pip, build, uv, hatch), not from this package.
FOREIGN = {"No matching distribution found for hatch-jaxexport",
           "Unknown build hook: jaxexport"}  # hatchling's, before any code of ours runs


def quoted_phrases() -> list[str]:
    """The phrase in backticks that opens each third-level heading of the page."""
    headings = re.findall(r"^### (.*)$", PAGE.read_text(), flags=re.M)
    return [re.match(r"`([^`]+)`", heading).group(1) for heading in headings]


def package_strings() -> str:
    """Every string literal of the package, f-strings with ``{}`` for their fields.

    Parsed, not read as text, so that a message split over lines by implicit concatenation
    (``f"...the baked " f"values are..."``) is one string, as the user sees it.
    """
    found = []
    for path in (ROOT / "hatch_jaxexport").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                found.append("".join(part.value if isinstance(part, ast.Constant) else "{}"
                                     for part in node.values))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append(node.value)
    return "\n".join(found)


def test_every_heading_quotes_a_phrase_the_code_prints():
    phrases = quoted_phrases()
    assert len(phrases) >= 15
    source = package_strings()
    missing = [p for p in phrases if p not in FOREIGN and p not in source
               and p not in errors.__all__]
    assert not missing, f"the page quotes phrases no module prints: {missing}"


def test_every_exception_and_warning_is_on_the_page():
    text = PAGE.read_text()
    for name in errors.__all__:
        assert f"`{name}`" in text, name
