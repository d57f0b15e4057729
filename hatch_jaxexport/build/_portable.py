"""Portable variants: static-shape StableHLO that non-JAX compilers (IREE...) can compile.

Build layer. ``@exportable(..., concrete={"n": [64, 1024]})`` asks, next to the ``jax.export``
artifacts, for one static-shape specialisation per structure x static values x combination of
concrete sizes. Each variant is exported with ``jax.export`` for ``cpu`` with concrete shapes
(no symbolic dimensions, so no ``shape_assertion`` custom calls) and written as three files in
the package's ``_jaxexport/`` folder:

- ``<variant>-<digest>.mlir``: StableHLO text, debug info stripped;
- ``<variant>-<digest>.mlirbc``: the StableHLO *portable artifact* (VHLO bytecode with a
  compatibility window; ``Exported.mlir_module_serialized``);
- ``<variant>-<digest>.interface.json``: argument and result names, shapes, dtypes, the pytree
  flattening order, the entry point and the IREE compile flags.

``portable.json`` (its own schema, see :data:`PORTABLE_SCHEMA_VERSION`) indexes the variants with
their sizes and SHA-256, and records what could not be made portable and why. It is written only
when some function of the package asks for portable variants.

A variant that cannot be made portable (custom calls such as LAPACK kernels, host callbacks,
side effects) is refused with a reason. With ``on-error = "fail"`` that fails the build (the
function asked for it); with ``"skip"`` it is left out, reported and recorded. Functions that
do not ask are never exported here, but when the package uses portable variants at all, the
build reports those whose ``jax.export`` artifacts show custom calls no other runtime has.

Nothing here imports jax at module import time; reading ``portable.json`` and writing bundles
(the ``portable`` command) needs no jax.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import importlib.resources
import importlib.util
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.errors import ArtifactError, NotPortable
from hatch_jaxexport.formats._concrete import check_concrete, size_combinations, size_problem
from hatch_jaxexport.formats.manifest import ARTIFACT_DIR, SHA256_HEX, check_file_name, sha256_hex
from hatch_jaxexport.formats.spec import (
    LeafSpec,
    Structure,
    evaluate_dim,
    static_key,
    tree_map_leaves,
)
from hatch_jaxexport.runtime._jaxcompat import (
    ir_context,
    is_lapack_target,
    mlir_ir,
    no_locations,
    x64_context,
)

if TYPE_CHECKING:
    from hatch_jaxexport.formats.manifest import ArtifactRecord
    from hatch_jaxexport.runtime.decorator import ExportableFunction

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
#: Custom calls that are JAX's own shape checks (absent from static-shape exports).
SHAPE_CHECKS = frozenset({"shape_assertion"})
#: Custom calls jax emits only for symbolic shapes (``stablehlo.dynamic_reduce_window``...):
#: static-shape exports lower the same operations to plain StableHLO.
SYMBOLIC_ONLY_PREFIX = "stablehlo.dynamic_"
#: IREE flags for every variant (``iree-compile`` and ``iree.compiler.compile_str``).
IREE_BASE_FLAGS = ("--iree-input-type=stablehlo",)
#: IREE demotes float64 to float32 unless told not to.
IREE_F64_FLAG = "--iree-input-demote-f64-to-f32=false"
_FILE_KINDS = ("text", "bytecode", "interface")
_SUFFIXES = {"text": TEXT_SUFFIX, "bytecode": BYTECODE_SUFFIX, "interface": INTERFACE_SUFFIX}
_MAX_FILE = 2**34
_F64 = re.compile(r"\bf64\b")
_STABLEHLO_VERSION = re.compile(rb"StableHLO_v([0-9][0-9.]*)")


# --------------------------------------------------------------------------------------------
# The ``concrete=`` option (checked when the decorator runs)


# --------------------------------------------------------------------------------------------
# Planning and exporting variants


@dataclasses.dataclass(frozen=True)
class VariantPlan:
    """One portable variant to export: structure x static values x concrete sizes."""

    function: str
    structure_index: int
    static: dict[str, Any]
    sizes: dict[str, int]
    name: str

    def file_stem(self, structure: Structure) -> str:
        """``<name>-<digest>``: a deterministic, safe, unique file-name stem."""
        key = [self.function, structure.key, static_key(self.static),
               sorted(self.sizes.items())]
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:12]
        return f"{self.name[:120]}-{digest}"


def short_name(function: str) -> str:
    """``pkg.mod:Class.method`` -> ``method``; ``pkg.solve`` -> ``solve``."""
    return function.split(":")[-1].split(".")[-1] or function


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_") or "fn"


def plan_variants(fn: ExportableFunction) -> list[VariantPlan]:
    """The portable variants ``fn`` asks for (``[]`` without ``concrete=``)."""
    spec = fn.export_spec
    concrete = getattr(spec, "concrete", None)
    if concrete is None:
        return []
    plans: list[VariantPlan] = []
    taken: set[str] = set()
    for index, structure in enumerate(spec.structures):
        if not structure.symbols <= set(concrete):
            continue  # a structure with an unbound symbol has no static-shape variant
        for env in size_combinations(structure, concrete):
            for static in spec.static_combinations():
                parts = [short_name(fn.name)]
                if len(spec.structures) > 1:
                    parts.append(f"s{index}")
                parts += [f"{k}_{v}" for k, v in sorted(static.items())]
                parts += [f"{k}{v}" for k, v in sorted(env.items())]
                name = "_".join(_safe(part) for part in parts)[:100]
                unique, n = name, 2
                while unique in taken:
                    unique, n = f"{name}_{n}", n + 1
                taken.add(unique)
                plans.append(VariantPlan(fn.name, index, dict(static), env, unique))
    return plans


@dataclasses.dataclass(frozen=True)
class PortableVariant:
    """An exported variant: its StableHLO text and bytecode and its interface."""

    plan: VariantPlan
    text: str
    bytecode: bytes
    interface: dict[str, Any]

    def files(self, stem: str) -> dict[str, bytes]:
        """File name -> contents, for ``stem`` (see ``VariantPlan.file_stem``)."""
        return {stem + TEXT_SUFFIX: self.text.encode(),
                stem + BYTECODE_SUFFIX: self.bytecode,
                stem + INTERFACE_SUFFIX: _json_bytes(self.interface)}


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode()


def _concrete_args(structure: Structure, env: Mapping[str, int]) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    def leaf(spec: LeafSpec) -> Any:
        shape = tuple(evaluate_dim(dim, env) for dim in spec.shape)
        return jax.ShapeDtypeStruct(shape, jnp.dtype(spec.dtype))

    return {name: tree_map_leaves(leaf, tree) for name, tree in structure.args.items()}


def _named_target(fn: ExportableFunction, name: str) -> Callable[..., Any]:
    """The function under a name of its own: jax names the module ``jit_<name>``."""
    source = fn.__wrapped__

    def target(*args: Any, **kwargs: Any) -> Any:
        return source(*args, **kwargs)

    functools.update_wrapper(target, source)
    target.__name__ = target.__qualname__ = name
    return target


def custom_call_reason(targets: Iterable[str]) -> str | None:
    """Why a module with these custom-call targets is not portable, or ``None``."""
    found = sorted(t for t in set(targets) - SHAPE_CHECKS
                   if not t.startswith(SYMBOLIC_ONLY_PREFIX))
    if not found:
        return None
    lapack = [t for t in found if is_lapack_target(t)]
    if lapack:
        other = [t for t in found if t not in lapack]
        return (f"uses LAPACK custom calls ({', '.join(lapack)}): jnp.linalg and "
                "jax.scipy.linalg on CPU call LAPACK kernels that only jaxlib provides, and "
                "non-JAX compilers such as IREE reject them; write the computation with lax "
                "operations, or call this function through JAX"
                + (f" (other custom calls: {', '.join(other)})" if other else ""))
    callbacks = [t for t in found if "callback" in t]
    if callbacks:
        return (f"calls back into Python ({', '.join(callbacks)}): host callbacks cannot run "
                "outside JAX")
    return (f"uses custom calls ({', '.join(found)}): they name kernels of jaxlib or of a "
            "plugin, which non-JAX compilers do not provide")


def export_variant(fn: ExportableFunction, plan: VariantPlan, package: str = "") -> PortableVariant:
    """Export one variant with concrete shapes; ``NotPortable`` says why it cannot be."""
    import jax
    from jax import export

    from hatch_jaxexport.build._exporter import (
        custom_call_targets,
        module_text,
        raised_in_callback_lowering,
    )

    spec = fn.export_spec
    structure = spec.structures[plan.structure_index]
    problem = size_problem(structure, plan.sizes)
    if problem:
        raise NotPortable(f"concrete sizes {plan.sizes}: {problem}")
    layout = fn.layouts[plan.structure_index]
    with no_locations(), x64_context(structure.uses_x64):
        values = {**_concrete_args(structure, plan.sizes), **plan.static}
        args, kwargs = layout.split(values)
        target = jax.jit(_named_target(fn, plan.name), static_argnames=tuple(spec.static),
                         keep_unused=True)
        try:
            exported = export.export(target, platforms=[LOWERING_PLATFORM])(*args, **kwargs)
        except Exception as err:
            if raised_in_callback_lowering(err) or "host_callbacks" in str(err):
                raise NotPortable("calls back into Python (jax.debug.print, jax.pure_callback "
                                  "or io_callback): host callbacks cannot run outside JAX") \
                    from err
            raise
        reason = custom_call_reason(custom_call_targets(exported))
        if reason:
            raise NotPortable(reason)
        effects = [str(e) for e in (*exported.ordered_effects, *exported.unordered_effects)]
        if effects:
            raise NotPortable(f"has side effects ({', '.join(effects)}), which only JAX runs")
        if exported.nr_devices != 1:
            raise NotPortable(f"is exported for {exported.nr_devices} devices; portable "
                              "variants are single-device")
        if exported.uses_global_constants or any(
                not isinstance(d, int) for a in exported.in_avals for d in a.shape):
            raise NotPortable("still has symbolic dimensions; give concrete sizes for them")
        text = module_text(exported)
        bytecode = bytes(exported.mlir_module_serialized)
        flat_args, flat_kwargs = layout.split(values, skip=spec.static)
        interface = _interface(fn, plan, structure, exported, text, bytecode,
                               flat_args, flat_kwargs, layout.positional, package)
    return PortableVariant(plan, text, bytecode, interface)


def _path_part(key: Any) -> str | int:
    for attr in ("idx", "key", "name"):
        if hasattr(key, attr):
            value = getattr(key, attr)
            return value if isinstance(value, int | str) else str(value)
    return str(key)


def _main_signature(text: str) -> tuple[str, list[str], list[str]]:
    """The module's name and the MLIR types of ``main``'s arguments and results."""
    ir: Any = mlir_ir()
    with ir_context():
        module = ir.Module.parse(text)
        name = ir.StringAttr(module.operation.attributes["sym_name"]).value
        for op in module.body.operations:
            attrs = op.operation.attributes
            if "sym_name" in attrs and ir.StringAttr(attrs["sym_name"]).value == "main":
                ftype = ir.FunctionType(ir.TypeAttr(attrs["function_type"]).value)
                return name, [str(t) for t in ftype.inputs], [str(t) for t in ftype.results]
    raise NotPortable("the exported module has no main function")


def _iree_type(mlir_type: str) -> str:
    """``tensor<4x8xf32>`` -> ``4x8xf32`` (the form ``iree-run-module --input`` takes)."""
    match = re.fullmatch(r"tensor<(.*)>", mlir_type)
    return match.group(1) if match else mlir_type


def _interface(fn: ExportableFunction, plan: VariantPlan, structure: Structure, exported: Any,
               text: str, bytecode: bytes, flat_args: Sequence[Any],
               flat_kwargs: Mapping[str, Any], positional: Sequence[str],
               package: str) -> dict[str, Any]:
    import jax
    from jax.tree_util import keystr

    module_name, in_types, out_types = _main_signature(text)
    positional_names = [n for n in positional if n not in plan.static]
    leaves, tree = jax.tree_util.tree_flatten_with_path((tuple(flat_args), dict(flat_kwargs)))
    if str(tree) != str(exported.in_tree):
        raise NotPortable(f"cannot name the flattened inputs: {tree} != {exported.in_tree}")
    if list(exported.module_kept_var_idx) != list(range(len(exported.in_avals))) or \
            len(in_types) != len(exported.in_avals):
        raise NotPortable("the module does not take every input (jax dropped unused "
                          "arguments, or added some of its own)")
    inputs = []
    for index, (path, aval) in enumerate(zip((p for p, _ in leaves), exported.in_avals,
                                             strict=True)):
        parts = [_path_part(k) for k in path]
        argument = positional_names[parts[1]] if parts[0] == 0 else str(parts[1])
        rest = parts[2:]
        inputs.append({
            "index": index, "name": argument + keystr(tuple(path[2:])), "argument": argument,
            "path": [argument, *rest], "shape": list(aval.shape), "dtype": str(aval.dtype),
            "mlir_type": _iree_type(in_types[index])})
    out_leaves, _ = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(exported.out_tree, list(range(len(exported.out_avals)))))
    outputs = []
    for index, ((path, _), aval) in enumerate(zip(out_leaves, exported.out_avals, strict=True)):
        parts = [_path_part(k) for k in path]
        outputs.append({"index": index, "name": "result" + keystr(tuple(path)), "path": parts,
                        "shape": list(aval.shape), "dtype": str(aval.dtype),
                        "mlir_type": _iree_type(out_types[index])})
    flags = list(IREE_BASE_FLAGS) + ([IREE_F64_FLAG] if _F64.search(text) else [])
    found = _STABLEHLO_VERSION.search(bytecode[:64])
    return {
        "interface_version": INTERFACE_VERSION,
        "package": package,
        "function": fn.name,
        "variant": plan.name,
        "structure_index": plan.structure_index,
        "structure": structure.key,
        "static": plan.static,
        "concrete": plan.sizes,
        "platform": LOWERING_PLATFORM,
        "jax_version": jax.__version__,
        "module": {
            "name": module_name, "entry": "main",
            "text_format": "StableHLO text (MLIR assembly, debug info stripped)",
            "bytecode_format": "StableHLO portable artifact (VHLO bytecode)",
            "stablehlo_version": found.group(1).decode() if found else None,
        },
        "iree": {"function": f"{module_name}.main", "compile_flags": flags},
        "calling_convention": (
            "call `main` with the arrays of `inputs` in order (dense, row-major); it returns "
            "the arrays of `outputs` in order. The order is jax's pytree flattening of "
            "(positional arguments, keyword arguments): dict keys sorted, sequences in order, "
            "static arguments baked in and left out"),
        "in_tree": str(exported.in_tree),
        "out_tree": str(exported.out_tree),
        "inputs": inputs,
        "outputs": outputs,
    }


# --------------------------------------------------------------------------------------------
# The build: worker and orchestrator


def worker_export(functions: Sequence[ExportableFunction], worker: int, workers: int,
                  out_dir: str | Path, package: str) -> dict[str, Any]:
    """Export this worker's share of portable variants into ``out_dir`` (JSON-able result)."""
    result: dict[str, Any] = {"functions": {}, "variants": [], "unsupported": [],
                              "seconds": {}}
    mine = list(functions)[worker::workers]
    for fn in mine:
        requested = getattr(fn.export_spec, "concrete", None) is not None
        result["functions"][fn.name] = requested
        for plan in plan_variants(fn):
            structure = fn.export_spec.structures[plan.structure_index]
            entry = {"function": plan.function, "variant": plan.name,
                     "structure_index": plan.structure_index, "structure": structure.key,
                     "static": plan.static, "concrete": plan.sizes}
            started = time.perf_counter()
            try:
                variant = export_variant(fn, plan, package)
            except NotPortable as err:
                result["unsupported"].append({**entry, "reason": str(err)})
                continue
            except Exception as err:
                result["unsupported"].append(
                    {**entry, "reason": f"{type(err).__name__}: {err}".strip()[:2000]})
                continue
            stem = plan.file_stem(structure)
            variant.interface["files"] = {
                kind: stem + _SUFFIXES[kind] for kind in _FILE_KINDS}
            files = variant.files(stem)
            record: dict[str, Any] = {**entry, "files": {}}
            for kind, file_name in variant.interface["files"].items():
                data = files[file_name]
                (Path(out_dir) / file_name).write_bytes(data)
                record["files"][kind] = {"file": file_name, "size": len(data),
                                         "sha256": sha256_hex(data)}
            record["inputs"] = len(variant.interface["inputs"])
            record["outputs"] = len(variant.interface["outputs"])
            record["iree_function"] = variant.interface["iree"]["function"]
            result["variants"].append(record)
            result["seconds"][f"{plan.function}/{plan.name}"] = time.perf_counter() - started
    return result


