"""Build progress: which functions are finished, while the export workers still run.

Each export worker appends JSON lines to its own progress file in the staging folder: first the
plan (every task of the package, ``{"planned": [[artifact id, function], ...]}``; every worker
knows the whole list), then one line per task it finished (``{"id", "function", "record",
"failed", "seconds"}``). The orchestrator reads new lines while it waits for the workers
(``ProgressFiles``) and hands each event to a callback. ``FunctionProgress`` is that callback
for the bake: it counts, across all workers, the tasks of each function, and reports a function
once all of its tasks are done, with ``done/total`` functions, the elapsed time and, when the
build is long, an estimate of the time left. The line format is here too (``function_line``),
so the lines printed as functions finish and the ones of a finished build read the same.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.formats.inventory import byte_text
from hatch_jaxexport.formats.manifest import ArtifactRecord

#: Estimate the time left once a build has run this long (seconds)...
ETA_AFTER_SECONDS = 10.0
#: ...or from the start when it has at least this many functions.
ETA_FROM_FUNCTIONS = 20


def function_line(name: str, records: Sequence[ArtifactRecord], skipped: int,
                  seconds: float | None, *, skip_word: str = "skipped") -> str:
    """A function's line: structures, platforms, artifacts, bytes, export seconds, skipped."""
    structures = len({r.structure_index for r in records})
    platforms = ",".join(sorted({r.platform for r in records})) or "-"
    line = (f"  {name}: {structures} structure(s), platforms {platforms}, "
            f"{len(records)} artifact(s), {byte_text(sum(r.size for r in records))}")
    if seconds is not None:
        line += f", {seconds:.2f} s"
    if skipped:
        line += f", {skipped} {skip_word}"
    return line


def duration_text(seconds: float) -> str:
    """``4.2 s``, ``1 min 05 s``: short, for progress lines."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


@dataclasses.dataclass(frozen=True)
class FunctionDone:
    """One function whose every artifact is finished (exported or failed), across workers."""

    name: str
    records: tuple[ArtifactRecord, ...]
    #: Its tasks that failed (skipped with ``on-error = "skip"``, or failing the build).
    failed: int
    #: Export seconds summed over its artifacts (workers run in parallel).
    seconds: float
    #: Functions finished so far, this one included, and how many the package has.
    done: int
    total: int
    #: Seconds since the progress started (the export's start).
    elapsed: float
    #: Estimated seconds left, or ``None`` when the build is short or finished.
    remaining: float | None

    def suffix(self) -> str:
        """``[3/60, 4.2 s elapsed, about 12 s left]``: where the build stands."""
        text = f"[{self.done}/{self.total}, {duration_text(self.elapsed)} elapsed"
        if self.remaining is not None:
            text += f", about {duration_text(self.remaining)} left"
        return text + "]"


class FunctionProgress:
    """Turns worker task events into one ``FunctionDone`` per function, in completion order.

    ``on_function`` gets each finished function as soon as its last task is reported.
    ``clock`` (seconds, monotonic) and ``started`` make the timings testable; by default the
    progress starts when the object is made.
    """

    def __init__(self, on_function: Callable[[FunctionDone], None], *,
                 clock: Callable[[], float] = time.perf_counter,
                 started: float | None = None) -> None:
        self.on_function = on_function
        self.clock = clock
        self.started = clock() if started is None else started
        self.planned_at: float | None = None
        self.tasks_left: dict[str, int] = {}  # function -> tasks not yet reported
        self.task_total = 0
        self.tasks_done = 0
        self.records: dict[str, list[ArtifactRecord]] = {}
        self.failed: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.seen: set[str] = set()
        self.finished: list[str] = []
        self.function_total = 0

    def __call__(self, event: Mapping[str, Any]) -> None:
        """Take one event of a worker's progress file (the plan, or a finished task)."""
        if "planned" in event:
            self.plan([(task_id, function) for task_id, function in event["planned"]])
        else:
            self.task_done(event)

    def plan(self, tasks: Sequence[tuple[str, str]]) -> None:
        """The whole task list (artifact id, function); later copies (other workers) are ignored."""
        if self.planned_at is not None:
            return
        self.planned_at = self.clock()
        for _, function in tasks:
            self.tasks_left[function] = self.tasks_left.get(function, 0) + 1
        self.task_total = len(tasks)
        self.function_total = len(self.tasks_left)

    def task_done(self, event: Mapping[str, Any]) -> None:
        """A finished task: ``id``, ``function``, ``record`` (or None), ``failed``, ``seconds``."""
        function = event["function"]
        if event["id"] in self.seen or function not in self.tasks_left:
            return  # a repeated line, or a task outside the plan: nothing to count
        self.seen.add(event["id"])
        self.tasks_done += 1
        if event.get("record"):
            self.records.setdefault(function, []).append(ArtifactRecord(**event["record"]))
            self.seconds[function] = self.seconds.get(function, 0.0) + event.get("seconds", 0.0)
        if event.get("failed"):
            self.failed[function] = self.failed.get(function, 0) + 1
        self.tasks_left[function] -= 1
        if self.tasks_left[function] == 0:
            self.finished.append(function)
            self.on_function(self._done(function))

    def _done(self, function: str) -> FunctionDone:
        now = self.clock()
        elapsed = now - self.started
        return FunctionDone(function, tuple(self.records.get(function, ())),
                            self.failed.get(function, 0), self.seconds.get(function, 0.0),
                            len(self.finished), self.function_total, elapsed,
                            self._remaining(now, elapsed))

    def _remaining(self, now: float, elapsed: float) -> float | None:
        """Seconds left at the rate tasks finished since the plan; None when not worth saying."""
        left = self.task_total - self.tasks_done
        long_build = elapsed >= ETA_AFTER_SECONDS or self.function_total >= ETA_FROM_FUNCTIONS
        if left <= 0 or not long_build or self.planned_at is None or self.tasks_done == 0:
            return None
        return (now - self.planned_at) / self.tasks_done * left


class ProgressFiles:
    """Reads the new complete lines of the workers' progress files, each time it is asked."""

    def __init__(self, paths: Sequence[Path], callback: Callable[[dict[str, Any]], None]) -> None:
        self.paths = list(paths)
        self.offsets = [0] * len(self.paths)
        self.callback = callback

    def poll(self) -> None:
        """Hand each line written since the last poll to the callback (partial lines wait)."""
        for index, path in enumerate(self.paths):
            try:
                with path.open("rb") as stream:
                    stream.seek(self.offsets[index])
                    chunk = stream.read()
            except FileNotFoundError:
                continue
            complete = chunk[:chunk.rfind(b"\n") + 1]
            self.offsets[index] += len(complete)
            for line in complete.splitlines():
                if line.strip():
                    self.callback(json.loads(line))


class ProgressWriter:
    """A worker's side: appends one JSON line per event, flushed at once for the orchestrator."""

    def __init__(self, path: str | None) -> None:
        self.stream = open(path, "a", encoding="utf-8") if path else None

    def write(self, event: Mapping[str, Any]) -> None:
        if self.stream is not None:
            self.stream.write(json.dumps(event) + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()


__all__ = [
    "ETA_AFTER_SECONDS",
    "ETA_FROM_FUNCTIONS",
    "FunctionDone",
    "FunctionProgress",
    "ProgressFiles",
    "ProgressWriter",
    "duration_text",
    "function_line",
]
