"""Tiered compilation: quick tier first, the optimized executable from a background process,
an exit that never waits, warm starts, the quick tier cached for a process started right after,
one compile per signature, failures, the off switch; background compiles bounded per machine,
queued in order of first use, dropped from the queue at exit, ended after their time limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import export_into_copy

SCRIPT = """
import json, os, sys, time, threading, warnings
import numpy as np, jax
import jxe_heavy as m
from hatch_jaxexport.runtime.executables import _background as background
from hatch_jaxexport.runtime.call.loader import tiered_calls
warnings.simplefilter("always")
x = np.linspace(0, 1, 16, dtype=np.float32)
out = {}
mode = MODE
if mode == "traced":  # inside the user's own jit: the outer compile decides, nothing tiers
    np.asarray(jax.jit(lambda v: m.chain(v) * 2)(x))
    out["tiers"] = [sorted(c.tiers.values()) for c in tiered_calls(m.chain)]
    out["workers"] = [p.pid for p in background.CHILDREN]
    print(json.dumps(out)); sys.exit(0)
if mode == "threads":
    results = []
    def run():
        results.append(np.asarray(m.chain(x)))
    ts = [threading.Thread(target=run) for _ in range(16)]
    [t.start() for t in ts]; [t.join() for t in ts]
    out["threads_equal"] = all(np.array_equal(r, results[0]) for r in results)
    first = results[0]
else:
    first = np.asarray(m.chain(x))
calls = tiered_calls(m.chain)
out["tiers"] = [sorted(c.tiers.values()) for c in calls]
out["workers"] = [p.pid for p in background.CHILDREN]
out["folder"] = str(calls[0].folder) if calls else None
if mode == "exit-now":
    out["exit_at"] = time.time()
    print(json.dumps(out)); sys.exit(0)
if mode == "kill-worker":
    for p in background.CHILDREN:
        p.kill()
    out["entries_after_kill"] = sorted(os.listdir(calls[0].folder))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for c in calls:
        assert c.wait(120)
    again = np.asarray(m.chain(x))
out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
out["after"] = [sorted(c.tiers.values()) for c in calls]
ref = np.asarray(jax.jit(m.chain.__wrapped__)(x))
out["first_vs_source"] = float(np.max(np.abs(first - ref)))
out["later_vs_source"] = float(np.max(np.abs(again - ref)))
out["hot"] = m.chain.calls.hot is not None
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def heavy_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_into_copy(tmp_path_factory.mktemp("heavy-site"), "jxe_heavy")


def _run(run_python, site: Path, cache: Path, mode: str, tiered: str = "1") -> dict:
    env = {"PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": str(cache),
           "HATCH_JAXEXPORT_TIERED": tiered, "HATCH_JAXEXPORT_STRICT": "1"}
    proc = run_python(SCRIPT.replace("MODE", repr(mode)), env=env)
    assert "terminate called" not in proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _entries(folder: str | Path) -> list[Path]:
    """The optimized executables in a cache folder (not the cached quick tiers)."""
    return sorted(p for p in Path(folder).glob("*.xla") if not p.name.startswith("quick-"))


def test_quick_tier_first_then_optimized_with_equal_results(heavy_site, tmp_path, run_python):
    out = _run(run_python, heavy_site, tmp_path / "cache", "switch")
    assert out["tiers"] == [["quick"]] and len(out["workers"]) == 1
    assert out["after"] == [["optimized"]] and out["warnings"] == []
    assert out["first_vs_source"] < 1e-5 and out["later_vs_source"] < 1e-5
    assert out["hot"]  # the optimized executable now serves steady-state calls directly
    folder = Path(out["folder"])
    assert len(_entries(folder)) == 1  # the background process's executable, and only that
    assert not list(folder.glob("*.lock")) and not list(folder.glob("*.log"))