def _variant_label(entry: Mapping[str, Any]) -> str:
    return f"{entry['function']} (variant {entry['variant']}, sizes {entry['concrete']})"


def obstacles_from_records(records: Sequence[ArtifactRecord], function: str) -> str | None:
    """Why a function that asked for nothing could not be made portable, from its artifacts."""
    calls = {c for r in records if r.function == function and r.platform == LOWERING_PLATFORM
             and not getattr(r, "mesh", None)  # sharded variants add sharding custom calls
             for c in r.custom_calls}
    return custom_call_reason(calls)


def write_index(staging: Path, package: str, results: Sequence[Mapping[str, Any]],
                records: Sequence[ArtifactRecord], *, on_error: str, generator: str,
                log: Callable[[str], None]) -> list[str]:
    """Write ``portable.json`` into ``staging`` after the workers ran (orchestrator side).

    Writes nothing when no function asks for portable variants. Returns the failures that must
    fail the build (``on_error == "fail"`` and a requested variant was refused); otherwise
    reports refusals through ``log`` as warnings and records them.
    """
    parts = [r.get("portable") or {} for r in results]
    functions: dict[str, bool] = {}
    for part in parts:
        functions.update(part.get("functions", {}))
    if not any(functions.values()):
        return []
    variants = sorted((v for p in parts for v in p.get("variants", [])),
                      key=lambda v: (v["function"], v["variant"]))
    unsupported = sorted((u for p in parts for u in p.get("unsupported", [])),
                         key=lambda u: (u["function"], u["variant"]))
    messages = [f"portable variant {_variant_label(u)}: {u['reason']}" for u in unsupported]
    if messages and on_error == "fail":
        hint = ("; remove the function's concrete= option, or set on-error = \"skip\" to build "
                "without the variant")
        return [m + hint for m in messages]
    for message in messages:
        log(f"warning: skipped {message}")
    not_requested = []
    for name in sorted(n for n, asked in functions.items() if not asked):
        reason = obstacles_from_records(records, name)
        not_requested.append({"function": name, "reason": reason})
        if reason:
            log(f"warning: portable: {name} cannot be made portable: {reason}")
    first = results[0]
    index = {
        "schema_version": PORTABLE_SCHEMA_VERSION,
        "package": package,
        "generator": generator,
        "jax_version": first.get("jax_version", ""),
        "jaxlib_version": first.get("jaxlib_version", ""),
        "platform": LOWERING_PLATFORM,
        "variants": variants,
        "unsupported": [{**u, "requested": True} for u in unsupported],
        "not_requested": not_requested,
    }
    (staging / PORTABLE_INDEX).write_bytes(_json_bytes(index))
    total = sum(f["size"] for v in variants for f in v["files"].values())
    seconds = sum(s for p in parts for s in p.get("seconds", {}).values())
    log(f"{package}: portable: {len(variants)} variant(s) of "
        f"{len({v['function'] for v in variants})} function(s), {total:,} bytes, "
        f"{seconds:.2f} s" + (f"; {len(unsupported)} refused" if unsupported else ""))
    return []


