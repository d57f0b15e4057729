"""Mesh variants and partition specs of ``@exportable``, parsed and checked without jax.

A function declared with ``mesh={"data": 2, "model": 2}`` is exported once per *mesh variant*:
by default the single-device variant and the sharded one (``mesh=[...]`` lists the variants,
``None`` standing for a single device). ``in_specs`` and ``out_specs`` say how each array is split
over a variant's axes. This module holds the vocabulary (:class:`PSpec`, ``MeshVariants``), the
parsing of ``mesh=``, ``in_specs=`` and ``out_specs=`` at decoration, the resolution of specs
against a parsed structure, and the manifest form of a variant. Pure Python: the jax side lives in
``runtime.artifacts.placement`` (the call) and ``build._sharded_export`` (the export).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hatch_jaxexport.errors import SpecError
from hatch_jaxexport.formats.dimensions import dim_symbols, evaluate_dim
from hatch_jaxexport.formats.manifest import MeshShape
from hatch_jaxexport.formats.spec import ClassNode, LeafSpec, Structure, tree_map_leaves

#: The mesh variants of a function (each a ``MeshShape``: ``(("data", 2), ("model", 2))``);
#: ``None`` is the single-device variant.
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


def is_broadcast(raw: Any) -> bool:
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
    if raw is None or is_broadcast(raw):
        spec = parse_leaf_spec(raw, where)
        return tree_map_leaves(lambda _leaf: spec, tree, keep_class_nodes=True)
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
        if is_broadcast(value):  # strings stay: at an array, a tuple of them is one spec
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


__all__ = ["REPLICATED", "MeshVariants", "PSpec", "SpecEntry", "check_in_spec_names",
           "check_leaf", "describe_mesh", "is_broadcast", "is_partition_spec", "mesh_record",
           "mesh_size", "normalize_out_specs", "parse_leaf_spec", "parse_meshes",
           "resolve_in_specs", "resolve_tree", "zip_leaves"]