def test_warm_start_builds_no_quick_tier(heavy_site, tmp_path, run_python):
    cache = tmp_path / "cache"
    _run(run_python, heavy_site, cache, "switch")
    warm = _run(run_python, heavy_site, cache, "switch")
    assert warm["tiers"] == [["cached"]] and warm["workers"] == []


def test_exit_during_background_compile_does_not_wait(heavy_site, tmp_path, run_python):
    out = _run(run_python, heavy_site, tmp_path / "cache", "exit-now")
    assert out["tiers"] == [["quick"]] and len(out["workers"]) == 1
    folder = Path(out["folder"])
    deadline = time.time() + 180
    while not _entries(folder) and time.time() < deadline:
        time.sleep(0.2)
    entries = _entries(folder)
    assert entries, "the background compile never wrote its executable"
    # the parent exited (and printed) before the executable existed: its exit did not wait
    assert entries[0].stat().st_mtime > out["exit_at"]


def test_a_process_started_right_after_reuses_the_quick_tier(heavy_site, tmp_path,
                                                              run_python):
    cache = tmp_path / "cache"
    first = _run(run_python, heavy_site, cache, "exit-now")
    assert first["tiers"] == [["quick"]]
    quick = list(Path(first["folder"]).glob("quick-*.xla"))
    assert len(quick) == 1  # written as soon as it had run, for the next process
    second = _run(run_python, heavy_site, cache, "exit-now")
    # the optimized compile of the first may still run (then: its quick tier, no compile) or
    # be done (then: the optimized executable): either way nothing was compiled here
    assert second["tiers"] in ([["cached-quick"]], [["cached"]]), second
    assert second["workers"] == []  # the first process's background compile is not repeated
    # once the optimized executable is in, the stale quick tier goes
    third = _run(run_python, heavy_site, cache, "wait")
    assert third["after"] == [["optimized"]] or third["tiers"] == [["cached"]], third
    assert list(Path(first["folder"]).glob("quick-*.xla")) == []


def test_concurrent_first_calls_compile_once(heavy_site, tmp_path, run_python):
    out = _run(run_python, heavy_site, tmp_path / "cache", "threads")
    assert out["threads_equal"]
    assert out["tiers"] == [["quick"]] and len(out["workers"]) == 1  # 16 threads, one compile


def test_a_compile_in_flight_elsewhere_is_not_repeated(heavy_site, tmp_path, run_python):
    first = _run(run_python, heavy_site, tmp_path / "probe", "exit-now")
    key = None
    deadline = time.time() + 180
    while key is None and time.time() < deadline:  # learn the entry name (same machine)
        found = _entries(first["folder"])
        key = found[0].stem if found else None
        time.sleep(0.2)
    assert key is not None
    cache = tmp_path / "cache"
    (cache / "executables").mkdir(parents=True)
    (cache / "executables" / f"{key}.lock").write_text("4242")  # another process compiles
    out = _run(run_python, heavy_site, cache, "exit-now")
    assert out["tiers"] == [["quick"]] and out["workers"] == []


def test_failed_background_compile_keeps_the_quick_tier_with_a_warning(heavy_site, tmp_path,
                                                                        run_python,
                                                                        maintainer_warnings):
    out = _run(run_python, heavy_site, tmp_path / "cache", "kill-worker")
    assert out["after"] == [["quick"]]  # still the quick tier, with equal results
    assert out["later_vs_source"] < 1e-5
    assert any(w.startswith("TieredCompileWarning") and "optimized compile failed" in w
               for w in out["warnings"]), out["warnings"]
    # the killed compile wrote no optimized entry; the quick tier is cached under its own name
    assert [e for e in out["entries_after_kill"] if e.endswith(".xla")] == [
        e for e in out["entries_after_kill"] if e.startswith("quick-")]


def test_calls_inside_the_users_jit_are_not_tiered(heavy_site, tmp_path, run_python):
    out = _run(run_python, heavy_site, tmp_path / "cache", "traced")
    assert out["tiers"] == [[]] and out["workers"] == []


