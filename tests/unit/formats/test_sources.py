"""The sources record of an export into a source tree, and the cheap check of it (issue 37)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.manifest import Manifest
from hatch_jaxexport.formats.manifest_reader import parse_manifest
from hatch_jaxexport.formats.sources import (
    changed_sources,
    check_sources,
    source_fingerprint,
    stale_text,
)


def _package(root: Path) -> Path:
    package = root / "mypkg"
    (package / "sub").mkdir(parents=True)
    (package / "_jaxexport").mkdir()
    (package / "__pycache__").mkdir()
    (package / "__init__.py").write_text("from mypkg.helpers import scale\n")
    (package / "helpers.py").write_text("def scale(x):\n    return x * 2.0\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "_jaxexport" / "not_a_module.py").write_text("")
    (package / "__pycache__" / "x.py").write_text("")
    return package


def test_the_fingerprint_lists_the_package_modules_relative_to_its_parent(tmp_path):
    sources = source_fingerprint(_package(tmp_path), "editable")
    assert sources["made_by"] == "editable"
    assert [f["path"] for f in sources["files"]] == [
        "mypkg/__init__.py", "mypkg/helpers.py", "mypkg/sub/__init__.py"]
    assert str(tmp_path) not in repr(sources)  # no build path in the record
    assert check_sources(sources, "m") == sources


def test_an_unchanged_or_touched_tree_is_current_an_edited_one_names_the_file(tmp_path):
    package = _package(tmp_path)
    sources = source_fingerprint(package, "export")
    assert changed_sources(sources, tmp_path) == []
    helper = package / "helpers.py"
    os.utime(helper, ns=(1, 1))  # touched: the time differs, the hash does not
    assert changed_sources(sources, tmp_path) == []
    helper.write_text("def scale(x):\n    return x * 3.0\n")  # same size, new content
    assert changed_sources(sources, tmp_path) == ["mypkg/helpers.py"]
    (package / "sub" / "__init__.py").unlink()
    assert changed_sources(sources, tmp_path) == ["mypkg/helpers.py", "mypkg/sub/__init__.py"]
    text = stale_text("mypkg", ["mypkg/helpers.py"], sources, "src/mypkg/_jaxexport")
    assert "mypkg/helpers.py changed" in text
    assert "python -m hatch_jaxexport export mypkg --out src/mypkg/_jaxexport" in text
    assert "pip install -e ." in stale_text("mypkg", ["a.py"], {"made_by": "editable"}, "f")


def test_the_manifest_carries_sources_only_when_given(tmp_path):
    plain = Manifest("mypkg", "g", "0.1", "0.1", ())
    assert b"sources" not in plain.to_bytes()  # a wheel's manifest: nothing to check
    sources = source_fingerprint(_package(tmp_path), "export")
    again = parse_manifest(plain._replace(sources=sources).to_bytes())
    assert again.sources == sources


@pytest.mark.parametrize("bad", [
    {"made_by": "magic", "files": []},
    {"made_by": "export", "files": [{"path": "../evil.py", "size": 1, "mtime_ns": 1,
                                     "sha256": "0"}]},
    {"made_by": "export", "files": [{"path": "/etc/x.py", "size": 1, "mtime_ns": 1,
                                     "sha256": "0"}]},
    {"made_by": "export", "files": [{"path": "a.py", "size": True, "mtime_ns": 1,
                                     "sha256": "0"}]},
])
def test_a_corrupt_sources_record_is_refused(bad):
    with pytest.raises(ArtifactError, match="corrupt manifest m: sources"):
        check_sources(bad, "m")