# --------------------------------------------------------------------------------------------
# Reading an installed package's portable variants (no jax, no import of the package)


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
        if sorted(variant["files"]) != sorted(_FILE_KINDS):
            raise ArtifactError(f"corrupt {where}: {at}.files must name "
                                f"{', '.join(_FILE_KINDS)}")
        for kind, entry in variant["files"].items():
            _check_type(f"{at}.files.{kind}", entry, dict, "an object")
            check_file_name(entry.get("file"))
            if not entry["file"].endswith(_SUFFIXES[kind]):
                raise ArtifactError(f"corrupt {where}: {at}.files.{kind} must end with "
                                    f"{_SUFFIXES[kind]}")
            _check_type(f"{at}.files.{kind}.size", entry.get("size"), int, "an int")
            if not 0 <= entry["size"] <= _MAX_FILE:
                raise ArtifactError(f"corrupt {where}: {at}.files.{kind}.size out of range")
            if not isinstance(entry.get("sha256"), str) or not SHA256_HEX.match(entry["sha256"]):
                raise ArtifactError(f"corrupt {where}: {at}.files.{kind}.sha256 is not a "
                                    "SHA-256 hex")
            if entry["file"] in seen:
                raise ArtifactError(f"corrupt {where}: {entry['file']} is listed twice")
            seen.add(entry["file"])
    return raw


