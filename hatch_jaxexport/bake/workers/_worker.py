"""``python -m hatch_jaxexport.bake.workers._worker REQUEST.json``: one export worker process.

The orchestrator (``orchestrate``) starts one per job, in a controlled environment; each exports
its share of the package's tasks and writes blobs and a result beside the request (both files of
``protocol``). While it
works it appends the plan and one line per finished task to its progress file (``progress``),
so the build can say which functions are done before every worker has finished.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.export.diagnose import describe_exception, located
from hatch_jaxexport.bake.export.discovery import discover
from hatch_jaxexport.bake.export.exporter import export_task, tasks_for
from hatch_jaxexport.bake.export.search_path import restore_search_path
from hatch_jaxexport.bake.protocol import WorkerRequest, WorkerResult
from hatch_jaxexport.bake.workers.progress import ProgressWriter
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.settings import traceback_wanted

# Imported in functions: each build option's room (concrete sizes, their forms, portable variants,
# executables), only when the build asks for it.


def main(request_path: str) -> int:
    """Entry point of one export worker process
    (``python -m hatch_jaxexport.bake.workers._worker``)."""
    restore_search_path()  # before the package is imported: see _search_path
    request = WorkerRequest.read(Path(request_path))
    result = WorkerResult()
    progress = ProgressWriter(request.progress)
    try:
        import jax
        import jaxlib

        jax.config.update("jax_traceback_in_locations_limit", 0)
        result.jax_version = jax.__version__
        result.jaxlib_version = jaxlib.__version__
        functions = {fn.name: fn for fn in discover(request.package, isolate_config=True)}
        tasks = [(fn, task) for fn in functions.values()
                 for task in tasks_for(fn, request.default_platforms)]
        result.task_count = len(tasks)
        mine = share_of(tasks, request.worker, request.workers)
        if request.list_only:
            result.tasks = [task.id for _, task in tasks]
            mine = []
        else:
            progress.write({"planned": [[task.id, fn.name] for fn, task in tasks]})
        _export_mine(mine, request, result, progress)
        if not request.list_only:  # where a symbolic export failed, or there is no spec
            from hatch_jaxexport.bake.concrete.exports import worker_concrete
            from hatch_jaxexport.bake.executables.compiling import recorded_sizes

            recorded = recorded_sizes(request.package, request.signatures)
            result.failed_calls = []
            result.concrete = worker_concrete(functions, request, result.failures, recorded,
                                              result.notes.append, result.failed_calls)
        if not request.list_only:  # what the executable compilers compile, per artifact
            from hatch_jaxexport.bake.executables.compiling import concrete_plans, plans_for_worker

            result.executable_plans = plans_for_worker(
                functions, result.records, request.executables, request.signatures) + \
                concrete_plans(functions, result.concrete, request.executables)
        if not request.list_only:  # concrete-size StableHLO for non-JAX runtimes
            from hatch_jaxexport.bake.concrete.portable_export import worker_export

            result.portable = worker_export(list(functions.values()), request.worker,
                                            request.workers, request.out_dir, request.package)
    except ExportError as err:
        result.fatal = err.failures
    except Exception as err:  # a fault of the worker itself: its traceback only when asked for
        described = describe_exception(err, request.package)
        result.fatal = [described["detail"] if traceback_wanted() else
                        described["error"] + located(err, request.package)]
    progress.close()
    result.write(Path(request.result))
    return 0 if result.fatal is None else 1


def share_of(tasks: list[tuple[Any, Any]], worker: int, workers: int
             ) -> list[tuple[Any, Any]]:
    """Worker ``worker``'s share of ``tasks`` (every worker computes the same list): whole
    families, every ``workers``-th from its own index, each family being a primal task and its
    transformation members (the same ``primal`` id). A family stays in one worker because what
    its failures lead to is planned per family: the concrete-size artifacts of a structure
    whose primal or member failed (``concrete.exports.failed_primals``). Split by task, the
    primal's worker and its member's worker each baked the same sizes, and the manifest
    listed them twice (a manifest the loader refuses)."""
    families: dict[str, int] = {}
    for _, task in tasks:
        families.setdefault(task.primal.id, len(families))
    return [(fn, task) for fn, task in tasks
            if families[task.primal.id] % workers == worker]


def _export_mine(mine: list[tuple[Any, Any]], request: WorkerRequest, result: WorkerResult,
                 progress: ProgressWriter) -> None:
    """Export this worker's tasks into the request's folder: blobs, with the concrete-size
    forms of primal artifacts (``static_shapes``), and their records or failures in ``result``."""
    from hatch_jaxexport.bake.concrete.forms import sized_entries, wants_sized
    from hatch_jaxexport.bake.executables.compiling import recorded_sizes

    out_dir = Path(request.out_dir)
    recorded: dict[str, Any] = {}
    for fn, task in mine:
        started = time.perf_counter()
        try:
            blob, record = export_task(fn, task)
        except Exception as err:
            structure = fn.export_spec.structures[task.structure_index]
            result.failures.append({
                "task": task.to_json(), "structure": structure.key,
                **describe_exception(err, request.package)})
            progress.write({"id": task.id, "function": fn.name, "record": None,
                            "failed": True, "seconds": time.perf_counter() - started})
            continue
        (out_dir / record.file).write_bytes(blob)
        if wants_sized(record):
            if fn.package not in recorded:
                recorded[fn.package] = recorded_sizes(fn.package, request.signatures)
            record = record._replace(sized=sized_entries(
                fn, record, blob, out_dir, recorded[fn.package], result.notes.append))
        result.records.append(record._asdict())
        result.seconds[record.id] = time.perf_counter() - started
        progress.write({"id": task.id, "function": fn.name, "record": record._asdict(),
                        "failed": False, "seconds": result.seconds[record.id]})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
