"""Bake a wheel another build backend built: flit, poetry-core, pdm-backend and the rest.

Those backends have no build-hook API, so nothing can add files while they write the wheel.
Instead the wheel they wrote is baked afterwards, by the wrapping PEP 517 backend
(``hatch_jaxexport.integrations.pep517``) and by ``jaxexport bake-wheel``: the wheel is unpacked
into a scratch folder, each top-level package is exported from there by the one flow every
integration calls (``bake.flow.bake``: the same isolated worker processes, messages and
read-back as the Hatch hook's), and the wheel is written again by the one wheel writer
(``bake.executables.merge.write_wheel``) with each package's artifacts as package data,
``Requires-Dist`` as the maintainer wrote it plus the jax requirement the Hatch hook adds
(``jax-requirement``), and ``RECORD`` computed again. The wheel is then read back as the loader
reads it before it is kept.

Reproducible: the wrapped wheel's entries keep their order and timestamps; the artifacts come
after the packages' files, sorted, stamped with ``SOURCE_DATE_EPOCH`` when it is set, else with
the timestamp of the wheel's own ``METADATA``; the same wrapped wheel bakes to the same bytes.
"""

from __future__ import annotations

import os
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from hatch_jaxexport.bake.config import (
    ConfigError,
    ExportOptions,
    merge_requirement,
    requirement_conflicts,
    requirement_name,
)
from hatch_jaxexport.bake.executables.merge import write_wheel
from hatch_jaxexport.bake.flow import Reporter, bake, write_companions
from hatch_jaxexport.bake.verify import read_back_wheel
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.manifest import ARTIFACT_DIR
from hatch_jaxexport.formats.settings import skip_requested
from hatch_jaxexport.formats.signatures import SIGNATURES_NAME

#: The runtime requirement a baked package needs to load its artifacts.
RUNTIME_REQUIREMENT = "hatch-jaxexport"


def wheel_packages(names: Sequence[str]) -> list[str]:
    """The top-level packages a wheel's member ``names`` ship (``pkg/__init__.py``), sorted."""
    return sorted({name.split("/")[0] for name in names
                   if name.count("/") == 1 and name.endswith("/__init__.py")
                   and ".dist-info" not in name and ".data" not in name.split("/")[0]})


def jax_requirement(options: ExportOptions) -> str | None:
    """The requirement the Hatch hook adds for artifacts exported by this environment's jax
    (``jax-requirement``; none by default, and none when the export is skipped)."""
    if skip_requested():
        return None
    from importlib import metadata

    try:
        return options.requirement_for(metadata.version("jax"))
    except metadata.PackageNotFoundError:
        return None  # the export fails later, with the reason


def rewrite_metadata(text: str, requirement: str | None, reporter: Reporter) -> str:
    """``METADATA`` with ``requirement`` merged into its ``Requires-Dist`` (the project's own
    jax requirement tightened, or a line added after the others), every other line untouched;
    warns, as the Hatch hook does, when the project does not require hatch-jaxexport."""
    head, blank, body = text.partition("\n\n")
    lines = head.split("\n")
    spots = [i for i, line in enumerate(lines) if line.lower().startswith("requires-dist:")]
    own = [lines[i].split(":", 1)[1].strip() for i in spots]
    if RUNTIME_REQUIREMENT not in {requirement_name(r) for r in own}:
        reporter.warning("jaxexport: the project does not list hatch-jaxexport in "
                         "[project].dependencies; the installed package needs it at run time "
                         "to load its artifacts")
    if requirement is None:
        return text
    merged, leftover = merge_requirement(own, requirement)
    for conflict in requirement_conflicts(own, requirement):
        reporter.warning(f"jaxexport: warning: {conflict}")
    for i, before, after in zip(spots, own, merged, strict=True):
        if after != before:
            lines[i] = f"Requires-Dist: {after}"
            reporter.info(f"jaxexport: runtime requirement {after!r} (the project's "
                          f"requirement on jax merged with {requirement!r}, for the artifacts)")
    if leftover is not None and leftover not in merged:
        lines.insert(spots[-1] + 1 if spots else len(lines), f"Requires-Dist: {leftover}")
        reporter.info(f"jaxexport: added runtime requirement {leftover!r}")
    return "\n".join(lines) + blank + body


