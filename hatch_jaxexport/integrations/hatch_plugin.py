"""The Hatch plugin: the ``jaxexport`` build hook, which bakes the exports into the wheel.

Registered with Hatch through the entry point group ``hatch`` (``hatch_register_build_hook``).

Configuration (every key optional)::

    [tool.hatch.build.targets.wheel.hooks.jaxexport]
    require-runtime-dependencies = true   # hatchling's: install the project's deps to export
    packages = ["my_pkg"]                 # default: the wheel's top-level packages
    platforms = ["cpu", "cuda"]           # default for functions that name none
    jobs = 2                              # parallel export workers ("auto": one per CPU)
    on-error = "fail"                     # or "skip"
    jax-requirement = true                # require "jax>=<exporting version>" in the wheel
    editable = "in-place"                 # or "trace"

Standard wheels: each package is exported into a temporary folder and every file is added to
the wheel with ``force_include`` at ``<package>/_jaxexport/<file>``. Editable wheels: the
artifacts are written into the source tree (``<package>/_jaxexport/``, which carries its own
``.gitignore``), where the loader finds them.

The flow itself (skip, editable, export, messages) is the bake the setuptools command shares
(``hatch_jaxexport.bake.flow``); this module holds what is Hatch's: which packages the wheel
ships, ``force_include``, reserved paths, the project's ignore patterns, the requirement added
to ``build_data`` and the hook's own wording.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.plugin import hookimpl

from hatch_jaxexport.bake.config import (
    HATCHLING_HOOK_KEYS,
    ConfigError,
    ExportOptions,
    brief_uncaught_build_errors,
    merge_requirement,
    parse_options,
    requirement_conflicts,
)
from hatch_jaxexport.bake.flow import GITIGNORE, bake, write_companions
from hatch_jaxexport.formats.manifest import ARTIFACT_DIR, MANIFEST_NAME


class HatchReporter:
    """A bake's messages through Hatch's ``app`` (pip shows them with ``-v``), in its words."""

    skip_note = " (the installed package traces its functions)"
    trace_note = ", functions trace from source"

    def __init__(self, app: Any) -> None:
        self.app = app

    def debug(self, message: str) -> None:
        self.app.display_debug(message)

    def info(self, message: str) -> None:
        self.app.display_info(message)

    def waiting(self, message: str) -> None:
        self.app.display_waiting(message)

    def success(self, message: str) -> None:
        self.app.display_success(message)

    def warning(self, message: str) -> None:
        self.app.display_warning(message)

    def workers(self, jobs: int) -> str:
        return f"{jobs} worker{'s' if jobs > 1 else ''}"

    def export_failed(self, package: str, failures: Sequence[str], *, lacks_module: bool,
                      on_error: str | None) -> None:
        """Every problem, then what to set in this hook's table."""
        self.app.display_error(f"jaxexport: export of {package} failed ({len(failures)} "
                               "problem(s)):")
        for failure in failures:
            self.app.display_error(f"  {failure}")
        if lacks_module:
            self.app.display_error(
                "  (the build environment lacks a module the package imports: set "
                "require-runtime-dependencies = true in this hook's table so hatchling "
                "installs the project's dependencies for the build)")
        elif on_error == "fail":
            self.app.display_error("  (set on-error = \"skip\" to build without the "
                                   "failing artifacts)")


