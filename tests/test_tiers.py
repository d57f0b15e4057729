"""Tiered compilation: quick tier first, optimized in the background, safe exit, warm start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import export_into_copy

SCRIPT = """
import json, sys, time, threading
import numpy as np, jax
import jxe_heavy as m
from hatch_jaxexport.loader import tiered_calls
x = np.linspace(0, 1, 16, dtype=np.float32)
out = {}
start = time.perf_counter()
first = np.asarray(m.chain(x))
out["first_s"] = time.perf_counter() - start
calls = tiered_calls(m.chain)
out["tiers"] = [list(c.tiers.values()) for c in calls]
mode = sys.argv[1]
if mode == "exit-now":
    print(json.dumps(out)); sys.exit(0)
if mode == "threads":
    results = []
    def run():
        results.append(np.asarray(m.tiny(x)))
    ts = [threading.Thread(target=run) for _ in range(16)]
    [t.start() for t in ts]; [t.join() for t in ts]
    out["threads_equal"] = all(np.array_equal(r, results[0]) for r in results)
    out["tiny_tiers"] = [list(c.tiers.values()) for c in tiered_calls(m.tiny)]
for c in calls:
    c.wait()
out["after"] = [list(c.tiers.values()) for c in calls]
again = np.asarray(m.chain(x))
ref = np.asarray(jax.jit(m.chain.__wrapped__)(x))
out["quick_vs_source"] = float(np.max(np.abs(first - ref)))
out["optimized_vs_source"] = float(np.max(np.abs(again - ref)))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def heavy_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_into_copy(tmp_path_factory.mktemp("heavy-site"), "jxe_heavy")


def _run(run_python, site: Path, cache: Path, mode: str, tiered: str = "1") -> dict:
    env = {"PYTHONPATH": str(site), "XDG_CACHE_HOME": str(cache), "HATCH_JAXEXPORT_TIERED": tiered,
           "HATCH_JAXEXPORT_STRICT": "1"}
    proc = run_python(SCRIPT.replace("sys.argv[1]", repr(mode)), env=env)
    assert "terminate called" not in proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_quick_tier_first_then_optimized_with_equal_results(heavy_site, tmp_path, run_python):
    out = _run(run_python, heavy_site, tmp_path / "cache", "switch")
    assert out["tiers"] == [["quick"]]
    assert out["after"] == [["optimized"]]
    assert out["quick_vs_source"] < 1e-5 and out["optimized_vs_source"] < 1e-5


def test_warm_start_builds_no_quick_tier(heavy_site, tmp_path, run_python):
    cache = tmp_path / "cache"
    _run(run_python, heavy_site, cache, "switch")
    warm = _run(run_python, heavy_site, cache, "switch")
    assert warm["tiers"] == [["cached"]]


def test_exit_during_background_compile_is_clean(heavy_site, tmp_path, run_python):
    out = _run(run_python, heavy_site, tmp_path / "cache", "exit-now")
    assert out["tiers"] == [["quick"]]  # exited while the optimized compile ran: no abort


def test_concurrent_first_calls_compile_one_quick_tier(heavy_site, tmp_path, run_python):
    out = _run(run_python, heavy_site, tmp_path / "cache", "threads")
    assert out["threads_equal"]
    assert out["tiny_tiers"] == [["quick"]]  # 16 threads, one signature, one compile


def test_off_switch(heavy_site, tmp_path, run_python):
    out = _run(run_python, heavy_site, tmp_path / "cache", "switch", tiered="0")
    assert out["tiers"] == [] and out["after"] == []
    assert out["optimized_vs_source"] < 1e-5
