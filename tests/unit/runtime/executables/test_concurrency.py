"""Concurrent first calls: threads in one process, and processes sharing a compilation cache.

Each artifact must be deserialized once however many threads make its first call at the same
moment, and every thread must get the same result as the source. Deserializations are counted
by wrapping ``jax.export.deserialize`` (what the loader calls), keyed by the blob's SHA-256.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from hatch_jaxexport.runtime.call import loader

THREADS = 16


def _inputs(demo: Any) -> list[tuple[str, Callable[[Any], Any]]]:
    """One call per distinct artifact of ``jxe_demo`` that runs on CPU (16 of them)."""
    rng = np.random.default_rng(7)

    def arr(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    a34, a25, a235, a6, a5, b5 = arr(3, 4), arr(2, 5), arr(2, 3, 5), arr(6), arr(5), arr(5)
    params, x74 = {"w": arr(4, 3), "b": arr(3)}, arr(7, 4)
    a9, a4, a32, a2 = arr(9), arr(4), arr(3, 2), arr(2)
    l1, l2, a3, s1, s2 = arr(2), arr(2), arr(3), arr(3), arr(3)
    od = collections.OrderedDict([("z", arr(3)), ("a", arr(3))])
    p1, p2 = arr(2), arr(2)
    return [
        ("scale", lambda f: f("scale")(a34)),
        ("reduce/2", lambda f: f("reduce")(a25)),
        ("reduce/3", lambda f: f("reduce")(a235)),
        ("poly/fast", lambda f: f("poly")(a6)),
        ("poly/exact", lambda f: f("poly")(a6, mode="exact")),
        ("combine", lambda f: f("combine")(a5, y=b5)),
        ("dense", lambda f: f("dense")(params, x74)),
        ("stats", lambda f: f("stats")(a9)),
        ("split", lambda f: f("split")(a4)),
        ("constrained", lambda f: f("constrained")(a32, a2)),
        ("listy", lambda f: f("listy")([l1, l2], np.float32(3.0))),
        ("power/1", lambda f: f("power")(a3, k=1)),
        ("power/2", lambda f: f("power")(a3, k=2)),
        ("pytree_in", lambda f: f("pytree_in")(demo.Stats(s1, s2), None, od)),
        ("swap", lambda f: f("swap")(demo.Pair(p1, p2))),
        ("lookup", lambda f: f("lookup")(x74)),
    ]


FUNCTIONS = ("scale", "reduce", "poly", "combine", "dense", "stats", "split", "constrained",
             "listy", "power", "pytree_in", "swap", "lookup")


def _source(demo: Any) -> Callable[[str], Any]:
    def get(name: str) -> Any:
        fn = getattr(demo, name)
        if fn.export_spec.skip_jitting:
            return fn.__wrapped__
        return jax.jit(fn.__wrapped__, static_argnames=tuple(fn.export_spec.static))

    return get


def _same(got: Any, expected: Any) -> None:
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected),
                    strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


class DeserializeCounter:
    """Counts ``jax.export.deserialize`` calls by blob SHA-256 (thread-safe)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def counting(data: Any, *args: Any, **kwargs: Any) -> Any:
            digest = hashlib.sha256(bytes(data)).hexdigest()
            with self.lock:
                self.counts[digest] += 1
            time.sleep(0.01)  # widen the window in which a second thread could load it too
            return original(data, *args, **kwargs)

        return counting