def _stamp(template: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """The timestamp of added entries: ``SOURCE_DATE_EPOCH`` when set, else ``template``'s."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    stamp = zipfile.ZipInfo("stamp", template.date_time)
    if epoch.isdigit():
        stamp.date_time = time.gmtime(max(int(epoch), 315532800))[:6]  # zip starts in 1980
    stamp.external_attr = 0o644 << 16
    return stamp


def bake_wheel(wheel: str | Path, out_dir: str | Path, options: ExportOptions,
               reporter: Reporter, *, sources: Mapping[str, Path] | None = None,
               editable: bool = False) -> Path:
    """Bake ``wheel`` into ``out_dir`` (same file name); the path of the baked wheel.

    ``sources``: the packages' source folders where known (the wrapping backend's project),
    whose recorded calls (``jaxexport-signatures.json``) the export reads when the wheel does
    not ship them. ``editable``: the wheel is an editable one (its packages live in the source
    tree): they are exported into ``<source>/_jaxexport`` as the Hatch hook's editable path does,
    and only its ``METADATA`` is rewritten. Artifacts an earlier bake (or a stale editable
    export the backend swept in) left in the wheel are replaced, never shipped beside new ones.
    """
    wheel, out_dir = Path(wheel), Path(out_dir)
    with zipfile.ZipFile(wheel) as archive:
        entries = {info.filename: (info, archive.read(info)) for info in archive.infolist()}
    names = options.packages if options.packages is not None else (
        tuple(sorted(sources)) if editable and sources else tuple(wheel_packages(list(entries))))
    if not names:
        raise ConfigError([f"{wheel.name} ships no top-level package to export: name them in "
                           "[tool.jaxexport] packages"])
    metadata_name = next(n for n in entries if n.endswith(".dist-info/METADATA"))
    with tempfile.TemporaryDirectory(prefix="jaxexport-wheel-") as scratch:
        root = Path(scratch, "unpacked")
        packages = _unpack(entries, names, root, sources or {}, editable)
        baked = list(bake(packages, options, reporter, editable=editable,
                          build_dir=Path(scratch, "build"), search_path=[str(root)]
                          if not editable else sorted({str(p.parent) for p in packages.values()}),
                          requirements=_requires(entries[metadata_name][1])))
        kept = [(n, info, data) for n, (info, data) in entries.items()
                if not n.endswith(".dist-info/RECORD") and not _stale(n, names)]
        stamp = _stamp(entries[metadata_name][0])
        added = [] if editable else [
            (f"{p.name}/{ARTIFACT_DIR}/{f.name}", stamp, f.read_bytes())
            for p in baked if not p.empty for f in p.files()]
        for p in baked:
            if p.empty:
                reporter.warning(f"jaxexport: {p.name} has no @exportable functions; nothing "
                                 "added")
        requirement = jax_requirement(options) if baked else None
        text = rewrite_metadata(entries[metadata_name][1].decode("utf-8"), requirement, reporter)
        kept = [(n, info, text.encode("utf-8") if n == metadata_name else data)
                for n, info, data in kept]
        first_meta = next(i for i, (n, _, _) in enumerate(kept) if ".dist-info/" in n)
        ordered = kept[:first_meta] + added + kept[first_meta:]
        record = next(n for n in entries if n.endswith(".dist-info/RECORD"))
        if out_dir.resolve() == wheel.parent.resolve():
            raise ExportError([f"--out {out_dir} holds {wheel.name} itself: write the baked "
                               "wheel into another folder"])
        out = write_wheel(out_dir / wheel.name, ordered, record, entries[record][0].date_time)
    out = read_back_wheel(out, [(f"{p.name}/{ARTIFACT_DIR}", p.name) for p in baked
                                if not editable and not p.empty], "the baked wheel")
    return out if editable else write_companions(out, out_dir, options, reporter)


def _stale(name: str, packages: Sequence[str]) -> bool:
    """Whether a wheel member is an artifact folder's file of one of ``packages``."""
    return any(name.startswith(f"{p}/{ARTIFACT_DIR}/") for p in packages)


def _requires(metadata: bytes) -> list[str]:
    head = metadata.decode("utf-8", "replace").partition("\n\n")[0]
    return [line.split(":", 1)[1].strip() for line in head.split("\n")
            if line.lower().startswith("requires-dist:")]


def _unpack(entries: Mapping[str, tuple[zipfile.ZipInfo, bytes]], names: Sequence[str],
            root: Path, sources: Mapping[str, Path], editable: bool) -> dict[str, Path]:
    """Each package to export -> the folder the export imports it from: the wheel's own files
    unpacked under ``root`` (what users install), or for an editable wheel the source folder.
    A package's recorded calls come from its source folder when the wheel lacks them."""
    if editable:
        missing = [n for n in names if n not in sources]
        if missing:
            raise ConfigError([f"cannot find the source folder of {', '.join(missing)} for an "
                               "editable install: name the packages in [tool.jaxexport] packages"
                               " (a folder <name>/ or src/<name>/ with an __init__.py)"])
        return {n: sources[n] for n in names}
    found = {}
    for name, (_, data) in entries.items():
        top = name.split("/")[0]
        if top in names and not _stale(name, names) and not name.endswith("/"):
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    for name in names:
        folder = root / name
        if not (folder / "__init__.py").is_file():
            raise ConfigError([f"[tool.jaxexport] packages: the wheel ships no package {name!r}"])
        signatures = sources.get(name, Path("/nonexistent")) / SIGNATURES_NAME
        if not (folder / SIGNATURES_NAME).is_file() and signatures.is_file():
            (folder / SIGNATURES_NAME).write_bytes(signatures.read_bytes())
        found[name] = folder
    return found


__all__ = ["RUNTIME_REQUIREMENT", "bake_wheel", "jax_requirement", "rewrite_metadata",
           "wheel_packages"]
