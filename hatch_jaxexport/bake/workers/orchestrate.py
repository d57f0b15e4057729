"""The build orchestrator: discovers and exports a package in subprocess workers, writes the folder.

Used by every integration (Hatch hook, setuptools, CLI, pytest plugin). Workers are fresh Python
processes, so the caller's jax configuration and imports stay untouched.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.concrete.exports import concrete_covered
from hatch_jaxexport.bake.executables.compiling import compile_executables, resolve_targets
from hatch_jaxexport.bake.export.captured import captured_warnings
from hatch_jaxexport.bake.export.diagnose import (
    failures_headline,
    first_line,
    fold_failures,
    hints_for,
)
from hatch_jaxexport.bake.export.discovery import discover
from hatch_jaxexport.bake.export.exporter import ExportTask
from hatch_jaxexport.bake.export.search_path import SEARCH_PATH_ENV, search_path_value
from hatch_jaxexport.bake.protocol import WorkerRequest, WorkerResult
from hatch_jaxexport.bake.verify import read_back
from hatch_jaxexport.bake.workers._dedupe import dedupe_files, one_per_id
from hatch_jaxexport.bake.workers.progress import ProgressFiles
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats import __version__
from hatch_jaxexport.formats.inventory import byte_text, summarize
from hatch_jaxexport.formats.jax_window import jax_release_date
from hatch_jaxexport.formats.manifest import (
    MANIFEST_NAME,
    ArtifactRecord,
    ConcreteRecord,
    FailedCall,
    Manifest,
    SkippedRecord,
)
from hatch_jaxexport.formats.options import (
    CAPTURED_WARN_BYTES,
    DEFAULT_PLATFORMS,
    ON_ERROR_CHOICES,
)
from hatch_jaxexport.formats.settings import traceback_wanted
from hatch_jaxexport.formats.sources import source_fingerprint

# Imported in functions: the portable export, only for a build that asks for portable variants.


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """What a build wrote and what it skipped."""

    manifest: Manifest
    out_dir: Path
    failures: list[str]
    #: Seconds each artifact took to trace, lower and serialize, by artifact id.
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Wall-clock seconds of the whole export (workers included).
    wall_seconds: float = 0.0
    #: The targets ``executables`` asked for (empty: no executables were asked for).
    executable_targets: tuple[str, ...] = ()


def worker_env(search_path: Sequence[str | os.PathLike[str]]) -> dict[str, str]:
    """The workers' environment: the package's folders on ``PYTHONPATH`` and, for the workers
    to put back where an isolated build's ``sitecustomize`` strips them (``search_path``), in
    ``SEARCH_PATH_ENV``; jax on the CPU; hashing fixed, so artifacts are reproducible."""
    env = dict(os.environ)
    paths = [os.path.abspath(p) for p in search_path]
    env[SEARCH_PATH_ENV] = search_path_value(paths)
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    paths.append(str(Path(__file__).resolve().parents[2]))  # where this hatch_jaxexport lives
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    env["JAX_PLATFORMS"] = "cpu"  # cross-platform lowering needs no accelerator
    env.pop("JAX_ENABLE_X64", None)  # 64-bit structures turn x64 on for themselves
    env["PYTHONHASHSEED"] = "0"
    return env


def _short(text: str, limit: int = 2000) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def _run_workers(package: str, staging: Path, jobs: int, platforms: Sequence[str],
                 env: Mapping[str, str], python: str,
                 list_only: bool = False,
                 progress: Callable[[dict[str, Any]], None] | None = None,
                 executables: Sequence[str] = (),
                 signatures: str | os.PathLike[str] | None = None) -> list[WorkerResult]:
    """Run ``jobs`` workers and collect their results, in worker order.

    While they run, each new line of their progress files (the plan, a finished task) goes to
    ``progress`` as it is written (polled every 50 ms), so a caller can report functions as
    they finish. ``signatures``: the package's signatures file in its source tree, which the
    workers read before the one beside the imported package (``bake.executables.compiling``).

    The first worker that dies or fails fatally fails the build at once. However this returns
    (results, ``ExportError``, ``KeyboardInterrupt``), no worker is left running: the rest are
    terminated and waited for, so the caller can remove ``staging``.
    """
    procs: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    progress_files = [staging / f".progress-{worker}.jsonl" for worker in range(jobs)]
    reader = ProgressFiles(progress_files, progress or (lambda event: None))
    try:
        for worker in range(jobs):
            request = staging / f".request-{worker}.json"
            result = staging / f".result-{worker}.json"
            log = staging / f".worker-{worker}.log"
            WorkerRequest(
                package=package, default_platforms=tuple(platforms), worker=worker,
                workers=jobs, out_dir=str(staging), result=str(result), list_only=list_only,
                executables=tuple(executables),
                signatures=None if signatures is None else os.path.abspath(signatures),
                progress=str(progress_files[worker]) if progress else None).write(request)
            with log.open("wb") as output:  # a file, not a pipe: no worker blocks on output
                proc = subprocess.Popen(
                    [python, "-m", "hatch_jaxexport.bake.workers._worker", str(request)], env=env,
                    stdout=output, stderr=subprocess.STDOUT, cwd=staging)
            procs.append((proc, result, log))
        results: dict[int, WorkerResult] = {}
        while len(results) < len(procs):
            reader.poll()
            for index, (proc, result_path, log) in enumerate(procs):
                if index not in results and proc.poll() is not None:
                    results[index] = _worker_result(package, proc, result_path, log)
            if len(results) < len(procs):
                try:
                    next(p for i, (p, _, _) in enumerate(procs) if i not in results).wait(0.05)
                except subprocess.TimeoutExpired:
                    pass
        reader.poll()  # the last lines of the workers that finished last
        return [results[index] for index in range(len(procs))]
    except KeyboardInterrupt:
        stopped = _stop_workers(procs)
        raise KeyboardInterrupt(f"export of {package!r} stopped ({stopped} worker(s) "
                                "terminated); nothing was written") from None
    finally:
        _stop_workers(procs)


def _worker_result(package: str, proc: subprocess.Popen[bytes], result_path: Path,
                   log: Path) -> WorkerResult:
    """A finished worker's result; ``ExportError`` if it died or failed fatally."""
    if not result_path.exists():
        output = log.read_text(errors="replace") if log.exists() else ""
        raise ExportError([f"export worker for {package!r} died (exit {proc.returncode}): "
                           f"{_short(output)}"])
    result = WorkerResult.read(result_path)
    if result.fatal:
        raise ExportError([_short(f) for f in result.fatal])
    return result