@pytest.fixture
def fresh(demo: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[DeserializeCounter]:
    """No artifact loaded yet, strict mode (a fallback raises), deserializations counted."""
    from jax import export

    def forget() -> None:
        loader.forget_package("jxe_demo")
        for name in FUNCTIONS:
            fn = getattr(demo, name)
            clear = getattr(fn, "clear_cache", None)
            clear() if clear else fn.calls.clear()

    counter = DeserializeCounter()
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    monkeypatch.setattr(export, "deserialize", counter.wrap(export.deserialize))
    from hatch_jaxexport.runtime.disk import cache_folders as cache

    cache.ensure_compilation_cache()
    monkeypatch.setattr(cache, "_executables", None)  # no warm executables: every blob loads
    forget()
    yield counter
    forget()


def _blob_names(demo_site: Path) -> dict[str, str]:
    manifest = json.loads((demo_site / "jxe_demo" / "_jaxexport" / "manifest.json").read_text())
    return {r["sha256"]: f"{r['function']}/{r['structure_index']}/{r['static']}"
            for r in manifest["artifacts"]}


def _race(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run ``jobs`` in one thread each, released together; return results (or raise)."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = jax.block_until_ready(jobs[i]())
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


def test_sixteen_threads_first_call_of_the_same_function(demo, demo_site, fresh) -> None:
    _, call = _inputs(demo)[0]
    expected = call(_source(demo))
    results = _race([lambda: call(lambda n: getattr(demo, n))] * THREADS)
    for got in results:
        _same(got, expected)
    names = _blob_names(demo_site)
    loaded = {names[digest]: count for digest, count in fresh.counts.items()}
    assert list(loaded.values()) == [1], loaded
    assert all(loader.loaded_from_artifact(demo.scale).values())


def test_sixteen_threads_first_calls_of_different_functions(demo, demo_site, fresh) -> None:
    calls = _inputs(demo)
    expected = {name: call(_source(demo)) for name, call in calls}
    jobs = [calls[i % len(calls)] for i in range(THREADS)]
    results = _race([lambda call=call: call(lambda n: getattr(demo, n)) for _, call in jobs])
    for (name, _), got in zip(jobs, results, strict=True):
        _same(got, expected[name])
    assert sum(fresh.counts.values()) == len(calls), fresh.counts
    assert set(fresh.counts.values()) == {1}, fresh.counts


def test_sixteen_threads_mixed_first_calls_in_shuffled_orders(demo, demo_site, fresh) -> None:
    calls = _inputs(demo)
    expected = {name: call(_source(demo)) for name, call in calls}

    def sequence(seed: int) -> Callable[[], list[tuple[str, Any]]]:
        order = list(calls)
        random.Random(seed).shuffle(order)
        return lambda: [(name, call(lambda n: getattr(demo, n))) for name, call in order]

    for results in _race([sequence(seed) for seed in range(THREADS)]):
        for name, got in results:
            _same(got, expected[name])
    assert sum(fresh.counts.values()) == len(calls), fresh.counts


WORKER = r"""
import json, os, sys, time
from pathlib import Path
import numpy as np
from jxe_demo import funcs

go = Path(sys.argv[1])
x = np.linspace(-1.0, 1.0, 12, dtype=np.float32)
calls = {
    "scale": lambda: funcs.scale(x.reshape(3, 4)),
    "reduce": lambda: funcs.reduce(x.reshape(2, 2, 3)),
    "poly": lambda: funcs.poly(x, mode="exact"),
    "combine": lambda: funcs.combine(x, y=x),
    "dense": lambda: funcs.dense({"w": x.reshape(4, 3), "b": x[:3]}, x.reshape(3, 4)),
    "stats": lambda: funcs.stats(x),
}
deadline = time.time() + 120
while not go.exists() and time.time() < deadline:
    time.sleep(0.005)
out = {}
for name, call in calls.items():
    import jax
    out[name] = [np.asarray(leaf).ravel().tolist()
                 for leaf in jax.tree_util.tree_leaves(call())]
print(json.dumps(out))
"""


def _processes(site: Path, cache: Path, script: Path, go: Path, count: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu",
           "HATCH_JAXEXPORT_STRICT": "1", "JAX_COMPILATION_CACHE_DIR": str(cache),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
    go.unlink(missing_ok=True)
    procs = [subprocess.Popen([sys.executable, str(script), str(go)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(count)]
    time.sleep(1.0)  # let them import; then release all at once
    go.touch()
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        outputs.append(json.loads(out.splitlines()[-1]))
    return outputs


def test_processes_warming_one_compilation_cache_at_once(demo_site, tmp_path) -> None:
    cache = tmp_path / "jax-cache"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    first = _processes(demo_site, cache, script, tmp_path / "go", 3)
    written = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert written, "no process wrote to the shared compilation cache"
    second = _processes(demo_site, cache, script, tmp_path / "go", 2)
    for output in first[1:] + second:
        assert output.keys() == first[0].keys()
        for name in output:
            for a, b in zip(output[name], first[0][name], strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-6)
    expected = np.sin(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)) * 2.0
    np.testing.assert_allclose(np.asarray(first[0]["scale"][0]).reshape(3, 4), expected,
                               rtol=1e-6)
    np.testing.assert_allclose(first[0]["stats"], [[0.0], [2.0]], atol=1e-6)
