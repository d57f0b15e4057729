"""Many builders, one wheel: merging the precompiled executables that several builders compiled.

An executable runs only on the machine kind it was compiled for, and one builder compiles only
for its own (Linux x86-64, Linux aarch64, macOS arm64 runners in CI). Each builder builds the
same pure wheel from the same source; this module puts their executables into one wheel. It
refuses wheels that are not the same build (another name or version, any other file or any
artifact that differs by SHA-256): one StableHLO is kept, never a mix. The merged wheel is
reproducible: its entries in the first wheel's order with the first wheel's timestamps, the
executables added sorted, the manifest written by ``Manifest.to_bytes`` and ``RECORD`` computed
again, so the same wheels in any order give the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Sequence
from pathlib import Path

from hatch_jaxexport.bake.verify import read_back, read_back_wheel
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.manifest import (
    ARTIFACT_DIR,
    MANIFEST_NAME,
    ExecutableRecord,
    Manifest,
)
from hatch_jaxexport.formats.manifest_reader import parse_manifest

_MANIFEST_SUFFIX = f"/{ARTIFACT_DIR}/{MANIFEST_NAME}"


def wheel_entries(wheel: Path) -> dict[str, tuple[zipfile.ZipInfo, bytes]]:
    """Every member of ``wheel``: its ``ZipInfo`` (timestamp, permissions) and bytes, in order."""
    with zipfile.ZipFile(wheel) as archive:
        return {info.filename: (info, archive.read(info)) for info in archive.infolist()}


def _is_executable(name: str, manifests: dict[str, Manifest]) -> bool:
    folder, _, file = name.rpartition("/")
    manifest = manifests.get(folder)
    return manifest is not None and any(e.file == file for e in manifest.executables)


def wheel_manifests(entries: dict[str, tuple[zipfile.ZipInfo, bytes]], wheel: Path
                    ) -> dict[str, Manifest]:
    """Each artifact folder's manifest, by folder (``mypkg/_jaxexport``)."""
    return {name[: -len(MANIFEST_NAME) - 1]: parse_manifest(data, where=f"{wheel.name}:{name}")
            for name, (_, data) in entries.items() if name.endswith(_MANIFEST_SUFFIX)}


def _differences(first: Path, base: dict, other: Path, entries: dict) -> list[str]:
    """Why ``other`` is not the same build as ``first``, file by file and artifact by artifact."""
    problems = []
    for folder, manifest in base["manifests"].items():
        theirs = entries["manifests"].get(folder)
        if theirs is None:
            problems.append(f"{other.name} has no {folder}/{MANIFEST_NAME}")
            continue
        problems += _manifest_differences(manifest, theirs, first.name, other.name, folder)
    for name in sorted(set(base["files"]) ^ set(entries["files"])):
        problems.append(f"{name} is in only one of {first.name} and {other.name}")
    for name in sorted(set(base["files"]) & set(entries["files"])):
        if base["files"][name] != entries["files"][name]:
            problems.append(f"{name} differs between {first.name} and {other.name}")
    return problems


def _manifest_differences(manifest: Manifest, theirs: Manifest, first: str, other: str,
                          folder: str) -> list[str]:
    """Why ``theirs`` (in ``other``) is not the manifest of the same build as ``manifest``
    (in ``first``): each artifact that differs by SHA-256, or what else differs."""
    mine = {a.id: a.sha256 for a in manifest.artifacts}
    problems = [f"artifact {artifact.id} differs (SHA-256 {mine[artifact.id][:12]} in {first}, "
                f"{artifact.sha256[:12]} in {other})" for artifact in theirs.artifacts
                if mine.get(artifact.id, artifact.sha256) != artifact.sha256]
    if set(mine) != {a.id for a in theirs.artifacts}:
        problems.append(f"{folder}: {first} and {other} hold other artifacts")
    if manifest._replace(executables=()) != theirs._replace(executables=()) and not problems:
        problems.append(f"{folder}/{MANIFEST_NAME} differs beyond its executables")
    return problems


