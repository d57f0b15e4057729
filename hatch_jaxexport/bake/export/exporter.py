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

from hatch_jaxexport.bake.export.body_warnings import merged, traced_warnings
from hatch_jaxexport.bake.export.captured import captured_constants
from hatch_jaxexport.formats.export_spec import baked_kinds
from hatch_jaxexport.formats.manifest import BLOB_SUFFIX, ArtifactRecord, artifact_id, sha256_hex
from hatch_jaxexport.formats.manifest_reader import mesh_from_record
from hatch_jaxexport.formats.mesh import mesh_record
from hatch_jaxexport.formats.spec import LeafSpec, Structure, static_key, tree_map_leaves
from hatch_jaxexport.formats.statics import encode_static
from hatch_jaxexport.runtime.artifacts import pytrees
from hatch_jaxexport.runtime.artifacts.family import (
    BATCH_SYMBOL,
    inexact_indices,
    member_avals,
    member_function,
    source_flat,
)
from hatch_jaxexport.runtime.call.decorator import ExportableFunction
from hatch_jaxexport.runtime.call.inlining import sources_inlined
from hatch_jaxexport.runtime.jax_dtypes import jax_dtype
from hatch_jaxexport.runtime.jaxcompat import (
    ir_context,
    lowering_config,
    lowering_context,
    mlir_ir,
    no_locations,
)

# Imported in functions: the sharded room, only for functions with mesh variants.


@dataclasses.dataclass(frozen=True)
class ExportTask:
    """One artifact to export."""

    function: str
    structure_index: int
    static: dict[str, Any]
    platform: str
    kind: str = "primal"
    batched: bool = False
    #: The mesh of a sharded variant (``formats.mesh.mesh_record``), ``{}`` for a single device.
    mesh: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The config variant of a function baked per value (``x64="both"``), ``{}`` otherwise.
    variant: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def id(self) -> str:
        return artifact_id(self.function, self.structure_index, encode_static(self.static),
                           self.platform, self.kind, self.batched, self.mesh, self.variant)

    def to_json(self) -> dict[str, Any]:
        """The task as JSON (a failure's report): its static values in tagged JSON, as the
        manifest records them (``dataclasses.asdict`` would turn a frozen dataclass value
        into a dict and choke on an Enum)."""
        return {**dataclasses.asdict(dataclasses.replace(self, static={})),
                "static": encode_static(self.static)}

    @property
    def primal(self) -> ExportTask:
        return dataclasses.replace(self, kind="primal", batched=False)

    @property
    def traced(self) -> str:
        """What its trace runs, whatever the platform (``traced_warnings``' key): jax
        traces a function once for every platform it is exported for."""
        return dataclasses.replace(self, platform="").id

    def file_name(self, structure: Structure) -> str:
        """A deterministic, safe blob file name."""
        slug = re.sub(r"[^A-Za-z0-9_]+", "_", self.function).strip("_")[:80] or "fn"
        key = [self.function, structure.key, static_key(self.static), self.platform]
        if (self.kind, self.batched) != ("primal", False):
            key += [self.kind, self.batched]
        if self.mesh:
            key += [self.mesh]
        if self.variant:
            key += [self.variant]
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
        return f"{slug}-{digest}{BLOB_SUFFIX}"


def tasks_for(fn: ExportableFunction, default_platforms: tuple[str, ...]) -> list[ExportTask]:
    """Every artifact of a function: mesh variant x structure x static values x platform x
    family member.

    A sharded variant of a function with only ``vjp_order`` gets the first-order companions:
    jax's own VJP of a sharded export does not compose under meshes with ``Explicit`` axes.
    A function that goes through the family with ``vjp_order`` gets its reverse-mode members
    (``baked_kinds``): the primitive serves ``jax.grad`` from them, not jax's own VJP.
    """
    spec = fn.export_spec
    platforms = spec.platforms or default_platforms

    def members(mesh: Any) -> list[tuple[str, bool]]:
        order = max(spec.ad_order, 1 if mesh is not None and spec.vjp_order else 0)
        through_family = spec.uses_family or mesh is not None
        kinds = baked_kinds(order, spec.vjp_order if through_family else 0)
        return [(kind, batched) for batched in ((False, True) if spec.vmap else (False,))
                for kind in kinds]

    variants = [{"jax_enable_x64": value} for value in spec.x64_variants] or [{}]
    return [ExportTask(fn.name, index, static, platform, kind, batched, mesh_record(mesh),
                       variant)
            for variant in variants
            for mesh in (spec.mesh or (None,))
            for index in range(len(spec.structures))
            for static in spec.static_combinations(index)
            for platform in platforms
            for kind, batched in members(mesh)]