def test_off_switch(heavy_site, tmp_path, run_python):
    out = _run(run_python, heavy_site, tmp_path / "cache", "switch", tiered="0")
    assert out["tiers"] == [["compiled"]] and out["workers"] == []
    assert out["later_vs_source"] < 1e-5
    assert len(_entries(out["folder"])) == 1  # the optimized executable, cached by this process


MANY = """
import json, sys, warnings
import numpy as np
import jxe_heavy as m
from hatch_jaxexport.runtime.executables import _background as background
from hatch_jaxexport.runtime.call.loader import tiered_calls
for n in SIZES:  # one new signature each, in this order
    np.asarray(m.chain(np.linspace(0, 1, n, dtype=np.float32)))
calls = tiered_calls(m.chain)
out = {"tiers": sorted(t for c in calls for t in c.tiers.values()),
       "queued": background.queued(), "folder": str(calls[0].folder)}
if MODE == "exit-now":
    print(json.dumps(out)); sys.exit(0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out["done"] = all(c.wait(600) for c in calls)
out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
out["after"] = sorted(t for c in calls for t in c.tiers.values())
out["started"] = [json.loads(p.args[-1])["leaves"][0][0][0] for p in background.CHILDREN]
print(json.dumps(out))
"""


def _many(site: Path, cache: Path, sizes: list[int], mode: str = "wait",
          **env: str) -> subprocess.Popen[str]:
    """A process that first-calls ``chain`` at each size (one new signature each)."""
    code = MANY.replace("SIZES", repr(sizes)).replace("MODE", repr(mode))
    return subprocess.Popen([sys.executable, "-c", code], text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(site),
                                 "HATCH_JAXEXPORT_CACHE": str(cache),
                                 "HATCH_JAXEXPORT_TIERED": "1", "HATCH_JAXEXPORT_STRICT": "1",
                                 **env})


def _result(proc: subprocess.Popen[str]) -> dict:
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-4000:]
    assert "terminate called" not in stderr
    return json.loads(stdout.splitlines()[-1])


def _compiles_running(cache: Path) -> int:
    """Background compile processes of this cache folder alive now, read from ``/proc`` (not
    from the slots they are bounded by)."""
    marker = str(cache).encode()
    count = 0
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path("/proc", pid, "cmdline").read_bytes()
        except OSError:
            continue
        count += b"hatch_jaxexport.runtime.executables._optimizer" in cmdline and marker in cmdline
    return count


def _watch(cache: Path, procs: list[subprocess.Popen[str]], seconds: float = 0.0) -> int:
    """The most background compiles seen at once while ``procs`` run (then ``seconds`` more)."""
    most, until = 0, None
    while until is None or time.monotonic() < until:
        most = max(most, _compiles_running(cache))
        if until is None and all(p.poll() is not None for p in procs):
            until = time.monotonic() + seconds
        time.sleep(0.02)
    return most


needs_proc = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")


@needs_proc
def test_background_compiles_are_capped_per_machine_and_queued_in_first_use_order(
        heavy_site, tmp_path):
    cache = tmp_path / "cache"
    # two programs at once, three new signatures each, sharing one cache folder: six compiles
    procs = [_many(heavy_site, cache, sizes, HATCH_JAXEXPORT_BACKGROUND_COMPILES="2")
             for sizes in ([16, 17, 18], [19, 20, 21])]
    most = _watch(cache, procs)
    outs = [_result(p) for p in procs]
    assert 1 <= most <= 2, most  # never more than the cap, across both processes
    for out, sizes in zip(outs, ([16, 17, 18], [19, 20, 21]), strict=True):
        assert out["done"] and out["warnings"] == []
        assert out["tiers"] == ["quick"] * 3
        assert out["after"] == ["optimized"] * 3  # every one compiled in the end
        assert out["started"] == sizes  # one after the other, in order of first use
    folder = Path(outs[0]["folder"])
    assert len(_entries(folder)) == 6
    assert not list(folder.glob("*.lock")) and not list(folder.glob("*.log"))
    assert sorted(p.name for p in (folder / "background").iterdir()) == ["slot-0", "slot-1"]


