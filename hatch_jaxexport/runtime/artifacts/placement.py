"""Sharded calls: the mesh a call runs under, the variant it takes, and placing its inputs.

At call time the loader picks the mesh variant matching the mesh of the call's context (the
arguments' shardings, or the mesh set with ``jax.set_mesh`` / ``with mesh:``) and places inputs
not yet on a device onto that mesh with the artifact's ``in_specs``; the transformation
primitive types a sharded artifact's outputs under explicit meshes. jax is imported lazily, and
``jax._src`` only through ``runtime.jaxcompat``. Specs and meshes themselves are parsed in
``formats.mesh``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hatch_jaxexport.formats.manifest import MeshShape
from hatch_jaxexport.formats.mesh import MeshVariants, PSpec, describe_mesh
from hatch_jaxexport.formats.spec import ClassNode, LeafSpec, Structure
from hatch_jaxexport.runtime.jaxcompat import with_mesh_physical


def named(mesh: Any, spec: PSpec) -> Any:
    """The ``NamedSharding`` of ``spec`` on ``mesh`` (concrete or abstract)."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(mesh, PartitionSpec(*spec.entries))


@dataclasses.dataclass(frozen=True)
class CallMesh:
    """The mesh a call runs under: its axes, where it was found, and the concrete mesh (for
    placing inputs) when there is one."""

    shape: MeshShape | None
    source: str = ""
    mesh: Any = None

    def describe(self) -> str:
        if self.shape is None:
            return ("no mesh (the arguments are not placed on one and none is set with "
                    "jax.set_mesh)")
        return f"{describe_mesh(self.shape)} ({self.source})"


def _shape_of(mesh: Any) -> MeshShape | None:
    """The axes of ``mesh`` that partition a call: its ``Manual`` axes left out. Inside
    ``shard_map`` (and ``jax.pmap``, a ``shard_map`` over ``_internal_pmap_axis_name`` since
    jax 0.8) the body's values carry the mesh with the mapped axes manual: each shard runs the
    body as a one-device computation, which the single-device variant serves. ``None`` when
    no axis is left."""
    if mesh is None:
        return None
    try:
        manual = frozenset(getattr(mesh, "manual_axes", ()) or ())
        shape = tuple((str(n), int(s)) for n, s in mesh.shape.items() if n not in manual)
    except (AttributeError, TypeError):
        return None
    return shape or None


def current_mesh() -> CallMesh:
    """The mesh set with ``jax.set_mesh`` / ``jax.sharding.use_mesh`` / ``with mesh:``."""
    from jax import sharding

    found = _asked(sharding, "get_mesh")  # the concrete mesh of jax.set_mesh
    shape = _shape_of(found)
    if shape is not None:
        return CallMesh(shape, "the mesh set with jax.set_mesh", found)
    physical = with_mesh_physical()  # `with mesh:` (deprecated, still honoured by jax)
    shape = _shape_of(physical)
    if shape is not None:
        return CallMesh(shape, "the mesh of `with mesh:`", physical)
    shape = _shape_of(_asked(sharding, "get_abstract_mesh"))
    if shape is not None:
        return CallMesh(shape, "the abstract mesh in use")
    return CallMesh(None)


def _asked(module: Any, getter: str) -> Any:
    """``module.getter()``, or ``None`` where this jax lacks it or it fails."""
    get = getattr(module, getter, None)
    if get is None:
        return None
    try:
        return get()
    except Exception:
        return None


def call_mesh(values: Any) -> CallMesh:
    """The call's mesh: that of the first argument placed on a mesh (a ``NamedSharding``, or a
    tracer with an explicit sharding), else the current mesh, else none."""
    import jax
    from jax.sharding import NamedSharding

    for leaf in jax.tree_util.tree_leaves(values):
        if isinstance(leaf, jax.core.Tracer):
            try:
                found = jax.typeof(leaf).sharding.mesh
            except Exception:
                continue
            shape = _shape_of(found)
            if shape is not None:
                return CallMesh(shape, "traced arguments with explicit shardings")
            continue
        if isinstance(leaf, jax.Array):
            try:
                sharding = leaf.sharding
            except Exception:
                continue
            if isinstance(sharding, NamedSharding):
                shape = _shape_of(sharding.mesh)
                if shape is not None:
                    return CallMesh(shape, "the arguments' mesh", sharding.mesh)
    return current_mesh()


