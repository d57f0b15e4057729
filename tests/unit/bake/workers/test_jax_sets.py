"""Another jax release's export added to an artifact folder as a set (``bake.workers.jax_sets``),
on real files: its blobs stored once, its manifest beside the main one, listed by it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hatch_jaxexport.bake.workers.jax_sets import add_jax_set
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.manifest import MANIFEST_NAME, ConcreteRecord, JaxSet, Manifest
from hatch_jaxexport.formats.manifest_reader import parse_manifest


def _export(folder: Path, jax_version: str, released: str, contents: dict[str, bytes],
            package: str = "pkg", index: bool = True) -> Manifest:
    """An export folder as the workers leave it: blobs, a portable index (``index``; a stand-in
    the build's read-back of a main folder would refuse), the manifest."""
    folder.mkdir(parents=True)
    records = []
    for i, (name, data) in enumerate(sorted(contents.items())):
        (folder / name).write_bytes(data)
        records.append(ConcreteRecord(
            function=f"{package}:f", structure_index=-1, static={}, platform="cpu", sizes={},
            inputs=[[[6], "float32"]], call=f'{{"k":{i}}}', file=name,
            sha256=hashlib.sha256(data).hexdigest(), size=len(data)))
    manifest = Manifest(package=package, generator="test", jax_version=jax_version,
                        jaxlib_version=jax_version, artifacts=(), concrete=tuple(records),
                        jax_released=released)
    if index:
        (folder / "portable.json").write_text("{}")
    (folder / MANIFEST_NAME).write_bytes(manifest.to_bytes())
    return manifest


def test_a_set_shares_equal_blobs_and_is_listed_by_the_main_manifest(tmp_path):
    main = tmp_path / "main"
    _export(main, "0.10.2", "2026-06-17", {"a.jaxexport": b"same", "b.jaxexport": b"new"},
            index=False)
    _export(tmp_path / "old", "0.8.1", "2025-11-18",
            {"a.jaxexport": b"same", "b.jaxexport": b"old", "c.jaxexport": b"only-old"})
    lines: list[str] = []
    added = add_jax_set(main, tmp_path / "old", lines.append)
    assert added == JaxSet("manifest-jax-0.8.1.json", "0.8.1", "0.8.1", "2025-11-18")
    assert sorted(p.name for p in main.iterdir()) == [
        "a.jaxexport", "b.jaxexport", "jax0.8.1-b.jaxexport", "jax0.8.1-c.jaxexport",
        "manifest-jax-0.8.1.json", MANIFEST_NAME]  # the set's portable index left out
    assert parse_manifest((main / MANIFEST_NAME).read_bytes()).jax_sets == (added,)
    the_set = parse_manifest((main / added.manifest).read_bytes())
    assert sorted(c.file for c in the_set.concrete) == [
        "a.jaxexport", "jax0.8.1-b.jaxexport", "jax0.8.1-c.jaxexport"]  # a: stored once
    for record in the_set.concrete:  # every record names bytes that match it
        assert hashlib.sha256((main / record.file).read_bytes()).hexdigest() == record.sha256
    assert (main / "jax0.8.1-b.jaxexport").read_bytes() == b"old"
    assert lines == ["pkg: added the artifacts of jax 0.8.1 (released 2025-11-18): 3 file(s), "
                     "11 B added, 1 identical to one already stored (stored once)"]
    assert not (tmp_path / "old").exists()


def test_a_release_the_folder_has_or_another_package_is_refused(tmp_path):
    main = tmp_path / "main"
    _export(main, "0.10.2", "2026-06-17", {"a.jaxexport": b"x"}, index=False)
    _export(tmp_path / "same", "0.10.2", "2026-06-17", {"a.jaxexport": b"y"})
    with pytest.raises(ExportError, match=r"with jax 0.10.2 to pkg's artifacts"):
        add_jax_set(main, tmp_path / "same", print)
    _export(tmp_path / "other", "0.8.1", "2025-11-18", {"a.jaxexport": b"y"}, package="other")
    with pytest.raises(ExportError, match=r"cannot add the export of other with jax 0.8.1"):
        add_jax_set(main, tmp_path / "other", print)
    _export(tmp_path / "old", "0.8.1", "2025-11-18", {"a.jaxexport": b"y"})
    add_jax_set(main, tmp_path / "old", print)
    _export(tmp_path / "again", "0.8.1", "2025-11-18", {"a.jaxexport": b"z"})
    with pytest.raises(ExportError, match=r"sets \['0.8.1'\]"):
        add_jax_set(main, tmp_path / "again", print)


def test_a_set_whose_files_do_not_match_it_fails_the_read_back(tmp_path):
    """What ``add_jax_set`` writes is read back (``bake.verify.read_back``): a file in the
    folder that no manifest names fails the build, naming the package and the file."""
    main = tmp_path / "main"
    _export(main, "0.10.2", "2026-06-17", {"a.jaxexport": b"same"}, index=False)
    _export(tmp_path / "old", "0.8.1", "2025-11-18", {"b.jaxexport": b"old"})
    (main / "stray.jaxexport").write_bytes(b"no record names me")
    with pytest.raises(ExportError, match=r"pkg: _jaxexport/stray.jaxexport: file not listed"):
        add_jax_set(main, tmp_path / "old", print)