def package_root(package: str) -> Any:
    """The package's ``_jaxexport`` folder (a ``Traversable``), found WITHOUT importing it.

    ``importlib.resources.files(package)`` imports the package, whose ``__init__`` usually
    imports jax; a module object made from its spec (not executed) reads the same resources.
    """
    if not package.isidentifier():
        raise ArtifactError(f"{package!r} is not the import name of a top-level package")
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise ArtifactError(f"cannot find package {package!r}")
    module = sys.modules.get(package) or importlib.util.module_from_spec(spec)
    return importlib.resources.files(module) / ARTIFACT_DIR


def load_index(package: str) -> tuple[Any, dict[str, Any]]:
    """``(folder, portable.json)`` of an installed package; ``ArtifactError`` if it has none."""
    root = package_root(package)
    path = root / PORTABLE_INDEX
    if not path.is_file():
        raise ArtifactError(f"{package} carries no portable variants ({ARTIFACT_DIR}/"
                            f"{PORTABLE_INDEX} not found): give @exportable functions "
                            "concrete= sizes and rebuild the wheel")
    return root, parse_index(path.read_bytes(), where=f"{package}/{ARTIFACT_DIR}/"
                                                      f"{PORTABLE_INDEX}")


def read_file(root: Any, entry: Mapping[str, Any]) -> bytes:
    """The bytes of one file of a variant, checked against its recorded SHA-256."""
    name = check_file_name(entry["file"])
    data = (root / name).read_bytes()
    if len(data) != entry["size"] or sha256_hex(data) != entry["sha256"]:
        raise ArtifactError(f"{ARTIFACT_DIR}/{name} does not match {PORTABLE_INDEX} "
                            "(damaged or modified after the build)")
    return data


