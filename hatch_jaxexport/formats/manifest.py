"""The manifest: what a package's ``_jaxexport/`` folder holds; written, read and validated here.

The format is JSON (never pickle), versioned by ``schema_version``. Artifact files are bare names
inside the artifact folder: no separators, no ``..``, nothing absolute.
"""

import functools
import hashlib
import json
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.sources import check_sources
from hatch_jaxexport.formats.statics import static_values_text

SCHEMA_VERSION = 1
#: The folder, inside the top-level package, that holds the manifest and the blobs.
ARTIFACT_DIR = "_jaxexport"
MANIFEST_NAME = "manifest.json"
BLOB_SUFFIX = ".jaxexport"
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: A SHA-256 digest as the manifests write it (lowercase hex).
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
KNOWN_KINDS = ("primal", "jvp", "vjp", "jvp_jvp", "vjp_jvp")
_MAX_BLOB = 2**34
#: A mesh variant: (axis name, size) pairs in order.
MeshShape = tuple[tuple[str, int], ...]


# The records are NamedTuples, not frozen dataclasses: creating a dataclass compiles its
# generated methods at class creation, which a process pays on its first call. For the same
# reason this module does not postpone its annotations (``from __future__ import
# annotations``): typing.NamedTuple compiles a string annotation into a ForwardRef per field
# (``docs/performance.md`` has the import costs).


class ArtifactRecord(NamedTuple):
    """One serialized ``jax.export.Exported``: a function x structure x static values x platform."""

    function: str
    structure: str
    structure_index: int
    spec: dict[str, Any]
    constraints: list[str]
    static: dict[str, Any]
    platform: str
    file: str
    sha256: str
    size: int
    fingerprint: str
    vjp_order: int
    kwargs: bool
    calling_convention: int
    in_tree: str
    out_tree: str
    in_avals: list[str]
    out_avals: list[str]
    pytree_types: list[str]
    kind: str
    batched: bool
    custom_calls: list[str]
    #: The mesh of a sharded variant (``{"axes": [...], "sizes": [...]}``), ``{}`` for none.
    mesh: dict[str, Any] = {}  # noqa: RUF012 - read only, like every field
    #: The arrays the function closes over, frozen into the artifact at build time (the primal
    #: trace's constants; every member of a family lists its primal's): ``name`` (``module.NAME``,
    #: ``module.NAME['key']``, a closure variable, or ``None`` where none was found), ``shape``,
    #: ``dtype``, ``bytes``. Manifests written before the field existed lack it: ``[]``.
    captured_constants: list[dict[str, Any]] = []  # noqa: RUF012 - read only, like every field
    #: The jax config values it was exported under that change lowering (``jax_enable_x64``,
    #: and ``jax_default_matmul_precision`` when it multiplies matrices); ``{}`` in manifests
    #: written before they were recorded (nothing is compared then).
    jax_config: dict[str, Any] = {}  # noqa: RUF012 - read only, like every field
    #: Of a function baked once per config value (``x64="both"``): which one this is, e.g.
    #: ``{"jax_enable_x64": true}``; ``{}`` for a function with one variant.
    variant: dict[str, Any] = {}  # noqa: RUF012 - read only, like every field
    #: Static-shape forms of a primal artifact, one per size its function names
    #: (``executable_sizes=``, else ``concrete=``) or its calls recorded: each ``inputs`` (the
    #: flat ``[[dims...], dtype]`` it takes), ``file``, ``sha256``, ``size``. A first call of
    #: exactly those types that no executable serves compiles one of these instead of the
    #: symbolic module: the same computation, without shape refinement in the user's process.
    sized: list[dict[str, Any]] = []  # noqa: RUF012 - read only, like every field

    @property
    def id(self) -> str:
        """A readable identifier, unique in a manifest."""
        return artifact_id(self.function, self.structure_index, self.static, self.platform,
                           self.kind, self.batched, self.mesh, self.variant)


class SkippedRecord(NamedTuple):
    """An artifact that failed to export and was left out (``on-error = "skip"``)."""

    function: str
    structure: str
    structure_index: int
    static: dict[str, Any]
    platform: str
    reason: str
    kind: str
    batched: bool
    mesh: dict[str, Any] = {}  # noqa: RUF012 - read only, like every field
    variant: dict[str, Any] = {}  # noqa: RUF012 - read only, like every field


