"""The warnings a package's own code issues while a function is traced for export (build layer).

A library's function body may warn while jax traces it (its own ``PendingDeprecationWarning``,
a ``RuntimeWarning`` of NumPy on a constant); the plain library's users see those on the calls
that trace. A baked call never traces, so the build keeps them with each artifact record
(``ArtifactRecord.warnings``, ``ConcreteRecord.warnings``) and the loader issues them again
(``runtime.artifacts.replayed_warnings``).

What is kept, precisely: a warning issued while a trace (and the serialization of its VJP)
runs, under the filter ``always`` (nothing swallowed by a registry or by the build's own
filters), whose reported location (the file Python attributes it to, after ``stacklevel``)
lies inside the exported package's folder, unless the code that called ``warnings.warn`` is
jax's, jaxlib's or hatch-jaxexport's (``NOT_THE_LIBRARY``: a jax deprecation pointed at the
library's line by ``stacklevel`` is about the build's jax, not the user's). A warning the
package's own code issued with a ``stacklevel`` that names a frame outside the package (the
body's caller: ``stacklevel=2`` in the decorated function, ``3`` in a helper it calls, as most
libraries write their deprecations) is kept too, attributed to that code's module at
``CALLER_LINE``: at the build its frame is jax's tracing, on the user's machine the caller of
the baked function, where the loader issues it. Every other warning issued then is dropped,
not printed. Each kept one is recorded as its category (``module:qualname``, the
nearest class of its MRO that resolves by that name), its message, the package's module it is
attributed to and the line: no path, so nothing of the build machine reaches the wheel.

jax caches traces: a second export of one function at the same concrete types (another
platform) does not run its body again. So what a trace said is kept per what was traced
(``key``: the function, structure, static values, config and member, never the platform) for
the process, and every export of that key records it, whichever worker exported it first.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

from hatch_jaxexport.formats.manifest import (
    CALLER_LINE,
    MAX_TRACED_WARNINGS,
    MAX_WARNING_MESSAGE,
    MAX_WARNING_NAME,
)

#: Top-level packages whose own ``warnings.warn`` calls are never kept, wherever they point.
NOT_THE_LIBRARY = frozenset({"jax", "jaxlib", "hatch_jaxexport"})
#: The modules whose frames lie between a ``warnings.warn`` call and ``showwarning``.
_WARNINGS_MODULES = frozenset({"warnings", "_py_warnings"})
#: What each traced key's first trace said in this process (see the module's docstring).
_SEEN: dict[Hashable, list[dict[str, Any]]] = {}


@contextlib.contextmanager
def traced_warnings(package: str, key: Hashable) -> Iterator[list[dict[str, Any]]]:
    """Record what ``package``'s code warns while the body runs; the list it yields holds,
    once the body is done (raised or not), the kept warnings of ``key`` (in the order the body
    issued them, each once)."""
    roots = _package_roots(package)
    own: dict[tuple[Any, ...], dict[str, Any]] = {}

    def show(message: Any, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: Any = None) -> None:
        entry = _entry(package, roots, _issuer(), message, category, filename, lineno)
        if entry is not None:
            own.setdefault(_identity(entry), entry)

    found: list[dict[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        try:
            yield found
        finally:
            _SEEN[key] = found[:] = merged(_SEEN.get(key, []), own.values())


def merged(*groups: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The warnings of ``groups``, each once, in the order they were issued (the first
    group's first: a trace issues them in one order, so builds repeat), at most
    ``MAX_TRACED_WARNINGS`` (the manifest's bound). The order is the plain library's: under
    ``filterwarnings = error`` the first one is the exception its call raises."""
    unique: dict[tuple[Any, ...], dict[str, Any]] = {}
    for group in groups:
        for entry in group:
            unique.setdefault(_identity(entry), entry)
    return list(unique.values())[:MAX_TRACED_WARNINGS]


def _identity(entry: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two kept warnings one (kept once, where first issued)."""
    return entry["module"], entry["lineno"], entry["category"], entry["message"]


def _issuer() -> str:
    """The module of the code that issued the warning being shown: the first frame outside
    the ``warnings`` module (``warnings.warn`` is C code: no frame of its own; a warning of
    C code, such as NumPy's ``RuntimeWarning``, is the frame that called it)."""
    frame = sys._getframe(2)  # showwarning's caller's caller: at least warnings._showwarnmsg
    while frame is not None and frame.f_globals.get("__name__") in _WARNINGS_MODULES:
        frame = frame.f_back
    return str(frame.f_globals.get("__name__", "")) if frame is not None else ""


def _package_roots(package: str) -> list[str]:
    """The real folders of ``package`` (its ``__path__``), or its file for a single module."""
    module = sys.modules.get(package)
    if module is None:
        return []
    paths = list(getattr(module, "__path__", None) or [])
    if not paths and getattr(module, "__file__", None):
        paths = [module.__file__]
    return [os.path.realpath(p) for p in paths]


def _module_of(package: str, roots: list[str], filename: str) -> str | None:
    """The module of ``package`` that file ``filename`` is (``pkg.sub.mod``), or ``None``
    where it lies outside the package (or is no module file: ``<string>``)."""
    if not filename or filename.startswith("<"):
        return None
    path = os.path.realpath(filename)
    for root in roots:
        if path == root:  # a single-module package
            return package
        if os.path.commonpath([root, path]) != root:
            continue
        parts = os.path.relpath(path, root).split(os.sep)
        parts[-1] = os.path.splitext(parts[-1])[0]
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join([package, *parts])
        ok = len(name) <= MAX_WARNING_NAME and all(p.isidentifier() for p in name.split("."))
        return name if ok else None
    return None


def _entry(package: str, roots: list[str], issuer: str, message: Any,
           category: type[Warning], filename: str, lineno: int) -> dict[str, Any] | None:
    """One warning as a record keeps it, or ``None`` where it is not the package's own."""
    if issuer.split(".")[0] in NOT_THE_LIBRARY:
        return None
    module = _module_of(package, roots, filename)
    if module is None and _is_module_of(package, issuer):  # a stacklevel above the body
        module, lineno = issuer, CALLER_LINE
    if module is None:
        return None
    return {"category": category_name(category), "lineno": int(lineno or 0),
            "message": str(message)[:MAX_WARNING_MESSAGE], "module": module}


def _is_module_of(package: str, name: str) -> bool:
    """Whether ``name`` is ``package`` or one of its modules, as a record can name it."""
    return (name == package or name.startswith(package + ".")) and \
        len(name) <= MAX_WARNING_NAME and all(part.isidentifier() for part in name.split("."))


def category_name(category: type[Warning]) -> str:
    """``module:qualname`` of the nearest class of ``category``'s MRO that is a ``Warning``
    and that this name finds again (a class defined in a function is not found by its name:
    its base is used); ``builtins:UserWarning`` if none is."""
    for cls in category.__mro__:
        if not (isinstance(cls, type) and issubclass(cls, Warning)):
            continue
        found: Any = sys.modules.get(cls.__module__)
        for part in cls.__qualname__.split("."):
            found = getattr(found, part, None)
        name = f"{cls.__module__}:{cls.__qualname__}"
        if found is cls and len(name) <= MAX_WARNING_NAME and "<" not in name:
            return name
    return "builtins:UserWarning"


__all__ = ["NOT_THE_LIBRARY", "category_name", "merged", "traced_warnings"]
