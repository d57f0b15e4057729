"""setuptools integration: a ``[tool.jaxexport]`` table bakes exports into the wheel.

The ``setuptools.finalize_distribution_options`` entry point runs for every setuptools
distribution in an environment where hatch-jaxexport is installed; it does nothing unless the
project's ``pyproject.toml`` has a ``[tool.jaxexport]`` table. With the table it

- registers ``build_jaxexport``, a ``build`` sub-command (setuptools' ``SubCommand`` protocol)
  that exports each package into ``<build_lib>/<package>/_jaxexport/``, or, for editable
  installs, into the source tree (lenient mode imports from there) with a copy in
  ``build_lib`` (strict mode's link tree copies it from there); the recorded calls
  (``jaxexport-signatures.json``) are read from the source tree, where they are committed,
  not from ``build_lib``, and sdists carry that file (``get_source_files``), and
- wraps ``egg_info`` so the metadata requires ``jax>=<exporting version>`` (option
  ``jax-requirement``), merged into the project's own requirement on jax.

The options are those of the Hatch hook (see ``hatch_jaxexport.bake.config``); the export
itself is the bake both share (``hatch_jaxexport.bake.flow``). This module imports setuptools:
only setuptools loads it (through the entry point), nothing at run time imports it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from logging import DEBUG, ERROR, INFO, WARNING
from pathlib import Path
from typing import Any

from setuptools import Command

from hatch_jaxexport.bake.config import (
    ConfigError,
    ExportOptions,
    brief_uncaught_build_errors,
    merge_requirement,
    parse_options,
    requirement_conflicts,
)
from hatch_jaxexport.bake.flow import artifact_files, bake, write_companions
from hatch_jaxexport.formats.manifest import ARTIFACT_DIR, MANIFEST_NAME
from hatch_jaxexport.formats.settings import skip_requested
from hatch_jaxexport.formats.signatures import SIGNATURES_NAME

TABLE = "tool.jaxexport"
COMMAND = "build_jaxexport"


def read_table(project_root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The project's ``[tool.jaxexport]`` table, or ``None`` (no pyproject.toml, no table)."""
    path = Path(project_root, "pyproject.toml")
    if not path.is_file():
        return None
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None  # setuptools reports a broken pyproject.toml itself
    tool = data.get("tool")
    table = tool.get("jaxexport") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError([f"{TABLE} must be a table, got {table!r}"])
    return table


def finalize_distribution_options(dist: Any) -> None:
    """Entry point: wire the export into ``dist`` when the project asks for it."""
    try:
        table = read_table(getattr(dist, "src_root", None) or os.curdir)
        if table is None:
            return
        options = parse_options(table, TABLE)
    except ConfigError:
        brief_uncaught_build_errors()  # the message, without the backend's traceback
        raise
    dist._jaxexport_options = options
    dist.cmdclass[COMMAND] = build_jaxexport
    build = dist.get_command_class("build")
    if not any(name == COMMAND for name, _ in build.sub_commands):
        dist.cmdclass["build"] = type("build", (build,), {
            "sub_commands": [*build.sub_commands, (COMMAND, None)]})
    if options.companion_wheels != "none":
        bdist_wheel = dist.get_command_class("bdist_wheel")
        if not getattr(bdist_wheel, "_jaxexport_wrapped", False):
            dist.cmdclass["bdist_wheel"] = _wrap_bdist_wheel(bdist_wheel)
    if options.jax_requirement is not None:
        egg_info = dist.get_command_class("egg_info")
        if not getattr(egg_info, "_jaxexport_wrapped", False):
            dist.cmdclass["egg_info"] = _wrap_egg_info(egg_info)


def _wrap_egg_info(base: type) -> type:
    """An ``egg_info`` that first adds the jax requirement of the artifacts to the metadata."""

    class egg_info(base):  # type: ignore[misc, valid-type]
        _jaxexport_wrapped = True

        def run(self) -> None:
            dist = self.distribution
            requirement = _jax_requirement(dist._jaxexport_options)
            current = [str(entry) for entry in dist.install_requires or []]
            if requirement is not None:
                # Merged into the project's own jax requirement: Requires-Dist names jax once.
                merged, leftover = merge_requirement(current, requirement)
                for conflict in requirement_conflicts(current, requirement):
                    self.announce(f"jaxexport: warning: {conflict}", WARNING)
                if leftover is not None and leftover not in merged:
                    merged.append(leftover)
                if merged != current:
                    # A new (non-static) list: setuptools marks Requires-Dist as dynamic.
                    dist.install_requires = merged
                    dist.metadata.install_requires = dist.install_requires
            super().run()

    return egg_info


def _wrap_bdist_wheel(base: type) -> type:
    """A ``bdist_wheel`` that splits the wheel it wrote into companion wheels
    (``companion-wheels``, ``bake.flow.write_companions``).

    setuptools' PEP 517 backend runs ``bdist_wheel`` into a temporary ``.tmp-*`` folder inside
    the output folder and takes the one wheel it finds there: the companions are written to the
    output folder itself (the temporary folder's parent), the package's wheel stays where the
    backend looks for it."""

    class bdist_wheel(base):  # type: ignore[misc, valid-type]
        _jaxexport_wrapped = True

        def run(self) -> None:
            super().run()
            impl, abi, plat = self.get_tag()
            dist_dir = Path(self.dist_dir)
            wheel = dist_dir / f"{self.wheel_dist_name}-{impl}-{abi}-{plat}.whl"
            beside = dist_dir.parent if dist_dir.name.startswith(".tmp-") else dist_dir
            write_companions(wheel, dist_dir, self.distribution._jaxexport_options,
                             SetuptoolsReporter(self), companions_dir=beside)

    return bdist_wheel