def select_variant(variants: MeshVariants, found: CallMesh) -> tuple[MeshShape | None, str]:
    """``(variant, "")`` for the variant matching the call's mesh, or ``(None, reason)``.

    A call without a mesh takes the single-device variant; a call on a mesh takes the variant
    with the same axis names and sizes, in order. Anything else is a reason to fall back.
    """
    if found.shape in variants:
        return found.shape, ""
    sharded = [v for v in variants if v is not None]
    needs = " or ".join(describe_mesh(v) for v in sharded)
    if None in variants:
        needs += " (or a single device, without a mesh)"
    if found.shape is None:
        names = [n for n, _ in sharded[0]]
        sizes = [s for _, s in sharded[0]]
        return None, (f"its artifacts need {needs}, and the call has {found.describe()}; set "
                      f"one with jax.set_mesh(jax.make_mesh({tuple(sizes)}, {tuple(names)})) "
                      "or place the arguments with jax.device_put and a NamedSharding")
    return None, f"its artifacts need {needs}, but the call runs on {found.describe()}"


def place(structure: Structure, specs: Mapping[str, Any], values: Mapping[str, Any],
          mesh: Any) -> dict[str, Any]:
    """Put every input that is not on a device yet (NumPy arrays, uncommitted jax arrays)
    onto ``mesh`` with its spec; arrays already placed and tracers are left as they are."""
    import jax

    def put(tree: Any, spec: Any, value: Any) -> Any:
        if isinstance(tree, LeafSpec):
            if isinstance(value, jax.core.Tracer):
                return value
            if isinstance(value, jax.Array):
                try:
                    if value.committed:
                        return value
                except Exception:
                    return value
            return jax.device_put(value, named(mesh, spec))
        if tree is None:
            return value
        if isinstance(tree, Mapping):
            return type(tree)((k, put(v, spec[k], value[k])) for k, v in tree.items())
        if isinstance(tree, ClassNode):
            return tree.build([put(v, s, x) for v, s, x in
                               zip(tree.items, spec.items, tree.children(value), strict=True)])
        items = [put(v, s, x) for v, s, x in zip(tree, spec, value, strict=True)]
        return items if isinstance(tree, list) else tuple(items)

    out = dict(values)
    for name, tree in structure.args.items():
        out[name] = put(tree, specs[name], values[name])
    return out


def typed_out_shardings(exported: Any, count: int) -> list[Any]:
    """The outputs' shardings as types, for a sharded artifact traced under a mesh with
    ``Explicit`` axes (``jax.set_mesh`` of a ``jax.make_mesh`` mesh): the artifact's output
    specs on the current abstract mesh. ``None`` each elsewhere (types carry no sharding)."""
    none: list[Any] = [None] * count
    shardings = getattr(exported, "_out_named_shardings", None)
    if getattr(exported, "nr_devices", 1) == 1 or not shardings or len(shardings) != count:
        return none
    from jax import sharding

    get_abstract = getattr(sharding, "get_abstract_mesh", None)
    axis_type = getattr(sharding, "AxisType", None)
    if get_abstract is None or axis_type is None:
        return none
    current = get_abstract()
    shape = _shape_of(current)
    types = getattr(current, "axis_types", ())
    if shape is None or not types or any(t != axis_type.Explicit for t in types):
        return none
    out = []
    for named_sharding in shardings:
        mesh = getattr(named_sharding, "mesh", None)
        if mesh is None or _shape_of(mesh) != shape:
            return none
        out.append(sharding.NamedSharding(current, named_sharding.spec))
    return out


__all__ = ["CallMesh", "call_mesh", "current_mesh", "named", "place", "select_variant",
           "typed_out_shardings"]