class ExecutableRecord(NamedTuple):
    """One precompiled XLA executable of an artifact: a target x concrete argument types.

    Plain bytes (``PjRtClient.serialize_executable``), never a pickle: everything a loader needs
    besides them is here. Used only where the machine matches exactly
    (``runtime.executables.shipped``).
    """

    #: The ``ArtifactRecord.id`` and ``sha256`` of the artifact it was compiled from.
    artifact: str
    artifact_sha256: str
    #: A name of ``formats.cpu_targets.TARGETS``.
    target: str
    #: The flat inputs, in the order of the artifact's call: ``[[dims...], dtype]`` each.
    inputs: list[Any]
    #: The flat outputs, likewise.
    outputs: list[Any]
    file: str
    sha256: str
    size: int
    #: What compiled it, all of which must match the loading process.
    jax_version: str
    jaxlib_version: str
    backend: str
    platform_version: str
    machine: str
    xla_flags: list[str]
    #: The LLVM features it was compiled for (``+`` entries of its feature string), sorted.
    cpu_features: list[str]
    #: What it computes: ``0`` the artifact's own call, ``1`` the VJP jax serialized with it
    #: (``Exported.vjp()`` of an artifact with ``vjp_order >= 1``: primal inputs and output
    #: cotangents in, input cotangents out), which an eager ``jax.grad`` runs.
    native_vjp: int = 0
    #: The OS that compiled it (``platform.system()`` spelling, read from the executable's
    #: target triple): its code is that OS's object format and calling convention. ``""`` in
    #: records made before it was recorded (the loader uses those on Linux only).
    system: str = ""

    @property
    def id(self) -> str:
        """``<artifact id>@<target>[float32[8,4],float32[4]] jaxlib 0.10.2``: unique in a
        manifest (one wheel may carry executables of several jaxlib versions)."""
        vjp = " vjp" if self.native_vjp else ""
        return f"{self.artifact}{vjp}@{self.target}[{signature_text(self.inputs)}] " \
            f"jaxlib {self.jaxlib_version}"


def signature_text(leaves: Sequence[Any]) -> str:
    """``float32[8,4],float32[4]``: flat argument types, as ``inspect`` shows them."""
    return ",".join(f"{dtype}[{','.join(str(d) for d in dims)}]" for dims, dtype in leaves)


class ConcreteRecord(NamedTuple):
    """A concrete-size artifact: a function exported for one call's exact types, with every
    dimension symbol bound, where its symbolic export failed (code that is not
    shape-polymorphic: ``len(x)``, a Python comparison of a size...) or where it has no
    structure at all (a spec-less ``@exportable``: one per recorded call).

    The loader serves a call of exactly these types from it, without tracing; others fall back.
    """

    function: str
    #: The structure it binds (``-1``: a recorded call of a spec-less function).
    structure_index: int
    static: dict[str, Any]
    platform: str
    #: The sizes its structure's symbols take (``{}`` for a recorded call).
    sizes: dict[str, int]
    #: The flat inputs of its call: ``[[dims...], dtype]`` each (a structure's lookup key).
    inputs: list[Any]
    #: ``formats.signatures.call_key`` of the recorded call (``""`` for a structure's sizes).
    call: str
    file: str
    sha256: str
    size: int
    jax_config: dict[str, Any] = {}  # noqa: RUF012 - read only, like every field
    variant: dict[str, Any] = {}  # noqa: RUF012 - read only, like every field

    @property
    def id(self) -> str:
        """``<function>/<structure>/.../cpu#float32[8]``, and for a recorded call the digest
        of its call key (``#call=1a2b...``: two calls with the same arrays may differ in their
        non-array values, ``f(x, shape=None)`` and ``f(x, shape=(5,))``): unique in a
        manifest."""
        base = artifact_id(self.function, self.structure_index, self.static, self.platform,
                           variant=self.variant)
        call = f"#call={hashlib.sha256(self.call.encode()).hexdigest()[:16]}" if self.call \
            else ""
        return f"{base}#{signature_text(self.inputs)}{call}"


class FailedCall(NamedTuple):
    """A recorded call of a spec-less function whose export failed at build time: the loader
    gives the build's reason when the call comes (it was recorded; recording it again would
    not help)."""

    function: str
    #: ``formats.signatures.call_key`` of the recorded call.
    call: str
    platform: str
    reason: str


