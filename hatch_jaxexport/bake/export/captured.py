"""The arrays an exported function closes over (build layer).

``jax.export`` inlines every array a function captures (a module-level table, weights held in a
global, a closure variable) into the artifact as a constant: the artifact keeps the value it had
at build time, whatever the source does with that global later. The build lists them, per
artifact in the manifest and per function in its output, and warns about big ones, so a frozen
value is never a surprise.

The constants come from the jaxpr of the trace the exporter makes anyway (``jax.jit``'s trace
cache hands ``jax.export`` the same trace), nested jaxprs included. Names are found by identity
in the function's closure and in the globals of the package's imported modules (a pytree global
such as a dict of weights names its leaves ``module.PARAMS['w']``).
"""

from __future__ import annotations

import inspect
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FunctionType, ModuleType
from typing import Any

from hatch_jaxexport.formats.inventory import byte_text, captured_by_function, constant_text
from hatch_jaxexport.formats.manifest import ArtifactRecord
from hatch_jaxexport.formats.options import CAPTURED_WARN_BYTES

#: A global pytree with more leaves than this is not searched for names (cost bound).
_MAX_LEAVES = 10_000


def captured_constants(closed_jaxpr: Any, function: Callable[..., Any],
                       exportable_name: str) -> list[dict[str, Any]]:
    """The manifest entries (``name``, ``shape``, ``dtype``, ``bytes``) of the constants of a
    traced function's jaxpr, largest first; ``function`` is the Python function traced."""
    values = list(_jaxpr_constants(closed_jaxpr))
    if not values:
        return []
    names, owners = _known_names(function, exportable_name)
    entries = [_entry(value, names, owners) for value in values]
    return sorted(entries, key=lambda e: (-e["bytes"], e["name"] or "", e["dtype"], e["shape"]))


def _jaxpr_constants(closed_jaxpr: Any) -> Iterator[Any]:
    """Every constant of a closed jaxpr and the jaxprs nested in its equations (``jit``,
    ``cond`` branches, ``scan`` bodies...), once each, plus array literals (jax versions that
    fold constants into the equations)."""
    seen: set[int] = set()
    queue: deque[Any] = deque([closed_jaxpr])
    while queue:
        item = queue.popleft()
        if id(item) in seen:
            continue
        seen.add(id(item))
        for value in getattr(item, "consts", ()) or ():
            if id(value) not in seen and hasattr(value, "shape") and hasattr(value, "dtype"):
                seen.add(id(value))
                yield value
        for eqn in getattr(getattr(item, "jaxpr", item), "eqns", ()):
            for var in eqn.invars:
                value = getattr(var, "val", None)
                if getattr(value, "ndim", 0) and id(value) not in seen:
                    seen.add(id(value))
                    yield value
            for param in eqn.params.values():
                queue.extend(_nested_jaxprs(param))


def _nested_jaxprs(param: Any) -> list[Any]:
    """The jaxprs in an equation parameter: one, or a tuple/list of them (``cond`` branches)."""
    items = param if isinstance(param, (tuple, list)) else (param,)
    return [p for p in items if hasattr(p, "eqns") or (hasattr(p, "jaxpr") and
                                                       hasattr(p, "consts"))]


