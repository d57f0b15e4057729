"""Reading a manifest: every record parsed and validated, for the build, ``inspect`` and the loader.

``parse_manifest`` validates a whole manifest (the build, ``inspect``, ``verify``);
``read_manifest_index`` validates one function's records the first time a process calls it
(``ManifestIndex``). Every problem is an ``ArtifactError`` naming the record and the field. The
records themselves, and writing them, are ``manifest``'s.
"""

import functools
import json
import typing
from collections.abc import Mapping
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.manifest import (
    KNOWN_KINDS,
    MANIFEST_NAME,
    MAX_TRACED_WARNINGS,
    MAX_WARNING_MESSAGE,
    MAX_WARNING_NAME,
    SCHEMA_VERSION,
    SIZED_FORMS,
    TEXT_FORMS,
    TRACED_WARNING_FIELDS,
    ArtifactRecord,
    CompanionRecord,
    ConcreteRecord,
    ExecutableRecord,
    FailedCall,
    JaxSet,
    Manifest,
    MeshShape,
    SkippedRecord,
    check_file_name,
    is_sha256_hex,
)
from hatch_jaxexport.formats.record_spans import SPANNED, RecordSpans, read_spans

#: The largest artifact file a manifest may list.
_MAX_BLOB = 2**34
#: The most devices a device target's executable may be compiled for (a bound on a number the
#: loader compares, not a limit of any real machine).
_MAX_DEVICES = 1 << 16
#: The longest backend options a device target may record (``LIBTPU_INIT_ARGS``: a few flags
#: in practice; a bound on what a reader keeps, not a limit of the backend).
_MAX_BACKEND_FLAGS = 1 << 14

# Imported in functions: the recorded sources' checks, only for a manifest that records them.


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


def _is_dotted(name: Any) -> bool:
    """Whether ``name`` is a dotted Python name (``pkg.mod``, ``Outer.Inner``), bounded."""
    return isinstance(name, str) and 0 < len(name) <= MAX_WARNING_NAME and \
        all(part.isidentifier() for part in name.split("."))


def _warning_problem(entry: Any) -> str | None:
    """What is wrong with one traced warning of a record (``TRACED_WARNING_FIELDS``), or
    ``None``."""
    if not isinstance(entry, Mapping) or sorted(entry) != list(TRACED_WARNING_FIELDS):
        return f"must be an object with exactly {', '.join(TRACED_WARNING_FIELDS)}"
    category = entry["category"]
    owner, _, qualname = category.partition(":") if isinstance(category, str) else ("", "", "")
    if not (_is_dotted(owner) and _is_dotted(qualname)):
        return "'category' must be 'module:qualname'"
    if not isinstance(entry["message"], str) or len(entry["message"]) > MAX_WARNING_MESSAGE:
        return f"'message' must be a string of at most {MAX_WARNING_MESSAGE} characters"
    if not _is_dotted(entry["module"]):
        return "'module' must be a module's dotted name"
    lineno = entry["lineno"]
    if not isinstance(lineno, int) or isinstance(lineno, bool) or not 0 <= lineno < 2**31:
        return "'lineno' must be an int >= 0"
    return None