def verify_files(root: Any, check_blob: Callable[..., list[str]]) -> tuple[set[str], list[str]]:
    """For ``jaxexport verify``: the file names portable.json accounts for, and problems."""
    path = root / PORTABLE_INDEX
    if not path.is_file():
        return set(), []
    try:
        index = parse_index(path.read_bytes())
    except (ArtifactError, OSError) as err:
        return {PORTABLE_INDEX}, [str(err)]
    listed = {PORTABLE_INDEX}
    problems: list[str] = []
    for variant in index["variants"]:
        for kind, entry in sorted(variant["files"].items()):
            listed.add(entry["file"])
            problems += check_blob(root, entry["file"], entry["size"], entry["sha256"],
                                   f"portable {variant['function']}/{variant['variant']} "
                                   f"{kind}")
    return listed, problems


# --------------------------------------------------------------------------------------------
# The ``portable`` command: list, and write a ready-to-compile bundle


def add_command(sub: Any) -> None:
    """Add ``portable`` to the CLI's subparsers."""
    cmd = sub.add_parser(
        "portable", help="list a package's portable StableHLO variants, or write a bundle",
        description="List the static-shape StableHLO variants an installed PACKAGE carries "
        "(baked for @exportable functions with concrete= sizes) and what could not be made "
        "portable. With --function and --out, write a ready-to-compile bundle for non-JAX "
        "runtimes: the .mlir/.mlirbc files, the interface JSON and a README with the IREE "
        "compile and run commands. Reads files only: needs no jax.")
    cmd.add_argument("package", help="import name of an installed package")
    cmd.add_argument("--function", help="the function to bundle: its manifest name, or a "
                     "unique short name (e.g. mlp_apply)")
    cmd.add_argument("--variant", help="only this variant of the function (default: all)")
    cmd.add_argument("--out", help="folder to write the bundle into (created)")
    cmd.add_argument("--json", action="store_true", help="print portable.json")


