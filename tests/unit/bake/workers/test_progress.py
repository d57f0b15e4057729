"""Build progress: one report per function when its last artifact is done, in completion order,
with done/total and an estimate of the time left only for long builds; the worker's progress
file read back line by line, partial lines held until complete."""

from __future__ import annotations

import json

from hatch_jaxexport.bake.config import ExportOptions
from hatch_jaxexport.bake.flow import export_one
from hatch_jaxexport.bake.workers.progress import (
    ETA_AFTER_SECONDS,
    ETA_FROM_FUNCTIONS,
    FunctionProgress,
    ProgressFiles,
    duration_text,
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _record(function: str, index: int, size: int = 1000) -> dict[str, object]:
    """An artifact record's fields (what a worker writes on its progress line)."""
    return {"function": function, "structure": "x: f32[n]", "structure_index": index,
            "spec": {}, "constraints": [], "static": {}, "platform": "cpu",
            "file": f"{function}-{index}.bin", "sha256": "0" * 64, "size": size,
            "fingerprint": "", "vjp_order": 0, "kwargs": False, "calling_convention": 9,
            "in_tree": "", "out_tree": "", "in_avals": [], "out_avals": [], "pytree_types": [],
            "kind": "primal", "batched": False, "custom_calls": []}


def _done(progress: FunctionProgress, function: str, index: int, *, failed: bool = False,
          seconds: float = 0.5) -> None:
    progress({"id": f"{function}/{index}", "function": function, "failed": failed,
              "record": None if failed else _record(function, index), "seconds": seconds})


def _plan(tasks: dict[str, int]) -> dict[str, object]:
    return {"planned": [[f"{f}/{i}", f] for f, n in tasks.items() for i in range(n)]}


def test_functions_are_reported_when_their_last_task_is_done_in_completion_order():
    clock, reported = Clock(), []
    progress = FunctionProgress(reported.append, clock=clock)
    plan = _plan({"a": 2, "b": 1, "c": 3})
    progress(plan)
    progress(plan)  # the second worker's copy of the plan counts nothing twice
    clock.now += 1
    _done(progress, "a", 0)
    _done(progress, "c", 0)
    assert reported == []  # no function has all its artifacts yet
    _done(progress, "b", 0)
    _done(progress, "b", 0)  # a repeated line is ignored
    clock.now += 1
    _done(progress, "c", 1)
    _done(progress, "c", 2, failed=True)
    _done(progress, "a", 1)
    assert [(d.name, d.done, d.total) for d in reported] == [("b", 1, 3), ("c", 2, 3),
                                                             ("a", 3, 3)]
    c = reported[1]
    assert (len(c.records), c.failed, c.seconds) == (2, 1, 1.0)
    assert c.elapsed == 2.0
    assert c.suffix() == "[2/3, 2.0 s elapsed]"  # short, few functions: no estimate
    assert progress.finished == ["b", "c", "a"]


def test_time_left_only_when_the_build_is_long():
    clock, reported = Clock(), []
    progress = FunctionProgress(reported.append, clock=clock)
    progress(_plan({"a": 1, "b": 1, "c": 1, "d": 1}))
    clock.now += ETA_AFTER_SECONDS - 1
    _done(progress, "a", 0)
    assert reported[-1].remaining is None
    clock.now += 3  # past the threshold: 2 of 4 tasks in 12 s, so about 12 s left
    _done(progress, "b", 0)
    assert reported[-1].remaining == (ETA_AFTER_SECONDS + 2) / 2 * 2
    assert reported[-1].suffix() == "[2/4, 12.0 s elapsed, about 12.0 s left]"
    _done(progress, "c", 0)
    _done(progress, "d", 0)
    assert reported[-1].remaining is None  # finished: nothing left to estimate


def test_many_functions_get_an_estimate_from_the_start():
    clock, reported = Clock(), []
    progress = FunctionProgress(reported.append, clock=clock)
    names = [f"f{i}" for i in range(ETA_FROM_FUNCTIONS)]
    progress(_plan(dict.fromkeys(names, 1)))
    clock.now += 2
    _done(progress, names[0], 0)
    assert reported[0].remaining == 2.0 * (ETA_FROM_FUNCTIONS - 1)
    assert reported[0].suffix() == f"[1/{ETA_FROM_FUNCTIONS}, 2.0 s elapsed, about 38.0 s left]"


def test_duration_text():
    assert [duration_text(s) for s in (0.04, 59.94, 65, 3600)] == [
        "0.0 s", "59.9 s", "1 min 05 s", "60 min 00 s"]


def test_progress_files_hand_over_complete_lines_only(tmp_path):
    path = tmp_path / ".progress-0.jsonl"
    events: list[dict[str, object]] = []
    reader = ProgressFiles([path, tmp_path / "not-yet-written.jsonl"], events.append)
    reader.poll()  # no file yet: nothing, no error
    with path.open("w") as stream:
        stream.write(json.dumps({"planned": []}) + "\n" + '{"id": "a", "fun')
    reader.poll()
    assert events == [{"planned": []}]
    with path.open("a") as stream:
        stream.write('ction": "f"}\n')
    reader.poll()
    reader.poll()
    assert events == [{"planned": []}, {"id": "a", "function": "f"}]


class Lines:
    """A reporter that keeps its lines (the bake's Reporter protocol)."""

    skip_note = trace_note = ""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def debug(self, message: str) -> None:
        self.lines.append(message)

    info = waiting = success = warning = debug

    def workers(self, jobs: int) -> str:
        return f"{jobs} worker(s)"

    def export_failed(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the export should not fail")


def test_export_one_reports_each_function_once_with_progress(tmp_path):
    """A real two-worker export of jxe_demo: every function once, done counting 1..total."""
    from conftest import FIXTURES

    reporter = Lines()
    result = export_one("jxe_demo", tmp_path / "out", ExportOptions(jobs=2, on_error="skip"),
                        reporter, [str(FIXTURES)])
    functions = {r.function for r in result.manifest.artifacts} | {
        s.function for s in result.manifest.skipped}
    progress_lines = [line for line in reporter.lines if line.startswith("  ")
                      and not line.startswith("    ")]
    assert len(progress_lines) == len(functions)
    for name in functions:  # each function exactly once
        assert sum(line.startswith(f"  {name}: ") for line in progress_lines) == 1, name
    counts = [line.rsplit("[", 1)[1].split(",")[0] for line in progress_lines]
    assert counts == [f"{i}/{len(functions)}" for i in range(1, len(functions) + 1)]
    assert reporter.lines[-1].startswith(f"jaxexport: jxe_demo: {len(functions)} function(s)")
