"""A PEP 517 build backend that wraps the project's own and bakes the wheels it builds.

For backends with no build-hook API (flit, poetry-core, pdm-backend...)::

    [build-system]
    requires = ["flit_core>=3.9", "hatch-jaxexport"]
    build-backend = "hatch_jaxexport.integrations.pep517"

    [tool.jaxexport]
    backend = "flit_core.buildapi"     # the backend this one delegates to

Every hook is the wrapped backend's: ``build_sdist``, ``get_requires_for_build_*``,
``prepare_metadata_for_build_*`` and ``build_editable`` where it has them (a hook it lacks is
missing here too, so front ends fall back as they would with it). ``build_wheel`` then bakes the
wheel it built (``bake.wheel_bake``: the flow every integration calls) and
``prepare_metadata_for_build_wheel`` writes the same ``Requires-Dist`` the baked wheel carries.
``build_editable`` exports into the source tree (``<package>/_jaxexport``), where the loader
finds the artifacts, as the Hatch hook's and setuptools' editable paths do. The other keys of
``[tool.jaxexport]`` are the options of the Hatch hook.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.config import (
    ConfigError,
    ExportOptions,
    brief_uncaught_build_errors,
    parse_options,
)
from hatch_jaxexport.integrations._stderr_reporter import StderrReporter

# Imported in functions: the bake (the export flow and its workers), only by the hooks that bake:
# get_requires_for_build_* and build_sdist run in a front end's environment before jax is there.

TABLE = "tool.jaxexport"
#: The key naming the wrapped backend; every other key is an export option.
BACKEND_KEY = "backend"
#: Backends with their own integration: wrapping them would bake twice or not at all.
OWN_INTEGRATION = {"hatchling.build": "the Hatch build hook ([tool.hatch.build.targets.wheel."
                   "hooks.jaxexport])",
                   "setuptools.build_meta": "the setuptools plugin ([tool.jaxexport] without "
                   "backend, build-backend = \"setuptools.build_meta\")"}
_OPTIONAL_HOOKS = ("prepare_metadata_for_build_wheel", "build_editable",
                   "get_requires_for_build_editable", "prepare_metadata_for_build_editable")


class StreamReporter(StderrReporter):
    """A bake's messages on stderr, flushed (front ends show a backend's output, pip with -v),
    with the build backend's notes and its advice on a failed export."""

    skip_note = " (the installed package traces its functions)"
    trace_note = ", functions trace from source"

    def export_failed(self, package: str, failures: Sequence[str], *,
                      lacks_module: bool, on_error: str | None) -> None:
        """Every problem, then what to set in ``[tool.jaxexport]``."""
        self.debug(f"jaxexport: export of {package} failed ({len(failures)} problem(s)):")
        for failure in failures:
            self.debug(f"  {failure}")
        if lacks_module:
            self.debug("  (the build environment lacks a module the package imports: list the "
                       "package's run-time dependencies in [build-system] requires as well)")
        elif on_error == "fail":
            self.debug("  (set on-error = \"skip\" in [tool.jaxexport] to build without the "
                       "failing artifacts)")


def read_config(root: str | os.PathLike[str] = ".") -> tuple[str | None, ExportOptions]:
    """The wrapped backend's name (``None`` when the table names none) and the export options,
    from ``root``'s ``pyproject.toml``; ``ConfigError`` listing every problem."""
    import tomllib

    path = Path(root, "pyproject.toml")
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    table = data.get("tool", {}).get("jaxexport", {})
    if not isinstance(table, dict):
        raise ConfigError([f"{TABLE} must be a table, got {table!r}"])
    backend = table.get(BACKEND_KEY)
    errors = []
    if backend is not None and (not isinstance(backend, str) or not backend.strip()):
        errors.append(f"{TABLE}.{BACKEND_KEY} must be a backend's import name such as "
                      f"\"flit_core.buildapi\", got {backend!r}")
    elif backend in OWN_INTEGRATION:
        errors.append(f"{TABLE}.{BACKEND_KEY} = {backend!r} has its own integration: use "
                      f"{OWN_INTEGRATION[backend]} instead of the wrapping backend")
    try:
        options = parse_options(table, TABLE, passthrough={BACKEND_KEY})
    except ConfigError as err:
        errors += err.errors
        options = ExportOptions()
    if errors:
        raise ConfigError(errors)
    return backend, options


