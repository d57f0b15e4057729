"""The documentation site builds with ``mkdocs build --strict`` and every nav page renders."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "mkdocs.yml"


def _load_config() -> Any:
    try:
        from mkdocs.config import load_config
    except ImportError as err:  # the docs extra is part of the test environment: fail, never skip
        pytest.fail(f"mkdocs is not importable ({err}); install the docs extra: "
                    "pip install 'hatch-jaxexport[docs]'")
    return load_config(str(CONFIG))


def _nav_pages(nav: Any) -> list[tuple[str | None, str]]:
    """``(title, file)`` for every page of a mkdocs nav (nested sections flattened).

    The title is ``None`` for a page listed without one (mkdocs then takes its first heading).
    """
    pages: list[tuple[str | None, str]] = []
    for item in nav:
        if isinstance(item, str):
            pages.append((None, item))
            continue
        for title, value in item.items():
            if isinstance(value, list):
                pages += _nav_pages(value)
            elif not re.match(r"^[a-z]+://", value):  # external links render nothing
                pages.append((title, value))
    return pages


def _rendered(site: Path, page: str, use_directory_urls: bool) -> Path:
    stem = page[: -len(".md")]
    if stem == "index" or stem.endswith("/index"):
        return site / f"{stem}.html"
    return site / (f"{stem}/index.html" if use_directory_urls else f"{stem}.html")


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    config = _load_config()
    site = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(CONFIG),
         "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, (f"mkdocs build --strict failed ({proc.returncode}):\n"
                                  f"{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")
    return config, site


def test_every_nav_page_renders_with_its_title(built_site: tuple[Any, Path]) -> None:
    config, site = built_site
    pages = _nav_pages(config["nav"])
    assert len(pages) >= 10, pages
    files = [file for _, file in pages]
    assert len(set(files)) == len(files), f"a page is listed twice in the nav: {files}"
    site_name = config["site_name"]
    for title, file in pages:
        assert (ROOT / config["docs_dir"] / file).is_file(), f"nav lists a missing page {file}"
        out = _rendered(site, file, config["use_directory_urls"])
        assert out.is_file(), f"{file} did not render {out.relative_to(site)}"
        text = out.read_text(encoding="utf-8")
        found = re.search(r"<title>(.*?)</title>", text, re.S)
        assert found, f"{out} has no <title>"
        rendered_title = html.unescape(found.group(1)).strip()
        if file == "index.md":
            assert rendered_title == site_name, (file, rendered_title)
        elif title is not None:
            assert rendered_title == f"{title} - {site_name}", (file, rendered_title)
        assert "<h1" in text, f"{file} rendered no heading"


def test_every_markdown_page_is_in_the_nav() -> None:
    config = _load_config()
    docs = ROOT / config["docs_dir"]
    listed = {file for _, file in _nav_pages(config["nav"])}
    on_disk = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")}
    assert on_disk - listed == set(), "pages missing from the nav in mkdocs.yml"


def _api_identifiers(markdown: str) -> list[str]:
    """The objects the API page's ``::: identifier`` blocks ask for: each listed member, or the
    identifier itself where a block lists no members."""
    blocks: list[tuple[str, list[str]]] = []
    in_members = False
    for line in markdown.splitlines():
        block = re.match(r"^::: *([\w.]+)", line)
        if block:
            blocks.append((block.group(1), []))
            in_members = False
        elif blocks and re.match(r"^\s+members:\s*$", line):
            in_members = True
        elif blocks and in_members and (item := re.match(r"^\s+- *(\w+)\s*$", line)):
            blocks[-1][1].append(item.group(1))
        elif line.strip() and not line.startswith(" "):
            in_members = False
    return [f"{root}.{m}" for root, members in blocks for m in members] + \
        [root for root, members in blocks if not members]


def test_api_reference_is_generated_from_docstrings(built_site: tuple[Any, Path]) -> None:
    config, site = built_site
    wanted = _api_identifiers((ROOT / config["docs_dir"] / "api.md").read_text(encoding="utf-8"))
    text = (site / "api" / "index.html").read_text(encoding="utf-8")
    for identifier in ("hatch_jaxexport.exportable", "hatch_jaxexport.ExportableFunction",
                       "hatch_jaxexport.ArtifactError", "hatch_jaxexport.bake.export_package",
                       "hatch_jaxexport.formats.manifest.ArtifactRecord"):
        assert identifier in wanted, f"the API page no longer documents {identifier}"
    # mkdocstrings silently drops a listed member that does not exist (e.g. after a rename)
    missing = [i for i in wanted if f'id="{i}"' not in text]
    assert not missing, f"the API page lists objects that rendered nothing: {missing}"
    assert "Mark a function for export at build time; traces nothing." in text


def test_diagrams_are_rendered_as_mermaid(built_site: tuple[Any, Path]) -> None:
    _, site = built_site
    for page in ("how-it-works", "loader", "architecture"):
        text = (site / page / "index.html").read_text(encoding="utf-8")
        assert '<pre class="mermaid">' in text, f"{page}: the mermaid diagram did not render"
