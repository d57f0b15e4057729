"""Identical artifact files stored once (``bake.workers._dedupe``), on real files in a folder."""

from __future__ import annotations

import hashlib

from hatch_jaxexport.bake.workers._dedupe import dedupe_files
from hatch_jaxexport.formats.manifest import ConcreteRecord, Manifest
from hatch_jaxexport.formats.manifest_reader import parse_manifest


def _manifest(folder, contents: dict[str, bytes]) -> Manifest:
    records = []
    for i, (name, data) in enumerate(sorted(contents.items())):
        (folder / name).write_bytes(data)
        records.append(ConcreteRecord(
            function="pkg:f", structure_index=-1, static={}, platform="cpu", sizes={},
            inputs=[[[6], "float32"]], call=f'{{"k":{i}}}', file=name,
            sha256=hashlib.sha256(data).hexdigest(), size=len(data)))
    return Manifest(package="pkg", generator="test", jax_version="0.10.2",
                    jaxlib_version="0.10.2", artifacts=(), concrete=tuple(records))


def test_identical_files_are_stored_once_under_the_smallest_name(tmp_path):
    manifest = _manifest(tmp_path, {"b.jaxexport": b"same", "a.jaxexport": b"same",
                                    "c.jaxexport": b"other"})
    deduped, removed, saved = dedupe_files(tmp_path, manifest)
    assert (removed, saved) == (1, 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jaxexport", "c.jaxexport"]
    assert [c.file for c in deduped.concrete] == ["a.jaxexport", "a.jaxexport", "c.jaxexport"]
    assert [c.id for c in deduped.concrete] == [c.id for c in manifest.concrete]
    assert parse_manifest(deduped.to_bytes()) == parse_manifest(deduped.to_bytes())
    again, removed, _ = dedupe_files(tmp_path, deduped)  # nothing left to share
    assert removed == 0 and again == deduped


def test_nothing_changes_without_duplicates(tmp_path):
    manifest = _manifest(tmp_path, {"a.jaxexport": b"one", "b.jaxexport": b"two"})
    assert dedupe_files(tmp_path, manifest) == (manifest, 0, 0)
