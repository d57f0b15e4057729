"""Exporting portable variants at build time: concrete-size StableHLO for non-JAX compilers.

Build layer. ``@exportable(..., concrete={"n": [64, 1024]})`` asks, next to the ``jax.export``
artifacts, for one concrete-size specialisation per structure x static values x combination of
concrete sizes (:func:`plan_variants`). Each variant is exported with ``jax.export`` for ``cpu``
with concrete shapes (no symbolic dimensions, so no ``shape_assertion`` custom calls) by
:func:`export_variant`, which also writes its interface JSON; a worker writes the files
(:func:`worker_export`) and the orchestrator writes ``portable.json`` (:func:`write_index`). The
files and the index are described in ``formats/portable_index.py``.

A variant that cannot be made portable (custom calls such as LAPACK kernels, host callbacks,
side effects) is refused with a reason. With ``on-error = "fail"`` that fails the build (the
function asked for it); with ``"skip"`` it is left out, reported and recorded. Functions that
do not ask are never exported here, but when the package uses portable variants at all, the
build reports those whose ``jax.export`` artifacts show custom calls no other runtime has.

Nothing here imports jax at module import time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.errors import NotPortable
from hatch_jaxexport.formats.concrete_sizes import size_combinations, size_problem
from hatch_jaxexport.formats.dimensions import evaluate_dim
from hatch_jaxexport.formats.manifest import sha256_hex
from hatch_jaxexport.formats.portable_index import (
    BYTECODE_SUFFIX,
    FILE_KINDS,
    INTERFACE_SUFFIX,
    INTERFACE_VERSION,
    IREE_BASE_FLAGS,
    IREE_F64_FLAG,
    LOWERING_PLATFORM,
    PORTABLE_INDEX,
    PORTABLE_SCHEMA_VERSION,
    SHAPE_CHECKS,
    SUFFIXES,
    SYMBOLIC_ONLY_PREFIX,
    TEXT_SUFFIX,
    json_bytes,
    short_name,
    variant_label,
)
from hatch_jaxexport.formats.spec import LeafSpec, Structure, static_key, tree_map_leaves
from hatch_jaxexport.formats.statics import encode_static, encode_static_value, static_text
from hatch_jaxexport.runtime.jax_dtypes import jax_dtype
from hatch_jaxexport.runtime.jaxcompat import (
    ir_context,
    is_lapack_target,
    mlir_ir,
    no_locations,
    x64_context,
)

if TYPE_CHECKING:
    from hatch_jaxexport.bake.protocol import WorkerResult
    from hatch_jaxexport.formats.manifest import ArtifactRecord
    from hatch_jaxexport.runtime.call.decorator import ExportableFunction

# Imported in functions: the exporter, only where a portable variant is exported.

_F64 = re.compile(r"\bf64\b")
_STABLEHLO_VERSION = re.compile(rb"StableHLO_v([0-9][0-9.]*)")


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
            continue  # a structure with an unbound symbol has no concrete-size variant
        for env in size_combinations(structure, concrete):
            for static in spec.static_combinations(index):
                parts = [short_name(fn.name)]
                if len(spec.structures) > 1:
                    parts.append(f"s{index}")
                parts += [f"{k}_{v if type(v) is str else static_text(encode_static_value(v))}"
                          for k, v in sorted(static.items())]
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
                stem + INTERFACE_SUFFIX: json_bytes(self.interface)}


def _concrete_args(structure: Structure, env: Mapping[str, int]) -> dict[str, Any]:
    import jax

    def leaf(spec: LeafSpec) -> Any:
        shape = tuple(evaluate_dim(dim, env) for dim in spec.shape)
        return jax.ShapeDtypeStruct(shape, jax_dtype(spec.dtype))

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

    from hatch_jaxexport.bake.export.exporter import (
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
        "static": encode_static(plan.static),
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
                     "static": encode_static(plan.static), "concrete": plan.sizes}
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
                kind: stem + SUFFIXES[kind] for kind in FILE_KINDS}
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


def obstacles_from_records(records: Sequence[ArtifactRecord], function: str) -> str | None:
    """Why a function that asked for nothing could not be made portable, from its artifacts."""
    calls = {c for r in records if r.function == function and r.platform == LOWERING_PLATFORM
             and not getattr(r, "mesh", None)  # sharded variants add sharding custom calls
             for c in r.custom_calls}
    return custom_call_reason(calls)


def write_index(staging: Path, package: str, results: Sequence[WorkerResult],
                records: Sequence[ArtifactRecord], *, on_error: str, generator: str,
                log: Callable[[str], None]) -> list[str]:
    """Write ``portable.json`` into ``staging`` after the workers ran (orchestrator side).

    Writes nothing when no function asks for portable variants. Returns the failures that must
    fail the build (``on_error == "fail"`` and a requested variant was refused); otherwise
    reports refusals through ``log`` as warnings and records them.
    """
    parts = [r.portable or {} for r in results]
    functions: dict[str, bool] = {}
    for part in parts:
        functions.update(part.get("functions", {}))
    if not any(functions.values()):
        return []
    variants = sorted((v for p in parts for v in p.get("variants", [])),
                      key=lambda v: (v["function"], v["variant"]))
    unsupported = sorted((u for p in parts for u in p.get("unsupported", [])),
                         key=lambda u: (u["function"], u["variant"]))
    messages = [f"portable variant {variant_label(u)}: {u['reason']}" for u in unsupported]
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
        "jax_version": first.jax_version,
        "jaxlib_version": first.jaxlib_version,
        "platform": LOWERING_PLATFORM,
        "variants": variants,
        "unsupported": [{**u, "requested": True} for u in unsupported],
        "not_requested": not_requested,
    }
    (staging / PORTABLE_INDEX).write_bytes(json_bytes(index))
    total = sum(f["size"] for v in variants for f in v["files"].values())
    seconds = sum(s for p in parts for s in p.get("seconds", {}).values())
    log(f"{package}: portable: {len(variants)} variant(s) of "
        f"{len({v['function'] for v in variants})} function(s), {total:,} bytes, "
        f"{seconds:.2f} s" + (f"; {len(unsupported)} refused" if unsupported else ""))
    return []


__all__ = [
    "PortableVariant",
    "VariantPlan",
    "custom_call_reason",
    "export_variant",
    "obstacles_from_records",
    "plan_variants",
    "worker_export",
    "write_index",
]
