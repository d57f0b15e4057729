"""Artifacts for several jax releases in one wheel: each release's export, merged as a set.

Build layer. jax reads an export for about 6 months after the exporting jax's release and 3
weeks before it (``formats.jax_window``), and libraries release less often than that. With
``jax-releases``, the build exports the package again with each listed jax, in an environment
of its own (``bake.jax_envs``: the same workers, another interpreter), and adds each export to
the wheel's artifact folder as a set: its manifest (``manifest-jax-<version>.json``) beside the
main one, which lists it (``Manifest.jax_sets``), and its blobs in the same folder, where a blob
byte-equal to one already stored is stored once. The loader serves the set the running jax
reads (``runtime.artifacts.package_artifacts``). A set's portable index is left out: the
portable bundle (for consumers outside Python) is the main set's.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.jax_envs import jax_python
from hatch_jaxexport.bake.verify import read_back
from hatch_jaxexport.bake.workers.orchestrate import BuildResult, export_package, worker_env
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.inventory import byte_text
from hatch_jaxexport.formats.manifest import (
    MANIFEST_NAME,
    JaxSet,
    Manifest,
    check_file_name,
    set_manifest_name,
    sha256_hex,
)
from hatch_jaxexport.formats.manifest_reader import parse_manifest


def export_jax_set(package: str, folder: Path, version: str, *, requirements: Sequence[str],
                   search_path: Sequence[str], log: Callable[[str], None],
                   **options: Any) -> BuildResult:
    """Export ``package`` with jax ``version`` (``options``: ``export_package``'s) and add it
    to the artifact folder ``folder``, which holds the build's own export, as a set."""
    with tempfile.TemporaryDirectory(prefix="jaxexport-set-") as tmp, \
            jax_python(version, worker_env(search_path), log, requirements) as (python, env):
        result = export_package(package, Path(tmp) / "set", search_path=search_path, log=log,
                                python=python, environment=env, **options)
        if result.manifest.jax_version != version:
            raise ExportError([f"the environment made for jax {version} exported with jax "
                               f"{result.manifest.jax_version}"])
        add_jax_set(folder, result.out_dir, log)
    return result


def _named_files(manifest: Manifest) -> list[str]:
    """Every file a manifest's records name (blobs, concrete-size forms, executables)."""
    names = [r.file for r in manifest.artifacts]
    names += [e["file"] for r in manifest.artifacts for e in r.sized]
    names += [c.file for c in manifest.concrete] + [e.file for e in manifest.executables]
    return sorted(set(names))


def add_jax_set(folder: Path, set_folder: Path, log: Callable[[str], None]) -> JaxSet:
    """Add the export in ``set_folder`` (another jax's) to the artifact folder ``folder`` as a
    set: its blobs (each stored once: one byte-equal to a file already there is that file),
    its manifest, and its entry in the main manifest. ``ExportError`` if ``folder`` has a set
    of that jax already, or the export is of another package."""
    main = parse_manifest((folder / MANIFEST_NAME).read_bytes())
    theirs = parse_manifest((set_folder / MANIFEST_NAME).read_bytes())
    version = theirs.jax_version
    if theirs.package != main.package or version == main.jax_version or \
            any(s.jax_version == version for s in main.jax_sets):
        raise ExportError([f"cannot add the export of {theirs.package} with jax {version} to "
                           f"{main.package}'s artifacts (jax {main.jax_version}, sets "
                           f"{[s.jax_version for s in main.jax_sets]}): another package or a "
                           "jax it has already"])
    stored = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.name.startswith("manifest"):
            data = path.read_bytes()
            stored.setdefault((sha256_hex(data), len(data)), path.name)
    names, shared, added = {}, 0, 0
    for name in _named_files(theirs):
        data = (set_folder / name).read_bytes()
        key = (sha256_hex(data), len(data))
        if key in stored:
            shared += 1
        else:
            stored[key] = check_file_name(f"jax{version}-{name}")
            (folder / stored[key]).write_bytes(data)
            added += len(data)
        names[name] = stored[key]
    jax_set = JaxSet(set_manifest_name(version), version, theirs.jaxlib_version,
                     theirs.jax_released)
    (folder / jax_set.manifest).write_bytes(
        theirs._replace(sources={}).with_files(names).to_bytes())
    (folder / MANIFEST_NAME).write_bytes(
        main._replace(jax_sets=(*main.jax_sets, jax_set)).to_bytes())
    read_back(folder, main.package, f"the artifacts with jax {version}'s set")
    log(f"{main.package}: added the artifacts of jax {version} (released "
        f"{theirs.jax_released}): {len(names)} file(s), {byte_text(added)} added, {shared} "
        "identical to one already stored (stored once)")
    shutil.rmtree(set_folder, ignore_errors=True)
    return jax_set


__all__ = ["add_jax_set", "export_jax_set"]
