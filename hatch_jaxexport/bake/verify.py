"""Checking a package's baked artifacts against its manifest: ``jaxexport verify``, the release
check, and the build's read-back of everything it writes.

Reads only files: the manifest and the blobs, through ``importlib.resources`` like the loader
(a folder, or a folder in a wheel), and the manifest through the loader's own reader
(``loader_read``: its index, each function's records as a first call decodes them, and the
whole file). Every writer of an artifact folder (the export, a jax release's set, a merge of
builders' executables) calls ``read_back`` before its folder or wheel is finished, so that
nothing is shipped that the loader would refuse; ``verify`` and the release check run the same
checks on what is installed. Imports nothing but the package itself (to locate it) and never
imports jax.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import os
import pathlib
import zipfile
from collections.abc import Sequence
from typing import Any

from hatch_jaxexport.errors import ArtifactError, ExportError
from hatch_jaxexport.formats.device_targets import target_problem
from hatch_jaxexport.formats.inventory import inventory
from hatch_jaxexport.formats.manifest import (
    ARTIFACT_DIR,
    MANIFEST_NAME,
    CompanionRecord,
    JaxSet,
    Manifest,
    check_file_name,
    signature_text,
)
from hatch_jaxexport.formats.manifest_reader import parse_manifest, read_manifest_index
from hatch_jaxexport.formats.record_spans import SPANNED, read_spans, record_owner
from hatch_jaxexport.runtime.artifacts.package_artifacts import record_key

# Imported in functions: the runtime's artifacts, only for a package with pytree classes (verify
# imports no jax otherwise).

_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` found: the manifest (``None`` if unreadable) and each problem."""

    package: str
    manifest: Manifest | None
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line for a package without problems."""
        if self.manifest is None:
            return f"{self.package}: no manifest"
        counts = inventory(self.manifest)  # as the build summary and inspect count them
        executables = self.manifest.executables
        also = f" and {len(executables)} precompiled executable(s), " \
            f"{sum(e.size for e in executables):,} bytes," if executables else ""
        return (f"{self.package}: OK, {counts.functions} function(s), {counts.artifacts} "
                f"artifact(s){counts.kinds_text()}, {counts.bytes:,} "
                f"bytes{also} match {ARTIFACT_DIR}/{MANIFEST_NAME} (schema "
                f"{self.manifest.schema_version}, built with jax {self.manifest.jax_version})"
                + "".join(f"; jax {s.jax_version}'s set matches {s.manifest}"
                          for s in self.manifest.jax_sets))


def _foreign_type_problem(ref: str, package: str) -> str:
    """Why the loader would refuse a manifest's pytree type, judged from names and installed
    metadata only: a type must come from the package or from a distribution it declares."""
    from hatch_jaxexport.runtime.artifacts import pytrees

    module = ref.partition(":")[0]
    if module == package or module.startswith(package + "."):
        return ""
    providers = pytrees.distributions_of(module)
    declared = pytrees.declared_dependencies(package)
    if any(pytrees.normalize_name(p) in declared for p in providers):
        return ""
    return (f"pytree type {ref!r} is outside package {package!r} and not from a distribution it "
            f"declares in Requires-Dist (module {module!r} comes from "
            f"{', '.join(providers) or 'no installed distribution'})")


def _check_executables(root: Any, manifest: Manifest, listed: set[str]) -> list[str]:
    """Each precompiled executable: present with its size and SHA-256, and compiled from an
    artifact the manifest lists with that SHA-256 (adds their files to ``listed``)."""
    compiled_from = (*manifest.artifacts, *manifest.concrete)  # concrete-size ones too
    artifacts = {record.id: record.sha256 for record in compiled_from}
    platforms = {record.id: record.platform for record in compiled_from}
    problems = []
    for record in manifest.executables:
        listed.add(record.file)
        problems += _check_blob(root, record.file, record.size, record.sha256, record.id)
        if artifacts.get(record.artifact) != record.artifact_sha256:
            problems.append(f"{record.id}: compiled from artifact {record.artifact}, which the "
                            "manifest does not list with that SHA-256")
        wrong = target_problem(record, platforms.get(record.artifact))
        if wrong is not None:  # a device target that does not describe its device
            problems.append(f"{record.id}: {wrong}")
    return problems


def companion_problems(root: Any, manifest: Manifest, record: CompanionRecord) -> list[str]:
    """Every problem of a companion wheel's folder ``root`` for ``package``'s ``manifest``:
    its manifest the one ``record`` pins (SHA-256), read by the loader's reader, holding
    executables only, each compiled from an artifact ``manifest`` lists (with its SHA-256) and
    each blob intact; no file it does not list."""
    where = f"{record.distribution}: {ARTIFACT_DIR}/{manifest.package}/{MANIFEST_NAME}"
    try:
        data = (root / MANIFEST_NAME).read_bytes()
    except OSError as err:
        return [f"{where}: cannot read it ({err})"]
    if hashlib.sha256(data).hexdigest() != record.manifest_sha256:
        return [f"{where} is not the one {manifest.package}'s manifest pins (SHA-256 "
                f"{record.manifest_sha256[:12]}): another version or build of the companion"]
    try:
        own = loader_read(data, where)
    except ArtifactError as err:
        return [str(err)]
    problems = []
    if own.package != manifest.package or own.artifacts or own.concrete or own.companions:
        problems.append(f"{where} must hold executables of {manifest.package} only")
    listed = {MANIFEST_NAME}
    with_artifacts = manifest._replace(executables=own.executables)
    problems += [f"{record.distribution}: {p}"
                 for p in _check_executables(root, with_artifacts, listed)]
    try:
        names = sorted(entry.name for entry in root.iterdir())
    except OSError as err:
        names = []
        problems.append(f"{where}: cannot list its folder ({err})")
    problems += [f"{record.distribution}: {name} is not listed in its manifest"
                 for name in names if name not in listed]
    if len(own.executables) != record.executables:
        problems.append(f"{where} holds {len(own.executables)} executables, the package's "
                        f"manifest says {record.executables}")
    return problems


def verify_companion(root: Any, manifest: Manifest, record: CompanionRecord, what: str) -> None:
    """The build's read-back of a companion wheel it wrote (``companion_problems``):
    ``ExportError`` naming every problem, nothing finished half."""
    problems = companion_problems(root, manifest, record)
    if problems:
        raise ExportError(problems, f"{manifest.package}: {what} failed the build's read-back; "
                          "nothing was finished")


def installed_companions(manifest: Manifest) -> list[tuple[CompanionRecord, str, list[str]]]:
    """Each companion wheel ``manifest`` lists, as installed beside it: its record, how it
    stands (``installed``, or why the loader would not use it) and its problems
    (``companion_problems``; none for a companion that is not installed: an extra the
    environment did not ask for)."""
    from hatch_jaxexport.runtime.artifacts.installed_companions import find_companion

    found = []
    for record in manifest.companions:
        companion = find_companion(record, manifest.package)
        if companion.missing:
            found.append((record, companion.problem, []))
        elif companion.root is None:
            found.append((record, companion.problem, [companion.problem]))
        else:
            problems = companion_problems(companion.root, manifest, record)
            found.append((record, "installed" if not problems else "damaged", problems))
    return found


def verify_package(package: str) -> list[str]:
    """Every problem with ``package``'s ``_jaxexport/`` folder; an empty list if it is intact.

    Checks that the manifest parses and validates, that every file name it lists is a safe bare
    name, that every blob is present (a regular file, not a link out of the folder) with the
    recorded size and SHA-256, likewise every precompiled executable (and that its artifact is
    listed), that pytree types are named inside the package or a distribution it declares, and
    that the folder holds no file the manifest does not list.
    """
    return verify_report(package).problems


def verify_report(package: str) -> VerifyReport:
    """Like [verify_package][hatch_jaxexport.bake.verify.verify_package], with the manifest."""
    try:
        root = importlib.resources.files(package) / ARTIFACT_DIR
    except (ModuleNotFoundError, TypeError, ValueError) as err:
        return VerifyReport(package, None, [f"cannot find package {package!r}: {err}"])
    return verify_folder(root, package)


def verify_folder(root: Any, package: str, *, installed: bool = True) -> VerifyReport:
    """Every problem of the artifact folder ``root`` (a path, or a folder in a wheel) of
    ``package``: its manifest read by the loader's reader (``loader_read``), every file it
    names with its size and SHA-256, each jax release's set likewise, no file it does not
    name. ``installed=False``: a build's folder (``read_back``), whose package is not the
    installed one (its pytree types' distributions are not judged) and whose manifest, just
    written, must hold readable record spans."""
    manifest_path = root / MANIFEST_NAME
    if not manifest_path.is_file():
        return VerifyReport(package, None, [
            f"{package} carries no baked artifacts ({ARTIFACT_DIR}/{MANIFEST_NAME} not found)"])
    problems: list[str] = []
    escape = _escapes(root, manifest_path)
    if escape:
        return VerifyReport(package, None, [f"{MANIFEST_NAME} {escape}"])
    try:
        manifest = loader_read(manifest_path.read_bytes(),
                               f"{package}/{ARTIFACT_DIR}/{MANIFEST_NAME}", spans=not installed)
    except (ArtifactError, OSError) as err:
        return VerifyReport(package, None, [str(err)])
    if manifest.package != package:
        problems.append(f"the manifest is for package {manifest.package!r}, not {package!r}")
    listed = {MANIFEST_NAME}
    problems += _check_records(root, manifest, package if installed else None, listed)
    if installed:  # the companion wheels installed beside it (a build's are read back alone)
        problems += [p for _, _, found in installed_companions(manifest) for p in found]
    for jax_set in manifest.jax_sets:  # other jax releases' sets (bake/workers/jax_sets.py)
        listed.add(jax_set.manifest)
        problems += [f"jax {jax_set.jax_version}'s set: {problem}"
                     for problem in _check_set(root, jax_set, package, listed, installed)]
    # portable.json and the files it lists
    from hatch_jaxexport.bake.concrete.portable_bundle import verify_files

    portable_listed, portable_problems = verify_files(root, _check_blob)
    listed |= portable_listed
    problems += portable_problems
    try:
        entries = sorted(root.iterdir(), key=lambda entry: entry.name)
    except OSError as err:
        entries = []
        problems.append(f"cannot list {ARTIFACT_DIR}/: {err}")
    for entry in entries:
        if entry.name not in listed:
            kind = "folder" if entry.is_dir() else "file"
            problems.append(f"{ARTIFACT_DIR}/{entry.name}: {kind} not listed in the manifest")
    return VerifyReport(package, manifest, problems)


def read_back(root: Any, package: str, what: str) -> Manifest:
    """The build's read-back of the artifact folder it just wrote (``root``: a folder, or a
    folder in a wheel), before the folder or wheel is finished: the checks of ``verify``
    (``verify_folder``, as a build's). ``what`` names the output (``the wheel's
    artifacts``...). ``ExportError`` naming the package and every problem: a build never
    finishes half, with a manifest its loader refuses."""
    report = verify_folder(root, package, installed=False)
    if report.problems or report.manifest is None:
        raise ExportError(
            [f"{package}: {problem}" for problem in report.problems],
            f"{package}: {what} failed the build's read-back (the loader's own reader and "
            f"every file's size and SHA-256); nothing was finished")
    return report.manifest


def read_back_wheel(wheel: pathlib.Path, folders: Sequence[tuple[str, str]], what: str
                    ) -> pathlib.Path:
    """``wheel`` once each of its artifact folders (``(folder in the wheel, package)``) reads
    back (``read_back``); otherwise the wheel is deleted, never left behind as if finished, and
    the ``ExportError`` raised. ``what`` names the wheel (``the merged wheel``...)."""
    try:
        for folder, package in folders:
            read_back(zipfile.Path(wheel, at=f"{folder}/"), package, f"{what} {wheel.name}")
    except ExportError:
        wheel.unlink()
        raise
    return wheel


def loader_read(data: bytes, where: str, *, spans: bool = False) -> Manifest:
    """Manifest bytes read every way the loader reads them: the index
    (``read_manifest_index``), each function's records as its first call decodes and resolves
    them (``ManifestIndex.function``, through the record spans, indexed by artifact key), and
    the whole file (``parse_manifest``, as ``inspect`` and the release check do). The whole
    manifest; ``ArtifactError`` where a read refuses it, a function's records read alone differ
    from the whole file's, or two of its artifacts resolve to one key. ``spans``: the record
    spans must be there and read cleanly (a manifest just written; an older wheel's has none,
    which the loader reads whole)."""
    index = read_manifest_index(data, where=where)
    whole = parse_manifest(data, where=where)
    if spans and read_spans(data) is None:
        raise ArtifactError(f"{where}: its record spans are missing or do not describe its "
                            "bytes (a first call would decode the whole manifest)")
    for name in sorted(_functions(whole)):
        spanned = index.spans is not None
        mine = index.function(name)
        if spans and spanned and index.spans is None:
            raise ArtifactError(f"{where}: the record spans of {name} do not read cleanly (its "
                                "first call would decode the whole manifest)")
        if mine != _records_of(whole, name):
            raise ArtifactError(f"{where}: the records of {name}, read as its first call reads "
                                "them, differ from the whole manifest's")
        keys: dict[Any, str] = {}
        for record in mine.artifacts:
            other = keys.setdefault(record_key(record), record.id)
            if other != record.id:
                raise ArtifactError(f"{where}: artifacts {other} and {record.id} of {name} "
                                    "resolve to one key: a call would find only one")
    return whole


def _functions(manifest: Manifest) -> set[str]:
    """The functions that own a record of ``manifest``."""
    return {record_owner(record._asdict(), field) for key, field in SPANNED.items()
            for record in getattr(manifest, key)}


def _records_of(manifest: Manifest, name: str) -> Manifest:
    """``manifest`` with only function ``name``'s records, in order: what
    ``ManifestIndex.function`` gives for it."""
    return manifest._replace(**{
        key: tuple(r for r in getattr(manifest, key) if record_owner(r._asdict(), field) == name)
        for key, field in SPANNED.items()})


def _check_records(root: Any, manifest: Manifest, package: str | None, listed: set[str]
                   ) -> list[str]:
    """The problems of one set's records (artifacts, their concrete-size forms, concrete-size
    artifacts, executables); the files they name are added to ``listed``. ``package``: whose
    installed metadata judges the pytree types (``None``: a build's, not judged)."""
    problems: list[str] = []
    for record in manifest.artifacts:
        listed.add(record.file)
        problems += _check_blob(root, record.file, record.size, record.sha256, record.id)
        for entry in record.sized:  # its concrete-size forms (bake/concrete/forms.py)
            listed.add(entry["file"])
            problems += _check_blob(root, entry["file"], entry["size"], entry["sha256"],
                                    f"{record.id} {signature_text(entry['inputs'])}")
        problems += [f"{record.id}: {problem}" for ref in record.pytree_types
                     if package and (problem := _foreign_type_problem(ref, package))]
    for concrete in manifest.concrete:  # concrete-size artifacts (bake/concrete/exports.py)
        listed.add(concrete.file)
        problems += _check_blob(root, concrete.file, concrete.size, concrete.sha256,
                                concrete.id)
    return problems + _check_executables(root, manifest, listed)


def _check_set(root: Any, jax_set: JaxSet, package: str, listed: set[str],
               installed: bool = True) -> list[str]:
    """The problems of another jax release's set: its manifest (read as the loader reads it,
    of this package and that jax, listing no sets itself) and its records, as the main
    manifest's."""
    path = root / jax_set.manifest
    escape = _escapes(root, path) if path.is_file() else "is missing"
    if escape:
        return [f"{ARTIFACT_DIR}/{jax_set.manifest} {escape}"]
    try:
        theirs = loader_read(path.read_bytes(), f"{package}/{ARTIFACT_DIR}/{jax_set.manifest}",
                             spans=not installed)
    except (ArtifactError, OSError) as err:
        return [str(err)]
    if (theirs.package, theirs.jax_version) != (package, jax_set.jax_version) or \
            theirs.jax_sets:
        return [f"{jax_set.manifest} is {theirs.package}'s with jax {theirs.jax_version}"
                f"{' and lists sets' if theirs.jax_sets else ''}, the main manifest lists it "
                f"as {package}'s with jax {jax_set.jax_version}"]
    return _check_records(root, theirs, package if installed else None, listed)


def _escapes(root: Any, path: Any) -> str:
    """Why ``path`` may not be read (a link out of the folder, not a regular file), or ``""``."""
    if not isinstance(path, pathlib.Path):
        return ""  # inside a zip archive: no links
    real_root = pathlib.Path(os.path.realpath(root))
    real = pathlib.Path(os.path.realpath(path))
    if not real.is_relative_to(real_root):
        return f"is a link that resolves outside {ARTIFACT_DIR}/ ({real})"
    if not real.is_file():
        return "is not a regular file"
    return ""


def _check_blob(root: Any, name: str, size: int, sha256: str, label: str) -> list[str]:
    try:
        check_file_name(name)
    except ArtifactError as err:
        return [f"{label}: {err}"]
    path = root / name
    try:
        if not path.is_file():
            return [f"{label}: {ARTIFACT_DIR}/{name} is missing"]
        escape = _escapes(root, path)
        if escape:
            return [f"{label}: {ARTIFACT_DIR}/{name} {escape}"]
        digest, length = _hash(path, size)
    except OSError as err:
        return [f"{label}: cannot read {ARTIFACT_DIR}/{name}: {err}"]
    if length != size:
        found = f"{length:,} bytes" if length <= size else "more bytes"
        return [f"{label}: {ARTIFACT_DIR}/{name} has {found}, the manifest says {size:,}"]
    if digest != sha256:
        return [f"{label}: {ARTIFACT_DIR}/{name} does not match its SHA-256 (damaged or "
                "modified after the build)"]
    return []


def _hash(path: Any, size: int) -> tuple[str, int]:
    """SHA-256 and length, reading at most one byte more than ``size`` (a huge file is cut)."""
    digest = hashlib.sha256()
    length = 0
    with path.open("rb") as handle:
        while length <= size:
            chunk = handle.read(min(_CHUNK, size + 1 - length))
            if not chunk:
                break
            digest.update(chunk)
            length += len(chunk)
    return digest.hexdigest(), length


__all__ = ["VerifyReport", "companion_problems", "installed_companions", "loader_read",
           "read_back", "read_back_wheel", "verify_companion", "verify_folder",
           "verify_package", "verify_report"]
