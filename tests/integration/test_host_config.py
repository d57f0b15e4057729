"""A library leaves its host's jax config alone: no ``jax.config`` value changes by default.

Each test runs a fresh process that snapshots every ``jax.config.values`` item after
``import jax`` (and after the user's own settings), imports a baked package, calls it eagerly,
under ``jax.jit``, and through ``jax.grad`` (eager and jitted; ``dense`` has ``vjp_order=1``),
then prints what differs. The executable cache is on throughout (a folder per test).
"""

from __future__ import annotations

import json
from pathlib import Path

SNAPSHOT = """
import json, os, sys
import numpy as np, jax
if os.environ.get("USER_CACHE_DIR"):  # the host program's own choice, made in code
    jax.config.update("jax_compilation_cache_dir", os.environ["USER_CACHE_DIR"])
before = {k: repr(v) for k, v in jax.config.values.items()}
from jxe_demo import funcs
from hatch_jaxexport.runtime.disk.cache_folders import active_cache_dir
from hatch_jaxexport.runtime.call.loader import loaded_from_artifact, tiered_calls
x = np.ones((3, 4), np.float32)
params = {"w": np.ones((4, 2), np.float32), "b": np.zeros(2, np.float32)}
loss = lambda p, x: funcs.dense(p, x).sum()
results = [funcs.scale(x), jax.jit(funcs.scale)(x), funcs.dense(params, x),
           jax.jit(funcs.dense)(params, x), jax.grad(loss)(params, x),
           jax.jit(jax.grad(loss))(params, x)]
jax.block_until_ready(results)
after = {k: repr(v) for k, v in jax.config.values.items()}
changed = {k: [before.get(k), after.get(k)] for k in before.keys() | after.keys()
           if before.get(k) != after.get(k)}
print(json.dumps({"changed": changed, "user_dir": before["jax_compilation_cache_dir"],
                  "cache": active_cache_dir(),
                  "tiers": sorted(t for c in tiered_calls(funcs.scale) for t in c.tiers.values()),
                  "baked": all(loaded_from_artifact(funcs.dense).values())}))
"""


def _snapshot(run_python, site: Path, tmp_path: Path, **env: str) -> dict:
    proc = run_python(SNAPSHOT, env={"PYTHONPATH": str(site), "XDG_CACHE_HOME": str(tmp_path),
                                     "HATCH_JAXEXPORT_STRICT": "1", **env})
    return json.loads(proc.stdout.splitlines()[-1])


def test_no_jax_config_value_changes_by_default(demo_site, tmp_path, run_python):
    out = _snapshot(run_python, demo_site, tmp_path)
    assert out["changed"] == {}
    assert out["baked"] and out["tiers"] == ["compiled"]
    ours = tmp_path / "hatch-jaxexport"
    assert out["cache"] == str(ours / "executables")
    assert list((ours / "executables").glob("*.xla"))  # the executable cache still works
    assert not (ours / "jax").exists()  # and jax's cache was never turned on
    again = _snapshot(run_python, demo_site, tmp_path)
    assert again["changed"] == {} and again["tiers"] == ["cached"]


def test_a_users_own_jax_cache_is_used_and_nothing_else_changes(demo_site, tmp_path,
                                                                run_python):
    by_env = tmp_path / "by-env"
    out = _snapshot(run_python, demo_site, tmp_path, JAX_COMPILATION_CACHE_DIR=str(by_env),
                    HATCH_JAXEXPORT_JAX_CACHE="1")  # the user's choice wins over our opt-in
    assert out["changed"] == {} and out["user_dir"] == repr(str(by_env))
    assert out["cache"] == str(by_env)
    assert list((by_env / "hatch-jaxexport-executables").glob("*.xla"))
    in_code = tmp_path / "in-code"
    out = _snapshot(run_python, demo_site, tmp_path, USER_CACHE_DIR=str(in_code))
    assert out["changed"] == {} and out["cache"] == str(in_code)
    assert not (tmp_path / "hatch-jaxexport").exists()


def test_the_opt_in_turns_jax_cache_on_in_our_folder(demo_site, tmp_path, run_python):
    out = _snapshot(run_python, demo_site, tmp_path, HATCH_JAXEXPORT_JAX_CACHE="1")
    folder = tmp_path / "hatch-jaxexport" / "jax"
    # the three settings the opt-in takes over, and nothing else (the third is unchanged
    # where jax's own default is already 0, as in 0.10.2)
    assert set(out["changed"]) <= {"jax_compilation_cache_dir",
                                   "jax_persistent_cache_min_compile_time_secs",
                                   "jax_persistent_cache_min_entry_size_bytes"}
    assert out["changed"]["jax_compilation_cache_dir"] == ["None", repr(str(folder))]
    assert out["changed"]["jax_persistent_cache_min_compile_time_secs"][1] == "0.0"
    assert out["cache"] == str(folder)
    assert any(folder.iterdir())  # the transformed calls' compiles went in
    assert list((tmp_path / "hatch-jaxexport" / "executables").glob("*.xla"))
