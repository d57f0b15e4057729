"""Export specs: structures of symbolic shapes and dtypes, parsed and checked (pure, no I/O).

A *structure* maps argument names to pytrees whose leaves are ``(shape, dtype)`` or
``(shape, dtype, [constraints])`` tuples, or ``jax.ShapeDtypeStruct``. Shapes are jax.export's
symbolic shape strings (``"a, b"``, ``"2*n, 3"``, ``""`` for a scalar).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from hatch_jaxexport.errors import SpecError
from hatch_jaxexport.formats.dimensions import (
    constraint_symbols,
    dim_symbols,
    parse_constraint,
    parse_shape,
)
from hatch_jaxexport.formats.dtype_names import dtype_name, is_dtype_like, is_key_dtype
from hatch_jaxexport.formats.statics import static_key

#: Dtypes that exist in jax only with ``jax_enable_x64`` on.
X64_DTYPES = frozenset({"float64", "int64", "uint64", "complex128"})

JsonScalar = str | int | float | bool | None


class _Frozen:
    """Immutable value objects with written-out methods: a frozen dataclass would generate and
    compile them when this module is imported, on every ``import`` of a package of
    exportables."""

    __slots__ = ()
    _value_fields: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._value_fields)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._value_fields)
        return f"{type(self).__name__}({inner})"


class LeafSpec(_Frozen):
    """One array argument: a symbolic shape (canonical dimension strings) and a dtype name."""

    __slots__ = ("dtype", "shape")
    _value_fields = ("shape", "dtype")
    shape: tuple[str, ...]
    dtype: str

    def __init__(self, shape: tuple[str, ...], dtype: str) -> None:
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    @property
    def shape_text(self) -> str:
        """The shape as jax.export's ``symbolic_shape`` reads it."""
        return ", ".join(self.shape) + ("," if len(self.shape) == 1 else "")

    def describe(self) -> str:
        return f"{self.dtype}[{', '.join(self.shape)}]"


class ClassNode(_Frozen):
    """A namedtuple or dataclass in a structure: its type, field names and fields' specs, and
    the values of its static fields (``(name, value)`` pairs: equinox ``field(static=True)``,
    flax ``struct.field(pytree_node=False)``), which are part of the node, not children."""

    __slots__ = ("fields", "items", "static", "type")
    _value_fields = ("type", "fields", "items", "static")
    type: type
    fields: tuple[str, ...]
    items: tuple[Any, ...]
    static: tuple[tuple[str, Any], ...]

    def __init__(self, type: type, fields: tuple[str, ...], items: tuple[Any, ...],
                 static: tuple[tuple[str, Any], ...] = ()) -> None:
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "items", items)
        object.__setattr__(self, "static", static)

    def replace(self, items: tuple[Any, ...]) -> ClassNode:
        """The same class, fields and static values with other field specs."""
        return ClassNode(self.type, self.fields, items, self.static)

    @property
    def kind(self) -> str:
        return "namedtuple" if issubclass(self.type, tuple) else "dataclass"

    def children(self, value: Any) -> list[Any]:
        """The values of ``value`` (an instance of ``type``) at this node's children."""
        return [getattr(value, name) for name in self.fields]

    def build(self, items: Sequence[Any]) -> Any:
        """An instance of the type with the given field values (both kinds take keywords).

        With static fields the instance is made as jax's unflattening of such a class makes it
        (equinox's, flax's): fields set on a bare instance, so a custom ``__init__`` (such as
        ``eqx.nn.Linear(in_features, out_features, key=...)``) is not called."""
        values = dict(zip(self.fields, items, strict=True))
        if not self.static:
            return self.type(**values)
        instance = object.__new__(self.type)
        for name, value in (*values.items(), *self.static):
            object.__setattr__(instance, name, value)
        return instance


_PLAIN_SCALARS = (type(None), bool, int, float, str, bytes)
#: Gives the stable text of a registered node's aux data (``type, aux -> text``), or raises
#: ``ValueError`` saying why it has none. The text is part of the structure's key, which the
#: manifest files artifacts under, so it must read the same in every process.
AuxKeyer = Callable[[type, Any], str]


