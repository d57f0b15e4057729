"""Serialization registration of custom pytree node types, for both build and load.

A blob's in/out trees name each custom node type by a serialized name; jax refuses to
deserialize a blob until every such type is registered. The build registers the types it meets
(namedtuples; dataclasses, equinox Modules and other classes in jax's pytree registry, with
JSON aux data, module-level sentinels in it by reference) and
records each one in the manifest as ``module:qualname``. At load each name is resolved back to
its class (``resolve``): from the package itself, from a module the process has already imported
(importing the package imports its dependencies), or from a distribution the package's
``Requires-Dist`` declares. A manifest never makes the loader import any other module.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import json
import re
import sys
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.spec import type_name

_REGISTERED: set[type] = set()
#: Types whose serialization this module registered (JSON aux data): the build checks their aux.
_JSON_AUX: set[type] = set()
# Patterns as text: ``re`` compiles them on first use, which a blob without custom pytree
# types never makes (importing this module is on the path of every deserialized blob).
_DOTTED = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z"
_REQUIREMENT_NAME = r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)"
_BUILTIN_MODULES = ("builtins", "collections")
WAY_OUT = ("register its serialization with jax.export.register_pytree_node_serialization in "
           "the module that defines it (see the spec format page, 'Pytrees')")

def type_ref(cls: type) -> str:
    """``module:name``: how a manifest names a pytree type, the place the loader finds it again.

    Its ``__qualname__`` where that leads back to it; else the module-level name it is bound to
    (a namedtuple made as ``StepOutput = namedtuple('step_output', ...)`` is named
    ``module:StepOutput``: its qualname ``step_output`` is bound to nothing), the first in
    sorted order where several are; else ``module:qualname`` (the build then refuses it,
    ``_unserializable`` says why).
    """
    module = sys.modules.get(cls.__module__)
    if module is None or _walk(module, cls.__qualname__) is cls:
        return type_name(cls)
    names = sorted(name for name, item in vars(module).items() if item is cls)
    return f"{cls.__module__}:{names[0]}" if names else type_name(cls)


def _to_tuples(value: Any) -> Any:
    return tuple(_to_tuples(v) for v in value) if isinstance(value, list) else value


_REF_KEY = "__jaxexport_ref__"


def _constant_ref(value: Any) -> dict[str, str]:
    """A JSON reference to a module-level constant that is not JSON itself: a sentinel such as
    equinox's ``MISSING`` (the first item of every equinox Module's aux data). The constant
    must be a global of the module that defines its type."""
    module_name = type(value).__module__
    module = sys.modules.get(module_name)
    names = [name for name, item in vars(module).items() if item is value] if module else []
    if not names:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable "
                        f"nor a module-level constant of {module_name!r}")
    return {_REF_KEY: f"{module_name}:{min(names)}"}


def _resolve_constant(obj: dict[str, Any]) -> Any:
    """The constant a ``_constant_ref`` names, from a module already imported (resolving the
    node type imported it); never imports anything."""
    if set(obj) != {_REF_KEY}:
        return obj
    module_name, _, name = str(obj[_REF_KEY]).partition(":")
    module = sys.modules.get(module_name)
    if module is None or name not in vars(module):
        raise ValueError(f"pytree aux data names constant {obj[_REF_KEY]!r}, which no "
                         f"imported module defines")
    return vars(module)[name]


def _serialize_aux(aux: Any) -> bytes:
    return json.dumps(aux, default=_constant_ref).encode()


def _tuples_in(obj: dict[str, Any]) -> Any:
    """A JSON object with its arrays as tuples (a sparse ``BCOO``'s aux data is a dict whose
    ``shape`` is a tuple), or the constant it references."""
    return _resolve_constant({key: _to_tuples(value) for key, value in obj.items()})


def _deserialize_aux(data: bytes) -> Any:
    return _to_tuples(json.loads(data, object_hook=_tuples_in))


def register(cls: type, name: str | None = None) -> None:
    """Register ``cls`` for jax.export serialization under ``name`` (its ``type_ref`` unless
    given: the loader passes the manifest's name, which resolved to ``cls``).

    Namedtuples need no pytree registration; any other class must be in jax's pytree registry
    (a jax dataclass, a flax ``struct.dataclass``, a ``register_pytree_node`` class), and gets
    JSON aux data. A type already registered for serialization (by its own library) is kept
    as it is. ``ValueError`` for a class jax does not know as a pytree node.
    """
    if cls in _REGISTERED:
        return
    from jax import export

    name = name or type_ref(cls)
    try:
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            export.register_namedtuple_serialization(cls, serialized_name=name)
        else:
            export.register_pytree_node_serialization(
                cls, serialized_name=name, serialize_auxdata=_serialize_aux,
                deserialize_auxdata=_deserialize_aux)
            _JSON_AUX.add(cls)
    except ValueError as err:
        if "Duplicate serialization registration for type" not in str(err):
            raise
    _REGISTERED.add(cls)


def registered_here(cls: type) -> bool:
    """Whether this module registered ``cls``'s serialization (JSON aux data)."""
    return cls in _JSON_AUX


def json_aux_text(aux: Any) -> str | None:
    """The JSON text this module serializes ``aux`` to when it registers the node's type, or
    ``None`` when ``aux`` is not JSON or does not come back from it unchanged (then the build
    refuses the type unless its own serialization is registered)."""
    try:
        data = _serialize_aux(aux)
        return data.decode() if _deserialize_aux(data) == aux else None
    except (TypeError, ValueError):
        return None


def _custom_nodes(treedef: Any) -> list[tuple[type, Any]]:
    """``(type, aux data)`` of every custom (non builtin-container) node of a ``PyTreeDef``."""
    found: list[tuple[type, Any]] = []
    data = treedef.node_data()
    if data is not None:
        cls = data[0]
        if cls not in (tuple, list, dict, type(None)) and cls.__module__ not in _BUILTIN_MODULES:
            found.append((cls, data[1]))
    for child in treedef.children():
        found += _custom_nodes(child)
    return found


def node_types(treedef: Any) -> list[type]:
    """Every custom (non builtin-container) node type in a jax ``PyTreeDef``."""
    return [cls for cls, _ in _custom_nodes(treedef)]


def _unserializable(cls: type, aux: Any) -> str:
    """Why the build cannot record ``cls`` for the loader (``""`` when it can)."""
    why = _not_found_again(cls)
    if why:
        return why
    if cls not in _JSON_AUX:
        return ""
    try:
        same = _deserialize_aux(_serialize_aux(aux)) == aux
    except (TypeError, ValueError) as err:
        return (f"its pytree aux data (a {type(aux).__name__}) is not JSON ({err}); "
                f"{WAY_OUT}")
    if not same:
        return f"its pytree aux data {aux!r} does not survive JSON unchanged; {WAY_OUT}"
    return ""


def _not_found_again(cls: type) -> str:
    """Why the loader could not find ``cls`` again by its ``type_ref`` (``""`` when it can):
    the real cause, as far as the build can see it."""
    module = sys.modules.get(cls.__module__)
    ref = type_ref(cls)
    if module is not None and _walk(module, ref.partition(":")[2]) is cls:
        return ""
    if "<locals>" in cls.__qualname__:
        return (f"it is defined inside a function ({cls.__qualname__}): each call makes a new "
                f"class, which the loader cannot find again; define it at module level")
    if module is None:
        return (f"its module {cls.__module__!r} is not imported (a class made with another "
                f"module name, e.g. namedtuple(..., module=...)); make it in the module that "
                f"names it and bind it to a module-level name there")
    bound = vars(module).get(cls.__qualname__.split(".")[-1]) if "." not in cls.__qualname__ \
        else None
    if isinstance(bound, type):
        return (f"module {cls.__module__!r} binds {cls.__qualname__!r} to another class "
                f"(this one was replaced after definition, e.g. defined twice or its module "
                f"reloaded); keep one definition")
    return (f"no module-level name of {cls.__module__!r} holds it (made inside a function? "
            f"each call makes a new class, which the loader cannot find again); make it once "
            f"at module level and bind it to a name there (e.g. "
            f"{cls.__qualname__.split('.')[-1]} = ...)")


def register_all(treedefs: list[Any], function: str = "") -> list[str]:
    """Register every custom node type of the given treedefs (build time); return their
    ``type_ref``s. ``ValueError`` naming the type, the function and the way out for a type
    the loader could not get back."""
    refs = []
    for treedef in treedefs:
        for cls, aux in _custom_nodes(treedef):
            ref = type_ref(cls)
            try:
                register(cls)
                why = _unserializable(cls, aux)
            except ValueError as err:
                why = f"{err}; {WAY_OUT}"
            if why:
                raise ValueError(f"{function or 'the function'}: cannot serialize pytree type "
                                 f"{ref!r}: {why}")
            refs.append(ref)
    return sorted(set(refs))


def normalize_name(name: str) -> str:
    """A distribution name in its PEP 503 normalized form."""
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=1)
def _distributions_by_module() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def declared_dependencies(package: str) -> set[str]:
    """Normalized names of the distributions ``package``'s own distribution requires
    (``Requires-Dist``, extras left out); empty when the package is not installed as one."""
    declared: set[str] = set()
    for dist_name in _distributions_by_module().get(package.partition(".")[0], []):
        try:
            requires = importlib.metadata.distribution(dist_name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            found = re.match(_REQUIREMENT_NAME, requirement)
            if found and "extra" not in requirement.partition(";")[2]:
                declared.add(normalize_name(found.group(1)))
    return declared


def distributions_of(module_name: str) -> list[str]:
    """The installed distributions providing ``module_name``'s top-level package."""
    return _distributions_by_module().get(module_name.partition(".")[0], [])


def _walk(module: Any, qualname: str) -> Any:
    """The class ``qualname`` names in ``module``, through namespaces only (``__dict__``: no
    ``__getattr__`` hook runs), each step a class defined in that module; else ``None``."""
    obj: Any = module
    for part in qualname.split("."):
        obj = vars(obj).get(part)
        if not isinstance(obj, type) or obj.__module__ != module.__name__:
            return None
    return obj


def _module_for(ref: str, module_name: str, package: str) -> Any:
    """The module a manifest's type lives in, importing only the package's own modules and
    those of its declared dependencies."""
    inside = module_name == package or module_name.startswith(package + ".")
    if not inside and module_name in sys.modules:
        return sys.modules[module_name]
    if not inside:
        providers = distributions_of(module_name)
        if not {normalize_name(p) for p in providers} & declared_dependencies(package):
            origin = (f"from distribution {', '.join(providers)}" if providers
                      else "from no installed distribution")
            raise ArtifactError(
                f"manifest names pytree type {ref!r} outside package {package!r}: module "
                f"{module_name!r} is not imported, and it is {origin}, not one {package!r} "
                f"declares in Requires-Dist; refusing to import it")
    try:
        return sys.modules.get(module_name) or importlib.import_module(module_name)
    except ImportError as err:
        raise ArtifactError(f"cannot find pytree type {ref!r} named by the manifest: {err}") \
            from None


def resolve(ref: str, package: str) -> type:
    """The class a manifest's ``type_ref`` names: in ``package``, in a module already imported,
    or in a module of a distribution ``package`` declares (imported then); ``ArtifactError``
    saying why otherwise."""
    module_name, _, qualname = ref.partition(":")
    if not re.match(_DOTTED, module_name) or not re.match(_DOTTED, qualname):
        raise ArtifactError(f"manifest names malformed pytree type {ref!r} (expected "
                            f"'module:QualName'); refusing it for package {package!r}")
    found = _walk(_module_for(ref, module_name, package), qualname)
    if found is None:
        raise ArtifactError(f"manifest's pytree type {ref!r} is not a class defined in "
                            f"{module_name!r}; refusing to look into other modules")
    return found


def load_type(ref: str, package: str) -> type:
    """Resolve and register a manifest's pytree type at load; ``ArtifactError`` on refusal."""
    cls = resolve(ref, package)
    try:
        register(cls, ref)
    except Exception as err:  # e.g. a dataclass that is not a registered pytree
        raise ArtifactError(f"cannot register pytree type {ref!r} named by the manifest: "
                            f"{type(err).__name__}: {err}") from None
    return cls


__all__ = ["WAY_OUT", "declared_dependencies", "distributions_of", "json_aux_text", "load_type",
           "node_types", "normalize_name", "register", "register_all", "registered_here",
           "resolve", "type_ref"]
