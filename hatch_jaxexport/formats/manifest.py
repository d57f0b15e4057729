"""The manifest: what a package's ``_jaxexport/`` folder holds, its records, and writing it.

The format is JSON (never pickle), versioned by ``schema_version``. Artifact files are bare names
inside the artifact folder: no separators, no ``..``, nothing absolute. Reading and validating a
manifest is ``manifest_reader``'s.
"""

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.record_spans import manifest_text
from hatch_jaxexport.formats.records import Record
from hatch_jaxexport.formats.statics import static_values_text

SCHEMA_VERSION = 1

#: What a form of an artifact's module holds (an ``ArtifactRecord.sized`` entry's ``form``):
#: the artifact's ``call`` at concrete sizes, or the ``vjp`` of an artifact serialized with
#: its VJP (``vjp_order``: primal inputs, then output cotangents, to input cotangents), which
#: an eager backward pass runs; or the artifact's own symbolic module as MLIR text
#: (``TEXT_FORMS``, ``inputs`` empty: any size), printed by the build's jaxlib, which a loader
#: running that jaxlib refines at a call's sizes without jax's lowering.
SIZED_FORMS = ("call", "vjp", "text", "vjp_text")
#: The text form of each module: ``text`` the call's, ``vjp_text`` the serialized VJP's.
TEXT_FORMS = {"call": "text", "vjp": "vjp_text"}
#: The folder, inside the top-level package, that holds the manifest and the blobs.
ARTIFACT_DIR = "_jaxexport"
MANIFEST_NAME = "manifest.json"
BLOB_SUFFIX = ".jaxexport"
#: What a bare file name may hold (its first character not ``.`` or ``-``), up to 200 of them.
#: (A set, not a regular expression: compiling that cost 0.1 ms of every first call.)
#: (Spelled out: ``formats`` imports as little as it can.)
_DIGITS = "0123456789"
_FILE_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  + _DIGITS + "_.-")
_FILE_NAME_MAX = 200
_HEX_DIGITS = frozenset(_DIGITS + "abcdef")
KNOWN_KINDS = ("primal", "jvp", "vjp", "jvp_jvp", "vjp_jvp")
#: What a traced warning (``ArtifactRecord.warnings``) holds: ``category`` (``module:qualname``
#: of a ``Warning`` subclass, resolvable without pickle: ``builtins:DeprecationWarning``),
#: ``message`` (its text), ``module`` (the package's module it is attributed to) and
#: ``lineno``. No path: nothing of the build machine reaches the wheel.
TRACED_WARNING_FIELDS = ("category", "lineno", "message", "module")
#: The ``lineno`` of a traced warning that points at the caller of the baked function: the
#: package's code issued it (``module``) with a ``stacklevel`` that names a frame above the
#: body (``warnings.warn(..., stacklevel=2)`` in the decorated function itself), which on the
#: plain library is its caller's line. No line of a file is 0, and a loader from before this
#: issues it at the module's line 0: the same category and message, elsewhere.
CALLER_LINE = 0
#: The most traced warnings a record holds, and the longest message and name kept.
MAX_TRACED_WARNINGS = 64
MAX_WARNING_MESSAGE = 4096
MAX_WARNING_NAME = 300
#: A mesh variant: (axis name, size) pairs in order.
MeshShape = tuple[tuple[str, int], ...]


# The records are ``Record``s (``formats.records``), not NamedTuples or frozen dataclasses:
# creating either of those classes compiles generated methods, which a process pays on its
# first call. This module does not postpone its annotations (``from __future__ import
# annotations``): the reader checks each field's JSON type against them
# (``manifest_reader._field_types``), which would then have to evaluate the texts.