def is_plain_data(value: Any) -> bool:
    """Whether ``value`` is built of ``None``, bools, numbers, strings, bytes, tuples, lists
    and dicts only: its ``repr`` is then the same in every process (no memory address, no set
    whose order follows string hashing), so it can key a structure as it is."""
    if type(value) in _PLAIN_SCALARS:
        return True
    if type(value) in (tuple, list):
        return all(is_plain_data(item) for item in value)
    if type(value) is dict:
        return all(is_plain_data(k) and is_plain_data(v) for k, v in value.items())
    return False


def plain_aux_key(cls: type, aux: Any) -> str:
    """The key of plain aux data (its ``repr``); ``ValueError`` for anything else. What a
    structure parsed without the runtime's keyer (which also reads jax's serialization
    registry) accepts."""
    if is_plain_data(aux):
        return repr(aux)
    raise ValueError(f"its aux data ({type(aux).__name__}) is not plain data, and no keyer that "
                     f"reads registered serializations was given")


class RegisteredNode(ClassNode):
    """A node of any other type in jax's pytree registry (a sparse ``BCOO``, a class registered
    with ``register_pytree_node``): its children's specs, labelled by jax's key paths or the
    attributes that hold them, and ``treedef``, the one-level ``PyTreeDef`` (type and aux data)
    that rebuilds it. jax flattens and unflattens it, so nothing about the class (its
    ``__init__``, which fields are data) is guessed; its aux data must match at call time.

    ``aux_text`` keys the aux data (an ``AuxKeyer`` made it): the ``repr`` of plain data, else
    a text of its serialization, never a ``repr`` that holds a memory address (equal objects
    print differently in every process, and the manifest's key would never be found again).
    A call matches when its aux data equals this one or, failing that, has the same key."""

    __slots__ = ("aux_text", "keyer", "treedef")
    _value_fields = ("type", "fields", "items", "aux_text")
    treedef: Any
    aux_text: str
    keyer: AuxKeyer

    def __init__(self, type: type, fields: tuple[str, ...], items: tuple[Any, ...],
                 treedef: Any, aux_text: str | None = None,
                 keyer: AuxKeyer = plain_aux_key) -> None:
        super().__init__(type, fields, items)
        object.__setattr__(self, "treedef", treedef)
        object.__setattr__(self, "keyer", keyer)
        object.__setattr__(self, "aux_text", keyer(type, treedef.node_data()[1])
                           if aux_text is None else aux_text)

    @property
    def aux(self) -> Any:
        """jax's aux data of the node (``BCOO``: its dense shape and index flags)."""
        return self.treedef.node_data()[1]

    @property
    def kind(self) -> str:
        return "node"

    def replace(self, items: tuple[Any, ...]) -> RegisteredNode:
        return RegisteredNode(self.type, self.fields, items, self.treedef, self.aux_text,
                              self.keyer)

    def build(self, items: Sequence[Any]) -> Any:
        """The node with these children, made by jax's unflattening of the type."""
        return self.treedef.unflatten(list(items))

    def children(self, value: Any) -> list[Any]:
        split = split_node(value)
        if split is None or self._differs(split[1]):
            raise ValueError(f"{value!r:.80} is not a {self.type.__name__} with aux data "
                             f"{self.aux_text}")
        return split[0]

    def _other_key(self, aux: Any) -> str | None:
        try:
            return self.keyer(self.type, aux)
        except ValueError:
            return None

    def _differs(self, treedef: Any) -> bool:
        """Whether a value's one-level treedef differs from this node's: another type, or aux
        data neither equal (jax's comparison, the quick one) nor of the same key."""
        if treedef.node_data()[0] is not self.type:
            return True
        try:
            if treedef == self.treedef:
                return False
        except Exception:  # aux data whose == gives no bool (numpy arrays): compare keys
            pass
        return self._other_key(treedef.node_data()[1]) != self.aux_text

    def mismatch(self, value: Any) -> str | None:
        """What differs between ``value`` and this node (type or aux data), or ``None``."""
        split = split_node(value)
        if split is None or split[1].node_data()[0] is not self.type:
            return f"a {self.type.__name__}"
        if self._differs(split[1]):
            aux = split[1].node_data()[1]
            return (f"a {self.type.__name__} with aux data {self.aux_text}, got aux data "
                    f"{self._other_key(aux) or repr(aux)}")
        return None