def _stop_workers(procs: Sequence[tuple[subprocess.Popen[bytes], Path, Path]]) -> int:
    """Terminate (then kill) the workers still running and wait for all; how many were."""
    running = [proc for proc, _, _ in procs if proc.poll() is None]
    for proc in running:
        proc.terminate()
    for proc in running:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return len(running)


def _warn(skipped: Sequence[str], records: Sequence[ArtifactRecord],
          results: Sequence[WorkerResult], captured_warn_bytes: int,
          emit: Callable[[str], None], concrete_only: Sequence[str] = ()) -> None:
    """The build's warning lines: skipped exports, exports served only at concrete sizes,
    large captured arrays, the workers' notes (a concrete-size form that could not be made)."""
    for message in skipped:
        emit(f"warning: skipped {message}")
    for message in concrete_only:
        emit(f"warning: served only at concrete sizes (no symbolic artifact): {message}")
    for message in captured_warnings(records, captured_warn_bytes):
        emit(f"warning: {message}")
    for message in (note for res in results for note in res.notes):
        emit(f"warning: {message}")


#: How long a skipped export's error line may be in the manifest.
SKIP_REASON_CHARS = 1000


def skip_reason(failure: dict[str, Any]) -> str:
    """A skipped export's reason as the manifest keeps it: the error's first line, where in
    the package it was raised, and the first hint. Never the whole error: a build with many
    skips of one cause made a manifest three times the size of its artifacts."""
    where = f" (at {failure['location']})" if failure.get("location") else ""
    hints = hints_for(failure["error"])
    # the first line at a length that keeps a fix the error itself gives (the build log's
    # lines stop at 300 characters; a pytree error names its fix after that)
    error = first_line(failure.get("message") or failure["error"], SKIP_REASON_CHARS)
    return f"{error}{where}" + (f"; hint: {hints[0]}" if hints else "")


