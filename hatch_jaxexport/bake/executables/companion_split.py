"""Splitting a baked wheel's executables into companion wheels, one per target.

``split_wheel`` takes a built wheel (the Hatch hook's, setuptools', the wrapping backend's, a
merge's) and writes, into a folder, the package's wheel without the executables it splits
(``formats.companion_wheels.is_split``: the accelerators', or every target's) and one
companion wheel per target that holds them (``formats.companion_wheels`` names them). The
package's wheel:

- lists the companions in each manifest (``CompanionRecord``: extra, distribution, version,
  import package, platform, the SHA-256 of the manifest written into the companion, counts);
- gets an extra per companion and one per platform in ``METADATA`` (``Provides-Extra`` where
  the project does not declare it already, ``Requires-Dist: <companion>==<version>; extra ==
  "<extra>"``): ``pip install mylib[tpu-v5e]``, ``mylib[tpu]``.

A companion is a pure wheel (``py3-none-any``: data the loader reads, no code the OS loads) of
``<companion package>/__init__.py``, ``<companion package>/_jaxexport/<package>/`` (a manifest
of the executables only, and their blobs) and its ``.dist-info``. Everything is written by the
one wheel writer (``merge.write_wheel``) with the package's wheel's timestamps, so two builds
of one source give byte-identical companions; each is read back (the loader's reader, every
blob's size and SHA-256, every executable's artifact in the package's manifest) before it is
kept, and the package's wheel too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from hatch_jaxexport.bake.executables.merge import wheel_entries, wheel_manifests, write_wheel
from hatch_jaxexport.bake.verify import read_back_wheel, verify_companion
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats import __version__
from hatch_jaxexport.formats.companion_wheels import (
    companion_distribution,
    companion_extra,
    companion_package,
    is_split,
    platform_extras,
)
from hatch_jaxexport.formats.manifest import (
    ARTIFACT_DIR,
    MANIFEST_NAME,
    CompanionRecord,
    ExecutableRecord,
    Manifest,
    sha256_hex,
)

Entries = dict[str, tuple[zipfile.ZipInfo, bytes]]


class SplitResult:
    """What a split wrote: the package's wheel, and each companion wheel by extra."""

    def __init__(self, wheel: Path, companions: dict[str, Path]) -> None:
        self.wheel, self.companions = wheel, companions


def split_wheel(wheel: str | Path, out_dir: str | Path, split: str = "accelerators",
                companions_dir: str | Path | None = None) -> SplitResult:
    """Write ``wheel`` split (``split``: ``accelerators`` or ``all``) into ``out_dir``: the
    package's wheel (its file name; ``out_dir`` may be the wheel's own folder, the wheel is
    then replaced once everything is written and read back) and its companion wheels (into
    ``companions_dir`` where given, a folder on the same file system). A wheel with nothing to
    split is written unchanged (``companions`` empty)."""
    wheel, out_dir = Path(wheel), Path(out_dir)
    entries = wheel_entries(wheel)
    manifests = wheel_manifests(entries, wheel)
    already = [folder for folder, m in manifests.items() if m.companions]
    if already:
        raise ExportError([f"{wheel.name}: {folder}/{MANIFEST_NAME} already lists companion "
                           "wheels: split a wheel whose executables are all inside it"
                           for folder in already])
    metadata_name = next(n for n in entries if n.endswith(".dist-info/METADATA")
                         and n.count("/") == 1)
    distribution, version = _name_and_version(entries[metadata_name][1])
    stamp = entries[metadata_name][0]
    groups = _groups(manifests, split)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not groups:  # nothing to split: the wheel as it is
        target = out_dir / wheel.name
        if target.resolve() != wheel.resolve():
            shutil.copyfile(wheel, target)
        return SplitResult(target, {})
    companions: dict[str, Path] = {}
    records: dict[str, list[CompanionRecord]] = {}
    with tempfile.TemporaryDirectory(prefix="jaxexport-split-", dir=out_dir) as scratch:
        for extra, by_folder in sorted(groups.items()):
            path, written = _write_companion(extra, by_folder, entries, manifests,
                                             (distribution, version), stamp, Path(scratch))
            companions[extra] = path
            for folder, record in written.items():
                records.setdefault(folder, []).append(record)
        moved = {f"{folder}/{r.file}" for by_folder in groups.values()
                 for folder, listed in by_folder.items() for r in listed}
        main = _write_main(wheel, entries, manifests, records, moved, Path(scratch))
        beside = Path(companions_dir) if companions_dir is not None else out_dir
        placed = {extra: beside / path.name for extra, path in companions.items()}
        for extra, path in companions.items():
            os.replace(path, placed[extra])
        target = out_dir / wheel.name
        os.replace(main, target)
    return SplitResult(target, placed)


def _groups(manifests: dict[str, Manifest], split: str
            ) -> dict[str, dict[str, list[ExecutableRecord]]]:
    """Extra -> artifact folder -> the executables that companion takes from that folder."""
    groups: dict[str, dict[str, list[ExecutableRecord]]] = {}
    for folder, manifest in sorted(manifests.items()):
        for record in manifest.executables:
            if is_split(record, split):
                groups.setdefault(companion_extra(record), {}).setdefault(
                    folder, []).append(record)
    return groups


def _name_and_version(metadata: bytes) -> tuple[str, str]:
    """The distribution's name and version, from its ``METADATA``."""
    head = metadata.decode("utf-8", "replace").partition("\n\n")[0]
    fields = {}
    for line in head.split("\n"):
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    return fields.get("name", ""), fields.get("version", "")