class Structure(_Frozen):
    """One alternative set of argument specs for a function (one symbolic scope)."""

    __slots__ = ("__dict__", "args", "constraints")  # __dict__: the cached properties
    _value_fields = ("args", "constraints")
    args: Mapping[str, Any]
    constraints: tuple[str, ...]

    def __init__(self, args: Mapping[str, Any], constraints: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "constraints", constraints)

    @functools.cached_property
    def key(self) -> str:
        """A canonical, human-readable text that identifies this structure."""
        parts = [f"{name}: {_describe_tree(tree)}" for name, tree in self.args.items()]
        if self.constraints:
            parts.append("where " + ", ".join(self.constraints))
        return "; ".join(parts)

    @functools.cached_property
    def symbols(self) -> frozenset[str]:
        found: set[str] = set()
        for _, leaf in iter_leaves(self.args):
            for dim in leaf.shape:
                found |= dim_symbols(dim)
        return frozenset(found)

    @functools.cached_property
    def uses_x64(self) -> bool:
        return any(leaf.dtype in X64_DTYPES for _, leaf in iter_leaves(self.args))

    def to_json(self) -> dict[str, Any]:
        return {"args": {name: tree_to_json(tree) for name, tree in self.args.items()},
                "constraints": list(self.constraints)}


# --------------------------------------------------------------------------------------------
# Dtypes


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a canonical name, ml_dtypes' too (``bfloat16``, ``float8_*``); a typed
    PRNG key (``key<fry>``) has none: ``TypeError`` (``runtime.jax_dtypes.jax_dtype`` has it)."""
    if is_key_dtype(name):
        raise TypeError(f"{name} is a typed PRNG key dtype, which numpy has no dtype for")
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # installed with jax

        extra = getattr(ml_dtypes, name, None)
        if extra is None:
            raise
        return np.dtype(extra)


def parse_dtype(raw: Any) -> str:
    """Return the canonical dtype name of a name that says its size (``"float32"``, ``"f4"``),
    a numpy or jax dtype or scalar type; ``TypeError`` naming the closest valid names (``"float"``,
    Python's ``float`` and misspellings are refused: see ``formats.dtype_names``)."""
    return dtype_name(raw)


# --------------------------------------------------------------------------------------------
# Trees


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


#: Containers a spec reads itself, though jax's registry holds them too.
_OWN_CONTAINERS = (dict, list, tuple, type(None), collections.OrderedDict,
                   collections.defaultdict)


def split_node(value: Any) -> tuple[list[Any], Any] | None:
    """``(children, one-level PyTreeDef)`` of a value whose type is a node in jax's pytree
    registry, other than the containers a spec reads itself; ``None`` for anything else.

    Registration is what decides, not shape: a ``chex.dataclass`` is also a ``Mapping``, a
    sparse ``BCOO`` has ``.shape`` and ``.dtype``, and read by shape they became a dict or a
    dense leaf. jax's registry is read only when jax is already imported: an instance of a
    registered type exists only once its library has imported jax, so this module never
    imports jax itself."""
    jax = sys.modules.get("jax")
    tree_util = getattr(jax, "tree_util", None)
    if tree_util is None or isinstance(value, type) or type(value) in _OWN_CONTAINERS \
            or _is_namedtuple(value):
        return None
    children, treedef = tree_util.tree_flatten(value, is_leaf=lambda x: x is not value)
    if len(children) == 1 and children[0] is value:
        return None  # a leaf: jax does not know the type as a node
    return children, treedef


def _child_labels(value: Any, children: list[Any]) -> tuple[str, ...]:
    """A name for each child of a registered node: the attribute, key or field jax's key path
    gives, else the attribute that holds exactly that child (``BCOO``'s ``data`` and
    ``indices``), else ``item<i>``."""
    jax = sys.modules["jax"]
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(
        value, is_leaf=lambda x: x is not value)[0]]
    attributes = getattr(value, "__dict__", {})
    labels: list[str] = []
    for index, (path, child) in enumerate(zip(paths, children, strict=True)):
        key = path[0] if path else None
        label = getattr(key, "name", None) or (
            str(key.key) if hasattr(key, "key") and isinstance(key.key, str) else None)
        if label is None:
            label = next((name for name, item in attributes.items()
                          if item is child and name not in labels), f"item{index}")
        labels.append(label)
    return tuple(labels)


