"""Sharded exports: meshes and partition specs of ``@exportable``, and their jax side.

A function declared with ``mesh={"data": 2, "model": 2}`` is exported once per *mesh variant*:
by default the single-device variant and the sharded one (``mesh=[...]`` lists the variants,
``None`` standing for a single device). A sharded variant is lowered over an abstract mesh (no
devices needed at build time) with ``NamedSharding`` inputs from ``in_specs`` and outputs from
``out_specs``; at call time the loader picks the variant matching the mesh of the call's context
(the arguments' shardings, or the mesh set with ``jax.set_mesh`` / ``with mesh:``).

The parsing half of this module (meshes, specs, validation at decoration) is pure Python; the
jax half (abstract meshes, shardings, the call's mesh, placement) imports jax lazily.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hatch_jaxexport.errors import SpecError
from hatch_jaxexport.formats.manifest import (
    MeshShape as MeshShape,  # re-exported: sharding's vocabulary
)
from hatch_jaxexport.formats.manifest import mesh_from_record as mesh_from_record
from hatch_jaxexport.formats.manifest import mesh_text as mesh_text
from hatch_jaxexport.formats.spec import ClassNode, LeafSpec, Structure, dim_symbols, evaluate_dim

#: A mesh's axes in order: ``(("data", 2), ("model", 2))``.
#: The mesh variants of a function; ``None`` is the single-device variant.
MeshVariants = tuple[MeshShape | None, ...]

SpecEntry = str | tuple[str, ...] | None


@dataclasses.dataclass(frozen=True)
class PSpec:
    """A partition spec without jax: one entry per leading array axis (an axis name, a tuple
    of axis names, or ``None`` for an axis that is not split). ``PSpec(())`` is replicated."""

    entries: tuple[SpecEntry, ...] = ()

    @property
    def axes(self) -> tuple[str, ...]:
        """The mesh axes this spec splits over, in order."""
        out: list[str] = []
        for entry in self.entries:
            if isinstance(entry, str):
                out.append(entry)
            elif entry is not None:
                out += entry
        return tuple(out)

    def to_jax(self) -> Any:
        from jax.sharding import PartitionSpec

        return PartitionSpec(*self.entries)

    def batched(self) -> PSpec:
        """The spec of the same value with a (not split) batch axis in front."""
        return PSpec((None, *self.entries))

    def __str__(self) -> str:
        return f"P({', '.join(map(repr, self.entries))})"


REPLICATED = PSpec()


# --------------------------------------------------------------------------------------------
# Meshes


def describe_mesh(shape: MeshShape | None) -> str:
    """``mesh data=2 x model=2``, or ``a single device``, for messages."""
    if not shape:
        return "a single device"
    return "mesh " + " x ".join(f"{name}={size}" for name, size in shape)


def mesh_record(shape: MeshShape | None) -> dict[str, Any]:
    """The manifest form of a variant: ``{"axes": [...], "sizes": [...]}``, ``{}`` for none.

    Two lists, not a dict: the manifest is written with sorted keys, and axis order matters.
    """
    if not shape:
        return {}
    return {"axes": [name for name, _ in shape], "sizes": [size for _, size in shape]}


def mesh_size(shape: MeshShape | None) -> int:
    return math.prod(size for _, size in shape or ())


def _parse_one_mesh(fn_name: str, raw: Any) -> MeshShape:
    where = f"@exportable spec of {fn_name}: mesh"
    if not isinstance(raw, Mapping) or not raw:
        raise SpecError(f"{where} must map axis names to sizes, e.g. {{'data': 2, 'model': 2}}; "
                        f"got {raw!r}")
    out = []
    for name, size in raw.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise SpecError(f"{where}: axis name {name!r} must be an identifier string")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise SpecError(f"{where}: axis {name!r} must have an int size >= 1, got {size!r}")
        out.append((name, size))
    return tuple(out)


def parse_meshes(fn_name: str, raw: Any) -> MeshVariants | None:
    """The mesh variants of ``mesh=``: a dict gives (single device, that mesh); a list gives
    exactly its items (``None`` for the single-device variant)."""
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        return (None, _parse_one_mesh(fn_name, raw))
    if isinstance(raw, str) or not isinstance(raw, Sequence) or not raw:
        raise SpecError(f"@exportable spec of {fn_name}: mesh must be a dict of axis sizes "
                        "(exported with and without it) or a non-empty list of such dicts and "
                        f"None (the single-device variant); got {raw!r}")
    variants: list[MeshShape | None] = []
    for item in raw:
        variant = None if item is None else _parse_one_mesh(fn_name, item)
        if variant in variants:
            raise SpecError(f"@exportable spec of {fn_name}: mesh lists "
                            f"{describe_mesh(variant)} twice")
        variants.append(variant)
    if variants == [None]:
        raise SpecError(f"@exportable spec of {fn_name}: mesh=[None] declares no mesh; leave "
                        "mesh out for a single-device function")
    return tuple(variants)


# --------------------------------------------------------------------------------------------
# Partition specs


def is_partition_spec(value: Any) -> bool:
    """Whether ``value`` is a ``jax.sharding.PartitionSpec`` (without importing jax)."""
    kind = type(value)
    return kind.__module__.startswith("jax") and kind.__name__ in ("PartitionSpec", "P")


def _entry(raw: Any, where: str) -> SpecEntry:
    if raw is None or isinstance(raw, str):
        return raw
    if isinstance(raw, list | tuple) and raw and all(isinstance(a, str) for a in raw):
        return tuple(raw)
    raise SpecError(f"{where}: a partition-spec entry is an axis name, a tuple of axis names "
                    f"or None, got {raw!r}")


def parse_leaf_spec(raw: Any, where: str) -> PSpec:
    """A ``PartitionSpec``, an axis name, or a tuple/list of entries, as a :class:`PSpec`."""
    if raw is None:
        return REPLICATED
    if isinstance(raw, PSpec):
        return raw
    if isinstance(raw, str):
        return PSpec((raw,))
    if is_partition_spec(raw):
        return PSpec(tuple(_entry(e, where) for e in tuple(raw)))
    if isinstance(raw, list | tuple):
        return PSpec(tuple(_entry(e, where) for e in raw))
    raise SpecError(f"{where}: expected a PartitionSpec, an axis name, a tuple of entries or "
                    f"None, got {raw!r}")


def _is_broadcast(raw: Any) -> bool:
    """A spec that applies to every leaf of a container (a PartitionSpec or an axis name)."""
    return isinstance(raw, PSpec | str) or is_partition_spec(raw)


def resolve_tree(raw: Any, tree: Any, where: str) -> Any:
    """Match a spec (a pytree prefix of the argument) to a parsed argument tree.

    Returns the tree with a :class:`PSpec` at every leaf. ``None`` replicates a whole subtree;
    a PartitionSpec or an axis name applies to every leaf below it; at an array a tuple of
    entries is its spec; at a dict, list, tuple, namedtuple or dataclass a spec of the same
    kind (a dict for classes, by field) is matched item by item (dict keys left out are
    replicated).
    """
    if isinstance(tree, LeafSpec):
        return parse_leaf_spec(raw, where)
    if tree is None:
        return None
    if raw is None or _is_broadcast(raw):
        spec = parse_leaf_spec(raw, where)
        return _map_structure(lambda _leaf: spec, tree)
    if isinstance(tree, Mapping | ClassNode):
        fields = tuple(tree) if isinstance(tree, Mapping) else tree.fields
        if not isinstance(raw, Mapping):
            raise SpecError(f"{where}: a {'dict' if isinstance(tree, Mapping) else 'class'} "
                            f"argument takes a dict of specs, one PartitionSpec for all its "
                            f"arrays, or None; got {raw!r}")
        unknown = [k for k in raw if k not in fields]
        if unknown:
            raise SpecError(f"{where}: spec keys {unknown} are not in the argument (keys: "
                            f"{list(fields)})")
        if isinstance(tree, Mapping):
            return type(tree)((k, resolve_tree(raw.get(k), v, f"{where}[{k!r}]"))
                              for k, v in tree.items())
        return tree.replace(tuple(
            resolve_tree(raw.get(f), v, f"{where}.{f}")
            for f, v in zip(tree.fields, tree.items, strict=True)))
    if not isinstance(raw, list | tuple) or len(raw) != len(tree):
        raise SpecError(f"{where}: a {type(tree).__name__} of {len(tree)} takes a "
                        f"{type(tree).__name__} of {len(tree)} specs, one PartitionSpec for all "
                        f"its arrays, or None; got {raw!r}")
    items = [resolve_tree(r, v, f"{where}[{i}]")
             for i, (r, v) in enumerate(zip(raw, tree, strict=True))]
    return items if isinstance(tree, list) else tuple(items)


def _map_structure(fn: Any, tree: Any) -> Any:
    """Like ``spec.tree_map_leaves`` but keeps ``ClassNode`` nodes (a parsed tree's shape)."""
    if isinstance(tree, LeafSpec):
        return fn(tree)
    if tree is None:
        return None
    if isinstance(tree, Mapping):
        return type(tree)((k, _map_structure(fn, v)) for k, v in tree.items())
    if isinstance(tree, ClassNode):
        return tree.replace(tuple(_map_structure(fn, v) for v in tree.items))
    items = [_map_structure(fn, v) for v in tree]
    return items if isinstance(tree, list) else tuple(items)


def zip_leaves(tree: Any, specs: Any, path: str = "") -> Iterator[tuple[str, LeafSpec, PSpec]]:
    """``(path, LeafSpec, PSpec)`` for each leaf of a parsed tree and its resolved specs."""
    if isinstance(tree, LeafSpec):
        yield path, tree, specs
    elif isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from zip_leaves(value, specs[key], f"{path}[{key!r}]" if path else str(key))
    elif isinstance(tree, ClassNode):
        for field, value, spec in zip(tree.fields, tree.items, specs.items, strict=True):
            yield from zip_leaves(value, spec, f"{path}.{field}")
    elif isinstance(tree, list | tuple):
        for i, (value, spec) in enumerate(zip(tree, specs, strict=True)):
            yield from zip_leaves(value, spec, f"{path}[{i}]")


def _check_axes(spec: PSpec, meshes: MeshVariants, where: str) -> None:
    axes = spec.axes
    repeated = sorted({a for a in axes if axes.count(a) > 1})
    if repeated:
        raise SpecError(f"{where}: {spec} splits over {', '.join(map(repr, repeated))} more than "
                        "once")
    for shape in meshes:
        if shape is None:
            continue
        names = [n for n, _ in shape]
        unknown = [a for a in axes if a not in names]
        if unknown:
            raise SpecError(f"{where}: {spec} names axis {unknown[0]!r}, which "
                            f"{describe_mesh(shape)} lacks (axes: {', '.join(names)})")


def _always_divisible(dim: str, size: int) -> bool:
    symbols = sorted(dim_symbols(dim))
    if not symbols:
        return evaluate_dim(dim, {}) % size == 0
    values = range(1, size + 2)
    for combo in itertools.islice(itertools.product(values, repeat=len(symbols)), 512):
        try:
            if evaluate_dim(dim, dict(zip(symbols, combo, strict=True))) % size:
                return False
        except ZeroDivisionError:
            continue
    return True


def check_leaf(leaf: LeafSpec, spec: PSpec, meshes: MeshVariants, where: str) -> None:
    """Axis names known to every mesh, no axis twice, rank, and divisible split dimensions."""
    _check_axes(spec, meshes, where)
    if len(spec.entries) > len(leaf.shape):
        raise SpecError(f"{where}: {spec} has {len(spec.entries)} entries but the array "
                        f"{leaf.describe()} has rank {len(leaf.shape)}")
    for axis, (entry, dim) in enumerate(zip(spec.entries, leaf.shape, strict=False)):
        if entry is None:
            continue
        names = (entry,) if isinstance(entry, str) else entry
        for shape in meshes:
            if shape is None:
                continue
            sizes = dict(shape)
            size = math.prod(sizes[n] for n in names)
            if size > 1 and not _always_divisible(dim, size):
                symbol = sorted(dim_symbols(dim))
                hint = f"; write it as a multiple, e.g. '{size}*{symbol[0]}'" if symbol else ""
                raise SpecError(f"{where}: axis {axis} ({dim}) is split over "
                                f"{' x '.join(names)} ({size} devices on "
                                f"{describe_mesh(shape)}), but {dim} is not always a multiple "
                                f"of {size}{hint}")


def resolve_in_specs(fn_name: str, structure_index: int, structure: Structure,
                     raw: Mapping[str, Any] | None, meshes: MeshVariants) -> dict[str, Any]:
    """Per-argument spec trees (a :class:`PSpec` per array) for one structure, checked."""
    where = f"@exportable spec of {fn_name}, structure {structure_index}, in_specs"
    raw = raw or {}
    out = {}
    for name, tree in structure.args.items():
        out[name] = resolve_tree(raw.get(name), tree, f"{where}[{name!r}]")
        for path, leaf, spec in zip_leaves(tree, out[name], name):
            check_leaf(leaf, spec, meshes, f"{where}, argument {path!r}")
    return out


def check_in_spec_names(fn_name: str, raw: Any, params: Sequence[str],
                        static: Sequence[str]) -> None:
    """``in_specs`` is a dict keyed by argument names that take arrays."""
    where = f"@exportable spec of {fn_name}: in_specs"
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where} must map argument names to partition specs, e.g. "
                        f"{{'x': ('data', None)}}; got {raw!r}")
    for name in raw:
        if name not in params:
            raise SpecError(f"{where} names {name!r}, which is not an argument of the function "
                            f"(it takes {', '.join(params) or 'no arguments'})")
        if name in static:
            raise SpecError(f"{where} names {name!r}, a static argument (baked in, never "
                            "sharded)")