class Manifest(NamedTuple):
    """The index of a package's baked artifacts."""

    package: str
    generator: str
    jax_version: str
    jaxlib_version: str
    artifacts: tuple[ArtifactRecord, ...]
    skipped: tuple[SkippedRecord, ...] = ()
    schema_version: int = SCHEMA_VERSION
    #: Precompiled executables (optional; manifests without them omit the key).
    executables: tuple[ExecutableRecord, ...] = ()
    #: Concrete-size artifacts (optional; manifests without them omit the key, and readers
    #: from before they existed ignore it).
    concrete: tuple[ConcreteRecord, ...] = ()
    #: The sources of an export into a source tree (``formats.sources``); ``{}`` for a wheel,
    #: and manifests without it omit the key.
    sources: dict[str, Any] = {}  # noqa: RUF012 - read only, like every field
    #: The exporting jax's release date (ISO), which starts its artifacts' compatibility
    #: window (``formats.jax_window``); ``""`` in manifests written before it was recorded.
    jax_released: str = ""
    #: Recorded calls whose export failed (optional; omitted when none).
    failed_calls: tuple[FailedCall, ...] = ()

    def to_bytes(self) -> bytes:
        """Deterministic, compact JSON: sorted keys, records sorted by id, no indentation
        or spaces (a wheel of a thousand concrete-size artifacts wrote a 691 kB manifest
        indented; people read it through ``jaxexport inspect --json | python -m json.tool``)."""
        data = {
            "schema_version": self.schema_version,
            "package": self.package,
            "generator": self.generator,
            "jax_version": self.jax_version,
            "jaxlib_version": self.jaxlib_version,
            "artifacts": [a._asdict() for a in sorted(self.artifacts, key=_sort_key)],
            "skipped": [s._asdict() for s in sorted(self.skipped, key=_sort_key)],
        }
        if self.executables:
            data["executables"] = [e._asdict() for e in sorted(self.executables,
                                                                 key=lambda e: e.id)]
        if self.concrete:
            data["concrete"] = [c._asdict() for c in sorted(self.concrete, key=lambda c: c.id)]
        if self.sources:
            data["sources"] = self.sources
        if self.jax_released:
            data["jax_released"] = self.jax_released
        if self.failed_calls:
            data["failed_calls"] = [f._asdict() for f in sorted(self.failed_calls)]
        return (json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
                + "\n").encode()


def artifact_id(function: str, structure_index: int, static: Mapping[str, Any], platform: str,
                kind: str = "primal", batched: bool = False,
                mesh: Mapping[str, Any] | None = None,
                variant: Mapping[str, Any] | None = None) -> str:
    """``function/structure/static/platform[@mesh][[variant]][/member]``, e.g.
    ``pkg.m:f/0/mode='a'/cpu/jvp``, ``pkg.m:f/0/cpu@data=2,model=2/vjp`` or
    ``pkg.m:f/0/cpu[jax_enable_x64=True]``."""
    text = static_values_text(static)  # tagged JSON (_statics), as Python writes it
    member = "" if (kind, batched) == ("primal", False) else f"/{member_name(kind, batched)}"
    sharded = ""
    if mesh:
        sharded = "@" + ",".join(f"{a}={s}" for a, s in zip(mesh.get("axes", ()),
                                                                mesh.get("sizes", ()),
                                                                strict=False))
    return f"{function}/{structure_index}" + (f"/{text}" if text else "") + f"/{platform}" + \
        sharded + variant_text(variant) + member


def variant_text(variant: Mapping[str, Any] | None) -> str:
    """``[jax_enable_x64=True]`` for a config variant (``x64="both"``), ``""`` for none."""
    if not variant:
        return ""
    return "[" + ",".join(f"{k}={v!r}" for k, v in sorted(variant.items())) + "]"


def member_name(kind: str, batched: bool) -> str:
    """``primal``, ``jvp``, ``vjp_jvp+batched``...: which member of its family an artifact is."""
    return kind + ("+batched" if batched else "")


def summarize(artifacts: Sequence[ArtifactRecord]) -> str:
    """One line: how many artifacts and bytes, and how many of them transformations added."""
    extra = [a for a in artifacts if (a.kind, a.batched) != ("primal", False)]
    total = sum(a.size for a in artifacts)
    text = f"{len(artifacts)} artifact(s), {total:,} bytes"
    if extra:
        text += (f"; of these, {len(extra)} for transformations (ad_order/vmap), "
                 f"{sum(a.size for a in extra):,} bytes")
    return text