def _known_names(function: Callable[..., Any],
                 exportable_name: str) -> tuple[dict[int, str], dict[int, str]]:
    """``id(array) -> name`` for the arrays the function's closure and the package's modules
    hold, and ``id(memory owner) -> name`` for the NumPy views among them (NumPy's ``base`` of a
    view of a view is the owner, so ``TABLE.T`` of a reshaped ``TABLE`` meets it only there).

    The function's closure variables come first, then its own module, then the package's other
    imported modules in name order: the first name found for an array is kept."""
    names: dict[int, str] = {}
    owners: dict[int, str] = {}
    python_function = inspect.unwrap(getattr(function, "__wrapped__", function))
    code = getattr(python_function, "__code__", None)
    cells = getattr(python_function, "__closure__", None) or ()
    if code is not None:
        for variable, cell in zip(code.co_freevars, cells, strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            _add_names(names, owners, f"{variable} (closure of {exportable_name})", value)
    own = getattr(python_function, "__module__", None) or exportable_name.partition(":")[0]
    top = exportable_name.partition(":")[0].split(".")[0]
    package_modules = sorted(name for name in list(sys.modules)
                             if name == top or name.startswith(top + "."))
    for module_name in [own, *(m for m in package_modules if m != own)]:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for global_name, value in list(vars(module).items()):
            if not global_name.startswith("__"):
                _add_names(names, owners, f"{module_name}.{global_name}", value)
    return names, owners


def _add_names(names: dict[int, str], owners: dict[int, str], name: str, value: Any) -> None:
    """Name an array, or each array leaf of a pytree (``name['key']``, ``name[0]``, ``name.f``)."""
    if isinstance(value, (ModuleType, type, FunctionType)):
        return
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        names.setdefault(id(value), name)
        owner = getattr(value, "base", None)
        if owner is not None:
            while getattr(owner, "base", None) is not None:
                owner = owner.base
            owners.setdefault(id(owner), name)
        return
    if not isinstance(value, (dict, list, tuple)) and not hasattr(value, "__dataclass_fields__"):
        return
    import jax

    try:
        leaves, _ = jax.tree_util.tree_flatten_with_path(value)
    except Exception:  # a container jax cannot flatten names nothing
        return
    if len(leaves) > _MAX_LEAVES:
        return
    for path, leaf in leaves:
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            _add_names(names, owners, name + jax.tree_util.keystr(path), leaf)


def _entry(value: Any, names: Mapping[int, str], owners: Mapping[int, str]) -> dict[str, Any]:
    """One manifest entry. A NumPy constant jax wrapped, or a view of a global (``TABLE.T``), is
    named through its ``base`` chain; a view says so."""
    shape = [int(d) for d in value.shape]
    name = names.get(id(value))
    base = getattr(value, "base", None)
    while name is None and base is not None:
        name = names.get(id(base))
        if name is not None and (tuple(base.shape) != tuple(shape) or
                                 getattr(base, "strides", None) != getattr(value, "strides",
                                                                           None)):
            name += " (a view)"
        elif name is None and id(base) in owners:
            name = owners[id(base)] + " (a view)"
        base = getattr(base, "base", None)
    dtype = value.dtype
    size = 1
    for d in shape:
        size *= d
    nbytes = getattr(value, "nbytes", None)
    if not isinstance(nbytes, int):
        nbytes = size * int(getattr(dtype, "itemsize", 0))
    return {"name": name, "shape": shape, "dtype": str(dtype), "bytes": int(nbytes)}


def captured_warnings(records: Sequence[ArtifactRecord],
                      threshold: int = CAPTURED_WARN_BYTES) -> list[str]:
    """One warning per captured constant of at least ``threshold`` bytes, naming the function,
    the value, how many artifacts carry a copy, and the way out."""
    messages = []
    counts: dict[str, int] = {}
    for record in records:
        counts[record.function] = counts.get(record.function, 0) + 1
    for function, entries in captured_by_function(records).items():
        for entry in entries:
            if entry["bytes"] >= threshold:
                messages.append(
                    f"{function} captures {constant_text(entry)} (warning threshold "
                    f"{byte_text(threshold)}): the value is frozen at build time into each of its "
                    f"{counts[function]} artifact(s), and later changes to it in the source are "
                    "not seen; pass it as an argument instead")
    return messages


def captured_lines(records: Sequence[ArtifactRecord],
                   indent: str = "    ") -> dict[str, list[str]]:
    """The lines about captured constants, by function (those that capture any): a heading with
    the count and total size, then one line per constant."""
    lines = {}
    for function, entries in captured_by_function(records).items():
        total = sum(e["bytes"] for e in entries)
        lines[function] = [f"{indent}captures {len(entries)} array(s), {byte_text(total)}, "
                           "frozen at build time:"]
        lines[function] += [f"{indent}  {constant_text(entry)}" for entry in entries]
    return lines


__all__ = ["captured_constants", "captured_lines", "captured_warnings"]
