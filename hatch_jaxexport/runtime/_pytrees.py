"""Serialization registration of namedtuple and dataclass pytree nodes, for both build and load."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.spec import type_name

_REGISTERED: set[type] = set()


type_ref = type_name  # ``module:qualname``: how a manifest names a pytree type


def _to_tuples(value: Any) -> Any:
    return tuple(_to_tuples(v) for v in value) if isinstance(value, list) else value


def register(cls: type) -> None:
    """Register ``cls`` for jax.export serialization (namedtuples and jax dataclasses)."""
    if cls in _REGISTERED:
        return
    from jax import export

    name = type_ref(cls)
    try:
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            export.register_namedtuple_serialization(cls, serialized_name=name)
        elif dataclasses.is_dataclass(cls):
            export.register_pytree_node_serialization(
                cls, serialized_name=name,
                serialize_auxdata=lambda aux: json.dumps(aux).encode(),
                deserialize_auxdata=lambda data: _to_tuples(json.loads(data)),
            )
        else:
            return
    except ValueError as err:
        if "already registered" not in str(err):
            raise
    _REGISTERED.add(cls)


def node_types(treedef: Any) -> list[type]:
    """Every custom (non builtin-container) node type in a jax ``PyTreeDef``."""
    found: list[type] = []
    data = treedef.node_data()
    if data is not None:
        cls = data[0]
        if cls not in (tuple, list, dict, type(None)) and cls.__module__ != "collections":
            found.append(cls)
    for child in treedef.children():
        found += node_types(child)
    return found


def register_all(treedefs: list[Any]) -> list[str]:
    """Register every custom node type of the given treedefs; return their ``type_ref``s."""
    refs = []
    for treedef in treedefs:
        for cls in node_types(treedef):
            register(cls)
            refs.append(type_ref(cls))
    return sorted(set(refs))


def resolve(ref: str, package: str) -> type:
    """Find (importing only inside ``package``) the class a manifest's ``type_ref`` names."""
    module_name, _, qualname = ref.partition(":")
    if not (module_name == package or module_name.startswith(package + ".")) or not qualname:
        raise ArtifactError(f"manifest names pytree type {ref!r} outside package {package!r}")
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
    except ImportError as err:
        raise ArtifactError(f"cannot find pytree type {ref!r} named by the manifest: {err}") \
            from None
    obj: Any = module
    for part in qualname.split("."):
        # walk classes only, each defined in that very module: never into other modules
        obj = getattr(obj, part, None) if isinstance(obj, type) or obj is module else None
        if not isinstance(obj, type) or obj.__module__ != module_name:
            raise ArtifactError(f"manifest's pytree type {ref!r} is not a class defined in "
                                f"{module_name!r}; refusing to look outside package "
                                f"{package!r}")
    return obj
