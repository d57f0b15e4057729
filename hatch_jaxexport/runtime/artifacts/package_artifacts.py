"""Reading and verifying a package's baked artifacts: manifest, blobs, deserialization.

The manifest is read once per package through ``importlib.resources`` (works from a zipped
package; ``package_folder``); a function's records are validated and indexed by artifact key on
that function's first call, the other functions' records never. A blob is read only when a call
needs it and checked against the manifest's size and SHA-256 before jax sees it; jax.export has
no integrity check of its own (FIELD-NOTES). Pytree node types named by the manifest are
registered before deserializing. Every refusal is an ``ArtifactError`` that says which file and
why.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.metadata
import importlib.resources
import os
import pathlib
import sys
import threading
from typing import Any

from hatch_jaxexport.errors import ArtifactError, FallbackWarning
from hatch_jaxexport.formats.manifest import (
    ARTIFACT_DIR,
    MANIFEST_NAME,
    ArtifactRecord,
    JaxSet,
    Manifest,
    artifact_sets,
    check_file_name,
    loaded_set,
    sha256_hex,
    variant_text,
)
from hatch_jaxexport.formats.manifest_reader import (
    ManifestIndex,
    mesh_from_record,
    mesh_text,
    read_manifest_index,
)
from hatch_jaxexport.formats.statics import encoded_static_key

# Imported in functions: jax and the pytree registrations, only to deserialize a blob (a
# package's manifest is read without jax); the release window, only to explain a refusal; the
# recorded sources, only for a manifest that records them (an editable install's or an
# export's, never a wheel's); the notices, only to tell of stale or damaged artifacts.

#: (function, structure key, static key, platform, mesh text, variant text, kind, batched)
ArtifactKey = tuple[str, str, str, str, str, str, str, bool]


class FunctionArtifacts:
    """One function's validated records (``manifest``: the function's records only), its
    artifacts indexed by key. A slotted class, not a NamedTuple, whose creation would cost a
    first call 0.1 ms (this module postpones its annotations: each is compiled)."""

    __slots__ = ("by_key", "manifest")

    def __init__(self, manifest: Manifest, by_key: dict[ArtifactKey, ArtifactRecord]) -> None:
        self.manifest, self.by_key = manifest, by_key


class PackageArtifacts:
    """A package's manifest and where its blobs are; each function's records are validated
    the first time that function asks for them (``records``), the whole manifest only when
    something needs all of it (``manifest``: ``inspect``)."""

    def __init__(self, package: str, index: ManifestIndex, root: Any,
                 sets: tuple[JaxSet, ...] = ()) -> None:
        self.package, self.index = package, index
        self.root = root  # importlib.resources Traversable
        #: Every jax release's set the wheel carries (``jax-releases``; ``index`` is the one
        #: the running jax reads), or ``()`` for a wheel of one jax.
        self.sets = sets
        self._functions: dict[str, FunctionArtifacts | ArtifactError] = {}
        self._lock = threading.Lock()
        #: The companion wheels (found on first need) and which holds each record read there.
        self._companions: Any = None
        self._companion_of: dict[tuple[str, str], Any] = {}

    @functools.cached_property
    def manifest(self) -> Manifest:
        """Every record of the manifest, validated."""
        return self.index.full()

    @functools.cached_property
    def stale(self) -> str | None:
        """Why these artifacts are older than their sources (an export into a source tree
        whose recorded modules changed since), else ``None``; checked once per process (the
        modules it imported do not change under it). A wheel's manifest records no sources:
        nothing is checked, no file is even looked at."""
        sources = self.index.sources
        if not sources or not isinstance(self.root, pathlib.Path):
            return None
        from hatch_jaxexport.formats.sources import changed_sources, stale_text

        changed = changed_sources(sources, self.root.parent.parent)
        if not changed:
            return None
        return stale_text(self.package, changed, sources, str(self.root))

    def records(self, function: str) -> FunctionArtifacts:
        """``function``'s records, validated once; ``ArtifactError`` (each time) if corrupt."""
        with self._lock:
            if function not in self._functions:
                try:
                    manifest = self.index.function(function)
                    self._functions[function] = FunctionArtifacts(
                        manifest, {record_key(r): r for r in manifest.artifacts})
                except ArtifactError as err:
                    self._functions[function] = err
            found = self._functions[function]
        if isinstance(found, ArtifactError):
            raise ArtifactError(str(found))
        return found

    def read_blob(self, record: ArtifactRecord) -> bytes:
        return self.read_checked(record.file, record.size, record.sha256)

    def read_checked(self, file: str, size: int, sha256: str) -> bytes:
        """A file of the artifact folder, checked against its manifest size and SHA-256."""
        return read_checked_file(self.root, file, size, sha256)

    def read_executable(self, record: Any) -> bytes:
        """An executable's bytes, from the wheel or the companion wheel that holds it
        (``companion_executables``), checked against its record."""
        companion = self._companion_of.get((record.file, record.sha256))
        if companion is not None:
            return companion.read(record, read_checked_file)
        return self.read_checked(record.file, record.size, record.sha256)

    def companion_executables(self, function: str, platform: str) -> tuple[list[Any], list[Any]]:
        """``function``'s executables of ``platform`` in the package's companion wheels, and
        those companions (``runtime.artifacts.installed_companions``: each found once, its
        ``problem`` saying why it serves none)."""
        if not any(c.platform == platform for c in self.index.companions):
            return [], []  # a CPU process imports nothing for a TPU companion
        # imported here: only a wheel split into companion wheels has any
        from hatch_jaxexport.runtime.artifacts.installed_companions import Companions

        with self._lock:
            if self._companions is None:
                self._companions = Companions(self.index.companions, self.package)
        companions = self._companions.for_platform(platform)
        records = []
        for companion in companions:
            for record in companion.executables(function):
                self._companion_of[(record.file, record.sha256)] = companion
                records.append(record)
        return records, companions


