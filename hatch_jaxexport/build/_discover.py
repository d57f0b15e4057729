"""Finding a package's exportables: import it and every submodule, collect the registered functions.

Used by the export workers, the warmup and the release check, each in a process of its own.
"""

from __future__ import annotations

import importlib
import pkgutil

from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.runtime.decorator import ExportableFunction, registered_in


def discover(package: str) -> list[ExportableFunction]:
    """Import ``package`` and all its submodules; return its exportables (sorted by name).

    Raises ``ExportError`` naming the module whose import failed, or names used twice.
    """
    try:
        module = importlib.import_module(package)
    except Exception as err:
        raise ExportError([f"cannot import package {package!r}: {type(err).__name__}: {err}"]) \
            from err
    errors = []
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=package + "."):
        if info.name.split(".")[-1].startswith("_jaxexport"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception as err:
            errors.append(f"cannot import module {info.name!r}: {type(err).__name__}: {err}")
    if errors:
        raise ExportError(errors, f"cannot import {len(errors)} modules of {package!r}")
    found: dict[str, ExportableFunction] = {}
    for fn in registered_in(package):
        other = found.get(fn.name)
        if other is not None and other is not fn:
            errors.append(f"two exportables are named {fn.name!r} ({other.__module__}."
                          f"{other.__qualname__} and {fn.__module__}.{fn.__qualname__}); "
                          "give them distinct names")
        found[fn.name] = fn
    if errors:
        raise ExportError(errors)
    return [found[name] for name in sorted(found)]