def _write_companion(extra: str, by_folder: dict[str, list[ExecutableRecord]],
                     entries: Entries, manifests: dict[str, Manifest],
                     dist_version: tuple[str, str], stamp: zipfile.ZipInfo, scratch: Path
                     ) -> tuple[Path, dict[str, CompanionRecord]]:
    """One companion wheel (in ``scratch``), read back; its record per artifact folder."""
    distribution, version = dist_version
    name = companion_distribution(distribution, extra)
    package = companion_package(distribution, extra)
    platform = next(iter(by_folder.values()))[0].backend
    files: list[tuple[str, zipfile.ZipInfo, bytes]] = [
        (f"{package}/__init__.py", stamp, _init_text(name, distribution, version, extra))]
    records: dict[str, CompanionRecord] = {}
    for folder, executables in sorted(by_folder.items()):
        main = folder.split("/")[0]
        base = manifests[folder]
        own = Manifest(package=base.package, generator=base.generator,
                       jax_version=base.jax_version, jaxlib_version=base.jaxlib_version,
                       artifacts=(), jax_released=base.jax_released,
                       executables=tuple(sorted(executables, key=lambda r: r.file)))
        data = own.to_bytes()
        inside = f"{package}/{ARTIFACT_DIR}/{main}"
        files.append((f"{inside}/{MANIFEST_NAME}", stamp, data))
        files += [(f"{inside}/{r.file}", stamp, entries[f"{folder}/{r.file}"][1])
                  for r in own.executables]
        records[folder] = CompanionRecord(
            extra=extra, distribution=name, version=version, package=package,
            platform=platform, manifest_sha256=sha256_hex(data),
            executables=len(executables), size=sum(r.size for r in executables))
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    files.append((f"{info}/METADATA", stamp, _companion_metadata(name, version, distribution,
                                                                 extra)))
    files.append((f"{info}/WHEEL", stamp, _wheel_text()))
    path = write_wheel(scratch / f"{name.replace('-', '_')}-{version}-py3-none-any.whl",
                       files, f"{info}/RECORD", stamp.date_time)
    for folder, record in records.items():
        main = folder.split("/")[0]
        verify_companion(zipfile.Path(path, at=f"{package}/{ARTIFACT_DIR}/{main}/"),
                         manifests[folder], record,
                         f"the companion wheel {path.name}")
    return path, records


def _write_main(wheel: Path, entries: Entries, manifests: dict[str, Manifest],
                records: dict[str, list[CompanionRecord]], moved: set[str],
                scratch: Path) -> Path:
    """The package's wheel without the split executables (``moved``: their names in the
    wheel), its manifests listing the companions, its ``METADATA`` with their extras; read
    back."""
    kept: list[tuple[str, zipfile.ZipInfo, bytes]] = []
    every = [c for listed in records.values() for c in listed]
    for name, (info, data) in entries.items():
        folder = name[: -len(MANIFEST_NAME) - 1]
        if name.endswith(".dist-info/RECORD") or name in moved:
            continue
        if name.endswith(f"/{ARTIFACT_DIR}/{MANIFEST_NAME}") and folder in records:
            manifest = manifests[folder]
            data = manifest._replace(
                executables=tuple(r for r in manifest.executables
                                  if f"{folder}/{r.file}" not in moved),
                companions=tuple(sorted(records[folder]))).to_bytes()
        elif name.endswith(".dist-info/METADATA") and every:
            data = add_extras(data.decode("utf-8"), every).encode("utf-8")
        kept.append((name, info, data))
    record = next(n for n in entries if n.endswith(".dist-info/RECORD"))
    out = write_wheel(scratch / wheel.name, kept, record, entries[record][0].date_time)
    return read_back_wheel(out, [(folder, m.package) for folder, m in manifests.items()],
                           "the package's wheel without its companions' executables")


def add_extras(metadata: str, companions: Sequence[CompanionRecord]) -> str:
    """``METADATA`` with an extra per companion and per platform: ``Provides-Extra`` where
    the project does not declare the extra already (its own ``tpu`` extra, say, then also
    installs the companions), a pinned ``Requires-Dist`` per companion, after its lines."""
    head, blank, body = metadata.partition("\n\n")
    lines = head.split("\n")
    declared = {line.split(":", 1)[1].strip().lower() for line in lines
                if line.lower().startswith("provides-extra:")}
    versions = {c.distribution: c.version for c in companions}
    added: list[str] = []
    for extra, names in platform_extras(list(companions)).items():
        if extra not in declared:
            added.append(f"Provides-Extra: {extra}")
        added += [f'Requires-Dist: {n}=={versions[n]}; extra == "{extra}"' for n in names]
    last = max((i for i, line in enumerate(lines)
                if line.lower().startswith(("requires-dist:", "provides-extra:"))),
               default=len(lines) - 1)
    lines[last + 1:last + 1] = added
    return "\n".join(lines) + blank + body


def _init_text(name: str, distribution: str, version: str, extra: str) -> bytes:
    return (f'"""{name}: the precompiled executables of {distribution} {version} for '
            f"{extra} (hatch-jaxexport's companion wheel; {distribution}'s loader reads "
            'them, nothing imports this package)."""\n').encode()


def _companion_metadata(name: str, version: str, distribution: str, extra: str) -> bytes:
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            f"Summary: Precompiled XLA executables of {distribution} {version} for {extra} "
            f"(install {distribution}[{extra}])\n\n").encode()


def _wheel_text() -> bytes:
    return (f"Wheel-Version: 1.0\nGenerator: hatch-jaxexport {__version__}\n"
            "Root-Is-Purelib: true\nTag: py3-none-any\n").encode()


__all__ = ["SplitResult", "add_extras", "split_wheel"]