def read_checked_file(root: Any, file: str, size: int, sha256: str, where: str = "") -> bytes:
    """A file of the artifact folder ``root``, checked against its manifest size and SHA-256
    (``where`` names a companion wheel's folder in the message)."""
    path = root / check_file_name(file)
    check_inside(path, root, f"{where}artifact {file!r}")
    data = path.read_bytes()
    if len(data) != size or sha256_hex(data) != sha256:
        raise ArtifactError(f"{where}artifact {file} does not match the manifest's SHA-256 "
                            "(damaged or modified after the build)")
    return data


def check_inside(path: Any, base: Any, what: str) -> None:
    """Refuse a file-system path that resolves (through symlinks) outside ``base``. An entry
    of ``base`` itself that is no symlink is inside it: one ``lstat``, where resolving both
    paths looks at each of their folders (a first call checks four paths)."""
    if isinstance(path, pathlib.Path) and isinstance(base, pathlib.Path):
        if path.parent == base and path.name != ".." and not path.is_symlink():
            return
        real_base = pathlib.Path(os.path.realpath(base))
        if not pathlib.Path(os.path.realpath(path)).is_relative_to(real_base):
            raise ArtifactError(f"{what} resolves outside {real_base} (a symlink out of the "
                                "package); refusing to read it")


_PACKAGES: dict[str, PackageArtifacts | ArtifactError | None] = {}
#: How many times each package was forgotten (``forget_package``): ``read_generation``.
_FORGOTTEN: dict[str, int] = {}
_PACKAGES_LOCK = threading.Lock()
#: Packages whose staleness this process has warned about (once each).
_STALE_SAID: set[str] = set()


def artifact_key(function: str, structure: str, static_key: str, platform: str, mesh: str = "",
                 variant: str = "", kind: str = "primal", batched: bool = False) -> ArtifactKey:
    """The lookup key of an artifact, its fields in the order of the parameters; ``mesh`` is
    ``mesh_key`` of its mesh variant (``""`` for the single-device one), ``variant`` the
    ``variant_text`` of its config variant (``""`` unless baked per value, ``x64="both"``)."""
    return (function, structure, static_key, platform, mesh, variant, kind, batched)


