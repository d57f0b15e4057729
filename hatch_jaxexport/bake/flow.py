"""The bake: the one export flow of a wheel build, called by the Hatch hook and setuptools.

Everything that does not depend on the build backend lives here: the ``HATCH_JAXEXPORT_SKIP``
check, editable installs with ``editable = "trace"``, the export of each package (into a build
folder, or for editable installs into the source tree with its ``.gitignore``), the progress and
result lines, and the "No module named" diagnosis of a failed export. The adapters hand in what
differs: where the packages are, where a standard build writes, the module search path, and a
``Reporter`` that prints in the backend's own output and words. What comes back names the
folder and files of each package, for the adapter to put into its wheel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from hatch_jaxexport.bake.config import (
    ExportOptions,
    brief_uncaught_build_errors,
    requirement_name,
)
from hatch_jaxexport.bake.export.captured import captured_lines
from hatch_jaxexport.bake.workers.jax_sets import export_jax_set
from hatch_jaxexport.bake.workers.orchestrate import BuildResult, export_package
from hatch_jaxexport.bake.workers.progress import FunctionDone, FunctionProgress, function_line
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.coverage import partial_coverage
from hatch_jaxexport.formats.inventory import Inventory, byte_text, inventory
from hatch_jaxexport.formats.manifest import ARTIFACT_DIR
from hatch_jaxexport.formats.settings import SKIP_ENV, skip_requested
from hatch_jaxexport.formats.signatures import SIGNATURES_NAME

# Imported in functions: the merge of several builders' executables, only when a build is asked to
# merge.

#: Written into the artifact folder of an editable install, so git never tracks it. Its first
#: line marks a folder as ours (``hatch clean`` removes only folders that carry it).
GITIGNORE = "# written by hatch-jaxexport: editable-install artifacts, never commit them\n*\n"


class Reporter(Protocol):
    """Where a bake's messages go: the backend's own output, in the backend's own words.

    ``skip_note`` and ``trace_note`` end the messages that the export is skipped (the
    ``HATCH_JAXEXPORT_SKIP`` variable, ``editable = "trace"``); ``workers`` says how many export
    workers run; ``export_failed`` gives the backend's advice about a failed export.
    """

    skip_note: str
    trace_note: str

    def debug(self, message: str) -> None: ...

    def info(self, message: str) -> None: ...

    def waiting(self, message: str) -> None: ...

    def success(self, message: str) -> None: ...

    def warning(self, message: str) -> None: ...

    def workers(self, jobs: int) -> str: ...

    def export_failed(self, package: str, failures: Sequence[str], *, lacks_module: bool,
                      on_error: str | None) -> None:
        """Every failure, then advice; ``on_error`` is the option's value, ``None`` where
        ``on-error = "skip"`` would not help (``skip_helps``): no hint to set it then."""


@dataclasses.dataclass(frozen=True)
class BakedPackage:
    """One exported package: where its artifacts are, and what the export reported."""

    #: Top-level import name.
    name: str
    #: The package's source folder.
    source: Path
    #: The artifact folder: in the build folder, or ``<source>/_jaxexport`` for editable installs.
    folder: Path
    result: BuildResult

    @property
    def empty(self) -> bool:
        """Whether the package has no ``@exportable`` function (no artifact, none skipped)."""
        manifest = self.result.manifest
        return not manifest.artifacts and not manifest.skipped

    def files(self) -> list[Path]:
        """The artifact files to ship, sorted (the editable-install ``.gitignore`` left out)."""
        return artifact_files(self.folder)


def artifact_files(folder: Path) -> list[Path]:
    """The files of an artifact folder that belong in a wheel, sorted (no ``.gitignore``)."""
    return [file for file in sorted(folder.iterdir()) if file.name != ".gitignore"]


def skip_helps(error: ExportError) -> bool:
    """Whether ``on-error = "skip"`` would let this build through: not when the package or a
    module of it failed to import (a ``SpecError`` at decoration, a missing dependency) or two
    exportables share a name, since then no export ran that could be skipped."""
    stages = ("cannot import package", "cannot import module", "two exportables are named")
    return not any(failure.startswith(stages) for failure in error.failures)


def lacks_module(error: ExportError, package: str | None = None) -> bool:
    """Whether an export failed because the build environment lacks a module the package imports.

    Not where the module missing is ``package`` itself or one of its modules: no dependency
    brings those, so the hint to install the run-time dependencies would send the user after
    the wrong fix (build isolation that strips the source folder looks the same)."""
    text = "\n".join(error.failures)
    missing = re.findall(r"No module named '([^']+)'", text)
    if not missing:
        return "No module named" in text
    return any(package is None or name.partition(".")[0] != package for name in missing)


#: The distribution that gives jax each accelerator platform, as ``pip install jax[...]`` does.
PLATFORM_PLUGINS = {"cuda": ("jax-cuda12-plugin", "jax-cuda13-plugin"),
                    "rocm": ("jax-rocm60-plugin", "jax-rocm7-plugin"), "tpu": ("libtpu",)}


def missing_local_platform(platforms: Sequence[str]) -> str | None:
    """The platform this machine's jax runs that ``platforms`` lacks, if none of them is one.

    Read from the installed distributions (jax's plugin packages), not by starting jax's
    backends: the build process never initializes a device. Every machine runs ``cpu``.
    """
    from importlib import metadata

    local = ["cpu"]
    for platform, distributions in PLATFORM_PLUGINS.items():
        for distribution in distributions:
            try:
                metadata.distribution(distribution)
            except metadata.PackageNotFoundError:
                continue
            local.insert(0, platform)
            break
    return None if set(local) & set(platforms) else local[0]


def exports_wanted(options: ExportOptions, *, editable: bool, reporter: Reporter) -> bool:
    """Whether this build exports at all; says why not (skip variable, ``editable = "trace"``)."""
    if skip_requested():
        reporter.warning(f"jaxexport: {SKIP_ENV} is set: building without exports"
                         f"{reporter.skip_note}")
        return False
    if editable and options.editable == "trace":
        reporter.info(f"jaxexport: editable install with editable = \"trace\": no exports"
                      f"{reporter.trace_note}")
        return False
    return True


def bake(packages: Mapping[str, Path], options: ExportOptions, reporter: Reporter, *,
         editable: bool, build_dir: Path | None, search_path: Sequence[str],
         before_export: Callable[[], None] | None = None,
         requirements: Sequence[str] = ()) -> Iterator[BakedPackage]:
    """Export each of ``packages`` (import name -> source folder), one at a time, in order.

    A standard build writes ``<build_dir>/<name>/_jaxexport``; an editable one writes
    ``<source>/_jaxexport`` with its ``.gitignore`` (``build_dir`` unused). Yields each package
    once exported, so the adapter puts it into its wheel before the next one starts (and its
    messages keep their order); yields nothing when ``exports_wanted`` says no.
    ``before_export`` runs once, after that check, before the first export. An ``ExportError``
    propagates after the reporter gave its advice. A standard build with ``jax-releases``
    exports each package again with each of those jax releases (``requirements``: the
    project's runtime dependencies, installed beside each) and adds them as sets
    (``add_jax_sets``); an editable install exports with the build's jax only.
    """
    if not editable and build_dir is None:
        raise ValueError("a standard (not editable) build needs a build_dir to export into")
    if not exports_wanted(options, editable=editable, reporter=reporter):
        return
    if before_export is not None:
        before_export()
    for name, source in packages.items():
        folder = source / ARTIFACT_DIR if editable else Path(build_dir or "", name, ARTIFACT_DIR)
        result = export_one(name, folder, options, reporter, search_path,
                            (source, "editable") if editable else None,
                            signatures=source / SIGNATURES_NAME)
        if editable:
            (folder / ".gitignore").write_text(GITIGNORE)
        elif options.jax_releases and (result.manifest.artifacts or result.manifest.concrete):
            add_jax_sets(name, folder, result, options, reporter, search_path, requirements,
                         signatures=source / SIGNATURES_NAME)
        yield BakedPackage(name, source, folder, result)


def add_jax_sets(name: str, folder: Path, result: BuildResult, options: ExportOptions,
                 reporter: Reporter, search_path: Sequence[str], requirements: Sequence[str],
                 signatures: Path | None = None) -> None:
    """Export ``name`` with each of ``jax-releases`` but the build's own and add each export
    to ``folder`` as a set (``bake.workers.jax_sets``), a line per release and a summary
    saying what they cost; each set has the recorded calls (``signatures``) and concrete
    sizes the build's own export has. A release whose export fails fails the build."""
    others = [v for v in options.jax_releases if v != result.manifest.jax_version]
    dependencies = [r for r in requirements if requirement_name(r) not in BUILDER_OWNED]
    log = reporter_log(reporter)
    started, before = time.perf_counter(), folder_bytes(folder)
    for version in others:
        reporter.waiting(f"jaxexport: exporting {name} with jax {version} (jax-releases)")
        try:
            export_jax_set(name, folder, version, requirements=dependencies,
                           search_path=search_path, log=log, platforms=options.platforms,
                           jobs=options.jobs, on_error=options.on_error,
                           executables=options.executables, signatures=signatures)
        except ExportError as err:
            reporter.export_failed(name, [f"with jax {version}: {f}" for f in err.failures],
                                   lacks_module=lacks_module(err, name), on_error=None)
            brief_uncaught_build_errors()
            raise
    reporter.success(f"jaxexport: {name}: artifacts for {len(others) + 1} jax releases "
                     f"({', '.join([result.manifest.jax_version, *others])}); the other "
                     f"releases took {time.perf_counter() - started:.1f} s and added "
                     f"{byte_text(folder_bytes(folder) - before)}")
    flush_output()


#: Requirements a set's environment never takes from the project: its jax and jaxlib are the
#: release's, and hatch-jaxexport is this one (linked in).
BUILDER_OWNED = frozenset({"jax", "jaxlib", "hatch-jaxexport"})


def folder_bytes(folder: Path) -> int:
    """The bytes of the files in ``folder``."""
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def export_one(name: str, folder: Path, options: ExportOptions, reporter: Reporter,
               search_path: Sequence[str], sources_of: tuple[Path, str] | None = None,
               signatures: Path | None = None) -> BuildResult:
    """Export one package into ``folder``: a line before, one line per function as soon as all
    of its artifacts are done (across workers, with ``done/total``, elapsed time and, for long
    builds, the time left), and the summary after. ``signatures``: the recorded calls' file in
    the package's source folder (read where it exists, whatever copy the build imports)."""
    reporter.waiting(f"jaxexport: exporting {name} for {', '.join(options.platforms)} "
                     f"({reporter.workers(options.jobs)}, on-error {options.on_error})")
    missing = missing_local_platform(options.platforms)
    if missing:
        reporter.warning(f"jaxexport: warning: platforms = {list(options.platforms)} lacks "
                         f"{missing}, the platform this machine runs: here {name}'s functions "
                         f"will trace their source instead of loading artifacts; add "
                         f"'{missing}' to platforms if its users may run on {missing}")
    start = time.perf_counter()
    log = reporter_log(reporter)
    skip_word = "skipped" if options.on_error == "skip" else "failed"

    def report_function(done: FunctionDone) -> None:
        line = function_line(done.name, done.records, done.failed, done.seconds,
                             skip_word=skip_word)
        reporter.info(f"{line} {done.suffix()}")
        for captured in captured_lines(done.records).get(done.name, []):
            reporter.info(captured)
        flush_output()

    progress = FunctionProgress(report_function, started=start)
    try:
        result = export_package(name, folder, platforms=options.platforms, jobs=options.jobs,
                                on_error=options.on_error, search_path=search_path, log=log,
                                progress=progress, executables=options.executables,
                                executable_jaxlibs=options.executable_jaxlibs,
                                sources_of=sources_of, signatures=signatures)
    except ExportError as err:
        reporter.export_failed(name, err.failures, lacks_module=lacks_module(err, name),
                               on_error=options.on_error if skip_helps(err) else None)
        brief_uncaught_build_errors()  # listed just now: not again with the backend's traceback
        raise
    if options.executables_from:
        _add_executables_from(name, folder, options.executables_from, reporter)
    # A function the progress files did not report (none, unless a file was lost) still gets
    # its line, so the output always names every function.
    for function, lines in describe_functions(result).items():
        if function not in progress.finished:
            for line in lines:
                reporter.info(line)
    for function, text in partial_coverage(result.manifest).items():
        reporter.info(f"jaxexport: serves: {function}: {text}")
    reporter.success(f"jaxexport: {describe_result(result, time.perf_counter() - start)[1]}")
    flush_output()
    return result


def reporter_log(reporter: Reporter) -> Callable[[str], None]:
    """The export's log lines into the reporter: a ``warning:`` line as a warning, the rest as
    detail, each shown as it happens."""
    def log(message: str) -> None:
        if message.startswith("warning:"):
            reporter.warning(f"jaxexport: {message}")
        else:
            reporter.debug(f"jaxexport: {message}")
        flush_output()

    return log


def _add_executables_from(name: str, folder: Path, patterns: Sequence[str],
                          reporter: Reporter) -> None:
    """``executables-from``: add the executables of the wheels the patterns match (other
    builders' builds of this source) to the export in ``folder``; a line says how many, or
    that no wheel matched. An ``ExportError`` (a wheel of other source) fails the build."""
    import glob

    from hatch_jaxexport.bake.executables.merge import add_executables_from

    wheels = sorted({path for pattern in patterns for path in glob.glob(pattern)})
    if not wheels:
        reporter.warning(f"jaxexport: warning: executables-from matches no wheel "
                         f"({', '.join(patterns)}, from {os.getcwd()}): only this builder's "
                         "executables are in the wheel")
        return
    try:
        added = add_executables_from(folder, name, wheels)
    except ExportError as err:
        reporter.export_failed(name, err.failures, lacks_module=False, on_error=None)
        brief_uncaught_build_errors()
        raise
    reporter.info(f"jaxexport: {name}: {added} precompiled executable(s) added from "
                  f"{len(wheels)} wheel(s) of other builders (executables-from)")


def write_companions(wheel: Path, out_dir: Path, options: ExportOptions, reporter: Reporter,
                     companions_dir: Path | None = None) -> Path:
    """Split the built ``wheel``'s executables into companion wheels in ``out_dir``
    (``companions_dir`` where given; ``companion-wheels``;
    ``bake.executables.companion_split``), which every integration calls on the wheel it
    built; the package's wheel. Each companion is a line of the build log: its file, bytes
    and the extra that installs it."""
    if options.companion_wheels == "none":
        return wheel
    from hatch_jaxexport.bake.executables.companion_split import split_wheel

    result = split_wheel(wheel, out_dir, options.companion_wheels, companions_dir)
    if not result.companions:
        reporter.info(f"jaxexport: companion-wheels = {options.companion_wheels!r}: the wheel "
                      "has no such executables, no companion wheel written")
    for extra, path in result.companions.items():
        reporter.info(f"jaxexport: companion wheel {path.name}, {path.stat().st_size:,} bytes, "
                      f"installed by the extra [{extra}]")
    if result.companions:
        reporter.info(f"jaxexport: {result.wheel.name} is {result.wheel.stat().st_size:,} bytes "
                      "without them; upload the companion wheels with it")
    return result.wheel


def flush_output() -> None:
    """Flush stdout and stderr: a backend's output is a pipe (block-buffered) under most front
    ends, and a progress line is only useful when it shows as it happens."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass  # a closed or replaced stream: nothing to flush


def describe_functions(result: BuildResult) -> dict[str, list[str]]:
    """Each exported function's line, then the arrays it captures (indented further), by name.

    A function's time is the sum over its artifacts (workers run in parallel).
    """
    by_function: dict[str, list[Any]] = {}
    for record in result.manifest.artifacts:
        by_function.setdefault(record.function, []).append(record)
    concrete: dict[str, list[Any]] = {}
    for record in result.manifest.concrete:  # served at concrete sizes, or recorded calls
        by_function.setdefault(record.function, [])
        concrete.setdefault(record.function, []).append(record)
    skipped: dict[str, int] = {}
    for record in result.manifest.skipped:
        skipped[record.function] = skipped.get(record.function, 0) + 1
    #: Seconds each artifact took to export, by artifact id (``ArtifactRecord.id``).
    timings: Mapping[str, float] = getattr(result, "seconds", None) or {}
    captured = captured_lines(result.manifest.artifacts)
    lines = {}
    for name in sorted(set(by_function) | set(skipped)):
        records = by_function.get(name, [])
        seconds = (sum(timings.get(r.id, 0.0) for r in records)
                   if any(r.id in timings for r in records) else None)
        line = function_line(name, records, skipped.get(name, 0), seconds)
        served = concrete.get(name, [])
        if served:
            line += (f"; {len(served)} concrete-size or recorded-call artifact(s), "
                     f"{byte_text(sum(c.size for c in served))}")
        lines[name] = [line, *captured.get(name, [])]
    return lines


def describe_result(result: BuildResult, seconds: float) -> tuple[list[str], str]:
    """One line per exported function (sorted by name), and a summary line, for a finished
    export. Under a function's line come the arrays it captures (frozen at build time),
    indented further. ``seconds`` is the wall-clock time of the whole export.
    """
    lines = [line for block in describe_functions(result).values() for line in block]
    manifest = result.manifest
    counts = inventory(manifest)
    summary = (f"{manifest.package}: {counts.text()}, {seconds:.1f} s (jax "
               f"{manifest.jax_version}); {growth_text(result.out_dir, counts)}")
    at_sizes = concrete_served(manifest)
    if len(manifest.skipped) > len(at_sizes):
        summary += f", {len(manifest.skipped) - len(at_sizes)} skipped"
    if at_sizes:
        summary += f", {len(at_sizes)} symbolic export(s) failed but served at concrete sizes"
    if manifest.executables or getattr(result, "executable_targets", ()):
        summary += "; " + executables_text(manifest)
    return lines, summary


def concrete_served(manifest: Any) -> list[Any]:
    """The skipped exports whose structure (static values, platform, variant) the build
    serves at concrete sizes: not skipped for whoever calls them at those sizes."""
    served = {(c.function, c.structure_index, json.dumps(c.static, sort_keys=True), c.platform,
               json.dumps(c.variant, sort_keys=True)) for c in manifest.concrete}
    return [s for s in manifest.skipped
            if (s.function, s.structure_index, json.dumps(s.static, sort_keys=True), s.platform,
                json.dumps(s.variant, sort_keys=True)) in served]


def growth_text(folder: Path, counts: Inventory) -> str:
    """``adds 1.2 MB to the wheel (40 file(s), uncompressed; 3 artifact(s) share another's
    identical file)``: what the artifact folder weighs, manifest included (the files as written;
    the wheel stores them compressed). Measured on the folder where it was written, else
    counted from the manifest."""
    try:
        sizes = [p.stat().st_size for p in Path(folder).iterdir() if p.is_file()]
    except OSError:
        sizes = []
    total = sum(sizes) if sizes else counts.stored
    files = len(sizes) if sizes else counts.files
    shared = counts.artifacts - counts.distinct_artifacts
    return (f"adds {byte_text(total)} to the wheel ({files} file(s), uncompressed"
            + (f"; {shared} artifact(s) share another's identical file" if shared > 0 else "")
            + ")")


def executables_text(manifest: Any) -> str:
    """``3 precompiled executable(s) for x86_64-avx2, 40.1 kB (mypkg:f 2, mypkg:g 1)``, or
    ``0 precompiled executable(s)``: what a build that asked for executables got, per function."""
    if not manifest.executables:
        return "0 precompiled executable(s)"
    function_of = {r.id: r.function for r in manifest.artifacts}
    per_function = Counter(function_of.get(e.artifact, e.artifact) for e in manifest.executables)
    targets = ", ".join(sorted({e.target for e in manifest.executables}))
    counts = ", ".join(f"{name} {count}" for name, count in sorted(per_function.items()))
    return (f"{len(manifest.executables)} precompiled executable(s) for {targets}, "
            f"{byte_text(sum(e.size for e in manifest.executables))} ({counts})")


__all__ = [
    "GITIGNORE",
    "BakedPackage",
    "Reporter",
    "artifact_files",
    "bake",
    "describe_functions",
    "describe_result",
    "executables_text",
    "export_one",
    "growth_text",
    "exports_wanted",
    "flush_output",
    "lacks_module",
    "missing_local_platform",
]