def _read(wheel: Path) -> dict:
    entries = wheel_entries(wheel)
    manifests = wheel_manifests(entries, wheel)
    files = {name: data for name, (_, data) in entries.items()
             if not name.endswith((".dist-info/RECORD", _MANIFEST_SUFFIX))
             and not _is_executable(name, manifests)}
    return {"entries": entries, "manifests": manifests, "files": files}


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def merge_wheels(wheels: Sequence[str | Path], out_dir: str | Path) -> Path:
    """One wheel with the executables of every one of ``wheels`` (the same build from several
    builders), written into ``out_dir`` under the wheels' common name; ``ExportError`` listing
    every difference when they are not the same build."""
    paths = [Path(w) for w in wheels]
    if len(paths) < 2 or len({p.name for p in paths}) != 1:
        raise ExportError([f"merge needs two or more builds of one wheel (the same file name), "
                           f"got {', '.join(p.name for p in paths) or 'none'}"])
    read = [_read(p) for p in paths]
    problems = [f"{problem}: build every wheel from the same source with the same jax"
                for p, r in zip(paths[1:], read[1:], strict=True)
                for problem in _differences(paths[0], read[0], p, r)]
    if problems:
        raise ExportError(problems, f"{len(problems)} differences between the wheels to merge")
    out = _write(paths[0], read, Path(out_dir))
    return read_back_wheel(out, [(folder, manifest.package) for folder, manifest
                                 in read[0]["manifests"].items()], "the merged wheel")


def add_to_wheel(wheel: str | Path, added: dict[str, list[tuple[ExecutableRecord, bytes]]],
                 out_dir: str | Path) -> Path:
    """A copy of ``wheel`` in ``out_dir`` (the same file name) with ``added`` executables
    (per artifact folder, ``mypkg/_jaxexport``: each record and its bytes) beside its own:
    what ``jaxexport compile-executables`` writes, so that ``merge`` and ``executables-from``
    take a device's executables as they take another builder's wheel. Written as a merge
    writes (``RECORD`` computed again, reproducible) and read back before it is kept."""
    wheel, out_dir = Path(wheel), Path(out_dir)
    if out_dir.resolve() == wheel.parent.resolve():
        raise ExportError([f"--out {out_dir} holds {wheel.name} itself: write the wheel with "
                           "the executables into another folder"])
    base = _read(wheel)
    unknown = sorted(set(added) - set(base["manifests"]))
    if unknown:
        raise ExportError([f"{wheel.name} has no {folder}/{MANIFEST_NAME}" for folder in unknown])
    overlay = {"manifests": {}, "entries": {}}
    for folder, pairs in added.items():
        overlay["manifests"][folder] = base["manifests"][folder]._replace(
            executables=tuple(record for record, _ in pairs))
        overlay["entries"].update({f"{folder}/{record.file}": (None, data)
                                   for record, data in pairs})
    out = _write(wheel, [base, overlay], out_dir)
    return read_back_wheel(out, [(folder, manifest.package) for folder, manifest
                                 in base["manifests"].items()],
                           "the wheel with the device's executables")


def _write(first: Path, read: list[dict], out_dir: Path) -> Path:
    """The merged wheel: the first wheel's entries (its manifests with every executable), the
    other wheels' executables added, ``RECORD`` computed again."""
    base = read[0]
    executables: dict[str, dict[str, tuple[object, bytes]]] = {}
    for wheel in read:
        for folder, manifest in wheel["manifests"].items():
            for record in manifest.executables:
                data = wheel["entries"][f"{folder}/{record.file}"][1]
                known = executables.setdefault(folder, {}).get(record.file)
                if known is not None and known[1] != data:
                    raise ExportError([f"{folder}/{record.file} differs between two wheels: "
                                       "two builders compiled different executables under one "
                                       "name"])
                executables[folder][record.file] = (record, data)
    entries: list[tuple[str, zipfile.ZipInfo, bytes]] = []
    for name, (info, data) in base["entries"].items():
        folder = name[: -len(MANIFEST_NAME) - 1]
        if name.endswith(".dist-info/RECORD") or _is_executable(name, base["manifests"]):
            continue
        if name.endswith(_MANIFEST_SUFFIX):
            found = executables.get(folder, {})
            merged = base["manifests"][folder]._replace(executables=tuple(
                sorted((r for r, _ in found.values()), key=lambda r: r.file)))
            entries.append((name, info, merged.to_bytes()))
            entries += [(f"{folder}/{file}", info, found[file][1]) for file in sorted(found)]
        else:
            entries.append((name, info, data))
    record_name = next(n for n in base["entries"] if n.endswith(".dist-info/RECORD"))
    return write_wheel(out_dir / first.name, entries, record_name,
                       base["entries"][record_name][0].date_time)