def record_key(record: Any) -> ArtifactKey:
    """The key of a manifest record (an artifact, or a skipped export: the same fields)."""
    return artifact_key(record.function, record.structure, encoded_static_key(record.static),
                        record.platform, mesh_key(record.mesh), variant_text(record.variant),
                        record.kind, record.batched)


def mesh_key(mesh: Any) -> str:
    """The text of a manifest's mesh record, as in artifact keys (``""``: no mesh)."""
    if not mesh:
        return ""
    return mesh_text(mesh_from_record(mesh))


def read_package_artifacts(package: str) -> PackageArtifacts | None:
    """The package's artifacts (cached), ``None`` if it has none, stale or not (``inspect``
    says which); ``ArtifactError`` if corrupt."""
    with _PACKAGES_LOCK:
        if package not in _PACKAGES:
            try:
                _PACKAGES[package] = _read_package_artifacts(package)
            except ArtifactError as err:
                _PACKAGES[package] = err  # a corrupt manifest is read once, reported each call
        found = _PACKAGES[package]
    if isinstance(found, ArtifactError):
        raise ArtifactError(str(found))
    return found


def load_package_artifacts(package: str) -> PackageArtifacts | None:
    """The package's artifacts for calls: ``read_package_artifacts``, but ``None`` (its
    functions trace their source) where they are stale, said once per process by one
    notice (``runtime.notices``: a log record, a ``FallbackWarning`` where the maintainer asks
    for warnings) naming the changed files and the command that refreshes them."""
    found = read_package_artifacts(package)
    if found is None or found.stale is None:
        return found
    with _PACKAGES_LOCK:
        first = package not in _STALE_SAID
        _STALE_SAID.add(package)
    if first:
        from hatch_jaxexport.runtime.notices import NEEDS_FIX, notify

        notify(f"hatch-jaxexport: {found.stale}", FallbackWarning, NEEDS_FIX)
    return None


def read_generation(package: str) -> int:
    """Which read of ``package`` this process is on (a new one after ``forget_package``): a
    notice told once per read says it again when the package is read again."""
    return _FORGOTTEN.get(package, 0)


def stale_reason(package: str) -> str | None:
    """Why ``load_package_artifacts`` gave no artifacts for ``package`` although it has some
    (they are stale), else ``None``."""
    found = _PACKAGES.get(package)
    return found.stale if isinstance(found, PackageArtifacts) else None


#: The standard library's loaders of plain files (``importlib.resources`` reads their packages'
#: resources with ``importlib.readers.FileReader``, the folder of ``__init__``).
_FILE_LOADERS = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader)


def package_folder(package: str) -> Any:
    """``importlib.resources.files(package)``: a ``pathlib.Path`` for a package imported from
    files on disk, another ``Traversable`` for one in a zip file or elsewhere.

    For an imported package whose loader reads plain files, the folder of its ``__init__``
    file is taken directly: it is what ``files()`` returns there (``importlib.readers``'s
    ``FileReader``), without importing that module and its helpers, 0.5 ms of a first call."""
    spec = getattr(sys.modules.get(package), "__spec__", None)
    if spec is not None and spec.submodule_search_locations is not None and \
            isinstance(spec.loader, _FILE_LOADERS) and spec.origin:
        return pathlib.Path(spec.origin).parent
    return importlib.resources.files(package)


def _read_package_artifacts(package: str) -> PackageArtifacts | None:
    try:
        package_dir = package_folder(package)
        root = package_dir / ARTIFACT_DIR
        manifest_path = root / MANIFEST_NAME
        exists = manifest_path.is_file()
    except (ModuleNotFoundError, TypeError, ValueError, AttributeError):
        exists = False  # AttributeError: ``__main__`` of a script, which has no spec
    if not exists:
        return None
    check_inside(root, package_dir, f"{package}/{ARTIFACT_DIR}")
    index = _read_index(package, root, MANIFEST_NAME)
    if not index.jax_sets:
        return PackageArtifacts(package, index, root)
    return PackageArtifacts(package, _running_jax_set(package, index, root), root,
                            artifact_sets(index))