def run_command(args: argparse.Namespace) -> int:
    """``python -m hatch_jaxexport portable ...``."""
    root, index = load_index(args.package)
    if args.out or args.function:
        if not (args.out and args.function):
            raise ValueError("--function and --out go together: name the function to "
                             "bundle and the folder to write")
        chosen = select_variants(index, args.function, args.variant)
        written = write_bundle(root, index, chosen, Path(args.out))
        print(f"wrote {len(chosen)} variant(s) of {chosen[0]['function']} to {args.out} "
              f"({len(written)} files); see {Path(args.out) / 'README.md'}")
        return 0
    if args.json:
        sys.stdout.write(_json_bytes(index).decode())
        return 0
    print(f"{index['package']}: {len(index['variants'])} portable variant(s) (static-shape "
          f"StableHLO lowered for {index['platform']}), built with jax {index['jax_version']}")
    rows = [("function", "variant", "inputs", "outputs", "bytes (.mlir)")]
    for variant in index["variants"]:
        interface = json.loads(read_file(root, variant["files"]["interface"]))
        rows.append((variant["function"], variant["variant"], _describe(interface["inputs"]),
                     _describe(interface["outputs"]), f"{variant['files']['text']['size']:,}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for entry in index["unsupported"]:
        print(f"refused: {_variant_label(entry)}: {entry['reason']}")
    for entry in index["not_requested"]:
        if entry.get("reason"):
            print(f"not portable: {entry['function']}: {entry['reason']}")
    plain = [e["function"] for e in index["not_requested"] if not e.get("reason")]
    if plain:
        print(f"no concrete= sizes (not baked): {', '.join(plain)}")
    if index["variants"]:
        print(f"write a bundle: python -m hatch_jaxexport portable {index['package']} "
              "--function NAME --out DIR")
    return 0


def _describe(items: Sequence[Mapping[str, Any]], limit: int = 2) -> str:
    shown = [f"{i['name']}: {i['dtype']}[{','.join(map(str, i['shape']))}]"
             for i in items[:limit]]
    more = f" +{len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(shown) + more


def select_variants(index: Mapping[str, Any], function: str, variant: str | None = None
                    ) -> list[dict[str, Any]]:
    """The variants of ``function`` (full name or unique short name), ``ValueError`` if none."""
    names = sorted({v["function"] for v in index["variants"]})
    matches = [n for n in names if n == function] or \
        [n for n in names if short_name(n) == function or n.split(":")[-1] == function]
    if len(matches) != 1:
        refused = [u for u in index["unsupported"] if function in (u["function"],
                                                                     short_name(u["function"]))]
        refused += [u for u in index["not_requested"]
                    if function in (u["function"], short_name(u["function"]))]
        why = f" ({refused[0]['function']}: {refused[0].get('reason') or 'no concrete= sizes'})" \
            if refused else ""
        what = "is ambiguous" if matches else "has no portable variant"
        raise ValueError(f"{function!r} {what}{why}; functions with variants: "
                         f"{', '.join(names) or 'none'}")
    chosen = [v for v in index["variants"] if v["function"] == matches[0]
              and (variant is None or v["variant"] == variant)]
    if not chosen:
        known = ", ".join(v["variant"] for v in index["variants"] if v["function"] == matches[0])
        raise ValueError(f"{matches[0]} has no variant {variant!r} (variants: {known})")
    return chosen


def iree_compile_command(interface: Mapping[str, Any], source: str, output: str,
                         backend: str = "llvm-cpu") -> list[str]:
    """The ``iree-compile`` command line for a variant."""
    flags = list(interface["iree"]["compile_flags"])
    flags.append(f"--iree-hal-target-backends={backend}")
    if backend == "llvm-cpu":
        flags.append("--iree-llvmcpu-target-cpu=host")
    return ["iree-compile", *flags, source, "-o", output]


def iree_run_command(interface: Mapping[str, Any], module: str) -> list[str]:
    """An ``iree-run-module`` smoke-test command line: every input filled with ones."""
    inputs = [f"--input={i['mlir_type']}=1" for i in interface["inputs"]]
    return ["iree-run-module", "--device=local-task", f"--module={module}",
            f"--function={interface['module']['entry']}", *inputs]


def write_bundle(root: Any, index: Mapping[str, Any], variants: Sequence[Mapping[str, Any]],
                 out: Path) -> list[Path]:
    """Copy the variants' files into ``out`` and write a README with the commands."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    sections = []
    for variant in variants:
        for kind in _FILE_KINDS:
            entry = variant["files"][kind]
            path = out / entry["file"]
            path.write_bytes(read_file(root, entry))
            written.append(path)
        interface = json.loads(read_file(root, variant["files"]["interface"]))
        sections.append(_readme_section(variant, interface))
    readme = out / "README.md"
    readme.write_text(_README_HEAD.format(
        function=variants[0]["function"], package=index["package"],
        jax=index["jax_version"], generator=index["generator"]) + "\n".join(sections)
        + _README_TAIL)
    written.append(readme)
    return written


def _shell(command: Sequence[str]) -> str:
    """A command over several lines: the program, one option a line, then the operands."""
    import shlex

    quoted = [shlex.quote(part) for part in command]
    options = [p for p in quoted[1:] if p.startswith("--")]
    operands = [p for p in quoted[1:] if not p.startswith("--")]
    lines = [quoted[0], *options] + ([" ".join(operands)] if operands else [])
    return " \\\n    ".join(lines)


def _readme_section(variant: Mapping[str, Any], interface: Mapping[str, Any]) -> str:
    files = variant["files"]
    stem = files["text"]["file"][: -len(TEXT_SUFFIX)]
    vmfb = f"{stem}.vmfb"
    rows = ["| # | input | dtype | shape | `--input` type |", "|---|---|---|---|---|"]
    rows += [f"| {i['index']} | `{i['name']}` | {i['dtype']} | {i['shape']} | "
             f"`{i['mlir_type']}` |" for i in interface["inputs"]]
    outs = ["| # | output | dtype | shape |", "|---|---|---|---|"]
    outs += [f"| {o['index']} | `{o['name']}` | {o['dtype']} | {o['shape']} |"
             for o in interface["outputs"]]
    static = f", static {interface['static']}" if interface["static"] else ""
    return f"""
## Variant `{variant['variant']}`

Sizes {interface['concrete']}{static}; structure {interface['structure_index']}
(`{interface['structure']}`).

- `{files['text']['file']}`: StableHLO text
- `{files['bytecode']['file']}`: StableHLO portable artifact (VHLO bytecode, StableHLO
  {interface['module']['stablehlo_version']})
- `{files['interface']['file']}`: the interface (names, shapes, dtypes, order)

Entry point: `{interface['iree']['function']}` (module `{interface['module']['name']}`,
function `{interface['module']['entry']}`). Inputs, in call order:

{chr(10).join(rows)}

Outputs, in order:

{chr(10).join(outs)}

Compile for this machine's CPU (other backends: `--iree-hal-target-backends=vulkan-spirv`,
`cuda`, `rocm`...):

```sh
{_shell(iree_compile_command(interface, files['text']['file'], vmfb))}
```

Smoke test (every input filled with ones; real data: `--input=@x.npy`, one per input, in the
order above):

```sh
{_shell(iree_run_command(interface, vmfb))}
```

From C, with the host program in hatch-jaxexport's `examples/iree_host/` (inputs as raw
little-endian files, shapes and types as above):

