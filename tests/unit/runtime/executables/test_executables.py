"""The executable cache: warm starts without lowering, misses on damage, a restricted unpickler,
one entry per signature, the steady-state path, and the off switch."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from hatch_jaxexport.runtime.executables.entries import NO_CACHE, ServedCall

SCRIPT = """
import json, sys
import numpy as np, jax
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: compiles.append(event)
    if event == "/jax/core/compile/backend_compile_duration" else None)
from jxe_demo import funcs
from hatch_jaxexport.runtime.call.loader import tiered_calls
x = np.arange(6, dtype=np.float32)
out = {"results": {}}
for name, call in [("scale", lambda: funcs.scale(x.reshape(2, 3))),
                   ("poly_fast", lambda: funcs.poly(x, "fast")),
                   ("poly_exact", lambda: funcs.poly(x, "exact")),
                   ("poly_fast_again", lambda: funcs.poly(x, "fast")),
                   ("scale_other_shape", lambda: funcs.scale(np.ones((4, 5), np.float32))),
                   ("swap", lambda: funcs.swap(funcs.Pair(x[:2], x[2:4]))),
                   ("stats", lambda: funcs.stats(x))]:
    out["results"][name] = [np.asarray(a).tolist() for a in jax.tree_util.tree_leaves(call())]
out["tiers"] = {name: sorted(t for c in tiered_calls(getattr(funcs, name))
                            for t in c.tiers.values())
                for name in ("scale", "poly", "swap", "stats")}
out["not_cached"] = sorted({str(c.not_cached) for name in ("scale", "poly", "swap", "stats")
                           for c in getattr(funcs, name).call_report()})