def write_wheel(out: Path, entries: Sequence[tuple[str, zipfile.ZipInfo, bytes]],
                record_name: str, record_time: tuple[int, ...]) -> Path:
    """The one wheel writer of every command that rewrites a wheel (``merge``, ``bake-wheel``,
    the wrapping build backend): ``entries`` (name, the ``ZipInfo`` whose timestamp and
    permissions it takes, bytes) in their order, deflated, then ``RECORD`` computed from them,
    last. The same entries give the same bytes: nothing of the writing machine or moment."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, template, data in entries:
            info = zipfile.ZipInfo(name, template.date_time)
            info.external_attr, info.compress_type = template.external_attr, zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
            lines.append(_record_line(name, data))
        record = zipfile.ZipInfo(record_name, record_time)
        record.compress_type = zipfile.ZIP_DEFLATED  # a ZipInfo is stored uncompressed otherwise
        archive.writestr(record, "\n".join([*lines, f"{record_name},,"]) + "\n")
    return out


def add_executables_from(folder: Path, package: str, wheels: Sequence[str | Path]) -> int:
    """Add to a fresh export of ``package`` in ``folder`` (its ``manifest.json`` and files) the
    executables that other builders' wheels of the same build carry; how many were added.

    The hook's side of a merge (``executables-from``): the last builder builds the wheel
    with every runner's executables in it, instead of merging wheels afterwards. Refuses, as
    ``merge_wheels`` does, a wheel whose artifacts differ from this export's by SHA-256 or
    whose manifest differs beyond its executables (``ExportError`` listing each difference),
    and two executables of one name with other bytes."""
    mine = parse_manifest((folder / MANIFEST_NAME).read_bytes(), where=str(folder))
    found = {record.file: (record, (folder / record.file).read_bytes())
             for record in mine.executables}
    inside = f"{package}/{ARTIFACT_DIR}"
    problems: list[str] = []
    for wheel in map(Path, wheels):
        entries = wheel_entries(wheel)
        theirs = wheel_manifests(entries, wheel).get(inside)
        if theirs is None:
            problems.append(f"{wheel.name} has no {inside}/{MANIFEST_NAME}")
            continue
        problems += _manifest_differences(mine, theirs, "this build", wheel.name, inside)
        for record in theirs.executables:
            data = entries[f"{inside}/{record.file}"][1]
            if record.file in found and found[record.file][1] != data:
                problems.append(f"{inside}/{record.file} differs between this build and "
                                f"{wheel.name}: two builders compiled different executables "
                                "under one name")
            found.setdefault(record.file, (record, data))
    if problems:
        raise ExportError([f"{problem}: build every wheel from the same source with the same "
                           "jax" for problem in problems],
                          f"executables-from: {len(problems)} differences from this build")
    added = 0
    for file, (_, data) in sorted(found.items()):
        if not (folder / file).exists():
            (folder / file).write_bytes(data)
            added += 1
    merged = mine._replace(executables=tuple(record for _, (record, _) in sorted(found.items())))
    (folder / MANIFEST_NAME).write_bytes(merged.to_bytes())
    read_back(folder, package, "the artifacts with other builders' executables")
    return added


__all__ = ["add_executables_from", "add_to_wheel", "merge_wheels", "wheel_entries",
           "wheel_manifests", "write_wheel"]
