"""Exporting a sharded variant: jax's view of a mesh variant and of its specs at build time.

A sharded variant is lowered over an abstract mesh (no devices needed at build time) with
``NamedSharding`` inputs from ``in_specs`` and outputs from ``out_specs``; family members
(companions, batched artifacts) take their shardings from the primal's. The release check runs a
sharded artifact's numerics under a concrete mesh of its shape (:func:`mesh_context`). Specs are
parsed in ``formats.mesh``; jax is imported lazily.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hatch_jaxexport.formats.manifest import MeshShape
from hatch_jaxexport.formats.manifest_reader import mesh_from_record
from hatch_jaxexport.formats.mesh import is_broadcast, mesh_size, parse_leaf_spec
from hatch_jaxexport.formats.spec import ClassNode, LeafSpec, Structure
from hatch_jaxexport.runtime.artifacts.placement import named
from hatch_jaxexport.runtime.jax_dtypes import jax_dtype


def abstract_mesh(shape: MeshShape) -> Any:
    """A ``jax.sharding.AbstractMesh`` (no devices) with ``Auto`` axes, across jax versions."""
    from jax import sharding

    names = tuple(n for n, _ in shape)
    sizes = tuple(s for _, s in shape)
    axis_type = getattr(sharding, "AxisType", None)
    kwargs = {"axis_types": (axis_type.Auto,) * len(shape)} if axis_type is not None else {}
    try:
        return sharding.AbstractMesh(sizes, names, **kwargs)
    except TypeError:  # older jax: AbstractMesh(((name, size), ...))
        return sharding.AbstractMesh(tuple(shape))


def sharded_structs(structure: Structure, specs: Mapping[str, Any], mesh: Any,
                    scope: Any) -> dict[str, Any]:
    """``jax.ShapeDtypeStruct`` trees for a structure, each carrying its ``NamedSharding``."""
    import jax
    from jax import export

    def build(tree: Any, spec_tree: Any) -> Any:
        if isinstance(tree, LeafSpec):
            shape = export.symbolic_shape(tree.shape_text, scope=scope) if tree.shape else ()
            return jax.ShapeDtypeStruct(shape, jax_dtype(tree.dtype),
                                        sharding=named(mesh, spec_tree))
        if tree is None:
            return None
        if isinstance(tree, Mapping):
            return type(tree)((k, build(v, spec_tree[k])) for k, v in tree.items())
        if isinstance(tree, ClassNode):
            return tree.build([build(v, s) for v, s in zip(tree.items, spec_tree.items,
                                                            strict=True)])
        items = [build(v, s) for v, s in zip(tree, spec_tree, strict=True)]
        return items if isinstance(tree, list) else tuple(items)

    return {name: build(tree, specs[name]) for name, tree in structure.args.items()}


def out_shardings(raw: Any, outputs: Any, mesh: Any) -> Any:
    """The ``NamedSharding`` pytree for a function's outputs (``jax.eval_shape`` structs)."""
    import jax

    def is_array(value: Any) -> bool:
        return hasattr(value, "shape") and hasattr(value, "dtype")

    def walk(spec: Any, node: Any, path: str) -> Any:
        if is_array(node):
            return named(mesh, parse_leaf_spec(spec, f"out_specs{path}"))
        if spec is None or is_broadcast(spec):
            leaf = named(mesh, parse_leaf_spec(spec, f"out_specs{path}"))
            return jax.tree_util.tree_map(lambda _: leaf, node)
        if isinstance(node, Mapping) and isinstance(spec, Mapping):
            unknown = [k for k in spec if k not in node]
            if unknown:
                raise ValueError(f"out_specs{path}: keys {unknown} are not in the output "
                                 f"(keys: {list(node)})")
            return type(node)((k, walk(spec.get(k), v, f"{path}[{k!r}]"))
                              for k, v in node.items())
        if isinstance(node, list | tuple) and isinstance(spec, list | tuple) \
                and len(spec) == len(node):
            items = [walk(s, v, f"{path}[{i}]")
                     for i, (s, v) in enumerate(zip(spec, node, strict=True))]
            if hasattr(type(node), "_fields"):
                return type(node)(*items)
            return items if isinstance(node, list) else tuple(items)
        raise ValueError(f"out_specs{path or ''} ({spec!r}) does not match the output "
                         f"{jax.tree_util.tree_structure(node)}; give a spec per output, one "
                         "PartitionSpec for all of them, or None")

    return walk(raw, outputs, "")


def member_out_specs(kind: str, ins: Sequence[Any], outs: Sequence[Any],
                     din: Sequence[int], dout: Sequence[int]) -> list[Any]:
    """What a family member returns, in terms of the primal's inputs and outputs (shardings)."""
    like_outputs = [outs[j] for j in dout]
    like_inputs = [ins[i] for i in din]
    return {"primal": list(outs), "jvp": like_outputs, "vjp": like_inputs,
            "jvp_jvp": like_outputs, "vjp_jvp": like_inputs}[kind]


def mesh_context(record: Mapping[str, Any] | None) -> Any:
    """A context running under a concrete mesh of a manifest ``mesh`` (the first devices);
    a no-op for ``{}``. Needs enough devices (see ``jax.device_count()``)."""
    import contextlib

    shape = mesh_from_record(record)
    if shape is None:
        return contextlib.nullcontext()
    import jax

    devices = jax.devices()[:mesh_size(shape)]
    sizes, names = tuple(s for _, s in shape), tuple(n for n, _ in shape)
    try:
        mesh = jax.make_mesh(sizes, names, devices=devices)
    except TypeError:  # older jax: make_mesh without devices=
        from jax.sharding import Mesh

        mesh = Mesh(np_array(devices).reshape(sizes), names)
    set_mesh = getattr(jax, "set_mesh", None) or getattr(jax.sharding, "use_mesh", None)
    return set_mesh(mesh) if set_mesh is not None else mesh


def np_array(values: Sequence[Any]) -> Any:
    """A 1-D NumPy object array of ``values`` (devices), for ``Mesh`` on older jax."""
    import numpy as np

    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


__all__ = ["abstract_mesh", "member_out_specs", "mesh_context", "np_array", "out_shardings",
           "sharded_structs"]