def abstract_args(structure: Structure, scope: Any = None) -> dict[str, Any]:
    """``jax.ShapeDtypeStruct`` trees for a structure, all symbols in one ``SymbolicScope``."""
    import jax
    from jax import export

    scope = scope or export.SymbolicScope(list(structure.constraints))

    def leaf(spec: LeafSpec) -> Any:
        shape = export.symbolic_shape(spec.shape_text, scope=scope) if spec.shape else ()
        return jax.ShapeDtypeStruct(shape, jax_dtype(spec.dtype))

    return {name: tree_map_leaves(leaf, tree) for name, tree in structure.args.items()}



def task_config(fn: ExportableFunction, task: ExportTask) -> dict[str, Any]:
    """The jax config a task is exported under: the function's, as recorded at decoration (not
    the worker's global config, which every module of the package could change), its variant's
    value, and x64 on for a structure with 64-bit dtypes."""
    spec = fn.export_spec
    config = {**lowering_config(), **(spec.jax_config or {}), **task.variant}
    if spec.structures[task.structure_index].uses_x64:
        config["jax_enable_x64"] = True
    return config


_MATMUL = re.compile(r"stablehlo\.(dot_general|dot|convolution) ")


def recorded_config(config: dict[str, Any], full_text: str) -> dict[str, Any]:
    """What an artifact's record says it was exported under: ``jax_enable_x64`` always, the
    default matmul precision only for a module that multiplies matrices (it changes nothing
    else, and a process that sets it should not lose the artifacts it does not affect)."""
    recorded = {"jax_enable_x64": bool(config["jax_enable_x64"])}
    if _MATMUL.search(full_text):
        recorded["jax_default_matmul_precision"] = config["jax_default_matmul_precision"]
    return recorded


#: A primal export: its ``Exported``, symbolic scope, placement, captured constants and the
#: warnings its trace issued (``traced_warnings``).
_Primal = tuple[Any, Any, Any, list[dict[str, Any]], list[dict[str, Any]]]
#: Primal exports of this process, reused by their family members (each member is exported
#: from the primal's avals): (function, primal task id) -> ``_Primal``.
_PRIMALS: dict[tuple[ExportableFunction, str], _Primal] = {}


def _primal_of(fn: ExportableFunction, task: ExportTask) -> _Primal:
    key = (fn, task.primal.id)
    found = _PRIMALS.get(key)
    if found is None:
        with traced_warnings(fn.package, task.primal.traced) as warned:
            exported = _export_primal(fn, task)
        found = _PRIMALS[key] = (*exported, warned)
    return found


def captured_of(fn: ExportableFunction, task: ExportTask) -> list[dict[str, Any]]:
    """The arrays a task's function closes over (``build._captured``), from its primal's trace:
    every member of a family reports its primal's."""
    return _primal_of(fn, task)[3]


def export_exported(fn: ExportableFunction, task: ExportTask,
                    warned: list[dict[str, Any]] | None = None) -> Any:
    """Trace and lower one task to a ``jax.export.Exported``, locations stripped; the
    ``@exportable`` functions it calls run their source inline (``sources_inlined``).
    ``warned`` gets what the package's code warned while its trace ran (``traced_warnings``)."""
    with sources_inlined():
        primal, scope, placement, _, primal_warned = _primal_of(fn, task)
        if (task.kind, task.batched) == ("primal", False):
            _add(warned, primal_warned)
            return primal
        with no_locations(), lowering_context(task_config(fn, task)), \
                traced_warnings(fn.package, task.traced) as found:
            member = _export_member(fn, task, primal, scope, placement)
        _add(warned, found)
        return member


def _add(warned: list[dict[str, Any]] | None, found: list[dict[str, Any]]) -> None:
    if warned is not None:
        warned.extend(found)


