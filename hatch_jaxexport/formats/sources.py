"""The sources a source-tree export was made from, so that a loader can tell when they changed.

An export written into a source tree (an editable install, ``jaxexport export`` into a flat
layout) records, in its manifest's ``sources``, every Python module of its package: path
(relative to the folder holding the package, ``/``-separated), size, modification time and
SHA-256. The package's modules and not only those a trace touched: a helper module the
function calls changes its result as surely as the function's own, and recording them all
costs one stat each. A loader compares them cheaply (``changed_sources``: a stat per file, a
hash only where size or time differ), so an edited function never serves yesterday's
artifact without a word. Wheels built for installation record nothing and check nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hatch_jaxexport.errors import ArtifactError

#: How the artifacts were made, hence the command that refreshes them.
MADE_BY = ("editable", "export")
#: A recorded path: relative, ``/``-separated, no ``..``, a ``.py`` file. (A pattern's text:
#: ``re`` compiles it on first use, so reading a wheel's manifest, which records no sources,
#: never pays for it.)
_SOURCE_PATH = r"^(?!/)(?!.*(?:^|/)\.\.(?:/|$))[^\\\x00]{1,400}\.py$"
_SKIPPED_DIRS = ("_jaxexport", "__pycache__")


def _modules(package_dir: Path) -> list[Path]:
    """The package's Python modules, sorted (artifact and cache folders, hidden folders and
    subfolders that are not packages left out)."""
    found = []
    for folder, subfolders, files in os.walk(package_dir):
        subfolders[:] = sorted(d for d in subfolders if d not in _SKIPPED_DIRS
                               and not d.startswith("."))
        found += [Path(folder, name) for name in sorted(files) if name.endswith(".py")]
    return found


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_fingerprint(package_dir: Path, made_by: str) -> dict[str, Any]:
    """The ``sources`` record of a package exported into its own source tree."""
    base = package_dir.parent
    files = []
    for path in _modules(package_dir):
        stat = path.stat()
        files.append({"path": path.relative_to(base).as_posix(), "size": stat.st_size,
                      "mtime_ns": stat.st_mtime_ns, "sha256": _sha256(path)})
    return {"made_by": made_by, "files": files}


def check_sources(raw: Any, where: str) -> dict[str, Any]:
    """A manifest's ``sources`` validated (``{}`` when absent); ``ArtifactError`` if not."""
    if raw in (None, {}):
        return {}
    problem = None
    if not isinstance(raw, Mapping) or raw.get("made_by") not in MADE_BY or \
            not isinstance(raw.get("files"), list):
        problem = "must be {made_by: 'editable' | 'export', files: [...]}"
    else:
        for i, entry in enumerate(raw["files"]):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str) or \
                    not re.match(_SOURCE_PATH, entry["path"]) or \
                    not all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                            for k in ("size", "mtime_ns")) or \
                    not isinstance(entry.get("sha256"), str):
                problem = f"files[{i}] must be a relative .py path with size, mtime_ns, sha256"
                break
    if problem:
        raise ArtifactError(f"corrupt manifest {where}: sources {problem}")
    return dict(raw)


def changed_sources(sources: Mapping[str, Any], base: Path) -> list[str]:
    """The recorded modules under ``base`` (the folder holding the package) that changed since
    the export, or are gone: a stat each, a hash only where size or time differ."""
    changed = []
    for entry in sources.get("files", ()):
        path = base / entry["path"]
        try:
            stat = path.stat()
            if stat.st_size == entry["size"] and stat.st_mtime_ns == entry["mtime_ns"]:
                continue
            if stat.st_size == entry["size"] and _sha256(path) == entry["sha256"]:
                continue  # touched, not changed
        except OSError:
            pass  # gone: changed
        changed.append(entry["path"])
    return changed


def refresh_command(sources: Mapping[str, Any], package: str, folder: str) -> str:
    """What refreshes artifacts made as ``sources`` says."""
    if sources.get("made_by") == "editable":
        return "reinstall the project (`pip install -e .`)"
    return f"run `python -m hatch_jaxexport export {package} --out {folder}`"


def stale_text(package: str, changed: list[str], sources: Mapping[str, Any], folder: str) -> str:
    """The one message of a package whose artifacts are older than their sources."""
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return (f"the artifacts of {package} are stale: {shown} changed since they were exported "
            f"into the source tree; its functions trace their current source until you "
            f"{refresh_command(sources, package, folder)}")


__all__ = ["MADE_BY", "changed_sources", "check_sources", "refresh_command",
           "source_fingerprint", "stale_text"]