class JaxExportBuildHook(BuildHookInterface):
    """Exports every ``@exportable`` of the wheel's packages and adds the artifacts."""

    PLUGIN_NAME = "jaxexport"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scratch: tempfile.TemporaryDirectory[str] | None = None

    # -- configuration -------------------------------------------------------------------------

    @property
    def config_path(self) -> str:
        """The TOML path of the table this hook's configuration came from."""
        target_hooks = self.build_config.target_config.get("hooks", {})
        if isinstance(target_hooks, dict) and self.PLUGIN_NAME in target_hooks:
            return f"tool.hatch.build.targets.{self.target_name}.hooks.{self.PLUGIN_NAME}"
        return f"tool.hatch.build.hooks.{self.PLUGIN_NAME}"

    def options(self) -> ExportOptions:
        return parse_options(self.config, self.config_path, passthrough=HATCHLING_HOOK_KEYS)

    def wheel_packages(self) -> dict[str, Path]:
        """The wheel's top-level packages: import name -> source folder."""
        found: dict[str, Path] = {}
        for relative in self.build_config.packages:
            distribution = self.build_config.get_distribution_path(relative)
            distribution = distribution.replace(os.sep, "/").strip("/")
            source = Path(self.root, relative)
            if "/" in distribution or not (source / "__init__.py").is_file():
                continue  # namespace or nested package: artifacts live in a top-level package
            found[distribution] = source
        return found

    def packages(self, options: ExportOptions) -> dict[str, Path]:
        """The packages to export (import name -> source folder); ``ConfigError`` if unknown."""
        shipped = self.wheel_packages()
        if options.packages is None:
            if not shipped:
                raise ConfigError([
                    f"{self.config_path}.packages is needed: the {self.target_name} target "
                    "ships no top-level package this hook can find (set "
                    f"tool.hatch.build.targets.{self.target_name}.packages, or name the "
                    "packages to export here)"])
            return shipped
        chosen: dict[str, Path] = {}
        errors = []
        for i, name in enumerate(options.packages):
            candidates = [shipped[name]] if name in shipped else [
                Path(self.root, name), Path(self.root, "src", name)]
            source = next((c for c in candidates if (c / "__init__.py").is_file()), None)
            if source is None:
                looked = ", ".join(os.path.relpath(c, self.root) for c in candidates)
                errors.append(f"{self.config_path}.packages[{i}]: cannot find package {name!r} "
                              f"(looked for {looked} with an __init__.py)")
            else:
                chosen[name] = source
        if errors:
            raise ConfigError(errors)
        return chosen

    # -- the build -----------------------------------------------------------------------------

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            # Artifacts are built from source, never shipped in an sdist: keep out any an
            # editable install left in the tree.
            if self.target_name == "sdist":
                self._reserve_source_artifacts(self._source_artifact_folders())
            return
        try:
            options = self.options()
            packages = self.packages(options)
        except ConfigError:
            brief_uncaught_build_errors()  # the message, without the backend's traceback
            raise
        editable = version == "editable"
        if not editable:
            self._scratch = tempfile.TemporaryDirectory(prefix="jaxexport-")
        search_path = sorted({str(source.parent) for source in self.wheel_packages().values()}
                             | {str(source.parent) for source in packages.values()})
        jax_versions = set()
        for package in bake(packages, options, HatchReporter(self.app), editable=editable,
                            build_dir=Path(self._scratch.name) if self._scratch else None,
                            search_path=search_path,
                            before_export=lambda: self._before_export(packages, editable),
                            requirements=self.metadata.core.dependencies):
            if package.empty:
                self.app.display_warning(f"jaxexport: {package.name} has no @exportable "
                                         "functions; nothing added")
                if editable:
                    _remove_tree(package.folder)
                continue
            jax_versions.add(package.result.manifest.jax_version)
            if editable:
                self._report_editable(package.folder)
                continue
            for file in package.files():
                build_data["force_include"][str(file)] = \
                    f"{package.name}/{ARTIFACT_DIR}/{file.name}"
        for jax_version in sorted(jax_versions):
            requirement = options.requirement_for(jax_version)
            if requirement:
                self._require(requirement, build_data)

    def _require(self, requirement: str, build_data: dict[str, Any]) -> None:
        """Put the artifacts' jax requirement into the wheel's metadata, merged into the
        project's own requirement on jax so that METADATA names jax once.

        Hatchling writes ``metadata.core.dependencies`` (a list it computes once and keeps),
        then ``build_data["dependencies"]``, which can only add a line: the merge therefore
        replaces the project's entry in that list, for this build's metadata only (the
        project's files are untouched); what cannot merge is added through ``build_data``.
        """
        own = self.metadata.core.dependencies
        if not isinstance(own, list):  # pragma: no cover - hatchling no longer caches a list
            merged, leftover = list(own), requirement
        else:
            merged, leftover = merge_requirement(own, requirement)
            for conflict in requirement_conflicts(own, requirement):
                self.app.display_warning(f"jaxexport: warning: {conflict}")
        changed = [entry for entry in merged if entry not in own]
        if changed:
            own[:] = merged
            self.app.display_info(f"jaxexport: runtime requirement {', '.join(changed)!r} "
                                  f"(the project's requirement on jax merged with "
                                  f"{requirement!r}, for the artifacts)")
        if leftover and leftover not in build_data["dependencies"] and leftover not in own:
            build_data["dependencies"].append(leftover)
            self.app.display_info(f"jaxexport: added runtime requirement {leftover!r}")

    def _before_export(self, packages: dict[str, Path], editable: bool) -> None:
        """Once the export is on: warn of a missing runtime dependency, and keep stale
        source-tree artifacts out of a standard wheel."""
        self._check_runtime_dependency()
        if not editable:
            self._reserve_source_artifacts([s / ARTIFACT_DIR for s in packages.values()])

    def _report_editable(self, folder: Path) -> None:
        """Editable installs: say where the artifacts went, and whether git ignores them."""
        relative = os.path.relpath(folder, self.root)
        self.app.display_info(
            f"jaxexport: editable install: artifacts written to {relative}; they "
            "reflect the source as of now: reinstall after changing an @exportable "
            "function")
        if not self._ignored(relative):
            self.app.display_warning(
                f"jaxexport: {relative} is not ignored by the project's .gitignore: "
                f"add `{ARTIFACT_DIR}/` to it, or sdists built with the hook "
                "configured for wheels only will carry these files")

    def clean(self, versions: list[str]) -> None:
        """``hatch clean`` / ``hatch build --clean``: remove editable-install artifact folders."""
        for folder in self._source_artifact_folders():
            marker = folder / ".gitignore"
            if marker.is_file() and marker.read_text().startswith(GITIGNORE.splitlines()[0]):
                _remove_tree(folder)
                self.app.display_info(f"jaxexport: removed {os.path.relpath(folder, self.root)}")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """After hatchling wrote the wheel: its companion wheels beside it
        (``companion-wheels``), then the scratch folder goes."""
        try:
            if self.target_name == "wheel" and version != "editable" and \
                    self._scratch is not None:
                path = Path(artifact_path)
                write_companions(path, path.parent, self.options(), HatchReporter(self.app))
        finally:
            if self._scratch is not None:
                self._scratch.cleanup()
                self._scratch = None

    def _source_artifact_folders(self) -> list[Path]:
        """Artifact folders an editable install left in the tree (flat or ``src`` layout)."""
        root = Path(self.root)
        return sorted(p for pattern in (f"*/{ARTIFACT_DIR}", f"*/*/{ARTIFACT_DIR}")
                      for p in root.glob(pattern) if p.is_dir())

    def _reserve_source_artifacts(self, folders: list[Path]) -> None:
        """Keep artifact folders found in the source tree (editable installs) out of the build.

        The build's own artifacts are added with ``force_include``; stale source-tree copies
        must not be shipped next to them (or in an sdist).
        """
        reserved = getattr(self.build_config, "build_reserved_paths", None)
        for folder in folders:
            if not folder.exists():
                continue
            if isinstance(reserved, set):
                # Hatchling prunes reserved folders when it walks the project, and skips
                # reserved files (by distribution path) when it walks explicit inclusions.
                reserved.add(os.path.relpath(folder, self.root))
                for file in folder.rglob("*"):
                    relative = os.path.relpath(file, self.root)
                    reserved.add(self.build_config.get_distribution_path(relative))
            else:  # pragma: no cover - hatchling without build_reserved_paths
                self.app.display_warning(f"jaxexport: {os.path.relpath(folder, self.root)} "
                                         "exists in the source tree; exclude it from the build")

    def _ignored(self, relative_folder: str) -> bool:
        """Whether the project's VCS ignore patterns (or excludes) keep a folder out of builds."""
        try:
            return bool(self.build_config.path_is_excluded(
                f"{relative_folder.replace(os.sep, '/')}/{MANIFEST_NAME}"))
        except Exception:  # pragma: no cover - hatchling internals changed
            return True

    def _check_runtime_dependency(self) -> None:
        try:
            from packaging.requirements import Requirement
            from packaging.utils import canonicalize_name

            names = {canonicalize_name(Requirement(d).name)
                     for d in self.metadata.core.dependencies}
        except Exception:  # pragma: no cover - malformed metadata is hatchling's to report
            return
        if "hatch-jaxexport" not in names:
            self.app.display_warning(
                "jaxexport: the project does not list hatch-jaxexport in [project].dependencies;"
                " the installed package needs it at run time to load its artifacts")


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)




@hookimpl
def hatch_register_build_hook() -> type:
    """Hatch's entry point: the hook class it instantiates for ``[...hooks.jaxexport]``."""
    return JaxExportBuildHook


__all__ = ["HatchReporter", "JaxExportBuildHook", "hatch_register_build_hook"]