class Inventory(NamedTuple):
    """What a manifest serves, counted one way for the build summary, ``inspect`` and
    ``verify``, so that the three agree entry for entry: every artifact kind (symbolic,
    concrete-size, recorded call of a function) counts, and a function counts once whichever
    kinds serve it."""

    functions: int
    symbolic: int
    #: Concrete-size artifacts of a structure (``ConcreteRecord.structure_index >= 0``).
    concrete: int
    #: Artifacts of recorded calls (``structure_index`` -1: a spec-less function's, or calls
    #: no structure accepted).
    recorded: int
    #: The artifacts' bytes, each record counted (two records may share one file).
    bytes: int
    #: Distinct files the manifest lists (artifacts, static-shape forms, concrete-size
    #: artifacts, executables) and their bytes: what the artifacts add to the wheel, besides
    #: the manifest itself.
    files: int
    stored: int
    #: Distinct files among the artifacts (fewer than ``artifacts`` where identical modules
    #: are stored once, ``bake.workers._dedupe``).
    distinct_artifacts: int = 0

    @property
    def artifacts(self) -> int:
        return self.symbolic + self.concrete + self.recorded

    def text(self) -> str:
        """``3 function(s), 7 artifact(s) (2 symbolic, 2 concrete-size, 3 recorded calls),
        12.0 kB``; without concrete-size or recorded ones, ``2 function(s), 6 artifact(s),
        5.1 kB`` as before they existed."""
        return (f"{self.functions} function(s), {self.artifacts} artifact(s)"
                f"{self.kinds_text()}, {byte_text(self.bytes)}")

    def kinds_text(self) -> str:
        """`` (2 symbolic, 2 concrete-size, 3 recorded call(s))``, or ``""`` where every
        artifact is symbolic."""
        if not (self.concrete or self.recorded):
            return ""
        return (f" ({self.symbolic} symbolic, {self.concrete} concrete-size, "
                f"{self.recorded} recorded call(s))")


def inventory(manifest: "Manifest") -> Inventory:
    """The manifest's ``Inventory``."""
    recorded = [c for c in manifest.concrete if c.structure_index < 0]
    files: dict[str, int] = {}
    for record in manifest.artifacts:
        files[record.file] = record.size
        files.update((entry["file"], entry["size"]) for entry in record.sized)
    files.update((r.file, r.size) for r in (*manifest.concrete, *manifest.executables))
    return Inventory(
        functions=len({r.function for r in (*manifest.artifacts, *manifest.concrete)}),
        symbolic=len(manifest.artifacts), concrete=len(manifest.concrete) - len(recorded),
        recorded=len(recorded),
        bytes=sum(r.size for r in (*manifest.artifacts, *manifest.concrete)),
        files=len(files), stored=sum(files.values()),
        distinct_artifacts=len({r.file for r in (*manifest.artifacts, *manifest.concrete)}))


def byte_text(n: int) -> str:
    """A size for people: ``340.2 kB``, ``16.8 MB``, ``48 B`` (decimal units)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def constant_text(entry: Mapping[str, Any]) -> str:
    """One captured constant: ``pkg.m.TABLE float32[8,4] 128 B`` (``(unnamed)`` if no name)."""
    shape = ",".join(str(d) for d in entry["shape"])
    return f"{entry['name'] or '(unnamed)'} {entry['dtype']}[{shape}] {byte_text(entry['bytes'])}"


def captured_by_function(artifacts: Sequence[ArtifactRecord]) -> dict[str, list[dict[str, Any]]]:
    """Each function's captured constants over all its artifacts, without repeats, largest first;
    functions that capture nothing are left out."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for record in artifacts:
        for entry in record.captured_constants:
            key = json.dumps(entry, sort_keys=True)
            found.setdefault(record.function, {}).setdefault(key, entry)
    return {name: sorted(entries.values(), key=lambda e: (-e["bytes"], e["name"] or "",
                                                          e["dtype"], e["shape"]))
            for name, entries in sorted(found.items())}


def _sort_key(record: ArtifactRecord | SkippedRecord) -> tuple[Any, ...]:
    return (record.function, record.structure_index, json.dumps(record.static, sort_keys=True),
            record.platform, json.dumps(record.mesh, sort_keys=True),
            json.dumps(record.variant, sort_keys=True), record.kind, record.batched)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_file_name(name: Any) -> str:
    """Validate an artifact file name from a manifest: a bare, safe name, or ``ArtifactError``."""
    if not isinstance(name, str) or not _FILE_NAME.match(name) or ".." in name:
        raise ArtifactError(f"manifest names an unsafe artifact file {name!r}: expected a bare "
                            "file name inside the artifact folder (no '/', '\\', '..')")
    return name