def normalize_out_specs(fn_name: str, raw: Any, meshes: MeshVariants) -> Any:
    """Check ``out_specs`` (axis names, entries) and turn PartitionSpecs and axis names into
    :class:`PSpec`; tuples and lists stay (leaf or container: decided by the output at export).
    """
    where = f"@exportable spec of {fn_name}: out_specs"

    def walk(value: Any, path: str) -> Any:
        if value is None:
            return None
        if _is_broadcast(value):  # strings stay: at an array, a tuple of them is one spec
            _check_axes(parse_leaf_spec(value, path), meshes, path)
            return value if isinstance(value, str) else parse_leaf_spec(value, path)
        if isinstance(value, Mapping):
            for key in value:
                if not isinstance(key, str):
                    raise SpecError(f"{path}: dict keys must be strings, got {key!r}")
            return {k: walk(v, f"{path}[{k!r}]") for k, v in value.items()}
        if isinstance(value, list | tuple):
            items = [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return items if isinstance(value, list) else tuple(items)
        raise SpecError(f"{path}: expected a PartitionSpec, an axis name, None, or a "
                        f"dict/list/tuple of them, got {value!r}")

    return walk(raw, where)


# --------------------------------------------------------------------------------------------
# The jax side: export


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


def named(mesh: Any, spec: PSpec) -> Any:
    from jax.sharding import NamedSharding

    return NamedSharding(mesh, spec.to_jax())


def sharded_structs(structure: Structure, specs: Mapping[str, Any], mesh: Any,
                    scope: Any) -> dict[str, Any]:
    """``jax.ShapeDtypeStruct`` trees for a structure, each carrying its ``NamedSharding``."""
    import jax
    import jax.numpy as jnp
    from jax import export

    def build(tree: Any, spec_tree: Any) -> Any:
        if isinstance(tree, LeafSpec):
            shape = export.symbolic_shape(tree.shape_text, scope=scope) if tree.shape else ()
            return jax.ShapeDtypeStruct(shape, jnp.dtype(tree.dtype),
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
        if spec is None or _is_broadcast(spec):
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


# --------------------------------------------------------------------------------------------
# The jax side: the call's mesh, and placing inputs


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
    if mesh is None:
        return None
    try:
        shape = tuple((str(n), int(s)) for n, s in mesh.shape.items())
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
    try:  # `with mesh:` (deprecated, still honoured by jax)
        from jax._src import mesh as mesh_lib

        physical = mesh_lib.thread_resources.env.physical_mesh
        shape = _shape_of(None if physical.empty else physical)
        if shape is not None:
            return CallMesh(shape, "the mesh of `with mesh:`", physical)
    except (ImportError, AttributeError):
        pass
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
            return tree.build([put(v, s, getattr(value, f)) for f, v, s in
                               zip(tree.fields, tree.items, spec.items, strict=True)])
        items = [put(v, s, x) for v, s, x in zip(tree, spec, value, strict=True)]
        return items if isinstance(tree, list) else tuple(items)

    out = dict(values)
    for name, tree in structure.args.items():
        out[name] = put(tree, specs[name], values[name])
    return out


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
    import numpy as np

    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
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
