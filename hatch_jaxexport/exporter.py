"""Exporting one function x structure x static values x platform with ``jax.export`` (build layer).

Locations are stripped (``jax_traceback_in_locations_limit = 0``): the bytes do not depend on the
build directory or line numbers, and no build path leaks into an artifact.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

from . import pytrees
from .decorator import ExportableFunction
from .manifest import BLOB_SUFFIX, ArtifactRecord, artifact_id, sha256_hex
from .spec import LeafSpec, Structure, static_key, tree_map_leaves
from .transforms import (
    BATCH_SYMBOL,
    KINDS_BY_ORDER,
    inexact_indices,
    member_avals,
    member_function,
    source_flat,
)


@dataclasses.dataclass(frozen=True)
class ExportTask:
    """One artifact to export."""

    function: str
    structure_index: int
    static: dict[str, Any]
    platform: str
    kind: str = "primal"
    batched: bool = False

    @property
    def id(self) -> str:
        return artifact_id(self.function, self.structure_index, self.static, self.platform,
                           self.kind, self.batched)

    @property
    def primal(self) -> ExportTask:
        return dataclasses.replace(self, kind="primal", batched=False)

    def file_name(self, structure: Structure) -> str:
        """A deterministic, safe blob file name."""
        slug = re.sub(r"[^A-Za-z0-9_]+", "_", self.function).strip("_")[:80] or "fn"
        key = [self.function, structure.key, static_key(self.static), self.platform]
        if (self.kind, self.batched) != ("primal", False):
            key += [self.kind, self.batched]
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
        return f"{slug}-{digest}{BLOB_SUFFIX}"


def tasks_for(fn: ExportableFunction, default_platforms: tuple[str, ...]) -> list[ExportTask]:
    """Every artifact of a function: structure x static values x platform."""
    spec = fn.export_spec
    platforms = spec.platforms or default_platforms
    members = [(kind, batched) for batched in ((False, True) if spec.vmap else (False,))
               for kind in KINDS_BY_ORDER[spec.ad_order]]
    return [ExportTask(fn.name, index, static, platform, kind, batched)
            for index in range(len(spec.structures))
            for static in spec.static_combinations()
            for platform in platforms
            for kind, batched in members]


def abstract_args(structure: Structure, scope: Any = None) -> dict[str, Any]:
    """``jax.ShapeDtypeStruct`` trees for a structure, all symbols in one ``SymbolicScope``."""
    import jax
    import jax.numpy as jnp
    from jax import export

    scope = scope or export.SymbolicScope(list(structure.constraints))

    def leaf(spec: LeafSpec) -> Any:
        shape = export.symbolic_shape(spec.shape_text, scope=scope) if spec.shape else ()
        return jax.ShapeDtypeStruct(shape, jnp.dtype(spec.dtype))

    return {name: tree_map_leaves(leaf, tree) for name, tree in structure.args.items()}


def _x64_context(enabled: bool) -> Any:
    import contextlib

    import jax

    if not enabled:
        return contextlib.nullcontext()
    return jax.enable_x64(True)


def export_exported(fn: ExportableFunction, task: ExportTask) -> Any:
    """Trace and lower one task to a ``jax.export.Exported``, locations stripped."""
    import jax
    from jax import export
    from jax._src import config as jax_config

    spec = fn.export_spec
    structure = spec.structures[task.structure_index]
    scope = export.SymbolicScope(list(structure.constraints))
    with jax_config.traceback_in_locations_limit(0), _x64_context(structure.uses_x64):
        values = {**abstract_args(structure, scope), **task.static}
        args, kwargs = fn.layouts[task.structure_index].split(values)
        target = fn.__wrapped__ if spec.skip_jitting else jax.jit(
            fn.__wrapped__, static_argnames=tuple(spec.static))
        primal = export.export(target, platforms=[task.platform])(*args, **kwargs)
        if (task.kind, task.batched) == ("primal", False):
            return primal
        return _export_member(fn, task, primal, scope)


def _export_member(fn: ExportableFunction, task: ExportTask, primal: Any, scope: Any) -> Any:
    """Export a family member (a companion or a batched artifact) of a primal ``Exported``."""
    import jax
    from jax import export

    in_dtypes = [a.dtype for a in primal.in_avals]
    out_dtypes = [a.dtype for a in primal.out_avals]
    din, dout = inexact_indices(in_dtypes), inexact_indices(out_dtypes)
    f_flat = source_flat(fn, task.structure_index, task.static, primal.in_tree)
    member = member_function(task.kind, f_flat, len(in_dtypes), din, dout)
    avals = member_avals(task.kind, primal.in_avals, primal.out_avals, din, dout)
    if task.batched:
        (batch,) = export.symbolic_shape(BATCH_SYMBOL, scope=scope)
        member = jax.vmap(member)
        avals = [jax.ShapeDtypeStruct((batch, *a.shape), a.dtype) for a in avals]
    else:
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    return export.export(jax.jit(member), platforms=[task.platform])(*avals)


def module_text(exported: Any) -> str:
    """The module text of an export without locations or other debug info (comparable)."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir

    with jax_mlir.make_ir_context():
        module = ir.Module.parse(exported.mlir_module())
        return str(module.operation.get_asm(enable_debug_info=False))