out["stats_type"] = type(funcs.stats(x)).__name__
out["compiles"] = len(compiles)
out["deserialized"] = any(c._jitted is not None for c in tiered_calls(funcs.scale))
out["traced"] = funcs.TRACES["count"] if hasattr(funcs, "TRACES") else 0
print(json.dumps(out))
"""


def _run(run_python, site: Path, cache: str) -> dict:
    proc = run_python(SCRIPT, env={"PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": cache,
                                   "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_TIERED": "0"})
    return json.loads(proc.stdout.splitlines()[-1])


def test_warm_start_loads_executables_without_deserializing(demo_site, tmp_path, run_python):
    cold = _run(run_python, demo_site, str(tmp_path))
    assert cold["tiers"]["scale"] == ["compiled", "compiled"]  # two shapes, two executables
    warm = _run(run_python, demo_site, str(tmp_path))
    assert warm["tiers"]["scale"] == ["cached", "cached"] and warm["tiers"]["poly"] == [
        "cached", "cached"]
    assert not warm["deserialized"]  # no StableHLO read, no lowering: the executable ran
    assert warm["results"] == cold["results"]
    # a static value picks its own executable, also after another one was called
    assert warm["results"]["poly_fast"] == warm["results"]["poly_fast_again"]
    assert warm["results"]["poly_fast"] != warm["results"]["poly_exact"]
    # a registered dataclass in and out, a namedtuple out: the package's classes are cached
    # too, their trees rebuilt from the call and the artifact, never unpickled
    assert cold["tiers"]["swap"] == cold["tiers"]["stats"] == ["compiled"]
    assert warm["tiers"]["swap"] == warm["tiers"]["stats"] == ["cached"]
    assert warm["stats_type"] == "Stats" and warm["compiles"] == 0 < cold["compiles"]
    assert cold["not_cached"] == warm["not_cached"] == ["None"]  # every call is cached


def test_damaged_or_foreign_entries_are_misses(demo_site, tmp_path, run_python):
    cold = _run(run_python, demo_site, str(tmp_path))
    entries = sorted((tmp_path / "executables").glob("*.xla"))
    assert len(entries) == 6  # scale x2, poly x2, swap, stats
    marker = tmp_path / "unpickled-a-callable"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    from hatch_jaxexport.runtime.executables._executable_cache import MAGIC

    entries[0].write_bytes(entries[0].read_bytes()[:200])  # truncated
    entries[1].write_bytes(MAGIC + pickle.dumps(Evil()))  # names a callable outside jax
    entries[2].write_bytes(b"not an entry")
    warm = _run(run_python, demo_site, str(tmp_path))
    assert not marker.exists()
    assert warm["results"] == cold["results"]
    assert sum(tiers.count("compiled") for tiers in warm["tiers"].values()) == 3


def test_restricted_unpickler_refuses_non_jax_globals():
    from hatch_jaxexport.runtime.executables._executable_cache import _restricted

    for module, name in [("os", "system"), ("builtins", "eval"), ("jax._src.config", "os"),
                         ("jax", "numpy.save")]:
        payload = pickle.dumps(module)  # any stream; find_class is what is tested
        unpickler = _restricted(pickle.Unpickler)(__import__("io").BytesIO(payload))
        with pytest.raises(pickle.UnpicklingError):
            unpickler.find_class(module, name)


def test_cache_off_writes_nothing(demo_site, tmp_path, run_python, monkeypatch):
    out = _run(run_python, demo_site, "0")
    assert out["tiers"]["scale"] == ["compiled", "compiled"]
    # call_report() and the REPORT line say why a later process will compile again
    assert out["not_cached"] == [NO_CACHE]


def test_the_report_line_says_why_a_call_is_not_cached():
    served = ServedCall("pkg:f", "float32[4]", "compiled", 0.0123, None, "", NO_CACHE)
    assert served.line() == ("hatch-jaxexport: pkg:f float32[4] compiled in 12.3 ms (not "
                             f"cached for the next process: {NO_CACHE})")
    assert "not cached" not in served._replace(not_cached=None).line()


def test_entry_keys_depend_on_artifact_signature_and_options(tmp_path):
    from hatch_jaxexport.runtime.executables._executable_cache import cpu_fingerprint, entry_key

    sig = ("PyTreeDef(((*,), {}))", (((2, 3), "float32", False),))
    other = ("PyTreeDef(((*,), {}))", (((2, 4), "float32", False),))
    keys = {entry_key(tmp_path, "a" * 64, sig, "cpu"), entry_key(tmp_path, "b" * 64, sig, "cpu"),
            entry_key(tmp_path, "a" * 64, other, "cpu"),
            entry_key(tmp_path, "a" * 64, sig, "cpu", options="quick")}
    assert len(keys) == 4
    assert len(cpu_fingerprint(tmp_path)) == 64


def test_only_a_cpu_executable_is_keyed_by_the_host_cpu_read_without_a_subprocess(
        tmp_path, monkeypatch):
    """XLA:CPU compiles for the host's instruction set, so a cpu entry's key holds the CPU's
    fingerprint; an accelerator's program runs on the device (in the key already), as jax's
    own cache keys it. Reading the fingerprint starts no process (``platform.processor()``
    ran ``uname -p``: milliseconds of a first call)."""
    import subprocess

    from hatch_jaxexport.runtime.executables import _executable_cache as cache

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    fingerprint = cache._read_cpu_fingerprint()
    assert len(fingerprint) == 64
    assert cache._host_code("cpu", tmp_path) == cache.cpu_fingerprint(tmp_path)
    assert cache._host_code("tpu", tmp_path) == cache._host_code("cuda", tmp_path) == "-"


@pytest.mark.parametrize("variable", ["XLA_FLAGS", "LIBTPU_INIT_ARGS"])
def test_entry_keys_depend_on_the_compile_flags_the_environment_sets(tmp_path, monkeypatch,
                                                                    variable):
    """An entry compiled under other XLA_FLAGS (or a TPU's LIBTPU_INIT_ARGS) may hold other
    code: a process with other flags keys its own, as jax's own cache does; the same flags
    spelled with other whitespace are the same key."""
    from hatch_jaxexport.runtime.executables import _executable_cache as cache

    sig = ("PyTreeDef(((*,), {}))", (((2, 3), "float32", False),))
    platform = "tpu" if variable == "LIBTPU_INIT_ARGS" else "cpu"

    def key(flags: str | None) -> str:
        if flags is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, flags)
        cache._machine.cache_clear()
        try:
            return cache.entry_key(tmp_path, "a" * 64, sig, platform)
        finally:
            cache._machine.cache_clear()

    flag = "--xla_cpu_enable_fast_math=true" if platform == "cpu" else \
        "--xla_tpu_use_enhanced_launch_barrier=true"
    assert key(None) != key(flag)
    assert key(flag) == key(f"  {flag} ")


def test_steady_state_hot_path_checks_types_and_static_values(demo):
    scale, poly = demo.scale, demo.poly
    scale.clear_cache()  # the session's other tests called it with many shapes
    poly.clear_cache()
    a = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(np.asarray(scale(a)), np.asarray(scale.__wrapped__(a)), rtol=1e-6)
    assert scale.calls.hot is not None
    b = np.ones((3, 3), np.float32)  # another shape: the hot executable refuses, resolved again
    np.testing.assert_allclose(np.asarray(scale(b)), np.asarray(scale.__wrapped__(b)), rtol=1e-6)
    x = np.linspace(0, 1, 5, dtype=np.float32)
    fast, exact = np.asarray(poly(x, "fast")), np.asarray(poly(x, "exact"))
    np.testing.assert_allclose(np.asarray(poly(x, "fast")), fast)
    np.testing.assert_allclose(np.asarray(poly(x, "exact")), exact)
    np.testing.assert_allclose(exact, np.asarray(poly.__wrapped__(x, "exact")), rtol=1e-5)
    # a static value by keyword, then by default: never the keyword call's executable
    np.testing.assert_allclose(np.asarray(poly(x, mode="exact")), exact)
    np.testing.assert_allclose(np.asarray(poly(x)), fast)
    np.testing.assert_allclose(np.asarray(poly(x, mode="exact")), exact)
    np.testing.assert_allclose(np.asarray(poly(x)), fast)


def test_pytree_arguments_take_the_hot_path_and_bad_trees_still_get_clear_errors(demo, monkeypatch):
    import jax

    dense = demo.dense
    dense.clear_cache()
    params = {"w": np.ones((4, 2), np.float32), "b": np.full(2, 0.5, np.float32)}
    x = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    first = np.asarray(dense(params, x))
    assert dense.calls.hot is not None  # a dict of arrays: served by the compiled executable next
    np.testing.assert_allclose(np.asarray(dense(params, x)), first)
    np.testing.assert_allclose(first, np.asarray(dense.__wrapped__(params, x)), rtol=1e-6)
    other = {"w": np.full((4, 2), 2.0, np.float32), "b": np.zeros(2, np.float32)}
    np.testing.assert_allclose(np.asarray(dense(other, x)),
                               np.asarray(dense.__wrapped__(other, x)), rtol=1e-6)
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")  # by default a bad tree runs the source
    with pytest.raises(TypeError, match="expects a dict with keys"):  # our check, not jax's
        dense({"w": params["w"]}, x)
    grads = jax.grad(lambda p: dense(p, x).sum())(params)  # tracers: the hot path steps aside
    assert grads["w"].shape == (4, 2)
    assert dense.calls.hot_misses == 1  # the bad tree; the traced call is not counted
