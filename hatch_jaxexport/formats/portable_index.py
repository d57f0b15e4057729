"""The portable index format: ``portable.json``, its variants' files, and reading it back.

Layer 1 (pure: no jax, no I/O beyond parsing the bytes it is handed). A package whose
``@exportable`` functions ask for ``concrete=`` sizes carries, next to ``manifest.json`` in its
``_jaxexport/`` folder, three files per concrete-size variant:

- ``<variant>-<digest>.mlir``: StableHLO text, debug info stripped;
- ``<variant>-<digest>.mlirbc``: the StableHLO *portable artifact* (VHLO bytecode with a
  compatibility window; ``Exported.mlir_module_serialized``);
- ``<variant>-<digest>.interface.json``: argument and result names, shapes, dtypes, the pytree
  flattening order, the entry point and the IREE compile flags.

``portable.json`` (its own schema, see :data:`PORTABLE_SCHEMA_VERSION`) indexes the variants with
their sizes and SHA-256, and records what could not be made portable and why. This module holds the
names, suffixes, versions and flags that the writer (``bake/concrete/portable_export.py``) and the
readers (``bake/concrete/portable_bundle.py``, ``jaxexport verify``) share, and :func:`parse_index`,
which validates a document before anything trusts it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.manifest import check_file_name, is_sha256_hex

#: The index of a package's portable variants, next to ``manifest.json``.
PORTABLE_INDEX = "portable.json"
#: Version of ``portable.json``'s schema; readers refuse newer ones.
PORTABLE_SCHEMA_VERSION = 1
#: Version of the interface files' schema.
INTERFACE_VERSION = 1
TEXT_SUFFIX = ".mlir"
BYTECODE_SUFFIX = ".mlirbc"
INTERFACE_SUFFIX = ".interface.json"
#: The platform portable variants are lowered for (plain StableHLO: IREE compiles it anywhere).
LOWERING_PLATFORM = "cpu"
#: Custom calls that are JAX's own shape checks (absent from concrete-size exports).
SHAPE_CHECKS = frozenset({"shape_assertion"})
#: Custom calls jax emits only for symbolic shapes (``stablehlo.dynamic_reduce_window``...):
#: concrete-size exports lower the same operations to plain StableHLO.
SYMBOLIC_ONLY_PREFIX = "stablehlo.dynamic_"
#: IREE flags for every variant (``iree-compile`` and ``iree.compiler.compile_str``).
IREE_BASE_FLAGS = ("--iree-input-type=stablehlo",)
#: IREE demotes float64 to float32 unless told not to.
IREE_F64_FLAG = "--iree-input-demote-f64-to-f32=false"
#: The three files of a variant, by kind, and the suffix each kind's file name ends with.
FILE_KINDS = ("text", "bytecode", "interface")
SUFFIXES = {"text": TEXT_SUFFIX, "bytecode": BYTECODE_SUFFIX, "interface": INTERFACE_SUFFIX}
_MAX_FILE = 2**34


def short_name(function: str) -> str:
    """``pkg.mod:Class.method`` -> ``method``; ``pkg.solve`` -> ``solve``."""
    return function.split(":")[-1].split(".")[-1] or function


def json_bytes(data: Any) -> bytes:
    """How portable.json and the interface files are written: sorted keys, ASCII, one indent."""
    return (json.dumps(data, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode()


def variant_label(entry: Mapping[str, Any]) -> str:
    """A variant as messages name it: function, variant and concrete sizes."""
    return f"{entry['function']} (variant {entry['variant']}, sizes {entry['concrete']})"


def _check_type(where: str, value: Any, expected: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ArtifactError(f"corrupt {PORTABLE_INDEX}: {where} must be {what}, "
                            f"got {value!r:.80}")


def parse_index(data: bytes, *, where: str = PORTABLE_INDEX) -> dict[str, Any]:
    """Parse and validate ``portable.json``; every problem is an ``ArtifactError``."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ArtifactError(f"corrupt {where}: not valid JSON ({err})") from None
    _check_type("the document", raw, dict, "an object")
    version = raw.get("schema_version")
    _check_type("schema_version", version, int, "an int >= 1")
    if version < 1:
        raise ArtifactError(f"corrupt {where}: schema_version must be >= 1")
    if version > PORTABLE_SCHEMA_VERSION:
        raise ArtifactError(f"{where} has schema version {version}, newer than this "
                            f"hatch-jaxexport reads ({PORTABLE_SCHEMA_VERSION}); upgrade it")
    for key in ("package", "generator", "jax_version", "platform"):
        _check_type(key, raw.get(key), str, "a string")
    for key in ("variants", "unsupported", "not_requested"):
        _check_type(key, raw.get(key), list, "a list")
    seen: set[str] = set()
    for i, variant in enumerate(raw["variants"]):
        at = f"variants[{i}]"
        _check_type(at, variant, dict, "an object")
        for key in ("function", "variant"):
            _check_type(f"{at}.{key}", variant.get(key), str, "a string")
        _check_type(f"{at}.files", variant.get("files"), dict, "an object")
        if sorted(variant["files"]) != sorted(FILE_KINDS):
            raise ArtifactError(f"corrupt {where}: {at}.files must name "
                                f"{', '.join(FILE_KINDS)}")
        for kind, entry in variant["files"].items():
            _check_type(f"{at}.files.{kind}", entry, dict, "an object")
            check_file_name(entry.get("file"))
            if not entry["file"].endswith(SUFFIXES[kind]):
                raise ArtifactError(f"corrupt {where}: {at}.files.{kind} must end with "
                                    f"{SUFFIXES[kind]}")
            _check_type(f"{at}.files.{kind}.size", entry.get("size"), int, "an int")
            if not 0 <= entry["size"] <= _MAX_FILE:
                raise ArtifactError(f"corrupt {where}: {at}.files.{kind}.size out of range")
            if not is_sha256_hex(entry.get("sha256")):
                raise ArtifactError(f"corrupt {where}: {at}.files.{kind}.sha256 is not a "
                                    "SHA-256 hex")
            if entry["file"] in seen:
                raise ArtifactError(f"corrupt {where}: {entry['file']} is listed twice")
            seen.add(entry["file"])
    return raw


__all__ = [
    "BYTECODE_SUFFIX",
    "FILE_KINDS",
    "INTERFACE_SUFFIX",
    "INTERFACE_VERSION",
    "IREE_BASE_FLAGS",
    "IREE_F64_FLAG",
    "LOWERING_PLATFORM",
    "PORTABLE_INDEX",
    "PORTABLE_SCHEMA_VERSION",
    "SHAPE_CHECKS",
    "SUFFIXES",
    "SYMBOLIC_ONLY_PREFIX",
    "TEXT_SUFFIX",
    "json_bytes",
    "parse_index",
    "short_name",
    "variant_label",
]