def _configured() -> tuple[Any, ExportOptions]:
    """The wrapped backend (imported) and the options; the build's errors printed briefly."""
    try:
        name, options = read_config()
        if name is None:
            raise ConfigError([f"{TABLE}.{BACKEND_KEY} is needed: name the build backend this "
                               "one wraps, e.g. backend = \"flit_core.buildapi\" (and list its "
                               "distribution in [build-system] requires)"])
    except ConfigError:
        brief_uncaught_build_errors()
        raise
    module, _, attribute = name.partition(":")
    backend: Any = importlib.import_module(module)
    for part in filter(None, attribute.split(".")):
        backend = getattr(backend, part)
    return backend, options


def project_sources(options: ExportOptions, root: Path = Path()) -> dict[str, Path]:
    """The project's package folders (``<name>/`` or ``src/<name>/``), by import name: the
    options' packages, else every top-level package found there."""
    found: dict[str, Path] = {}
    for base in (root / "src", root):
        names = options.packages or [p.parent.name for p in sorted(base.glob("*/__init__.py"))]
        for name in names:
            if (base / name / "__init__.py").is_file():
                found.setdefault(name, (base / name).absolute())
    return found


#: What the bake needs in a build environment beyond hatch-jaxexport and the wrapped backend's:
#: ``packaging`` merges ``Requires-Dist`` (hatchling and setuptools bring it; flit does not).
BAKE_REQUIRES = ("packaging",)


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    backend, _ = _configured()
    hook = getattr(backend, "get_requires_for_build_wheel", None)
    return [*(hook(config_settings) if hook else []), *BAKE_REQUIRES]


def _get_requires_for_build_editable(config_settings: Mapping[str, Any] | None = None
                                     ) -> list[str]:
    backend, _ = _configured()
    return [*backend.get_requires_for_build_editable(config_settings), *BAKE_REQUIRES]


def get_requires_for_build_sdist(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    backend, _ = _configured()
    hook = getattr(backend, "get_requires_for_build_sdist", None)
    return list(hook(config_settings)) if hook else []


def build_sdist(sdist_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    backend, _ = _configured()
    return backend.build_sdist(sdist_directory, config_settings)


def build_wheel(wheel_directory: str, config_settings: Mapping[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    """The wrapped backend's wheel, baked into ``wheel_directory``."""
    return _build(wheel_directory, config_settings, metadata_directory, editable=False)


def _build(directory: str, config_settings: Mapping[str, Any] | None,
           metadata_directory: str | None, *, editable: bool) -> str:
    from hatch_jaxexport.bake.wheel_bake import bake_wheel

    backend, options = _configured()
    hook = backend.build_editable if editable else backend.build_wheel
    with tempfile.TemporaryDirectory(prefix="jaxexport-wrapped-") as scratch:
        name = hook(scratch, config_settings, metadata_directory)
        try:
            out = bake_wheel(Path(scratch, name), directory, options, StreamReporter(),
                             sources=project_sources(options), editable=editable)
        except ConfigError:
            brief_uncaught_build_errors()
            raise
    return out.name


def _prepare_metadata(hook: Callable[..., str]) -> Callable[..., str]:
    """The wrapped ``prepare_metadata_for_build_*``, its ``METADATA`` given the requirement
    the baked wheel carries (front ends may compare the two)."""

    def prepare(metadata_directory: str, config_settings: Mapping[str, Any] | None = None
                ) -> str:
        from hatch_jaxexport.bake.wheel_bake import jax_requirement, rewrite_metadata

        _, options = _configured()
        name = hook(metadata_directory, config_settings)
        path = Path(metadata_directory, name, "METADATA")
        text = path.read_text(encoding="utf-8")
        path.write_text(rewrite_metadata(text, jax_requirement(options), StreamReporter()),
                        encoding="utf-8")
        return name

    return prepare


def _build_editable(wheel_directory: str, config_settings: Mapping[str, Any] | None = None,
                    metadata_directory: str | None = None) -> str:
    """The wrapped backend's editable wheel; the artifacts exported into the source tree."""
    return _build(wheel_directory, config_settings, metadata_directory, editable=True)


def __getattr__(name: str) -> Any:
    """The optional hooks, present where the wrapped backend has them (PEP 517 front ends
    test for a hook with ``getattr`` and fall back when it is missing)."""
    if name not in _OPTIONAL_HOOKS:
        raise AttributeError(name)
    backend, _ = _configured()
    hook = getattr(backend, name, None)
    if hook is None:
        raise AttributeError(name)
    if name == "build_editable":
        return _build_editable
    if name.startswith("prepare_metadata"):
        return _prepare_metadata(hook)
    if name == "get_requires_for_build_editable":
        return _get_requires_for_build_editable
    return hook


__all__ = ["StreamReporter", "build_sdist", "build_wheel", "get_requires_for_build_sdist",
           "get_requires_for_build_wheel", "project_sources", "read_config"]