def _running_jax_set(package: str, index: ManifestIndex, root: Any) -> ManifestIndex:
    """Of a wheel baked with several jax releases (``jax-releases``), the set the running jax
    reads (``formats.jax_window.set_for``): the main manifest's, or another set's manifest,
    whose blobs share the folder. One set serves a process: jax does not change under it."""
    chosen = loaded_set(artifact_sets(index), running_jax_version())
    if chosen.manifest == MANIFEST_NAME:
        return index
    found = _read_index(package, root, chosen.manifest)
    if found.jax_sets or found.jax_version != chosen.jax_version:
        raise ArtifactError(f"corrupt manifest {package}/{ARTIFACT_DIR}/{chosen.manifest}: the "
                            f"main manifest lists it for jax {chosen.jax_version}, it says jax "
                            f"{found.jax_version}{' and lists sets' if found.jax_sets else ''}")
    return found


def _read_index(package: str, root: Any, name: str) -> ManifestIndex:
    """The manifest file ``name`` of ``package``'s artifact folder ``root``, its name and
    place checked (no link out of the folder), read and indexed."""
    path = root / check_file_name(name)
    check_inside(path, root, f"{package}/{ARTIFACT_DIR}/{name}")
    try:
        data = path.read_bytes()
    except OSError as err:
        what = "the manifest" if name == MANIFEST_NAME else f"the manifest {name}"
        raise ArtifactError(f"cannot read {what} of {package}: {err}") from None
    return read_manifest_index(data, where=f"{package}/{ARTIFACT_DIR}/{name}")


def running_jax_version() -> str:
    """The running jax's version, without importing jax where it is not imported yet (a
    package's manifest is read at its first call, or by ``inspect``)."""
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(getattr(jax, "__version__", None), str):
        return str(jax.__version__)
    try:
        return importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return ""


def forget_package(package: str) -> None:
    """Drop the cached manifest of a package (tests, reloads)."""
    with _PACKAGES_LOCK:
        _PACKAGES.pop(package, None)
        _STALE_SAID.discard(package)
        _FORGOTTEN[package] = _FORGOTTEN.get(package, 0) + 1


def deserialize_checked(data: bytes, refs: list[str], package: str,
                        built_with: str | None = None) -> Any:
    """Deserialize a blob after registering its pytree types; ``ArtifactError`` on refusal
    (which says so when the artifact's compatibility window has passed: ``_expired``)."""
    try:
        from jax import export
    except ImportError as err:  # jax 0.5.0's jax.export needs absl, which it does not require
        raise UnreadableArtifact(f"this jax cannot read exports: jax.export does not import "
                                 f"({type(err).__name__}: {err})") from None

    from hatch_jaxexport.runtime.artifacts import pytrees

    for ref in refs:
        pytrees.load_type(ref, package)
    try:
        exported = export.deserialize(bytearray(data))
    except Exception as err:  # jax raises struct.error, ValueError, IndexError...
        raise UnreadableArtifact(f"jax could not deserialize the artifact: "
                                 f"{type(err).__name__}: {err}{_expired(built_with)}") from None
    import jax

    try:  # a module from another jax's StableHLO fails here, not later inside a jit
        if built_with != jax.__version__:
            exported.mlir_module()
    except Exception as err:
        raise UnreadableArtifact(
            f"jax could not read the artifact's StableHLO module (exported by a newer jax?): "
            f"{type(err).__name__}: {str(err)[:300]}{_expired(built_with)}") from None
    low = export.minimum_supported_calling_convention_version
    high = export.maximum_supported_calling_convention_version
    if not low <= exported.calling_convention_version <= high:
        raise UnreadableArtifact(f"artifact uses calling convention "
                                 f"{exported.calling_convention_version}; this jax supports "
                                 f"{low}..{high}{_expired(built_with)}")
    return exported