def _check_captured(entries: list[Any], where: str) -> None:
    """Validate a record's ``captured_constants``: each entry exactly name, shape, dtype, bytes."""
    for i, entry in enumerate(entries):
        problem = None
        if not isinstance(entry, Mapping) or set(entry) != {"name", "shape", "dtype", "bytes"}:
            problem = "must be an object with exactly 'name', 'shape', 'dtype' and 'bytes'"
        elif not (entry["name"] is None or isinstance(entry["name"], str)):
            problem = "'name' must be a string or null"
        elif not isinstance(entry["shape"], list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0
                for d in entry["shape"]):
            problem = "'shape' must be a list of ints >= 0"
        elif not isinstance(entry["dtype"], str):
            problem = "'dtype' must be a string"
        elif not isinstance(entry["bytes"], int) or isinstance(entry["bytes"], bool) \
                or entry["bytes"] < 0:
            problem = "'bytes' must be an int >= 0"
        if problem:
            raise ArtifactError(f"corrupt manifest: {where}.captured_constants[{i}] {problem}, "
                                f"got {entry!r:.80}")



def _from_json(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ArtifactError(f"corrupt manifest: {where} must be an object, got "
                            f"{type(raw).__name__}")
    values = {}
    for name, (expected, text, items) in _field_types(cls).items():
        if name not in raw and name in cls._field_defaults:
            continue  # a field added later: older manifests lack it
        if name not in raw:
            raise ArtifactError(f"corrupt manifest: {where} lacks {name!r}")
        value = raw[name]
        ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
        if ok and items is str:
            ok = all(isinstance(item, str) for item in value)
        if not ok:
            raise ArtifactError(f"corrupt manifest: {where}.{name} must be "
                                f"{text}, got {value!r:.80}")
        values[name] = value
    return cls(**values)


@functools.cache
def _field_types(cls: type) -> dict[str, tuple[type, str, Any]]:
    """Per field of a record type: the JSON type its value must have, the annotation as text
    (for errors), and the type of its items (``list[str]``: each must be a ``str``)."""
    found = {}
    for name in cls._fields:
        annotation = cls.__annotations__[name]
        origin = typing.get_origin(annotation) or annotation
        items = typing.get_args(annotation)[0] if origin is list else None
        text = annotation.__name__ if isinstance(annotation, type) else \
            repr(annotation).replace("typing.", "")
        found[name] = (origin, text, items)
    return found


def mesh_text(shape: MeshShape | None) -> str:
    """``data=2,model=2`` (the lookup key of a variant); ``""`` for a single device."""
    return ",".join(f"{name}={size}" for name, size in shape or ())


def mesh_from_record(record: Mapping[str, Any] | None) -> MeshShape | None:
    """The variant a manifest ``mesh`` field names; ``ValueError`` if malformed."""
    if not record:
        return None
    if set(record) != {"axes", "sizes"}:
        raise ValueError(f"a mesh must have exactly 'axes' and 'sizes', got {sorted(record)}")
    axes, sizes = record["axes"], record["sizes"]
    if not isinstance(axes, list) or not isinstance(sizes, list) or len(axes) != len(sizes) \
            or not axes:
        raise ValueError("a mesh's 'axes' and 'sizes' must be lists of the same, non-zero length")
    for name, size in zip(axes, sizes, strict=True):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"mesh axis name {name!r:.40} is not an identifier")
        if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 2**20:
            raise ValueError(f"mesh axis {name!r} has size {size!r:.40}; expected an int >= 1")
    if len(set(axes)) != len(axes):
        raise ValueError(f"mesh axis names repeat: {axes}")
    return tuple(zip(axes, sizes, strict=True))


#: Config values a manifest may record, and the JSON types of their values.
CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "jax_enable_x64": (bool,), "jax_default_matmul_precision": (str, type(None))}
#: Config values a function may be baked once per value of (``x64="both"``).
VARIANT_CONFIG = ("jax_enable_x64",)


def _check_config(values: Mapping[str, Any], where: str, variant: bool = False) -> None:
    """A record's ``jax_config`` (or ``variant``): known names, values of the right type.

    A name this version does not know is refused: comparing only some of what an artifact
    was exported under could run it where it does not fit."""
    for name, value in values.items():
        known = VARIANT_CONFIG if variant else CONFIG_TYPES
        if name not in known:
            raise ArtifactError(f"corrupt manifest: {where} names {name!r:.60}, not one of "
                                f"{', '.join(known)} (a newer hatch-jaxexport wrote it?)")
        if not isinstance(value, CONFIG_TYPES[name]):
            raise ArtifactError(f"corrupt manifest: {where}: {name} = {value!r:.60} has the "
                                "wrong type")


def parse_manifest(data: bytes, *, where: str = MANIFEST_NAME) -> Manifest:
    """Parse and validate manifest bytes, every record of it; every problem is an
    ``ArtifactError``."""
    return read_manifest_index(data, where=where).full()