def _jax_requirement(options: ExportOptions) -> str | None:
    """The requirement for artifacts exported by this environment's jax (the build's)."""
    if skip_requested():
        return None
    from importlib import metadata

    try:
        version = metadata.version("jax")
    except metadata.PackageNotFoundError:
        return None  # the export fails later, with the reason
    return options.requirement_for(version)


class SetuptoolsReporter:
    """A bake's messages through the command's ``announce``, in setuptools' words."""

    skip_note = ""
    trace_note = ""

    def __init__(self, command: Command) -> None:
        self.command = command

    def debug(self, message: str) -> None:
        self.command.announce(message, DEBUG)

    def info(self, message: str) -> None:
        self.command.announce(message, INFO)

    waiting = success = info

    def warning(self, message: str) -> None:
        self.command.announce(message, WARNING)

    def workers(self, jobs: int) -> str:
        return f"{jobs} worker(s)"

    def export_failed(self, package: str, failures: Sequence[str], *, lacks_module: bool,
                      on_error: str | None) -> None:
        """Every problem (the uncaught error then only points at them), then advice for a
        missing module."""
        self.command.announce(f"jaxexport: export of {package} failed ({len(failures)} "
                              "problem(s)):", ERROR)
        for failure in failures:
            self.command.announce(f"  {failure}", ERROR)
        if lacks_module:
            self.command.announce(
                "jaxexport: the build environment lacks a module the package imports: list the "
                "package's run-time dependencies in [build-system] requires as well", ERROR)


class build_jaxexport(Command):  # lower case: setuptools names a command after its class
    """Export every ``@exportable`` of the distribution's packages (jax.export)."""

    description = "bake jax.export artifacts of @exportable functions into the build"
    user_options: list[tuple[str, str | None, str]] = []  # noqa: RUF012
    editable_mode: bool = False

    def initialize_options(self) -> None:
        self.build_lib: str | None = None
        self.editable_mode = False

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    # -- what to export ----------------------------------------------------------------------

    def _options(self) -> ExportOptions:
        options = getattr(self.distribution, "_jaxexport_options", None)
        return options if options is not None else ExportOptions()

    def packages(self) -> dict[str, Path]:
        """Top-level packages to export: import name -> source folder."""
        try:
            return self._packages()
        except ConfigError:
            brief_uncaught_build_errors()  # the message, without the backend's traceback
            raise

    def _packages(self) -> dict[str, Path]:
        options = self._options()
        build_py = self.get_finalized_command("build_py")
        names = options.packages
        if names is None:
            names = tuple(sorted({p for p in (self.distribution.packages or [])
                                  if "." not in p}))
            if not names:
                raise ConfigError([f"{TABLE}.packages is needed: the distribution has no "
                                   "top-level package"])
        found, errors = {}, []
        for i, name in enumerate(names):
            source = Path(build_py.get_package_dir(name) or ".").absolute()
            if (source / "__init__.py").is_file():
                found[name] = source
            else:
                errors.append(f"{TABLE}.packages[{i}]: cannot find package {name!r} "
                              f"(looked for {os.path.relpath(source)}/__init__.py)")
        if errors:
            raise ConfigError(errors)
        return found

    def _build_dir(self) -> Path:
        return Path(self.build_lib or "build/lib")

    def _out_dir(self, name: str, source: Path) -> Path:
        if self.editable_mode:
            return source / ARTIFACT_DIR
        return self._build_dir() / name / ARTIFACT_DIR

    # -- the SubCommand protocol -------------------------------------------------------------

    def run(self) -> None:
        packages = self.packages()
        search_path = sorted({str(s.parent) for s in packages.values()})
        if not self.editable_mode and self.build_lib:
            search_path.insert(0, os.path.abspath(self.build_lib))
        for package in bake(packages, self._options(), SetuptoolsReporter(self),
                            editable=self.editable_mode, build_dir=self._build_dir(),
                            search_path=search_path,
                            requirements=list(map(str, self.distribution.install_requires
                                                  or ()))):
            if self.editable_mode:
                self._copy_to_build_lib(package.name, package.folder)

    def _copy_to_build_lib(self, name: str, folder: Path) -> None:
        """Editable installs: also put copies in ``build_lib``, where a strict editable
        install (link tree) takes them from. Copies, not links: the loader refuses artifact
        files that resolve outside their package folder."""
        target = self._build_dir() / name / ARTIFACT_DIR
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for file in artifact_files(folder):
            shutil.copyfile(file, target / file.name)

    def _files(self) -> list[tuple[str, Path]]:
        """(build_lib path, file on disk) for every artifact file that exists now."""
        pairs = []
        for name, source in self.packages().items():
            out = self._out_dir(name, source)
            if not (out / MANIFEST_NAME).is_file():
                continue
            for file in artifact_files(out):
                target = os.path.join(self.build_lib or "build/lib", name, ARTIFACT_DIR,
                                      file.name)
                pairs.append((target, file))
        return pairs

    def get_outputs(self) -> list[str]:
        return [target for target, _ in self._files()]

    def get_output_mapping(self) -> dict[str, str]:
        # Nothing maps to a source file: editable installs find the in-place artifacts
        # (lenient mode) or copies of them from ``build_lib`` (strict mode's link tree).
        return {}

    def get_source_files(self) -> list[str]:
        """What an sdist carries for this command: each package's recorded calls
        (``jaxexport-signatures.json``, an input of the build), never artifacts (built from
        the package sources)."""
        files = [source / SIGNATURES_NAME for source in self.packages().values()]
        return [os.path.relpath(f) for f in files if f.is_file()]


__all__ = ["SetuptoolsReporter", "build_jaxexport", "finalize_distribution_options",
           "read_table"]