def _export_primal(fn: ExportableFunction,
                   task: ExportTask) -> tuple[Any, Any, Any, list[dict[str, Any]]]:
    """The primal export of a task's family, its symbolic scope, its flat shardings and the
    constants it captures.

    The constants come from ``target.trace`` with the export's own arguments: jit's trace cache
    hands ``jax.export`` that same trace, so finding them costs no second trace."""
    import jax
    from jax import export

    spec = fn.export_spec
    structure = spec.structures[task.structure_index]
    scope = export.SymbolicScope(list(structure.constraints))
    mesh = mesh_from_record(task.mesh)
    with no_locations(), lowering_context(task_config(fn, task)):
        layout = fn.layouts[task.structure_index]
        if mesh is None:
            values = {**abstract_args(structure, scope), **task.static}
        else:
            from hatch_jaxexport.bake.export import sharded as sharding

            assert spec.in_specs is not None
            abstract = sharding.abstract_mesh(mesh)
            values = {**sharding.sharded_structs(structure, spec.in_specs[task.structure_index],
                                                 abstract, scope), **task.static}
        args, kwargs = layout.split(values)
        target = fn.__wrapped__ if spec.skip_jitting else jax.jit(
            fn.__wrapped__, static_argnames=tuple(spec.static))
        out_shardings = None
        if mesh is not None and spec.out_specs is not None:
            outputs = jax.eval_shape(target, *args, **kwargs)
            out_shardings = sharding.out_shardings(spec.out_specs, outputs, abstract)
            target = jax.jit(fn.__wrapped__, static_argnames=tuple(spec.static),
                             out_shardings=out_shardings)
        captured = [] if not hasattr(target, "trace") else captured_constants(
            target.trace(*args, **kwargs).jaxpr, fn.__wrapped__, fn.name)
        primal = export.export(target, platforms=[task.platform])(*args, **kwargs)
        placement = None
        if mesh is not None:  # the flat inputs' and outputs' shardings, in the primal's order
            flat_in = [a.sharding for a in jax.tree_util.tree_leaves(
                layout.split(values, skip=task.static))]
            flat_out = None if out_shardings is None else \
                jax.tree_util.tree_leaves(out_shardings)
            placement = (abstract, flat_in, flat_out)
        return primal, scope, placement, captured


def _export_member(fn: ExportableFunction, task: ExportTask, primal: Any, scope: Any,
                   placement: tuple[Any, list[Any], list[Any] | None] | None = None) -> Any:
    """Export a family member (a companion or a batched artifact) of a primal ``Exported``.

    ``placement`` (sharded variants): the abstract mesh and the primal's flat input and output
    shardings; tangents are placed like inputs, cotangents like outputs.
    """
    import jax
    from jax import export

    in_dtypes = [a.dtype for a in primal.in_avals]
    out_dtypes = [a.dtype for a in primal.out_avals]
    din, dout = inexact_indices(in_dtypes), inexact_indices(out_dtypes)
    f_flat = source_flat(fn, task.structure_index, task.static, primal.in_tree)
    member = member_function(task.kind, f_flat, len(in_dtypes), din, dout)
    avals = member_avals(task.kind, primal.in_avals, primal.out_avals, din, dout)
    in_sh: list[Any] = [None] * len(avals)
    out_sh: Any = None
    if placement is not None:
        from hatch_jaxexport.bake.export.sharded import member_out_specs

        _, flat_in, flat_out = placement
        outs = flat_out or [None] * len(out_dtypes)
        in_sh = member_avals(task.kind, flat_in, outs, din, dout)
        out_sh = member_out_specs(task.kind, flat_in, outs, din, dout)
        if task.batched:
            in_sh = [_batched_sharding(s) for s in in_sh]
            out_sh = [_batched_sharding(s) for s in out_sh]
        out_sh = None if any(s is None for s in out_sh) else tuple(out_sh)
    if task.batched:
        (batch,) = export.symbolic_shape(BATCH_SYMBOL, scope=scope)
        member = jax.vmap(member)
        avals = [jax.ShapeDtypeStruct((batch, *a.shape), a.dtype, sharding=s)
                 for a, s in zip(avals, in_sh, strict=True)]
    else:
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
                 for a, s in zip(avals, in_sh, strict=True)]
    jitted = jax.jit(member) if out_sh is None else jax.jit(member, out_shardings=out_sh)
    return export.export(jitted, platforms=[task.platform])(*avals)


def _batched_sharding(sharding: Any) -> Any:
    """The sharding of a value with a batch axis (not split) added in front."""
    if sharding is None:
        return None
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(sharding.mesh, PartitionSpec(None, *sharding.spec))


def module_text(exported: Any, full_text: str | None = None) -> str:
    """The module text of an export without locations or other debug info (comparable).

    ``full_text``: ``exported.mlir_module()`` if the caller has it already (each call of it
    deserializes the module again)."""
    ir: Any = mlir_ir()
    with ir_context():
        module = ir.Module.parse(full_text if full_text is not None else exported.mlir_module())
        return str(module.operation.get_asm(enable_debug_info=False))


def fingerprint(exported: Any, vjp_order: int, full_text: str | None = None) -> str:
    """A location-free identity of an export: its metadata and module text without debug info."""
    text = module_text(exported, full_text)
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
        "in_shardings": _sharding_texts(exported, "in"),
        "out_shardings": _sharding_texts(exported, "out"),
    }