def _looks_like_shape(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list | tuple) and all(isinstance(d, int | str | np.integer)
                                                for d in value)
        and not any(isinstance(d, bool) for d in value))


def _looks_like_leaf(value: Any) -> bool:
    """``(shape, dtype)``, ``(shape, dtype, [constraints])`` or a ``jax.ShapeDtypeStruct``."""
    return (
        isinstance(value, tuple) and not _is_namedtuple(value) and len(value) in (2, 3)
        and _looks_like_shape(value[0]) and value[1] is not None
        and not isinstance(value[1], dict | list | tuple)
        and (not hasattr(value[1], "shape") or isinstance(value[1], np.dtype | type))
    ) or (hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type)
          and not _is_dataclass_instance(value))


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
    if _is_namedtuple(raw):
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
    return value is not None and not _is_tree_node(value) and not _looks_like_leaf(value)


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
                if _looks_like_shape(first) else None)
    second = raw[1]
    if isinstance(raw, list) and _looks_like_leaf(tuple(raw)) and is_dtype_like(second):
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
    return isinstance(value, Mapping | list | tuple) or _is_dataclass_instance(value) \
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


def _registered_node(raw: Any, where: str, constraints: list[str], keyer: AuxKeyer,
                     ) -> ClassNode | None:
    """The node of a value whose type jax registers (``None`` if it is not one): a dataclass
    whose data fields are jax's children stays a ``ClassNode`` of its fields (chex, flax and
    equinox dataclasses, static fields included); any other type is a ``RegisteredNode``."""
    split = split_node(raw)
    if split is None:
        return None
    children, treedef = split
    labels = _child_labels(raw, children)
    if _is_dataclass_instance(raw) and set(labels) == {
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
    if _looks_like_leaf(raw):
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
    if _is_namedtuple(raw) or _is_dataclass_instance(raw):
        return _class_node(raw, where, constraints, keyer)
    if isinstance(raw, list | tuple):
        problem = _misshapen_leaf(raw)
        if problem is not None:
            raise SpecError(f"{where}: {problem}")
        items = [_parse_tree(v, f"{where}[{i}]", constraints, keyer)
                 for i, v in enumerate(raw)]
        return items if isinstance(raw, list) else tuple(items)
    raise SpecError(f"{where}: {_not_a_tree(raw)}")


def iter_leaves(tree: Any, path: str = "") -> Iterator[tuple[str, LeafSpec]]:
    """Yield ``(path, LeafSpec)`` for every leaf of a parsed tree or ``Structure.args``."""
    if isinstance(tree, LeafSpec):
        yield path, tree
    elif isinstance(tree, Mapping):
        for key, value in tree.items():
            sub = f"{path}[{key!r}]" if path else str(key)
            yield from iter_leaves(value, sub)
    elif isinstance(tree, ClassNode):
        for field, value in zip(tree.fields, tree.items, strict=True):
            yield from iter_leaves(value, f"{path}.{field}")
    elif isinstance(tree, list | tuple):
        for i, value in enumerate(tree):
            yield from iter_leaves(value, f"{path}[{i}]")


def _describe_tree(tree: Any) -> str:
    if isinstance(tree, LeafSpec):
        return tree.describe()
    if tree is None:
        return "None"
    if isinstance(tree, Mapping):
        return "{" + ", ".join(f"{k}: {_describe_tree(v)}" for k, v in tree.items()) + "}"
    if isinstance(tree, ClassNode):
        inner = ", ".join([f"{f}={_describe_tree(v)}"
                           for f, v in zip(tree.fields, tree.items, strict=True)]
                          + [f"{f}={v!r}" for f, v in tree.static])
        aux = f"; {tree.aux_text}" if isinstance(tree, RegisteredNode) else ""
        return f"{tree.type.__name__}({inner}{aux})"
    inner = ", ".join(_describe_tree(v) for v in tree)
    return f"[{inner}]" if isinstance(tree, list) else f"({inner}{',' if len(tree) == 1 else ''})"


def type_name(cls: type) -> str:
    """``module:qualname``: how the manifest names a pytree type."""
    return f"{cls.__module__}:{cls.__qualname__}"


def tree_to_json(tree: Any) -> Any:
    """A tagged JSON form of a parsed tree (for the manifest and non-Python consumers)."""
    if isinstance(tree, LeafSpec):
        return {"kind": "array", "shape": list(tree.shape), "dtype": tree.dtype}
    if tree is None:
        return {"kind": "none"}
    if isinstance(tree, Mapping):
        return {"kind": "dict", "items": {k: tree_to_json(v) for k, v in tree.items()}}
    if isinstance(tree, ClassNode):
        node = {"kind": tree.kind, "type": type_name(tree.type),
                "items": {f: tree_to_json(v)
                          for f, v in zip(tree.fields, tree.items, strict=True)}}
        if isinstance(tree, RegisteredNode):
            return {**node, "aux": tree.aux_text}
        return {**node, "static": dict(tree.static)} if tree.static else node
    return {"kind": "list" if isinstance(tree, list) else "tuple",
            "items": [tree_to_json(v) for v in tree]}


def tree_map_leaves(fn: Callable[[LeafSpec], Any], tree: Any, *,
                    keep_class_nodes: bool = False) -> Any:
    """Rebuild a parsed tree with each ``LeafSpec`` replaced by ``fn(leaf)``.

    ``ClassNode`` nodes become instances of their classes (the tree a call passes), or stay
    ``ClassNode`` nodes with ``keep_class_nodes`` (a parsed tree of the same shape)."""
    if isinstance(tree, LeafSpec):
        return fn(tree)
    if tree is None:
        return None
    if isinstance(tree, Mapping):
        return type(tree)((k, tree_map_leaves(fn, v, keep_class_nodes=keep_class_nodes))
                          for k, v in tree.items())
    items = [tree_map_leaves(fn, v, keep_class_nodes=keep_class_nodes) for v in
             (tree.items if isinstance(tree, ClassNode) else tree)]
    if isinstance(tree, ClassNode):
        return tree.replace(tuple(items)) if keep_class_nodes else tree.build(items)
    return items if isinstance(tree, list) else tuple(items)


# --------------------------------------------------------------------------------------------
# Structures


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


def check_static_value(value: Any) -> bool:
    """Whether ``value`` is a JSON scalar (a static field of a dataclass in a structure is
    recorded in the structure's text; static *arguments* take more, see ``statics``)."""
    return value is None or (isinstance(value, str | int | float | bool)
                             and not (isinstance(value, float) and not np.isfinite(value)))


__all__ = ["AuxKeyer", "ClassNode", "JsonScalar", "LeafSpec", "RegisteredNode", "Structure",
           "X64_DTYPES", "check_static_value", "is_plain_data", "iter_leaves", "numpy_dtype",
           "parse_dtype", "parse_structure", "plain_aux_key", "split_node", "static_key",
           "tree_map_leaves", "tree_to_json", "type_name"]