def read_manifest_index(data: bytes, *, where: str = MANIFEST_NAME) -> "ManifestIndex":
    """Parse manifest bytes and validate the header and what ties each record to its function;
    the records themselves are validated by ``ManifestIndex.function`` or ``full``."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ArtifactError(f"corrupt manifest {where}: not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ArtifactError(f"corrupt manifest {where}: expected an object")
    version = raw.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ArtifactError(f"corrupt manifest {where}: schema_version must be an int >= 1, "
                            f"got {version!r:.80}")
    if version > SCHEMA_VERSION:
        raise ArtifactError(f"manifest {where} has schema version {version}, newer than this "
                            f"hatch-jaxexport reads ({SCHEMA_VERSION}); upgrade hatch-jaxexport")
    for key in ("package", "generator", "jax_version", "jaxlib_version"):
        if not isinstance(raw.get(key), str):
            raise ArtifactError(f"corrupt manifest {where}: {key!r} must be a string")
    for key in ("artifacts", "skipped"):
        if not isinstance(raw.get(key), list):
            raise ArtifactError(f"corrupt manifest {where}: {key!r} must be a list")
    for key in ("executables", "concrete", "failed_calls"):
        if not isinstance(raw.setdefault(key, []), list):
            raise ArtifactError(f"corrupt manifest: {key!r} must be a list")
    raw["sources"] = check_sources(raw.get("sources"), where)
    released = raw.setdefault("jax_released", "")
    if not isinstance(released, str) or (released and not _ISO_DATE.match(released)):
        raise ArtifactError(f"corrupt manifest {where}: 'jax_released' must be a date "
                            f"(YYYY-MM-DD), got {released!r:.80}")
    for key, owner in (("artifacts", "function"), ("skipped", "function"),
                       ("executables", "artifact"), ("concrete", "function"),
                       ("failed_calls", "function")):
        for i, item in enumerate(raw[key]):
            _owner_of(item, owner, f"{key}[{i}]")
    return ManifestIndex(raw, where)


def _owner_of(item: Any, field: str, where: str) -> str:
    """The function a raw record belongs to (``field``: its ``function``, or the ``artifact``
    id of an executable, which starts with ``<function>/``), checked as ``_from_json`` would."""
    if not isinstance(item, Mapping):
        raise ArtifactError(f"corrupt manifest: {where} must be an object, got "
                            f"{type(item).__name__}")
    if field not in item:
        raise ArtifactError(f"corrupt manifest: {where} lacks {field!r}")
    if not isinstance(item[field], str):
        raise ArtifactError(f"corrupt manifest: {where}.{field} must be str, got "
                            f"{item[field]!r:.80}")
    return item[field].split("/", 1)[0]


class ManifestIndex:
    """A parsed manifest whose records are validated one function at a time.

    A process that calls one function of a package with hundreds validates that function's
    records only, the first time it calls it (``function``): the other records are parsed as
    JSON but never validated, a fraction of validating it whole
    (``benchmarks/manifest_scale.py``). ``full`` validates
    everything, as ``inspect``, ``verify`` and the build need. A record is never used before it
    is validated: every path and hash is checked on the way in, whichever way it is read.
    """

    __slots__ = ("generator", "jax_released", "jax_version", "jaxlib_version", "package", "raw",
                 "schema_version", "sources", "where")

    def __init__(self, raw: dict[str, Any], where: str) -> None:
        self.raw, self.where = raw, where
        self.package: str = raw["package"]
        self.generator: str = raw["generator"]
        self.jax_version: str = raw["jax_version"]
        self.jaxlib_version: str = raw["jaxlib_version"]
        self.schema_version: int = raw["schema_version"]
        #: What a source-tree export was made from (``{}`` for a wheel's).
        self.sources: dict[str, Any] = raw["sources"]
        self.jax_released: str = raw["jax_released"]

    def function(self, name: str) -> Manifest:
        """The records of function ``name`` (artifacts, skipped exports, executables) as a
        manifest of their own, validated as ``full`` validates them; ``ArtifactError`` if one
        of them is corrupt."""
        def mine(key: str, field: str) -> list[tuple[int, Any]]:
            return [(i, item) for i, item in enumerate(self.raw[key])
                    if _owner_of(item, field, key) == name]

        return self._validated(mine("artifacts", "function"), mine("skipped", "function"),
                               mine("executables", "artifact"), mine("concrete", "function"),
                               mine("failed_calls", "function"))

    def full(self) -> Manifest:
        """Every record, validated, and no id or file listed twice across functions."""
        return self._validated(*(list(enumerate(self.raw[key])) for key in (
            "artifacts", "skipped", "executables", "concrete", "failed_calls")))

    def _validated(self, artifacts: list[tuple[int, Any]], skipped: list[tuple[int, Any]],
                   executables: list[tuple[int, Any]], concrete: list[tuple[int, Any]],
                   failed_calls: list[tuple[int, Any]]) -> Manifest:
        seen = _Claims()
        records = _checked_artifacts(artifacts, skipped, seen)
        return Manifest(package=self.package, generator=self.generator,
                        jax_version=self.jax_version, jaxlib_version=self.jaxlib_version,
                        artifacts=records[0], skipped=records[1],
                        schema_version=self.schema_version,
                        executables=_parse_executables(executables, seen),
                        concrete=_parse_concrete(concrete, seen), sources=self.sources,
                        jax_released=self.jax_released,
                        failed_calls=tuple(_from_json(FailedCall, item, f"failed_calls[{i}]")
                                           for i, item in failed_calls))


def _checked_artifacts(raw_artifacts: list[tuple[int, Any]], raw_skipped: list[tuple[int, Any]],
                       seen: "_Claims"
                       ) -> tuple[tuple[ArtifactRecord, ...], tuple[SkippedRecord, ...]]:
    """Artifact and skipped records from their ``(index, JSON)`` pairs, validated; ``seen``
    collects the ids, files and calls taken (a second record for one is corrupt)."""
    artifacts = tuple(_from_json(ArtifactRecord, item, f"artifacts[{i}]")
                      for i, item in raw_artifacts)
    skipped = tuple(_from_json(SkippedRecord, item, f"skipped[{i}]") for i, item in raw_skipped)
    for record in (*artifacts, *skipped):
        if record.kind not in KNOWN_KINDS:
            raise ArtifactError(f"corrupt manifest: unknown artifact kind {record.kind!r:.40}")
        if record.mesh:
            try:
                mesh_from_record(record.mesh)
            except ValueError as err:
                raise ArtifactError(f"corrupt manifest: bad mesh of {record.function:.80}: "
                                    f"{err}") from None
        _check_config(record.variant, f"variant of {record.function:.80}", variant=True)
    for (i, _), record in zip(raw_artifacts, artifacts, strict=True):
        _check_config(record.jax_config, f"jax_config of {record.function:.80}")
        check_file_name(record.file)
        _check_captured(record.captured_constants, f"artifacts[{i}]")
        if not SHA256_HEX.match(record.sha256):
            raise ArtifactError(f"corrupt manifest: artifacts[{i}].sha256 is not a SHA-256 hex")
        if not 0 <= record.size <= _MAX_BLOB:
            raise ArtifactError(f"corrupt manifest: artifacts[{i}].size {record.size} is out "
                                "of range")
        call_key = json.dumps([record.function, record.structure, record.static,
                               record.platform, record.kind, record.batched, record.mesh,
                               record.variant],
                              sort_keys=True)
        _claim(seen, "artifact", record.id, (record.file, record.sha256, record.size), call_key)
        _checked_sized(record.sized, f"artifacts[{i}].sized", seen)
    return artifacts, skipped


def _checked_sized(entries: list[Any], where: str, seen: "_Claims") -> None:
    """Validate a record's ``sized`` entries, and claim the files they name."""
    for j, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or set(entry) != {"inputs", "file", "sha256", "size"}:
            raise ArtifactError(f"corrupt manifest: {where}[{j}] must have exactly inputs, "
                                "file, sha256 and size")
        check_file_name(entry["file"])
        size = entry["size"]
        if not (isinstance(entry["sha256"], str) and SHA256_HEX.match(entry["sha256"])) or \
                not (isinstance(size, int) and not isinstance(size, bool)
                     and 0 <= size <= _MAX_BLOB) or \
                not (isinstance(entry["inputs"], list)
                     and all(_is_leaf_type(leaf) for leaf in entry["inputs"])):
            raise ArtifactError(f"corrupt manifest: {where}[{j}] has a malformed sha256, size "
                                "or inputs")
        seen.claim_file(f"{where}[{j}]", entry["file"], entry["sha256"], size)