def _skipped_record(failure: dict[str, Any]) -> SkippedRecord:
    """The manifest's record of one export that failed (``on_error="skip"``)."""
    task = failure["task"]
    return SkippedRecord(function=task["function"], structure=failure["structure"],
                         structure_index=task["structure_index"], static=task["static"],
                         platform=task["platform"], reason=skip_reason(failure), kind=task["kind"],
                         batched=task["batched"], mesh=task.get("mesh", {}),
                         variant=task.get("variant", {}))


def _stored_once(staging: Path, manifest: Manifest, emit: Callable[[str], None]) -> Manifest:
    """The manifest with identical artifact modules stored once (``_dedupe``), saying how
    many files that saved."""
    deduped, removed, saved = dedupe_files(staging, manifest)
    if removed:
        emit(f"{manifest.package}: {removed} artifact file(s) identical to another stored once "
             f"({byte_text(saved)} saved)")
    return deduped


def _concrete_results(package: str, results: Sequence[WorkerResult]
                      ) -> tuple[list[ConcreteRecord], tuple[FailedCall, ...]]:
    """The workers' concrete-size and recorded-call artifacts, each once (``one_per_id``; an
    entry's ``origin`` says where its size came from), and the recorded calls whose export
    failed (the loader gives their reason at call time)."""
    concrete = [(ConcreteRecord(**{k: v for k, v in c.items() if k != "origin"}),
                 f"worker {worker}: {c.get('origin', 'a concrete size')}")
                for worker, res in enumerate(results) for c in res.concrete]
    failed = {(f["function"], f["call"], f["platform"]): FailedCall(**f)
              for res in results for f in res.failed_calls}
    return one_per_id(package, "concrete-size artifact", concrete), tuple(failed.values())


def _artifact_results(package: str, results: Sequence[WorkerResult]) -> list[ArtifactRecord]:
    """The workers' artifact records, each once (``one_per_id``)."""
    return one_per_id(package, "artifact", [
        (ArtifactRecord(**r), f"worker {worker}'s export of {r['function']}")
        for worker, res in enumerate(results) for r in res.records])


def _checked_arguments(on_error: str, jobs: int, out_dir: str | os.PathLike[str]) -> Path:
    """``export_package``'s output folder, once its arguments are checked: a folder that holds
    something but no manifest is never replaced."""
    if on_error not in ON_ERROR_CHOICES:
        raise ValueError(f"on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs!r}")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST_NAME).exists():
        raise ExportError([f"refusing to replace {out}: it is not empty and holds no "
                           f"{MANIFEST_NAME}"])
    return out


