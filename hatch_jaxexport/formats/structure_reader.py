"""Reading a spec's structures: the raw ``{"x": ("a, b", "float32")}`` trees checked and parsed.

What ``@exportable`` was given for each structure becomes a ``spec.Structure`` here
(``parse_structure``), with every problem a ``SpecError`` that names the function, the
structure, the argument and the position in its tree, what was expected and what was given.
Dtype names are read by ``parse_dtype``; shapes and constraints by the dimension grammar
(``dimensions``). Pure: no jax at import, no I/O.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from hatch_jaxexport.errors import SpecError
from hatch_jaxexport.formats.dimensions import (
    constraint_symbols,
    parse_constraint,
    parse_shape,
)
from hatch_jaxexport.formats.dtype_names import dtype_name, is_dtype_like
from hatch_jaxexport.formats.spec import (
    AuxKeyer,
    ClassNode,
    LeafSpec,
    RegisteredNode,
    Structure,
    check_static_value,
    child_labels,
    is_dataclass_instance,
    is_namedtuple,
    looks_like_leaf,
    looks_like_shape,
    plain_aux_key,
    split_node,
    type_name,
)


def parse_dtype(raw: Any) -> str:
    """Return the canonical dtype name of a name that says its size (``"float32"``, ``"f4"``),
    a numpy or jax dtype or scalar type; ``TypeError`` naming the closest valid names (``"float"``,
    Python's ``float`` and misspellings are refused: see ``formats.dtype_names``)."""
    return dtype_name(raw)


def _is_static_field(field: dataclasses.Field[Any]) -> bool:
    """A dataclass field that is part of the pytree node, not a child: equinox's
    ``field(static=True)`` (also jax's ``register_dataclass`` convention) or flax's
    ``struct.field(pytree_node=False)``."""
    return field.metadata.get("static") is True or field.metadata.get("pytree_node") is False


def _is_static_value(value: Any) -> bool:
    return check_static_value(value) or (
        isinstance(value, tuple) and all(_is_static_value(v) for v in value))


def _class_node(raw: Any, where: str, constraints: list[str], keyer: AuxKeyer) -> ClassNode:
    """A namedtuple or dataclass spec: its children's specs and its static fields' values."""
    if is_namedtuple(raw):
        fields, static = tuple(type(raw)._fields), ()
    else:
        all_fields = dataclasses.fields(raw)
        fields = tuple(f.name for f in all_fields if f.init and not _is_static_field(f))
        static = tuple((f.name, getattr(raw, f.name)) for f in all_fields if _is_static_field(f))
        for name, value in static:
            if not _is_static_value(value):
                raise SpecError(f"{where}.{name}: a static field of {type(raw).__name__} must "
                                f"hold a JSON scalar or a tuple of them (it is recorded in the "
                                f"manifest), got {value!r}")
    items = tuple(_parse_tree(getattr(raw, f), f"{where}.{f}", constraints, keyer)
                  for f in fields)
    return ClassNode(type(raw), fields, items, static)


#: What a position in a spec tree may hold (said when it holds something else).
_TREE_EXPECTED = ("expected a leaf ((shape, dtype), (shape, dtype, [constraints]) or a "
                  "jax.ShapeDtypeStruct), None, or a dict/list/tuple/namedtuple/dataclass of them")


def _parse_leaf(raw: Any, where: str, constraints: list[str]) -> LeafSpec:
    if isinstance(raw, tuple):
        shape_raw, dtype_raw = raw[0], raw[1]
        if len(raw) == 3:
            extra = raw[2]
            if isinstance(extra, str) or not isinstance(extra, Sequence):
                raise SpecError(f"{where}: constraints must be a list of strings, "
                                f"got {extra!r}")
            for item in extra:
                try:
                    constraints.append(parse_constraint(item))
                except ValueError as err:
                    raise SpecError(f"{where}: {err}") from None
    else:
        shape_raw, dtype_raw = tuple(raw.shape), raw.dtype
    try:
        shape = parse_shape(shape_raw)
    except ValueError as err:
        raise SpecError(f"{where}: {err}") from None
    try:
        dtype = parse_dtype(dtype_raw)
    except TypeError as err:
        if isinstance(dtype_raw, str) and is_dtype_like(shape_raw) \
                and not is_dtype_like(dtype_raw):
            raise SpecError(f"{where}: {raw!r} gives the dtype first: a leaf is (shape, dtype), "
                            f"write {(dtype_raw, shape_raw)!r}") from None
        raise SpecError(f"{where}: bad dtype: {err}") from None
    return LeafSpec(shape, dtype)


def _is_bare(value: Any) -> bool:
    """A value that can only be part of a leaf: a shape, a dtype, a number..., never a tree."""
    return value is not None and not _is_tree_node(value) and not looks_like_leaf(value)


def _show_dtype(value: Any) -> str:
    try:
        return repr(value if isinstance(value, str) else parse_dtype(value))
    except TypeError:
        return repr(value)


def _misshapen_leaf(raw: list[Any] | tuple[Any, ...]) -> str | None:
    """What is wrong with a list or tuple meant as a leaf, or ``None`` if it is not one (it
    holds a bare shape or dtype, which no tree may hold, in a leaf-like arrangement)."""
    if not 1 <= len(raw) <= 3 or not any(_is_bare(item) for item in raw):
        return None
    first = raw[0]
    if len(raw) == 1:
        if is_dtype_like(first):
            return (f"{raw!r} has a dtype but no shape: write ('', {_show_dtype(first)}) for a "
                    f"scalar or ('n', {_show_dtype(first)}) for a vector")
        return (f"{raw!r} has a shape but no dtype: write ({first!r}, 'float32')"
                if looks_like_shape(first) else None)
    second = raw[1]
    if isinstance(raw, list) and looks_like_leaf(tuple(raw)) and is_dtype_like(second):
        return (f"{raw!r} is a list, which a spec reads as a list of leaves, yet it holds a "
                f"shape and a dtype: write the leaf as a tuple, {tuple(raw)!r}")
    if first is None and is_dtype_like(second):
        return (f"in the leaf {raw!r}, None is not a shape: write '' for a scalar, or a shape "
                f"such as 'n, 3'")
    if isinstance(first, list | tuple) and not any(map(_is_tree_node, first)) and (
            is_dtype_like(second) or isinstance(second, str)):
        try:
            parse_shape(first)
        except ValueError as err:
            return f"in the leaf {raw!r}, {err}"
    if second is None and isinstance(first, str):
        return (f"the leaf {raw!r} has no dtype (None): write ({first!r}, 'float32') or "
                "another dtype")
    return None


def _is_tree_node(value: Any) -> bool:
    return isinstance(value, Mapping | list | tuple) or is_dataclass_instance(value) \
        or split_node(value) is not None


def _not_a_tree(raw: Any) -> str:
    """What is wrong with a value where a tree was expected (not a leaf, container or None)."""
    if is_dtype_like(raw):
        dtype = _show_dtype(raw)
        return (f"{raw!r} is a dtype without a shape: write ('', {dtype}) for a scalar or "
                f"('n', {dtype}) for a vector ({_TREE_EXPECTED})")
    if isinstance(raw, str):
        try:
            parse_shape(raw)
        except ValueError:
            return f"{_TREE_EXPECTED}; got the string {raw!r}, neither a dtype nor a shape"
        return (f"{raw!r} is a shape without a dtype: write ({raw!r}, 'float32') "
                f"({_TREE_EXPECTED})")
    return f"{_TREE_EXPECTED}; got {raw!r} ({type(raw).__name__})"


def _round_trip_problem(raw: Any, children: list[Any], treedef: Any,
                        labels: tuple[str, ...]) -> str | None:
    """Why jax's unflattening of a spec's registered node would not give the function what
    the caller passed, or ``None``.

    jax rebuilds every argument of an exported function with the type's ``tree_unflatten``.
    Where that puts children in other places than ``tree_flatten`` took them from (an
    ``__init__`` whose parameters are in another order, seen in a real library), the artifact
    computes with swapped values and real calls stop matching it, which showed only as a
    fallback note at run time. An unflattening that raises on the spec's leaves tells
    nothing (an ``__init__`` may convert its arguments): the export says what it hits."""
    try:
        again = split_node(treedef.unflatten(children))
    except Exception:  # a type whose __init__ cannot take a spec's leaves
        return None
    name = type_name(type(raw))
    fix = (f"jax rebuilds every argument with {name}.tree_unflatten, so the function would "
           "get other values than the caller passed; make tree_unflatten put each child "
           "back where tree_flatten took it from")
    if again is None or again[1].node_data()[0] is not type(raw) or len(again[0]) != len(
            children):
        return f"{name} does not survive jax's flatten/unflatten round trip: {fix}"
    moved = [label for label, before, after in zip(labels, children, again[0], strict=True)
             if before is not after and any(after is child for child in children)]
    if moved:
        return (f"{name} does not survive jax's flatten/unflatten round trip: its children "
                f"{', '.join(moved)} come back in each other's places; {fix}")
    return None


def _registered_node(raw: Any, where: str, constraints: list[str], keyer: AuxKeyer,
                     ) -> ClassNode | None:
    """The node of a value whose type jax registers (``None`` if it is not one): a dataclass
    whose data fields are jax's children stays a ``ClassNode`` of its fields (chex, flax and
    equinox dataclasses, static fields included); any other type is a ``RegisteredNode``."""
    split = split_node(raw)
    if split is None:
        return None
    children, treedef = split
    labels = child_labels(raw, children)
    problem = _round_trip_problem(raw, children, treedef, labels)
    if problem is not None:
        raise SpecError(f"{where}: {problem}")
    if is_dataclass_instance(raw) and set(labels) == {
            f.name for f in dataclasses.fields(raw) if f.init and not _is_static_field(f)}:
        return _class_node(raw, where, constraints, keyer)
    items = tuple(_parse_tree(child, f"{where}.{label}", constraints, keyer)
                  for label, child in zip(labels, children, strict=True))
    try:
        aux_text = keyer(type(raw), treedef.node_data()[1])
    except ValueError as err:
        raise SpecError(f"{where}: cannot key the aux data of {type_name(type(raw))} (the "
                        f"manifest files artifacts by it, in every process alike): {err}") \
            from None
    return RegisteredNode(type(raw), labels, items, treedef, aux_text, keyer)


def _parse_tree(raw: Any, where: str, constraints: list[str], keyer: AuxKeyer) -> Any:
    node = _registered_node(raw, where, constraints, keyer)
    if node is not None:
        return node
    if looks_like_leaf(raw):
        return _parse_leaf(raw, where, constraints)
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        out = {}
        for key, value in raw.items():
            if not isinstance(key, str):
                raise SpecError(f"{where}: dict keys must be strings (jax.export cannot "
                                f"serialize {type(key).__name__} keys), got {key!r}")
            out[key] = _parse_tree(value, f"{where}[{key!r}]", constraints, keyer)
        return type(raw)(out) if isinstance(raw, collections.OrderedDict) else out
    if is_namedtuple(raw) or is_dataclass_instance(raw):
        return _class_node(raw, where, constraints, keyer)
    if isinstance(raw, list | tuple):
        problem = _misshapen_leaf(raw)
        if problem is not None:
            raise SpecError(f"{where}: {problem}")
        items = [_parse_tree(v, f"{where}[{i}]", constraints, keyer)
                 for i, v in enumerate(raw)]
        return items if isinstance(raw, list) else tuple(items)
    raise SpecError(f"{where}: {_not_a_tree(raw)}")


def parse_structure(fn_name: str, raw: Any, index: int, extra_constraints: Sequence[str] = (),
                    aux_keyer: AuxKeyer = plain_aux_key) -> Structure:
    """Parse one raw structure (a mapping of argument name to spec tree); ``aux_keyer`` keys
    the aux data of registered nodes (the runtime gives one that reads jax's serialization
    registry; the default accepts plain data only)."""
    where = f"@exportable spec of {fn_name}, structure {index}"
    if not isinstance(raw, Mapping) or not raw:
        raise SpecError(f"{where}: expected a non-empty dict mapping argument names to "
                        f"(shape, dtype), got {raw!r}")
    constraints: list[str] = []
    args = {}
    for name, tree in raw.items():
        if not isinstance(name, str):
            raise SpecError(f"{where}: argument names must be strings, got {name!r}")
        args[name] = _parse_tree(tree, f"{where}, argument {name!r}", constraints, aux_keyer)
    for item in extra_constraints:
        try:
            constraints.append(parse_constraint(item))
        except ValueError as err:
            raise SpecError(f"{where}: {err}") from None
    structure = Structure(args, tuple(dict.fromkeys(constraints)))
    for constraint in structure.constraints:
        unknown = constraint_symbols(constraint) - structure.symbols
        if unknown:
            raise SpecError(f"{where}: constraint {constraint!r} uses "
                            f"{', '.join(sorted(unknown))}, which no argument's shape uses "
                            f"(symbols: {', '.join(sorted(structure.symbols)) or 'none'})")
    return structure


__all__ = ["parse_dtype", "parse_structure"]
