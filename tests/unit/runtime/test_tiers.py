"""Tiered compilation: quick tier first, the optimized executable from a background process,
an exit that never waits, warm starts, the quick tier cached for a process started right after,
one compile per signature, failures, the off switch."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import export_into_copy

SCRIPT = """
import json, os, sys, time, threading, warnings
import numpy as np, jax
import jxe_heavy as m
from hatch_jaxexport.runtime import _tiers as tiers
from hatch_jaxexport.runtime.loader import tiered_calls
warnings.simplefilter("always")
x = np.linspace(0, 1, 16, dtype=np.float32)
out = {}
mode = MODE
if mode == "traced":  # inside the user's own jit: the outer compile decides, nothing tiers
    np.asarray(jax.jit(lambda v: m.chain(v) * 2)(x))
    out["tiers"] = [sorted(c.tiers.values()) for c in tiered_calls(m.chain)]
    out["workers"] = [p.pid for p in tiers._CHILDREN]
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
out["workers"] = [p.pid for p in tiers._CHILDREN]
out["folder"] = str(calls[0].folder) if calls else None
if mode == "exit-now":
    out["exit_at"] = time.time()
    print(json.dumps(out)); sys.exit(0)
if mode == "kill-worker":
    for p in tiers._CHILDREN:
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
                                                                        run_python):
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


def test_per_function_option_and_size_default():
    from hatch_jaxexport.runtime._tiers import TIER_MIN_MODULE_BYTES, tiering_wanted

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