class ArtifactRecord(Record):
    """One serialized ``jax.export.Exported``: a function x structure x static values x platform."""

    __slots__ = ()

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
    #: Concrete-size forms of a primal artifact, one per size its function names
    #: (``executable_sizes=``, else ``concrete=``) or its calls recorded: each ``inputs`` (the
    #: flat ``[[dims...], dtype]`` it takes), ``file``, ``sha256``, ``size``. A first call of
    #: exactly those types that no executable serves compiles one of these instead of the
    #: symbolic module: the same computation, without shape refinement in the user's process.
    #: An entry's ``form`` (``SIZED_FORMS``; absent: ``call``) says what its module computes.
    sized: list[dict[str, Any]] = []  # noqa: RUF012 - read only, like every field
    #: The warnings the package's own code issued while this artifact was traced
    #: (``TRACED_WARNING_FIELDS`` each, in the order issued): the loader issues them again on
    #: the first call the artifact serves, as the source's trace would. Omitted from the JSON
    #: when empty; manifests written before the field existed lack it: ``[]``.
    warnings: list[dict[str, Any]] = []  # noqa: RUF012 - read only, like every field

    @property
    def id(self) -> str:
        """A readable identifier, unique in a manifest."""
        return artifact_id(self.function, self.structure_index, self.static, self.platform,
                           self.kind, self.batched, self.mesh, self.variant)


class SkippedRecord(Record):
    """An artifact that failed to export and was left out (``on-error = "skip"``)."""

    __slots__ = ()

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


class ExecutableRecord(Record):
    """One precompiled XLA executable of an artifact: a target x concrete argument types.

    Plain bytes (``PjRtClient.serialize_executable``), never a pickle: everything a loader needs
    besides them is here. Used only where the machine matches exactly
    (``runtime.executables.shipped``).
    """

    __slots__ = ()

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
    #: A device target's (``formats.device_targets``: executables a TPU or GPU compiled):
    #: the device kind it was compiled for (``TPU v5 lite``) and how many devices it runs on
    #: (``1``), which the loading process must have. ``""`` and ``0`` for a CPU target, and
    #: then omitted from the JSON: CPU manifests read and write as before, and readers from
    #: before device targets ignore the keys (such a reader never runs a device target's
    #: executable: its backend is not ``cpu``).
    device_kind: str = ""
    device_count: int = 0
    #: A device target's backend options from the environment when it was compiled
    #: (``LIBTPU_INIT_ARGS`` on a TPU; ``formats.device_targets.backend_flags``: split on
    #: whitespace, joined by one space), which the loading process must set the same. ``""``
    #: where none were set, and then omitted from the JSON (manifests read and write as
    #: before; readers from before it ignore the key).
    backend_flags: str = ""
    #: A device target's host: how many devices of its platform the host it was compiled for
    #: has (``4`` for a ``v5e:2x2`` TPU host), which the loading process must have exactly (the
    #: same one-device program compiles to other bytes within another host's topology). ``0``
    #: in records made before it was recorded (then matched as before: at least
    #: ``device_count`` devices), and then omitted from the JSON.
    host_device_count: int = 0
    #: Where a build compiled it without the device (``formats.tpu_targets``): the topology
    #: libtpu described (``v5e:1x1``); ``""`` for an executable compiled on its device, and then
    #: omitted. Not matched: a deviceless and a device compile of one target are the same
    #: target, and the loader serves either.
    topology: str = ""

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


class ConcreteRecord(Record):
    """A concrete-size artifact: a function exported for one call's exact types, with every
    dimension symbol bound, where its symbolic export failed (code that is not
    shape-polymorphic: ``len(x)``, a Python comparison of a size...) or where it has no
    structure at all (a spec-less ``@exportable``: one per recorded call).

    The loader serves a call of exactly these types from it, without tracing; others fall back.
    """

    __slots__ = ()

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
    #: The warnings the package's own code issued while it was traced (``ArtifactRecord``'s).
    warnings: list[dict[str, Any]] = []  # noqa: RUF012 - read only, like every field

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


class FailedCall(Record):
    """A recorded call of a spec-less function whose export failed at build time: the loader
    gives the build's reason when the call comes (it was recorded; recording it again would
    not help)."""

    __slots__ = ()

    function: str
    #: ``formats.signatures.call_key`` of the recorded call.
    call: str
    platform: str
    reason: str


