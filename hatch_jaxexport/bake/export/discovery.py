"""Finding a package's exportables: import it and every submodule, collect the registered functions.

Used by the export workers, the warmup and the release check, each in a process of its own.
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil

from hatch_jaxexport.bake.export.diagnose import located
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.runtime.call.decorator import (
    ExportableFunction,
    decoration_errors_in,
    registered_in,
)
from hatch_jaxexport.runtime.jaxcompat import lowering_config, set_lowering_config

#: Module names (the last part) that pytest collects as tests; discovery never imports them.
TEST_MODULES = ("test_*", "*_test", "conftest")


def is_test_module(name: str) -> bool:
    """Whether ``name`` (``pkg.sub.mod``) is a test module by pytest's default names.

    Libraries keep tests inside the package (dm-pix's ``dm_pix/_src/*_test.py``) and leave
    them out of the wheel; importing them at build time would need the test dependencies
    (TensorFlow there), and they ship no exportables."""
    last = name.rsplit(".", 1)[-1]
    return any(fnmatch.fnmatchcase(last, pattern) for pattern in TEST_MODULES)


def discover(package: str, *, isolate_config: bool = False) -> list[ExportableFunction]:
    """Import ``package`` and all its submodules but test modules (``is_test_module``); return
    its exportables (sorted by name).

    ``isolate_config`` (export workers): each submodule is imported under jax's lowering config
    as its parent package left it, so that a module whose import turns ``jax_enable_x64`` on
    (or a dependency of it that does) changes the config its own functions record at
    decoration, not that of the siblings imported after it. A process importing a module
    imports its parent packages, never its siblings. At the end the config is what the
    last module that changed it set, as after a plain import of everything.

    Raises ``ExportError`` naming the module whose import failed, or names used twice.
    """
    try:
        module = importlib.import_module(package)
    except Exception as err:
        raise ExportError([f"cannot import package {package!r}: {type(err).__name__}: {err}"
                           f"{located(err, package)}"]) from err
    errors = []
    # the config each imported package left, for its submodules (isolate_config only)
    after_package = {package: lowering_config()} if isolate_config else {}
    changed_last = None
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=package + "."):
        if info.name.split(".")[-1].startswith("_jaxexport") or is_test_module(info.name):
            continue
        parent = after_package.get(info.name.rpartition(".")[0])
        if parent is not None:
            set_lowering_config(parent)
        try:
            importlib.import_module(info.name)
        except Exception as err:
            errors.append(f"cannot import module {info.name!r}: {type(err).__name__}: {err}"
                          f"{located(err, package)}")
        if isolate_config:
            now = lowering_config()
            changed_last = now if now != parent else changed_last
            if info.ispkg:
                after_package[info.name] = now
    if changed_last is not None:
        set_lowering_config(changed_last)
    if errors:
        raise ExportError(errors, f"cannot import {len(errors)} modules of {package!r}")
    errors += [str(err) for err in decoration_errors_in(package)]  # kept, not raised, at import
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


__all__ = ["TEST_MODULES", "discover", "is_test_module"]
