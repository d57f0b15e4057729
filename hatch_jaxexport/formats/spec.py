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

from hatch_jaxexport.formats.dimensions import (
    dim_symbols,
)
from hatch_jaxexport.formats.dtype_names import is_key_dtype
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


# --------------------------------------------------------------------------------------------
# Trees


def is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def is_dataclass_instance(value: Any) -> bool:
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
            or is_namedtuple(value):
        return None
    children, treedef = tree_util.tree_flatten(value, is_leaf=lambda x: x is not value)
    if len(children) == 1 and children[0] is value:
        return None  # a leaf: jax does not know the type as a node
    return children, treedef


def child_labels(value: Any, children: list[Any]) -> tuple[str, ...]:
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


def looks_like_shape(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list | tuple) and all(isinstance(d, int | str | np.integer)
                                                for d in value)
        and not any(isinstance(d, bool) for d in value))


def looks_like_leaf(value: Any) -> bool:
    """``(shape, dtype)``, ``(shape, dtype, [constraints])`` or a ``jax.ShapeDtypeStruct``."""
    return (
        isinstance(value, tuple) and not is_namedtuple(value) and len(value) in (2, 3)
        and looks_like_shape(value[0]) and value[1] is not None
        and not isinstance(value[1], dict | list | tuple)
        and (not hasattr(value[1], "shape") or isinstance(value[1], np.dtype | type))
    ) or (hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type)
          and not is_dataclass_instance(value))


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


def check_static_value(value: Any) -> bool:
    """Whether ``value`` is a JSON scalar (a static field of a dataclass in a structure is
    recorded in the structure's text; static *arguments* take more, see ``statics``)."""
    return value is None or (isinstance(value, str | int | float | bool)
                             and not (isinstance(value, float) and not np.isfinite(value)))


__all__ = ["AuxKeyer", "ClassNode", "JsonScalar", "LeafSpec", "RegisteredNode", "Structure",
           "X64_DTYPES", "check_static_value", "child_labels", "is_dataclass_instance",
           "is_namedtuple", "is_plain_data", "iter_leaves", "looks_like_leaf", "looks_like_shape",
           "numpy_dtype", "plain_aux_key", "split_node", "static_key", "tree_map_leaves",
           "tree_to_json", "type_name"]
