"""Two builds of one source with precompiled executables give identical folders (issue 37).

XLA lists a CPU executable's object files in the order its compile threads finish them, so
before ``formats.xla_objects.canonical_order`` two builds differed by kilobytes in some
executables (and so in the manifest's hashes). The export runs twice here, from two copies in
two folders, in fresh worker processes each, as the build hook runs it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from conftest import export_into_copy

from hatch_jaxexport.formats.xla_objects import canonical_order


def _files(site: Path, package: str) -> dict[str, str]:
    folder = site / package / "_jaxexport"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_two_builds_with_executables_are_byte_identical(exec_site, tmp_path):
    again = export_into_copy(tmp_path / "elsewhere" / "deeper", "jxe_exec", jobs=2,
                             executables=["x86_64-avx2", "x86_64-avx512"])
    first, second = _files(exec_site, "jxe_exec"), _files(again, "jxe_exec")
    manifest = json.loads((again / "jxe_exec" / "_jaxexport" / "manifest.json").read_text())
    assert len(manifest["executables"]) >= 10  # the guarantee covers executables, many of them
    differing = sorted(name for name in first if first[name] != second.get(name))
    assert first.keys() == second.keys() and differing == []


def _message(*fields: tuple[int, bytes]) -> bytes:
    """Protobuf wire format: each ``(field, bytes)`` length-delimited (lengths < 128)."""
    return b"".join(bytes([field << 3 | 2, len(value)]) + value for field, value in fields)


def test_object_files_are_sorted_and_nothing_else_moves():
    objects = [_message((1, b"\x7fELF-" + name), (2, b"emitter-" + name)) for name in
               (b"c", b"a", b"b")]
    result = _message((3, b"before"), *[(8, o) for o in objects], (9, b"after"))
    blob = bytes([4]) + b"head" + _message((1, result))
    canonical = canonical_order(blob)
    assert len(canonical) == len(blob) and canonical != blob
    assert canonical == bytes([4]) + b"head" + _message(
        (1, _message((3, b"before"), *[(8, o) for o in sorted(objects)], (9, b"after"))))
    assert canonical_order(canonical) == canonical  # already in order: unchanged
    assert canonical_order(b"\x02no") == b"\x02no"  # not the layout: returned as it is
    split = _message((8, objects[0]), (3, b"x"), (8, objects[1]))  # not one run: left alone
    odd = bytes([0]) + _message((1, split))
    assert canonical_order(odd) == odd