class JaxSet(Record):
    """Another jax release's artifacts in the same wheel: a manifest of their own, beside the
    main one, whose blobs share the artifact folder (a blob equal to one already there is
    stored once). The loader serves the set the running jax reads (``formats.jax_window``)."""

    __slots__ = ()

    #: The set's manifest file, in the artifact folder (``manifest-jax-0.8.1.json``).
    manifest: str
    jax_version: str
    jaxlib_version: str
    #: The exporting jax's release date (ISO), which starts the set's window.
    jax_released: str


class CompanionRecord(Record):
    """A companion wheel of the package (``formats.companion_wheels``): the executables of one
    target, installed through an extra, which the loader uses only where the companion's
    manifest is the one this build wrote (``manifest_sha256``)."""

    __slots__ = ()

    #: The package's extra that installs it (``tpu-v5e``).
    extra: str
    #: Its distribution (``example-pkg-jaxexport-tpu-v5e``), at ``version``: the package's.
    distribution: str
    version: str
    #: The import package that holds its files (``example_pkg_jaxexport_tpu_v5e``).
    package: str
    #: The backend its executables run on (``tpu``): a process of another never looks for it.
    platform: str
    #: The SHA-256 of its manifest for this package, how many executables and bytes it holds.
    manifest_sha256: str
    executables: int
    size: int


class Manifest(Record):
    """The index of a package's baked artifacts."""

    __slots__ = ()

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
    #: The other jax releases' artifact sets (``jax-releases``; optional, omitted when none;
    #: readers from before them serve this manifest's own set, as they always did).
    jax_sets: tuple[JaxSet, ...] = ()
    #: The companion wheels that hold executables split out of this wheel (optional, omitted
    #: when none; readers from before them use the executables the wheel itself holds).
    companions: tuple[CompanionRecord, ...] = ()

    def with_files(self, names: Mapping[str, str]) -> "Manifest":
        """This manifest with each file name its records name (artifacts, their concrete-size
        forms, concrete-size artifacts, executables) replaced through ``names``; a name
        ``names`` lacks is kept."""
        def sized(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{**e, "file": names.get(e["file"], e["file"])} for e in entries]

        return self._replace(
            artifacts=tuple(r._replace(file=names.get(r.file, r.file), sized=sized(r.sized))
                            for r in self.artifacts),
            concrete=tuple(c._replace(file=names.get(c.file, c.file)) for c in self.concrete),
            executables=tuple(e._replace(file=names.get(e.file, e.file))
                              for e in self.executables))

    def to_bytes(self) -> bytes:
        """Deterministic, compact JSON: sorted keys, records sorted by id, no indentation
        or spaces (a wheel of a thousand concrete-size artifacts wrote a 691 kB manifest
        indented; people read it through ``jaxexport inspect --json | python -m json.tool``),
        then where each function's records lie (``formats.record_spans``: a first call
        decodes its own function's records, not the whole package's)."""
        data = {
            "schema_version": self.schema_version,
            "package": self.package,
            "generator": self.generator,
            "jax_version": self.jax_version,
            "jaxlib_version": self.jaxlib_version,
            "artifacts": [_json(a) for a in sorted(self.artifacts, key=_sort_key)],
            "skipped": [s._asdict() for s in sorted(self.skipped, key=_sort_key)],
        }
        if self.executables:
            data["executables"] = [_executable_json(e) for e in sorted(self.executables,
                                                                        key=lambda e: e.id)]
        if self.concrete:
            data["concrete"] = [_json(c) for c in sorted(self.concrete, key=lambda c: c.id)]
        if self.sources:
            data["sources"] = self.sources
        if self.jax_released:
            data["jax_released"] = self.jax_released
        if self.failed_calls:
            data["failed_calls"] = [f._asdict() for f in sorted(self.failed_calls)]
        if self.jax_sets:
            data["jax_sets"] = [s._asdict() for s in sorted(self.jax_sets)]
        if self.companions:
            data["companions"] = [c._asdict() for c in sorted(self.companions)]
        return manifest_text(data).encode()


