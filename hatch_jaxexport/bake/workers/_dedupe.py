"""Each record once, and identical modules stored once: records whose bytes are equal share
one file.

Before anything else, the records of a build (artifacts, concrete-size artifacts,
executables) are made unique by id (``one_per_id``): the loader's reader refuses a manifest
that lists an id twice, so the same record planned twice (a size named by a recording and by
``concrete=``...) is written once, and two different records claiming one id fail the build,
naming both and where each came from.

Build layer. A function baked once per recorded call, per static value or per size often yields
byte-identical modules (a static flag the computation ignores at that size, two recorded calls
that differ only in a value the source does not read), and the export writes each under a name
of its own. Before the manifest is written, every artifact file (symbolic artifacts, their
concrete-size forms, concrete-size and recorded-call artifacts) whose SHA-256 and size equal
another's is removed and its records point at the file kept (the smallest name, so a rebuild
keeps the same one). The manifest allows several records to name one file only with the same
SHA-256 and size (``formats.manifest``), and the loader reads and checks each record's bytes
by its ``file``, so nothing else changes. Executables are left alone: ``jaxexport merge``
pairs them across wheels by file name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.manifest import Manifest

_R = TypeVar("_R")


def one_per_id(package: str, what: str, records: Sequence[tuple[_R, str]]) -> list[_R]:
    """``records`` (each with where it came from) with each id once: a record equal to one
    already kept (the same id and the same content, the same work planned twice) is dropped;
    two records that claim one id with other contents are an ``ExportError`` naming both and
    their origins (one would shadow the other, and the loader refuses such a manifest)."""
    kept: dict[str, tuple[Any, str]] = {}
    conflicts: list[str] = []
    for record, origin in records:
        record_id = record.id  # type: ignore[attr-defined]
        known = kept.setdefault(record_id, (record, origin))
        if known[0] != record:
            conflicts.append(
                f"{package}: two different {what}s claim {record_id}: one from {known[1]} "
                f"({_content(known[0])}), one from {origin} ({_content(record)})")
    if conflicts:
        raise ExportError(conflicts, None if len(conflicts) == 1 else
                          f"{package}: {len(conflicts)} {what} ids claimed by two records each")
    return [record for record, _ in kept.values()]


def _content(record: Any) -> str:
    """What tells two records of one id apart, briefly: their file, SHA-256 and sizes."""
    sizes = getattr(record, "sizes", None)
    return (f"file {record.file}, SHA-256 {record.sha256[:12]}, {record.size:,} bytes"
            + (f", sizes {sizes}" if sizes else ""))


def _kept_names(manifest: Manifest) -> dict[str, str]:
    """For each artifact file name, the name of the file it is stored as: the smallest name
    among the files with its SHA-256 and size."""
    by_content: dict[tuple[str, int], set[str]] = {}
    entries: list[tuple[str, str, int]] = []
    for record in manifest.artifacts:
        entries.append((record.file, record.sha256, record.size))
        entries += [(e["file"], e["sha256"], e["size"]) for e in record.sized]
    entries += [(c.file, c.sha256, c.size) for c in manifest.concrete]
    for name, sha256, size in entries:
        by_content.setdefault((sha256, size), set()).add(name)
    return {name: min(names) for names in by_content.values() for name in names}


def dedupe_files(folder: Path, manifest: Manifest) -> tuple[Manifest, int, int]:
    """Store each distinct artifact module of ``manifest`` once in ``folder``: the manifest
    with its records pointing at the files kept, how many files were removed and their bytes.

    A file is removed only after its bytes were compared with the one kept (a SHA-256 match
    is what the manifest says, and the disk must agree)."""
    kept = _kept_names(manifest)
    removed, saved = 0, 0
    for name, target in sorted(kept.items()):
        if name == target or not (folder / name).is_file():
            continue
        if (folder / name).read_bytes() != (folder / target).read_bytes():
            kept[name] = name  # equal hashes, unequal bytes: keep both (never seen)
            continue
        saved += (folder / name).stat().st_size
        (folder / name).unlink()
        removed += 1
    return manifest.with_files(kept), removed, saved


__all__ = ["dedupe_files", "one_per_id"]