def _sharding_texts(exported: Any, side: str) -> list[str]:
    """The shardings of an export's inputs or outputs as text, the same whether the export is
    fresh or deserialized (jax fills ``*_shardings_hlo`` only when deserializing): the named
    sharding's mesh axes and spec where there is one, else the HLO sharding (``None``)."""
    count = len(exported.in_avals if side == "in" else exported.out_avals)
    named = tuple(getattr(exported, f"_{side}_named_shardings", None) or ())
    hlo = tuple(getattr(exported, f"{side}_shardings_hlo", None) or ())
    texts = []
    for i in range(count):
        sharding = named[i] if i < len(named) else None
        if sharding is not None and hasattr(sharding, "spec"):
            texts.append(f"{dict(sharding.mesh.shape)} {sharding.spec}")
        else:
            texts.append(str(hlo[i] if i < len(hlo) else None))
    return texts


_CALLBACK_TARGET = re.compile(r"custom_call @(\w*callback\w*)")
_CUSTOM_CALL = re.compile(r"custom_call @([\w.]+)")


def custom_call_targets(exported: Any, full_text: str | None = None, vjp_order: int = 0
                        ) -> list[str]:
    """The custom-call targets a blob's modules use (LAPACK kernels, shape assertions...):
    the artifact's and, serialized with it, its VJPs' (a loader running a VJP on its own must
    know that it calls LAPACK even where the primal does not)."""
    text = full_text if full_text is not None else exported.mlir_module()
    found = set(_CUSTOM_CALL.findall(text))
    for _ in range(vjp_order):
        exported = exported.vjp()
        found |= set(_CUSTOM_CALL.findall(exported.mlir_module()))
    return sorted(found)


_CALLBACK_MESSAGE = ("the function calls back into Python ({targets}: jax.debug.print, "
                     "jax.pure_callback or io_callback), which jax.export cannot serialize; "
                     "remove the callback from the exported function")


def raised_in_callback_lowering(err: BaseException) -> bool:
    """Whether an export failed inside jax's lowering of a host callback (not serializable)."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    return any(frame.filename.endswith(("_src/callback.py", "_src/debugging.py"))
               for frame in frames)


def _refuse_host_callbacks(full_text: str) -> None:
    found = sorted(set(_CALLBACK_TARGET.findall(full_text)))
    if found:
        raise ValueError(_CALLBACK_MESSAGE.format(targets=", ".join(found)))


def export_task(fn: ExportableFunction, task: ExportTask) -> tuple[bytes, ArtifactRecord]:
    """Export one task: the serialized blob and its manifest record."""
    spec = fn.export_spec
    structure = spec.structures[task.structure_index]
    warned: list[dict[str, Any]] = []
    try:
        exported = export_exported(fn, task, warned)
    except Exception as err:
        if raised_in_callback_lowering(err):
            raise ValueError(_CALLBACK_MESSAGE.format(targets="host callback")) from err
        raise
    full_text = exported.mlir_module()  # deserialized once for the three uses below
    _refuse_host_callbacks(full_text)
    type_refs = pytrees.register_all([exported.in_tree, exported.out_tree], fn.name)
    config = task_config(fn, task)
    try:  # serialize traces the VJP (a custom_vjp's rules are the package's code)
        with lowering_context(config), sources_inlined(), \
                traced_warnings(fn.package, (task.traced, "vjp")) as vjp_warned:
            vjp_order = spec.vjp_order if task.kind == "primal" and not task.batched else 0
            blob = bytes(exported.serialize(vjp_order=vjp_order))
            custom_calls = custom_call_targets(exported, full_text, vjp_order)
    except ValueError as err:
        if "PyTreeDef" in str(err):
            raise ValueError(f"{fn.name}: {err} hatch-jaxexport registers the pytree types it "
                             f"meets itself; for one it cannot serialize, {pytrees.WAY_OUT}") \
                from None
        raise
    record = ArtifactRecord(
        function=fn.name, structure=structure.key, structure_index=task.structure_index,
        spec=structure.to_json(), constraints=list(structure.constraints),
        static=encode_static(task.static),
        platform=task.platform, file=task.file_name(structure), sha256=sha256_hex(blob),
        size=len(blob), fingerprint=fingerprint(exported, vjp_order, full_text),
        vjp_order=vjp_order, kwargs=spec.export_with_kwargs, kind=task.kind,
        batched=task.batched, custom_calls=custom_calls,
        calling_convention=exported.calling_convention_version,
        in_tree=str(exported.in_tree), out_tree=str(exported.out_tree),
        in_avals=[str(a) for a in exported.in_avals],
        out_avals=[str(a) for a in exported.out_avals], pytree_types=type_refs,
        mesh=dict(task.mesh), captured_constants=captured_of(fn, task),
        jax_config=recorded_config(config, full_text), variant=dict(task.variant),
        warnings=merged(warned, vjp_warned),
    )
    return blob, record


__all__ = ["ExportTask", "abstract_args", "captured_of", "custom_call_targets", "export_exported",
           "export_task", "fingerprint", "metadata", "module_text", "raised_in_callback_lowering",
           "recorded_config", "task_config", "tasks_for"]