def export_package(package: str, out_dir: str | os.PathLike[str], *,
                   platforms: Sequence[str] = DEFAULT_PLATFORMS, jobs: int = 1,
                   on_error: str = "fail",
                   search_path: Sequence[str | os.PathLike[str]] = (), python: str | None = None,
                   log: Callable[[str], None] | None = None,
                   captured_warn_bytes: int = CAPTURED_WARN_BYTES,
                   progress: Callable[[dict[str, Any]], None] | None = None,
                   executables: bool | Sequence[str] = False,
                   executable_jaxlibs: Sequence[str] = (),
                   sources_of: tuple[Path, str] | None = None,
                   signatures: str | os.PathLike[str] | None = None,
                   environment: Mapping[str, str] | None = None) -> BuildResult:
    """Export every ``@exportable`` of ``package`` into ``out_dir`` (manifest + blobs).

    ``platforms`` is the default for functions that name none. With ``on_error="fail"`` any
    failure raises ``ExportError`` listing all of them and ``out_dir`` is left untouched; with
    ``"skip"`` failed artifacts are left out and recorded in the manifest. A function that
    captures an array of ``captured_warn_bytes`` or more gets a warning line. ``progress``
    gets the workers' progress events as they happen (``progress.FunctionProgress`` turns them
    into one report per finished function). ``executables`` (``True``: this machine's targets,
    or target names) also compiles precompiled executables of the artifacts that have concrete
    signatures, also with each jax version of ``executable_jaxlibs``. ``sources_of`` (the
    package's source folder, and ``"editable"`` or ``"export"``): an export into a source tree,
    whose manifest records the package's modules as they were before the export began, so
    that a loader sees them change (``formats.sources``). ``signatures``: the source tree's
    recorded calls, read before the imported copy's (``compiling.signatures_file``).
    ``python`` and ``environment``: the workers' interpreter and environment, where they are
    another jax's (``bake.jax_envs``; else this Python, and ``worker_env(search_path)``).
    """
    out = _checked_arguments(on_error, jobs, out_dir)
    emit = log or (lambda message: None)
    started = time.perf_counter()
    sources = source_fingerprint(*sources_of) if sources_of is not None else {}
    with tempfile.TemporaryDirectory(prefix="jaxexport-") as tmp:
        staging = Path(tmp) / "artifacts"
        staging.mkdir()
        targets = resolve_targets(executables)
        env = environment or worker_env(search_path)
        results = _run_workers(package, staging, jobs, platforms, env,
                               python or sys.executable, progress=progress,
                               executables=targets, signatures=signatures)
        records = _artifact_results(package, results)
        concrete, failed_calls = _concrete_results(package, results)
        covered, failures = concrete_covered(
            [f for res in results for f in res.failures], concrete)
        messages = fold_failures(failures, detail=traceback_wanted())
        if failures and on_error == "fail":
            raise ExportError(messages, failures_headline(package, failures, messages))
        _warn(messages, records, results, captured_warn_bytes, emit, fold_failures(covered))
        from hatch_jaxexport.bake.concrete.portable_export import write_index

        portable_errors = write_index(staging, package, results, records, on_error=on_error,
                                      generator=f"hatch-jaxexport {__version__}", log=emit)
        if portable_errors:
            raise ExportError(portable_errors)
        skipped = [_skipped_record(f) for f in [*failures, *covered]]
        compiled = compile_executables(
            staging, package, [p for res in results for p in res.executable_plans],
            env, python or sys.executable, emit, executable_jaxlibs)
        manifest = _stored_once(staging, Manifest(
            package=package, generator=f"hatch-jaxexport {__version__}",
            jax_version=results[0].jax_version, jaxlib_version=results[0].jaxlib_version,
            artifacts=tuple(records), skipped=tuple(skipped), executables=tuple(one_per_id(
                package, "executable", [(e, f"the compile for {e.target}") for e in compiled])),
            concrete=tuple(concrete), sources=sources, failed_calls=failed_calls,
            jax_released=jax_release_date(results[0].jax_version)), emit)
        for leftover in staging.glob(".*"):  # requests, results, logs (blobs never start with .)
            leftover.unlink()
        (staging / MANIFEST_NAME).write_bytes(manifest.to_bytes())
        read_back(staging, package, "the export")  # before anything replaces ``out``
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staging, out)
    emit(f"{package}: exported {summarize(records)}"
         + (f"; skipped {len(skipped)}" if skipped else "") + f" into {out}")
    seconds = {k: v for res in results for k, v in res.seconds.items()}
    return BuildResult(manifest, out, messages, seconds, time.perf_counter() - started,
                       tuple(targets))


def list_tasks(package: str, *, platforms: Sequence[str] = DEFAULT_PLATFORMS,
               search_path: Sequence[str | os.PathLike[str]] = (),
               python: str | None = None) -> list[str]:
    """The ids of every artifact a build of ``package`` would export (no export runs)."""
    with tempfile.TemporaryDirectory(prefix="jaxexport-") as tmp:
        (results,) = _run_workers(package, Path(tmp), 1, platforms, worker_env(search_path),
                                  python or sys.executable, list_only=True)
    return list(results.tasks)


__all__ = ["BuildResult", "ExportTask", "discover", "export_package", "list_tasks",
           "worker_env"]