def _expired(built_with: str | None) -> str:
    """The end of a refusal's reason when this jax was released after the window of the jax
    that exported the artifact: it expired, and only a rebuild helps."""
    if not built_with:
        return ""
    import jax

    from hatch_jaxexport.formats.jax_window import jax_release_date, loads_until, window_text

    released = jax_release_date(built_with)
    running = jax_release_date(jax.__version__)
    if loads_until(released).isoformat() >= running:
        return ""
    return (f"; the artifact expired for this jax {jax.__version__} (released {running}): it "
            f"{window_text(built_with, released)}; rebuild with a newer jax")


def _unusable(package: PackageArtifacts, record: ArtifactRecord, err: ArtifactError
              ) -> ArtifactError:
    import jax

    return type(err)(
        f"artifact {record.file} (built with jax {package.index.jax_version}, running "
        f"jax {jax.__version__}) is unusable: {err}")


class UnreadableArtifact(ArtifactError):
    """A blob that passed its hash that jax refused to read: another jax's export (older or
    newer than this one, or past its window), or a module this jax cannot parse."""


def unusable_reason(package: PackageArtifacts, err: ArtifactError) -> str:
    """The reason the source runs for an artifact that cannot serve: a drop-in's (``INFO`` on
    the logger, like every uncovered call) where jax refused another jax's export, which the
    maintainer's own jax range allows; a ``NeedsFix`` (``WARNING``) for a damaged install: a
    blob that fails its hash, or one this very jax exported and cannot read."""
    import jax

    from hatch_jaxexport.runtime.notices import NeedsFix

    if isinstance(err, UnreadableArtifact) and package.index.jax_version != jax.__version__:
        return str(err)
    return NeedsFix(err)


def read_record(package: PackageArtifacts, record: ArtifactRecord) -> bytes:
    """Read and check one artifact; ``ArtifactError`` says why it is unusable."""
    try:
        return package.read_blob(record)
    except ArtifactError as err:
        raise _unusable(package, record, err) from None
    except OSError as err:
        raise ArtifactError(f"cannot read artifact {record.file}: {err}") from None


def deserialize_record(package: PackageArtifacts, record: ArtifactRecord, data: bytes) -> Any:
    """Deserialize one checked artifact; ``ArtifactError`` says why it is unusable."""
    try:
        return deserialize_checked(data, record.pytree_types, package.package,
                                   package.index.jax_version)
    except ArtifactError as err:
        raise _unusable(package, record, err) from None


def load_concrete(package: PackageArtifacts, entry: dict[str, Any]) -> Any:
    """Read, check and deserialize one concrete-size module (``entry``: its ``file``, ``size``
    and ``sha256``; a record's concrete-size form or a concrete-size artifact);
    ``ArtifactError`` says why it is unusable."""
    try:
        data = package.read_checked(entry["file"], entry["size"], entry["sha256"])
    except OSError as err:
        raise ArtifactError(f"cannot read artifact {entry['file']}: {err}") from None
    return deserialize_checked(data, [], package.package, package.index.jax_version)


def load_record(package: PackageArtifacts, record: ArtifactRecord) -> Any:
    """Read, check and deserialize one artifact; ``ArtifactError`` says why it is unusable."""
    return deserialize_record(package, record, read_record(package, record))


__all__ = ["ArtifactKey", "FunctionArtifacts", "PackageArtifacts", "UnreadableArtifact",
           "artifact_key", "check_inside", "deserialize_checked", "deserialize_record",
           "forget_package", "load_concrete", "load_package_artifacts", "load_record", "mesh_key",
           "package_folder", "read_checked_file", "read_generation", "read_package_artifacts",
           "read_record",
           "record_key",
           "running_jax_version", "stale_reason", "unusable_reason"]
