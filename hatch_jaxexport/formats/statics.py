"""Static argument values: which may be baked, their canonical text, how a call's value is compared.

A static value is baked into its artifact, so the manifest must name it in a text that every
later process computes the same way from the call's value: the loader finds an artifact by that
text. The text is tagged JSON, never a pickle (a pickle runs code when read, and its bytes change
with the protocol and the Python version):

- ``str``, ``int``, finite ``float``, ``bool``, ``None``: themselves, as JSON, so manifests baked
  before tuples, enums and dataclasses were allowed keep their keys;
- a tuple: ``{"tuple": [...]}``;
- an ``Enum`` member: ``{"enum": "module:Qualname", "name": "MEMBER"}``;
- a frozen dataclass: ``{"dataclass": "module:Qualname", "fields": {"name": ...}}``.

Anything else (a list, a dict, a mutable dataclass, an arbitrary object) has no such text and is
refused when the function is decorated. Pure: no jax, no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

#: What a static value may be, for messages.
ALLOWED_STATIC = ("a str, an int, a finite float, a bool, None, an Enum member, a frozen "
                  "dataclass whose fields are these, or a tuple of these")
_SCALARS = (str, int, bool)


def _class_path(kind: type) -> str:
    return f"{kind.__module__}:{kind.__qualname__}"


def _compared_fields(value: Any) -> list[str]:
    """The fields a dataclass's ``==`` compares: the ones its static text records."""
    return [f.name for f in dataclasses.fields(value) if f.compare]


def _class_problem(kind: type, what: str) -> str | None:
    if "<locals>" in kind.__qualname__:
        return (f"{what} {kind.__qualname__} is defined inside a function: each call makes a "
                "new class, which no later process can name; define it at module level")
    return None