def _parse_executables(raw: list[tuple[int, Any]], seen: "_Claims"
                       ) -> tuple[ExecutableRecord, ...]:
    """Executable records from their ``(index, JSON)`` pairs, validated like the artifacts
    (``seen``: the file names and ids taken so far)."""
    records = []
    for i, item in raw:
        record = _from_json(ExecutableRecord, item, f"executables[{i}]")
        check_file_name(record.file)
        if not (SHA256_HEX.match(record.sha256) and SHA256_HEX.match(record.artifact_sha256)):
            raise ArtifactError(f"corrupt manifest: executables[{i}] has a malformed SHA-256")
        if not 0 <= record.size <= _MAX_BLOB:
            raise ArtifactError(f"corrupt manifest: executables[{i}].size is out of range")
        if record.native_vjp not in (0, 1):
            raise ArtifactError(f"corrupt manifest: executables[{i}].native_vjp must be 0 or 1, "
                                f"got {record.native_vjp}")
        for name in ("inputs", "outputs"):
            if not all(_is_leaf_type(leaf) for leaf in getattr(record, name)):
                raise ArtifactError(f"corrupt manifest: executables[{i}].{name} must be "
                                    "[[dims...], dtype] pairs")
        _claim(seen, "executable", record.id, (record.file, record.sha256, record.size))
        records.append(record)
    return tuple(records)