```sh
iree_host {vmfb} {interface['iree']['function']} \\
    {' '.join(f"{i['mlir_type']}:input{i['index']}.bin" for i in interface['inputs'])}
```
"""


_README_HEAD = """# Portable bundle: `{function}`

Static-shape StableHLO of `{function}` from package `{package}`, exported with jax {jax} by
{generator}. It runs without JAX: compile it with a StableHLO compiler such as IREE
(`pip install iree-base-compiler iree-base-runtime` gives `iree-compile` and `iree-run-module`)
and call the entry point with the inputs listed below. Only these shapes are supported: other
sizes need another `concrete=` size and a rebuild.
"""

_README_TAIL = """
## Notes

- The interface JSON is the contract: inputs are jax's pytree flattening of the function's
  arguments (dict keys sorted, sequences in order, static arguments baked in), and `name`,
  `path` and `shape` say which array goes where.
- Constants the function closed over (weights) are inside the module.
- The `.mlirbc` file is the version-stable form: a StableHLO consumer within the StableHLO
  compatibility window reads it; `iree-compile` takes either file.
"""


__all__ = [
    "PORTABLE_INDEX",
    "PORTABLE_SCHEMA_VERSION",
    "NotPortable",
    "PortableVariant",
    "VariantPlan",
    "check_concrete",
    "export_variant",
    "load_index",
    "package_root",
    "parse_index",
    "plan_variants",
    "read_file",
    "select_variants",
    "write_bundle",
    "write_index",
]