def fingerprint(exported: Any, vjp_order: int) -> str:
    """A location-free identity of an export: its metadata and module text without debug info."""
    text = module_text(exported)
    meta = metadata(exported)
    meta["vjp_order"] = vjp_order
    return hashlib.sha256((json.dumps(meta, sort_keys=True) + "\n" + text).encode()).hexdigest()


def metadata(exported: Any) -> dict[str, Any]:
    """The comparable metadata of an ``Exported`` (JSON-able)."""
    return {
        "in_tree": str(exported.in_tree),
        "out_tree": str(exported.out_tree),
        "in_avals": [str(a) for a in exported.in_avals],
        "out_avals": [str(a) for a in exported.out_avals],
        "platforms": list(exported.platforms),
        "calling_convention": exported.calling_convention_version,
        "nr_devices": exported.nr_devices,
        "ordered_effects": [str(e) for e in exported.ordered_effects],
        "unordered_effects": [str(e) for e in exported.unordered_effects],
        "disabled_safety_checks": [str(c) for c in exported.disabled_safety_checks],
        "in_shardings": [str(s) for s in exported.in_shardings_hlo],
        "out_shardings": [str(s) for s in exported.out_shardings_hlo],
    }


_CALLBACK_TARGET = re.compile(r"custom_call @(\w*callback\w*)")
_CUSTOM_CALL = re.compile(r"custom_call @([\w.]+)")


def custom_call_targets(exported: Any) -> list[str]:
    """The custom-call targets a module uses (LAPACK kernels, shape assertions...)."""
    return sorted(set(_CUSTOM_CALL.findall(exported.mlir_module())))


_CALLBACK_MESSAGE = ("the function calls back into Python ({targets}: jax.debug.print, "
                     "jax.pure_callback or io_callback), which jax.export cannot serialize; "
                     "remove the callback from the exported function")


def _raised_in_callback_lowering(err: BaseException) -> bool:
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    return any(frame.filename.endswith(("_src/callback.py", "_src/debugging.py"))
               for frame in frames)


def _refuse_host_callbacks(exported: Any) -> None:
    found = sorted(set(_CALLBACK_TARGET.findall(exported.mlir_module())))
    if found:
        raise ValueError(_CALLBACK_MESSAGE.format(targets=", ".join(found)))


def export_task(fn: ExportableFunction, task: ExportTask) -> tuple[bytes, ArtifactRecord]:
    """Export one task: the serialized blob and its manifest record."""
    spec = fn.export_spec
    structure = spec.structures[task.structure_index]
    try:
        exported = export_exported(fn, task)
    except Exception as err:
        if _raised_in_callback_lowering(err):
            raise ValueError(_CALLBACK_MESSAGE.format(targets="host callback")) from err
        raise
    _refuse_host_callbacks(exported)
    type_refs = pytrees.register_all([exported.in_tree, exported.out_tree])
    try:
        with _x64_context(structure.uses_x64):
            vjp_order = spec.vjp_order if task.kind == "primal" and not task.batched else 0
            blob = bytes(exported.serialize(vjp_order=vjp_order))
    except ValueError as err:
        if "PyTreeDef" in str(err):
            raise ValueError(f"{err} hatch-jaxexport registers namedtuples and jax dataclasses "
                             "itself; register other pytree types with "
                             "jax.export.register_pytree_node_serialization in their module") \
                from None
        raise
    record = ArtifactRecord(
        function=fn.name, structure=structure.key, structure_index=task.structure_index,
        spec=structure.to_json(), constraints=list(structure.constraints), static=task.static,
        platform=task.platform, file=task.file_name(structure), sha256=sha256_hex(blob),
        size=len(blob), fingerprint=fingerprint(exported, vjp_order),
        vjp_order=vjp_order, kwargs=spec.export_with_kwargs, kind=task.kind,
        batched=task.batched, custom_calls=custom_call_targets(exported),
        calling_convention=exported.calling_convention_version,
        in_tree=str(exported.in_tree), out_tree=str(exported.out_tree),
        in_avals=[str(a) for a in exported.in_avals],
        out_avals=[str(a) for a in exported.out_avals], pytree_types=type_refs,
    )
    return blob, record