def _problem(value: Any, path: str) -> str | None:
    """Why ``value`` (at ``path`` inside the static value) has no stable text, or ``None``."""
    kind = type(value)
    at = f" at {path}" if path else ""
    if value is None or kind in _SCALARS:
        return None
    if kind is float:
        return None if math.isfinite(value) else f"a float that is not finite{at} ({value!r})"
    if isinstance(value, enum.Enum):
        return _class_problem(kind, "the Enum")
    if kind is tuple:
        for i, item in enumerate(value):
            found = _problem(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(kind, "__dataclass_params__", None)
        if params is None or not params.frozen:
            return (f"a dataclass {kind.__qualname__}{at} that is not frozen (a value that can "
                    "change after it is baked): declare it @dataclasses.dataclass(frozen=True)")
        if not params.eq:
            return (f"a dataclass {kind.__qualname__}{at} declared with eq=False (compared by "
                    "identity, so no call's value could equal the baked one)")
        for name in _compared_fields(value):
            found = _problem(getattr(value, name), f"{path}.{name}")
            if found:
                return found
        return _class_problem(kind, "the dataclass")
    return _unsupported(value, at)


def _unsupported(value: Any, at: str) -> str:
    kind = type(value)
    if isinstance(value, tuple):
        return f"a {kind.__qualname__}{at}, a tuple subclass: write a plain tuple or a frozen " \
               "dataclass"
    if isinstance(value, list):
        return f"a list{at}: write a tuple"
    if isinstance(value, Mapping):
        return f"a {kind.__qualname__}{at}: write a frozen dataclass or a tuple of pairs"
    name = kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"
    fix = "str(...)" if isinstance(value, str) else "float(...)" if isinstance(value, float) \
        else "bool(...)" if kind.__name__.startswith("bool") \
        else "int(...)" if hasattr(value, "__index__") else None
    article = "an" if name[0] in "aeiouAEIOU" else "a"
    if fix:
        return f"{article} {name}{at}: write {fix}"
    return f"{article} {name}{at}, which has no stable text"


def static_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a static value (``None`` when it can): what it is and what to
    write instead, for the decorator's ``SpecError``."""
    return _problem(value, "")


def encode_static_value(value: Any) -> Any:
    """The tagged-JSON form of one static value (see the module docstring); ``value`` must have
    passed ``static_problem``."""
    if value is None or type(value) in (*_SCALARS, float):
        return value
    if isinstance(value, enum.Enum):
        return {"enum": _class_path(type(value)), "name": value.name}
    if type(value) is tuple:
        return {"tuple": [encode_static_value(item) for item in value]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"dataclass": _class_path(type(value)),
                "fields": {name: encode_static_value(getattr(value, name))
                           for name in _compared_fields(value)}}
    raise TypeError(f"{value!r} is not a static value: {static_problem(value)}")


def encode_static(values: Mapping[str, Any]) -> dict[str, Any]:
    """Argument name -> tagged JSON: what the manifest records as an artifact's ``static``."""
    return {name: encode_static_value(value) for name, value in values.items()}


def encoded_static_key(encoded: Mapping[str, Any]) -> str:
    """The canonical text of static values already in tagged JSON (a manifest record's)."""
    return json.dumps(dict(encoded), sort_keys=True, separators=(",", ":"))


def static_key(values: Mapping[str, Any]) -> str:
    """The canonical text of one combination of static values: the same for equal values in
    every process and Python version (JSON, keys sorted, ASCII), and for JSON scalars the text
    of versions that took only those."""
    return encoded_static_key(encode_static(values))


def static_text(encoded: Any) -> str:
    """A tagged-JSON static value as Python would write it: ``'a'``, ``(1, True)``,
    ``Mode.FAST``, ``Config(order=2)`` (for artifact ids and messages)."""
    if isinstance(encoded, Mapping):
        if "tuple" in encoded:
            items = [static_text(item) for item in encoded["tuple"]]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if "enum" in encoded:
            return f"{str(encoded['enum']).rpartition(':')[2]}.{encoded.get('name')}"
        if "dataclass" in encoded:
            fields = ", ".join(f"{k}={static_text(v)}"  # sorted: the manifest's JSON is
                               for k, v in sorted(dict(encoded.get("fields", {})).items()))
            return f"{str(encoded['dataclass']).rpartition(':')[2]}({fields})"
    return repr(encoded)


def static_values_text(encoded: Mapping[str, Any]) -> str:
    """``a=1,mode='fast'``: one combination of encoded static values, names sorted."""
    return ",".join(f"{k}={static_text(v)}" for k, v in sorted(encoded.items()))


def same_static(a: Any, b: Any) -> bool:
    """Whether a call's value ``a`` selects the artifact baked for ``b``: the same type and
    equal, tuples and dataclass fields compared item by item with the same rule (so ``(1,
    True)`` is not ``(1, 1)``) and ``-0.0`` not ``0.0`` (their texts differ)."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is tuple:
        return len(a) == len(b) and all(same_static(x, y) for x, y in zip(a, b, strict=True))
    if kind is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type) and not isinstance(a, enum.Enum):
        return all(same_static(getattr(a, n), getattr(b, n)) for n in _compared_fields(a))
    try:
        return bool(a == b)
    except Exception:  # an object whose == returns an array (a default value, not a static)
        return False


def unique_statics(values: Iterable[Any]) -> tuple[Any, ...]:
    """``values`` without repeats, in order, by their text (``dict.fromkeys`` would merge
    ``1`` and ``True``, or ``(1, True)`` and ``(1, 1)``, which hash and compare equal)."""
    seen: dict[str, Any] = {}
    for value in values:
        seen.setdefault(json.dumps(encode_static_value(value), sort_keys=True), value)
    return tuple(seen.values())


class StaticPin:
    """The static values one structure is exported with (``static(...)`` in a structure)."""

    __slots__ = ("values",)

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values

    def __repr__(self) -> str:
        return f"static({', '.join(map(repr, self.values))})"


def static(*values: Any) -> StaticPin:
    """Pin a static argument's values in one structure: ``{"x": ("m, n", "float32"), "axis":
    static(-1)}`` exports that structure with ``axis=-1`` only, and a call matches it only
    with ``axis=-1`` (the values are checked by ``@exportable``)."""
    return StaticPin(values)


__all__ = ["ALLOWED_STATIC", "StaticPin", "encode_static", "encode_static_value",
           "encoded_static_key", "same_static", "static", "static_key", "static_problem",
           "static_text", "static_values_text", "unique_statics"]
