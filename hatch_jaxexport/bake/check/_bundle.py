"""What the release check compares: the installed distribution's bundle and the source.

- :func:`find_bundle` reads the artifacts of the *installed distribution* that provides an import
  package (through ``importlib.metadata``), whatever ``import PACKAGE`` resolves to, and explains
  a missing or editable install;
- :func:`put_source_first` puts the folders given as the source (``--jaxexport-source``) first on
  the import path, and :func:`check_source_paths` that the package is imported from one of them;
- :func:`source_info` says where the source being checked was imported from, and
  :func:`source_location` where one of its functions is defined (for messages);
  :func:`refuse_installed_copy` stops a check whose "source" is the installed wheel itself.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.config import requirement_name
from hatch_jaxexport.bake.verify import loader_read
from hatch_jaxexport.errors import ArtifactError, CheckError
from hatch_jaxexport.formats.inventory import inventory
from hatch_jaxexport.formats.manifest import (
    ARTIFACT_DIR,
    MANIFEST_NAME,
    ArtifactRecord,
    ConcreteRecord,
    JaxSet,
    Manifest,
    artifact_sets,
    check_file_name,
    loaded_set,
    sha256_hex,
)
from hatch_jaxexport.formats.manifest_reader import parse_manifest
from hatch_jaxexport.runtime.artifacts.package_artifacts import running_jax_version
from hatch_jaxexport.runtime.call.decorator import ExportableFunction


@dataclasses.dataclass(frozen=True)
class Bundle:
    """The artifacts an installed distribution carries for one import package."""

    package: str
    distribution: str
    version: str
    folder: Path  # <site-packages>/<package>/_jaxexport
    #: The set of artifacts the running jax loads: the checked one (of several, where the
    #: wheel was baked with ``jax-releases``).
    manifest: Manifest
    #: Every jax release's set the wheel carries (``()`` for a wheel of one jax).
    sets: tuple[JaxSet, ...] = ()
    #: The package's own jax requirement in the distribution's metadata (``""``: none).
    jax_requirement: str = ""

    def read_blob(self, record: ArtifactRecord | ConcreteRecord) -> bytes:
        """A blob's bytes, checked against the manifest's size and SHA-256."""
        path = self.folder / record.file
        try:
            data = path.read_bytes()
        except OSError as err:
            raise CheckError(f"cannot read artifact {path}: {err}") from None
        if len(data) != record.size or sha256_hex(data) != record.sha256:
            raise CheckError(f"artifact {path} does not match the manifest's SHA-256 (damaged or "
                             "modified after the build)")
        return data

    def describe(self) -> str:
        m = self.manifest
        counts = inventory(m)
        sets = f" (the set this jax loads, of {len(self.sets)} jax releases)" if self.sets else ""
        return (f"wheel {self.distribution} {self.version} installed at {self.folder.parent.parent}"
                f": {counts.artifacts} artifact(s){counts.kinds_text()} built by {m.generator} "
                f"with jax {m.jax_version} (jaxlib {m.jaxlib_version}){sets}")


def _editable_origin(dist: Any) -> str | None:
    try:
        raw = dist.read_text("direct_url.json")
        info = json.loads(raw) if raw else {}
    except (OSError, ValueError):
        return None
    if isinstance(info, dict) and (info.get("dir_info") or {}).get("editable"):
        return str(info.get("url", "a source tree"))
    return None


def _import_location(package: str) -> str:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return f"`import {package}` finds nothing either"
    where = spec.origin if spec.origin not in (None, "namespace") else \
        ", ".join(spec.submodule_search_locations or ())
    if spec.origin and spec.submodule_search_locations:
        where = str(Path(spec.origin).parent)
    has = any((Path(p) / ARTIFACT_DIR / MANIFEST_NAME).is_file()
              for p in (spec.submodule_search_locations or ()))
    return f"`import {package}` resolves to {where}" + (
        " (a source tree holding artifacts of its own, from an editable install or a manual "
        "export; the check reads those of the installed wheel)" if has
        else " (a source tree without artifacts)")


def find_bundle(package: str) -> Bundle:
    """The artifacts of the installed distribution providing ``package``; ``CheckError`` if none.

    Read through ``importlib.metadata`` (the distribution's RECORD), never through the import
    system: run from a repository, ``import package`` finds the source checkout, but the bundled
    artifacts are those of the wheel installed in this environment.
    """
    from importlib import metadata

    names = list(dict.fromkeys(metadata.packages_distributions().get(package, [])))
    found: list[tuple[Any, Any]] = []
    without: list[str] = []
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # pragma: no cover - raced with an uninstall
            continue
        manifest = next((f for f in dist.files or ()
                         if tuple(f.parts) == (package, ARTIFACT_DIR, MANIFEST_NAME)), None)
        if manifest is None:
            editable = _editable_origin(dist)
            why = f"installed editable from {editable}" if editable else \
                "built without the hatch-jaxexport build hook, or without exportables"
            without.append(f"{dist.metadata['Name']} {dist.version} ({why})")
        else:
            found.append((dist, manifest))
    if not found:
        where = _import_location(package)
        if without:
            raise CheckError(
                f"the installed distribution providing {package!r} carries no "
                f"{package}/{ARTIFACT_DIR}/{MANIFEST_NAME}: {'; '.join(without)}; {where}. "
                f"Install the built wheel into this environment (an editable install carries "
                f"no artifacts), then rerun the check")
        raise CheckError(
            f"no installed distribution provides the import package {package!r} "
            f"(importlib.metadata knows none); {where}. The check compares the wheel installed "
            f"in this environment with the source: build the wheel and install it here "
            f"(`python -m build --wheel`, `pip install dist/*.whl`), then rerun the check")
    dist, manifest_file = found[0]
    path = Path(dist.locate_file(manifest_file))
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckError(f"cannot read {path}: {err}") from None
    try:  # a manifest the loader's own reader refuses never passes; a damaged blob is the
        # failed item of its artifact (the loader serves the others), not the whole check's
        loader_read(data, f"{package}/{ARTIFACT_DIR}/{MANIFEST_NAME}")
    except ArtifactError as err:
        raise CheckError(f"the installed {package}/{ARTIFACT_DIR}/{MANIFEST_NAME} is refused by "
                         f"the loader's reader (as `jaxexport verify` says): {err}") from None
    try:
        manifest = parse_manifest(data, where=str(path))
        sets = artifact_sets(manifest) if manifest.jax_sets else ()
        if sets:  # the set this jax loads is the one checked
            chosen = loaded_set(sets, running_jax_version())
            own = path.parent / check_file_name(chosen.manifest)
            manifest = parse_manifest(own.read_bytes(), where=str(own))
    except Exception as err:
        raise CheckError(str(err)) from None
    return Bundle(package=package, distribution=str(dist.metadata["Name"]),
                  version=str(dist.version), folder=path.parent, manifest=manifest, sets=sets,
                  jax_requirement=_jax_requirement(dist))


def _jax_requirement(dist: Any) -> str:
    """The distribution's own ``Requires-Dist`` on jax (without its markers), else ``""``."""
    for line in dist.requires or ():
        spec, _, marker = line.partition(";")
        if requirement_name(spec) == "jax" and "extra" not in marker:
            return spec.strip()
    return ""


# --------------------------------------------------------------------------------------------
# The source


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """Where the source being checked was imported from."""

    package: str
    path: Path | None  # the package's folder (or module file)
    installed_copy: bool  # the same files as the installed distribution's
    has_artifacts: bool  # a _jaxexport/manifest.json sits beside the source

    def describe(self) -> str:
        if self.path is None:
            return f"source: {self.package} (location unknown)"
        if self.installed_copy:
            return f"source: {self.path} (the installed copy)"
        note = "" if self.has_artifacts else " without artifacts"
        return f"source: {self.path} (a source tree{note}, not the installed copy)"


#: How to point the check at the source, for the messages that need it.
SOURCE_HINT = (
    "point the check at your source tree with `--jaxexport-source PATH` (or the ini option "
    "`jaxexport_source`), PATH being the folder that holds the package folder: `src` in a src "
    "layout, the project root in a flat layout; or put that folder on the import path yourself, "
    "with pytest's ini option `pythonpath = src`, with `PYTHONPATH=src`, or, in a flat layout, "
    "by running `python -m pytest` from the project root (the rootdir; plain `pytest` does not "
    "put the current folder on the import path)")


def put_source_first(paths: Sequence[str | os.PathLike[str]]) -> tuple[Path, ...]:
    """Put the source folders ``paths`` first on ``sys.path``, in order; return them resolved.

    So that ``import PACKAGE`` in this process finds the source tree to release rather than
    the installed copy, whatever folder the check runs from. Done before anything imports the
    package (the plugin calls it at configure time, before conftests are imported).
    """
    resolved = []
    for given in paths:
        path = Path(given).resolve()
        if not path.is_dir():
            what = "does not exist" if not path.exists() else "is not a folder"
            raise CheckError(f"put_source_first: the source folder {os.fspath(given)!r} ({path}) "
                             f"{what}; expected the folder that holds the package folder (`src` "
                             "in a src layout, the project root in a flat layout)")
        if path not in resolved:
            resolved.append(path)
    for path in reversed(resolved):
        while os.fspath(path) in sys.path:
            sys.path.remove(os.fspath(path))
        sys.path.insert(0, os.fspath(path))
    importlib.invalidate_caches()
    return tuple(resolved)


def _module_location(module: Any) -> Path | None:
    paths = list(getattr(module, "__path__", []) or [])
    if not paths and getattr(module, "__file__", None):
        paths = [module.__file__]
    return Path(paths[0]) if paths else None


def check_source_paths(package: str, sources: Sequence[Path]) -> None:
    """``CheckError`` unless ``package`` is (or will be) imported from one of ``sources``.

    Catches a source folder that does not hold the package (a src layout given as its project
    root), and a package some conftest or plugin imported before the folders were put first.
    """
    holders = [s for s in sources if (s / package).is_dir() or (s / f"{package}.py").is_file()]
    listed = ", ".join(map(os.fspath, sources))
    if not holders:
        raise CheckError(
            f"the source folder(s) given ({listed}) hold no package {package!r}: looked for "
            f"{package}/ and {package}.py in each. Give the folder that holds the package "
            "folder: `src` in a src layout, the project root in a flat layout")
    imported = sys.modules.get(package)
    where = _module_location(imported) if imported is not None else None
    if where is None:
        return
    real = Path(os.path.realpath(where))
    if not any(real.parent == Path(os.path.realpath(h)) for h in holders):
        raise CheckError(
            f"{package!r} was already imported from {where} before the check put the source "
            f"folder(s) ({listed}) first on the import path, so the check would export that "
            "copy. Something imported it earlier (a conftest.py, a plugin or a `-p` option): "
            "let the check import it first, or put the source on the import path before pytest "
            "starts (`PYTHONPATH`, or the ini option `pythonpath`)")


def source_info(package: str, bundle: Bundle) -> SourceInfo:
    module = sys.modules.get(package) or importlib.import_module(package)
    path = _module_location(module)
    if path is None:
        return SourceInfo(package, None, False, False)
    installed = bundle.folder.parent
    same = os.path.realpath(path) == os.path.realpath(installed)
    has = (path / ARTIFACT_DIR / MANIFEST_NAME).is_file() if path.is_dir() else False
    return SourceInfo(package, path, same, has)


def refuse_installed_copy(source: SourceInfo, bundle: Bundle) -> None:
    """``CheckError`` when the "source" is the installed distribution's own files.

    A fresh export of the installed copy reproduces the wheel's artifacts whatever the source
    to release says, so such a check would pass on a stale wheel: it compares the wheel with
    itself. That happens when the check runs from a folder where the source is not importable.
    """
    if not source.installed_copy:
        return
    raise CheckError(
        f"`import {source.package}` resolves to {source.path}, the installed distribution's "
        f"own files ({bundle.distribution} {bundle.version}), not your source tree: exporting "
        "them afresh reproduces the wheel whatever your source says, so the check would compare "
        f"the wheel with itself and pass on a stale wheel. To check the release, {SOURCE_HINT}")


def source_location(fn: ExportableFunction) -> str:
    """`` (path:line)`` of the function's definition, for messages; ``""`` if unknown."""
    try:
        path = inspect.getsourcefile(fn.__wrapped__)
        line = inspect.getsourcelines(fn.__wrapped__)[1]
    except (TypeError, OSError):
        return ""
    return f" ({path}:{line})" if path else ""


__all__ = ["SOURCE_HINT", "Bundle", "SourceInfo", "check_source_paths", "find_bundle",
           "put_source_first", "refuse_installed_copy", "source_info", "source_location"]