def _parse_concrete(raw: list[tuple[int, Any]], seen: "_Claims"
                    ) -> tuple[ConcreteRecord, ...]:
    """Concrete-size artifact records from their ``(index, JSON)`` pairs, validated like the
    artifacts (``seen``: the file names and ids taken so far)."""
    records = []
    for i, item in raw:
        record = _from_json(ConcreteRecord, item, f"concrete[{i}]")
        check_file_name(record.file)
        _check_config(record.jax_config, f"jax_config of {record.function:.80}")
        _check_config(record.variant, f"variant of {record.function:.80}", variant=True)
        if not SHA256_HEX.match(record.sha256) or not 0 <= record.size <= _MAX_BLOB or \
                not all(_is_leaf_type(leaf) for leaf in record.inputs) or \
                not all(isinstance(v, int) and not isinstance(v, bool)
                        for v in record.sizes.values()):
            raise ArtifactError(f"corrupt manifest: concrete[{i}] has a malformed sha256, size, "
                                "sizes or inputs")
        _claim(seen, "concrete artifact", record.id, (record.file, record.sha256, record.size))
        records.append(record)
    return tuple(records)


class _Claims:
    """The ids, lookup keys and files a manifest's records took so far, while validating it.

    An id or key listed twice would let one record shadow another: refused. A file may be
    named by several records where they give it the same SHA-256 and size: the build stores
    identical modules once (``bake.workers._dedupe``), and the loader reads each record's bytes by
    its ``file`` and checks them against that record's hash. A file named with two different
    hashes is a true conflict (one of them must fail to load): refused."""

    __slots__ = ("files", "keys")

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.files: dict[str, tuple[str, int]] = {}

    def claim_file(self, what: str, name: str, sha256: str, size: int) -> None:
        """Take file ``name``, holding ``sha256`` and ``size``; ``ArtifactError`` if another
        record took it with other contents."""
        known = self.files.setdefault(name, (sha256, size))
        if known != (sha256, size):
            raise ArtifactError(
                f"corrupt manifest: {what} names file {name}, which another record lists with "
                f"other contents: expected SHA-256 {known[0][:16]}... and {known[1]:,} bytes, "
                f"given {sha256[:16]}... and {size:,} bytes")


def _claim(seen: _Claims, what: str, record_id: str, file: tuple[str, str, int],
           *keys: str) -> None:
    """Take a record's id, lookup ``keys`` and ``file`` (name, SHA-256, size) into ``seen``;
    ``ArtifactError`` if the id or a key was taken already, or the file with other contents."""
    if record_id in seen.keys or any(key in seen.keys for key in keys):
        raise ArtifactError(f"corrupt manifest: {what} {record_id} listed twice")
    seen.claim_file(f"{what} {record_id}", *file)
    seen.keys |= {record_id, *keys}


def _is_leaf_type(leaf: Any) -> bool:
    """``[[8, 4], "float32"]``: non-negative int dims and a dtype name."""
    return (isinstance(leaf, list) and len(leaf) == 2 and isinstance(leaf[1], str)
            and isinstance(leaf[0], list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                    for d in leaf[0]))


__all__ = ["ARTIFACT_DIR", "ArtifactRecord", "BLOB_SUFFIX", "CONFIG_TYPES", "ConcreteRecord",
           "ExecutableRecord", "FailedCall", "Inventory", "KNOWN_KINDS", "ManifestIndex",
           "MANIFEST_NAME", "Manifest", "MeshShape", "SCHEMA_VERSION", "SHA256_HEX",
           "SkippedRecord", "VARIANT_CONFIG", "artifact_id", "byte_text", "captured_by_function",
           "check_file_name", "constant_text", "inventory", "member_name", "mesh_from_record",
           "mesh_text", "parse_manifest", "read_manifest_index", "sha256_hex", "signature_text",
           "summarize", "variant_text"]