@needs_proc
def test_queued_compiles_are_dropped_at_exit_and_the_running_one_finishes(heavy_site,
                                                                          tmp_path):
    cache = tmp_path / "cache"
    proc = _many(heavy_site, cache, [16, 17, 18], "exit-now",
                 HATCH_JAXEXPORT_BACKGROUND_COMPILES="1")
    most = _watch(cache, [proc], seconds=0.5)
    out = _result(proc)
    assert most == 1 and out["tiers"] == ["quick"] * 3
    assert out["queued"] >= 1  # the exit came while compiles still waited for the slot
    folder = Path(out["folder"])
    deadline = time.time() + 300
    while _compiles_running(cache) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # nothing starts the queued ones any more
    assert _compiles_running(cache) == 0
    compiled = len(_entries(folder))
    assert 1 <= compiled < 3, _entries(folder)
    assert not list(folder.glob("*.lock"))
    # the next program's first calls queue the dropped ones again and compile them
    again = _result(_many(heavy_site, cache, [16, 17, 18]))
    assert again["done"], again
    assert again["after"] == ["cached"] * compiled + ["optimized"] * (3 - compiled), again
    assert len(_entries(folder)) == 3


def test_a_background_compile_past_its_time_limit_is_ended(heavy_site, tmp_path,
                                                           maintainer_warnings):
    cache = tmp_path / "cache"
    out = _result(_many(heavy_site, cache, [16], HATCH_JAXEXPORT_BACKGROUND_TIMEOUT="0.2"))
    assert out["done"] and out["after"] == ["quick"]  # the quick tier stays in use
    assert any(w.startswith("TieredCompileWarning") and "past its time limit of 0.2 s" in w
               for w in out["warnings"]), out["warnings"]
    folder = Path(out["folder"])
    assert _entries(folder) == []
    assert not list(folder.glob("*.lock"))  # its lock and scratch files are gone
    assert [p.name for p in (folder / "background").iterdir()] == ["slot-0"]
    (log,) = folder.glob("*.log")  # kept, for whoever wonders why
    assert "HATCH_JAXEXPORT_BACKGROUND_TIMEOUT" in log.read_text()


def test_no_background_compiles_means_no_tiering(heavy_site, tmp_path):
    env = {"HATCH_JAXEXPORT_BACKGROUND_COMPILES": "0"}
    out = _result(_many(heavy_site, tmp_path / "cache", [16], **env))
    assert out["tiers"] == ["compiled"] and out["started"] == []


def test_per_function_option_and_size_default():
    from hatch_jaxexport.runtime.executables.tier_policy import (
        TIER_MIN_MODULE_BYTES,
        tiering_wanted,
    )

    env = os.environ.pop("HATCH_JAXEXPORT_TIERED", None)
    try:
        assert tiering_wanted("cpu", None, TIER_MIN_MODULE_BYTES)
        assert not tiering_wanted("cpu", None, TIER_MIN_MODULE_BYTES - 1)
        assert not tiering_wanted("cpu", False, 10 * TIER_MIN_MODULE_BYTES)
        assert tiering_wanted("cpu", True, 10)
        assert not tiering_wanted("cuda", True, 10 * TIER_MIN_MODULE_BYTES)  # not measured there
        os.environ["HATCH_JAXEXPORT_TIERED"] = "0"
        assert not tiering_wanted("cpu", True, 10 * TIER_MIN_MODULE_BYTES)
    finally:
        os.environ.pop("HATCH_JAXEXPORT_TIERED", None)
        if env is not None:
            os.environ["HATCH_JAXEXPORT_TIERED"] = env