def _check_warnings(entries: list[Any], where: str) -> None:
    """Validate a record's ``warnings``: at most ``MAX_TRACED_WARNINGS``, each well formed."""
    if len(entries) > MAX_TRACED_WARNINGS:
        raise ArtifactError(f"corrupt manifest: {where}.warnings holds {len(entries)} entries, "
                            f"more than {MAX_TRACED_WARNINGS}")
    for i, entry in enumerate(entries):
        problem = _warning_problem(entry)
        if problem:
            raise ArtifactError(f"corrupt manifest: {where}.warnings[{i}] {problem}, "
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
    the records themselves are validated by ``ManifestIndex.function`` or ``full``. Where the
    manifest holds its record spans (``formats.record_spans``), only its header is decoded
    now, and each function's records when asked for."""
    spans = read_spans(data)
    raw = spans.header() if spans is not None else None
    if raw is None:
        raw, spans = _decoded(data, where), None
    _check_header(raw, where)
    _check_lists(raw, where)
    return ManifestIndex(raw, where, data, spans)


def _decoded(data: bytes, where: str) -> dict[str, Any]:
    """The manifest's JSON object, whole."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ArtifactError(f"corrupt manifest {where}: not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ArtifactError(f"corrupt manifest {where}: expected an object")
    return raw


def _check_header(raw: dict[str, Any], where: str) -> None:
    """Validate the manifest's fields that are not record lists (``sources`` and
    ``jax_sets`` are replaced by their checked forms, absent optional fields defaulted)."""
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
    raw["sources"] = _checked_sources(raw.get("sources"), where)
    released = raw.setdefault("jax_released", "")
    if not isinstance(released, str) or (released and not _is_iso_date(released)):
        raise ArtifactError(f"corrupt manifest {where}: 'jax_released' must be a date "
                            f"(YYYY-MM-DD), got {released!r:.80}")
    raw["jax_sets"] = _check_jax_sets(raw.get("jax_sets", []), where)
    raw["companions"] = _check_companions(raw.get("companions", []), where)


def _check_lists(raw: dict[str, Any], where: str) -> None:
    """Validate that each record list is a list and each of its records names its function
    (absent optional lists defaulted to empty)."""
    for key in ("artifacts", "skipped"):
        if not isinstance(raw.get(key), list):
            raise ArtifactError(f"corrupt manifest {where}: {key!r} must be a list")
    for key in ("executables", "concrete", "failed_calls"):
        if not isinstance(raw.setdefault(key, []), list):
            raise ArtifactError(f"corrupt manifest: {key!r} must be a list")
    for key, owner in SPANNED.items():
        for i, item in enumerate(raw[key]):
            _owner_of(item, owner, f"{key}[{i}]")


def _checked_sources(raw: Any, where: str) -> dict[str, Any]:
    """A manifest's validated ``sources`` (``formats.sources.check_sources``), that module
    imported only for a manifest that records sources (never a wheel's)."""
    if raw in (None, {}):
        return {}
    from hatch_jaxexport.formats.sources import check_sources

    return check_sources(raw, where)


def _is_iso_date(text: str) -> bool:
    """Whether ``text`` is a date as ``YYYY-MM-DD`` (ASCII digits; no pattern compiled)."""
    digits = text[:4] + text[5:7] + text[8:]
    return len(text) == 10 and text[4] == text[7] == "-" and digits.isascii() and \
        digits.isdigit()


def _check_jax_sets(raw: Any, where: str) -> tuple[JaxSet, ...]:
    """The manifest's other jax releases' sets, each naming a safe manifest file and a date."""
    if not isinstance(raw, list):
        raise ArtifactError(f"corrupt manifest {where}: 'jax_sets' must be a list")
    sets = tuple(_from_json(JaxSet, item, f"jax_sets[{i}]") for i, item in enumerate(raw))
    for i, jax_set in enumerate(sets):
        check_file_name(jax_set.manifest)
        if jax_set.manifest == MANIFEST_NAME or not _is_iso_date(jax_set.jax_released):
            raise ArtifactError(f"corrupt manifest {where}: jax_sets[{i}] must name another "
                                "manifest and the set's jax release date (YYYY-MM-DD)")
    return sets


def _check_companions(raw: Any, where: str) -> tuple[CompanionRecord, ...]:
    """The manifest's companion wheels, each with names that cannot leave the site folder (a
    bare import package name, an extra and a distribution of letters, digits and ``-``), a
    SHA-256, and counts in range; no extra or import package twice."""
    if not isinstance(raw, list):
        raise ArtifactError(f"corrupt manifest {where}: 'companions' must be a list")
    records = tuple(_from_json(CompanionRecord, item, f"companions[{i}]")
                    for i, item in enumerate(raw))
    for i, record in enumerate(records):
        names_ok = record.package.isidentifier() and all(
            text and text.replace("-", "").isalnum() and text.isascii()
            for text in (record.extra, record.distribution, record.platform))
        if not names_ok or not is_sha256_hex(record.manifest_sha256) or \
                not 0 <= record.executables <= 10**7 or not 0 <= record.size <= 2**50:
            raise ArtifactError(f"corrupt manifest {where}: companions[{i}] must name a "
                                "companion by a bare package name, its extra, distribution "
                                f"and platform, with its manifest's SHA-256, got {raw[i]!r:.160}")
    for field in ("extra", "package"):
        names = [getattr(r, field) for r in records]
        if len(set(names)) != len(names):
            raise ArtifactError(f"corrupt manifest {where}: two companions have one {field}")
    return records


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
    records only, the first time it calls it (``function``), and, where the manifest holds its
    record spans (``formats.record_spans``), decodes only those records: the rest of the
    manifest is never decoded, a fraction of reading it whole
    (``benchmarks/manifest_scale.py``). ``full`` decodes and validates everything, as
    ``inspect``, ``verify`` and the build need. A record is never used before it is validated:
    every path and hash is checked on the way in, whichever way it is read.
    """

    __slots__ = ("companions", "data", "generator", "jax_released", "jax_sets", "jax_version",
                 "jaxlib_version", "package", "raw", "schema_version", "sources", "spans",
                 "where")

    def __init__(self, raw: dict[str, Any], where: str, data: bytes = b"",
                 spans: RecordSpans | None = None) -> None:
        self.raw, self.where, self.data, self.spans = raw, where, data, spans
        self.package: str = raw["package"]
        self.generator: str = raw["generator"]
        self.jax_version: str = raw["jax_version"]
        self.jaxlib_version: str = raw["jaxlib_version"]
        self.schema_version: int = raw["schema_version"]
        #: What a source-tree export was made from (``{}`` for a wheel's).
        self.sources: dict[str, Any] = raw["sources"]
        self.jax_released: str = raw["jax_released"]
        #: The other jax releases' sets (a main manifest's; ``()`` in a set's own).
        self.jax_sets: tuple[JaxSet, ...] = raw["jax_sets"]
        #: The companion wheels the package's executables were split into.
        self.companions: tuple[CompanionRecord, ...] = raw["companions"]

    def function(self, name: str) -> Manifest:
        """The records of function ``name`` (artifacts, skipped exports, executables) as a
        manifest of their own, validated as ``full`` validates them; ``ArtifactError`` if one
        of them is corrupt."""
        found = self._spanned(name)
        if found is None:
            self._decode_whole()
            found = {key: [(i, item) for i, item in enumerate(self.raw[key])
                           if _owner_of(item, field, key) == name]
                     for key, field in SPANNED.items()}
        return self._validated(found["artifacts"], found["skipped"], found["executables"],
                               found["concrete"], found["failed_calls"])

    def full(self) -> Manifest:
        """Every record, validated, and no id or file listed twice across functions."""
        self._decode_whole()
        return self._validated(*(list(enumerate(self.raw[key])) for key in (
            "artifacts", "skipped", "executables", "concrete", "failed_calls")))

    def _spanned(self, name: str) -> dict[str, list[tuple[int, Any]]] | None:
        """``name``'s records of each list, decoded from their spans alone; ``None`` without
        spans, or where a span does not hold records of ``name`` only."""
        if self.spans is None:
            return None
        found = {}
        for key, field in SPANNED.items():
            pairs = self.spans.records(name, key)
            if pairs is None or any(_owner_of(item, field, f"{key}[{i}]") != name
                                    for i, item in pairs):
                return None
            found[key] = pairs
        return found

    def _decode_whole(self) -> None:
        """Decode every record list, where only the header was (the spans are then done)."""
        if self.spans is None:
            return
        whole = _decoded(self.data, self.where)
        _check_lists(whole, self.where)
        self.raw = {**self.raw, **{key: whole[key] for key in SPANNED}}
        self.spans = None

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
                        jax_released=self.jax_released, jax_sets=self.jax_sets,
                        companions=self.companions,
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
        _check_warnings(record.warnings, f"artifacts[{i}]")
        if not is_sha256_hex(record.sha256):
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
        if not isinstance(entry, Mapping) or \
                set(entry) - {"form"} != {"inputs", "file", "sha256", "size"}:
            raise ArtifactError(f"corrupt manifest: {where}[{j}] must have exactly inputs, "
                                "file, sha256 and size (and form, but for a call's)")
        if entry.get("form", SIZED_FORMS[1]) not in SIZED_FORMS[1:]:
            raise ArtifactError(f"corrupt manifest: {where}[{j}].form must be one of "
                                f"{', '.join(SIZED_FORMS[1:])}, got {entry['form']!r:.40}")
        if entry.get("form") in TEXT_FORMS.values() and entry["inputs"] != []:
            raise ArtifactError(f"corrupt manifest: {where}[{j}] is a text form, whose "
                                "inputs must be empty (it takes any size)")
        check_file_name(entry["file"])
        size = entry["size"]
        if not is_sha256_hex(entry["sha256"]) or \
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
        if not (is_sha256_hex(record.sha256) and is_sha256_hex(record.artifact_sha256)):
            raise ArtifactError(f"corrupt manifest: executables[{i}] has a malformed SHA-256")
        if not 0 <= record.size <= _MAX_BLOB:
            raise ArtifactError(f"corrupt manifest: executables[{i}].size is out of range")
        if record.native_vjp not in (0, 1):
            raise ArtifactError(f"corrupt manifest: executables[{i}].native_vjp must be 0 or 1, "
                                f"got {record.native_vjp}")
        if not (0 <= record.device_count <= _MAX_DEVICES and len(record.device_kind) <= 200
                and bool(record.device_kind) == (record.device_count > 0)):
            raise ArtifactError(f"corrupt manifest: executables[{i}] has a device_kind without a "
                                "device_count of 1 or more, or the other way round")
        if len(record.backend_flags) > _MAX_BACKEND_FLAGS or \
                (record.backend_flags and not record.device_kind):
            raise ArtifactError(f"corrupt manifest: executables[{i}].backend_flags is over "
                                f"{_MAX_BACKEND_FLAGS} characters, or set without a device_kind")
        if not (0 <= record.host_device_count <= _MAX_DEVICES and len(record.topology) <= 40
                and (record.device_kind or not (record.host_device_count or record.topology))):
            raise ArtifactError(f"corrupt manifest: executables[{i}].host_device_count or "
                                "topology is out of range, or set without a device_kind")
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
        if not is_sha256_hex(record.sha256) or not 0 <= record.size <= _MAX_BLOB or \
                not all(_is_leaf_type(leaf) for leaf in record.inputs) or \
                not all(isinstance(v, int) and not isinstance(v, bool)
                        for v in record.sizes.values()):
            raise ArtifactError(f"corrupt manifest: concrete[{i}] has a malformed sha256, size, "
                                "sizes or inputs")
        _check_warnings(record.warnings, f"concrete[{i}]")
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


__all__ = ["CONFIG_TYPES", "ManifestIndex", "VARIANT_CONFIG", "mesh_from_record", "mesh_text",
           "parse_manifest", "read_manifest_index"]