def _executable_json(record: ExecutableRecord) -> dict[str, Any]:
    """An executable's record as JSON, without the fields it leaves empty (a CPU target's
    device fields; ``backend_flags`` where none were set), so that its manifest is the bytes
    it was before those fields existed."""
    data = record._asdict()
    if not record.device_kind and not record.device_count:
        del data["device_kind"], data["device_count"]
    for optional in ("backend_flags", "host_device_count", "topology"):
        if not data[optional]:
            del data[optional]
    return data


def _json(record: "ArtifactRecord | ConcreteRecord") -> dict[str, Any]:
    """A record as the manifest writes it: its fields, ``warnings`` left out when empty (the
    manifests of packages whose code warns of nothing stay as they were, byte for byte)."""
    data = record._asdict()
    if not data["warnings"]:
        del data["warnings"]
    return data


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


def _sort_key(record: ArtifactRecord | SkippedRecord) -> tuple[Any, ...]:
    return (record.function, record.structure_index, json.dumps(record.static, sort_keys=True),
            record.platform, json.dumps(record.mesh, sort_keys=True),
            json.dumps(record.variant, sort_keys=True), record.kind, record.batched)


def is_sha256_hex(value: Any) -> bool:
    """Whether ``value`` is a SHA-256 digest as the manifests write it (64 lowercase hex
    digits). (No regular expression: its compile cost a first call 0.05 ms.)"""
    return isinstance(value, str) and len(value) == 64 and _HEX_DIGITS.issuperset(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def artifact_sets(manifest: Any) -> tuple[JaxSet, ...]:
    """Every jax release's set of a main manifest (or ``ManifestIndex``): its own first (as a
    ``JaxSet`` naming ``manifest.json``), then those ``jax-releases`` added."""
    own = JaxSet(MANIFEST_NAME, manifest.jax_version, manifest.jaxlib_version,
                 manifest.jax_released)
    return (own, *manifest.jax_sets)


def loaded_set(sets: Sequence[JaxSet], running: str) -> JaxSet:
    """Of a wheel's sets (``artifact_sets``), the one the running jax ``running`` loads
    (``formats.jax_window.set_for``, by the recorded release dates)."""
    from hatch_jaxexport.formats.jax_window import set_for  # a wheel with several sets only

    return sets[set_for(running, [(s.jax_version, s.jax_released) for s in sets])]


def set_manifest_name(jax_version: str) -> str:
    """The file name of the manifest of jax ``jax_version``'s artifact set."""
    return check_file_name(f"manifest-jax-{jax_version}.json")


def check_file_name(name: Any) -> str:
    """Validate an artifact file name from a manifest: a bare, safe name, or ``ArtifactError``."""
    if not isinstance(name, str) or not 0 < len(name) <= _FILE_NAME_MAX or \
            name[0] in ".-" or not _FILE_NAME_CHARACTERS.issuperset(name) or ".." in name:
        raise ArtifactError(f"manifest names an unsafe artifact file {name!r}: expected a bare "
                            "file name inside the artifact folder (no '/', '\\', '..')")
    return name


__all__ = ["ARTIFACT_DIR", "ArtifactRecord", "BLOB_SUFFIX", "CALLER_LINE", "CompanionRecord",
           "ConcreteRecord",
           "ExecutableRecord", "FailedCall", "JaxSet", "KNOWN_KINDS", "MANIFEST_NAME",
           "MAX_TRACED_WARNINGS",
           "MAX_WARNING_MESSAGE", "MAX_WARNING_NAME", "Manifest", "MeshShape",
           "SCHEMA_VERSION", "SIZED_FORMS", "TEXT_FORMS", "TRACED_WARNING_FIELDS",
           "SkippedRecord", "artifact_id", "artifact_sets", "check_file_name", "is_sha256_hex",
           "loaded_set", "member_name", "set_manifest_name", "sha256_hex",
           "signature_text", "variant_text"]
