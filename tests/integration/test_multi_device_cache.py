"""The executable cache on hosts with several devices, in fresh processes with forced host
devices (``--xla_force_host_platform_device_count``, as chex's pmap variants set it; every
multi-GPU and TPU host has several): two processes per device count share one cache folder;
every eager signature is compiled in the first and read back in the second, results equal the
source's, ``jax.pmap`` and ``shard_map`` of baked functions and a call under a mesh included.
An entry for devices a process does not have is a miss, never an error.

Before entries named their devices, jax's unpickler loaded a cached one-device executable onto
every local device, and the second process's call failed with ``Expected args to
execute_sharded_on_local_devices to have 4 shards, got: [1]``.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TESTS, built_once, export_into_copy, run


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, demo_site: Path) -> str:
    """``jxe_demo`` (the session's) and ``jxe_sharded`` with their artifacts, as a path."""
    sharded = built_once(tmp_path_factory, "device-cache-sharded",
                         lambda tmp: export_into_copy(tmp, "jxe_sharded", jobs=2))
    return os.pathsep.join([str(demo_site), str(sharded), str(ROOT)])


def calls(site: str, cache: Path, devices: int, script: str = "device_cache_calls.py",
          code: str | None = None) -> dict:
    """One fresh process in strict mode with ``devices`` forced host devices: its JSON line."""
    argv = [sys.executable, "-c", code] if code else [sys.executable, str(TESTS / script)]
    proc = run(argv, env={"PYTHONPATH": site, "HATCH_JAXEXPORT_CACHE": str(cache),
                          "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_TIERED": "0",
                          "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"})
    return json.loads(proc.stdout.splitlines()[-1])


def entry_devices(path: Path) -> tuple[int, ...]:
    """The device ids an entry names (its outer pickle's last field)."""
    from hatch_jaxexport.runtime.executables._executable_cache import MAGIC

    data = path.read_bytes()
    assert data.startswith(MAGIC)
    return pickle.load(io.BytesIO(data[len(MAGIC):]))[-1]


@pytest.mark.parametrize("devices", [1, 2, 4, 8], ids=lambda n: f"{n}-devices")
def test_every_call_is_compiled_then_cached_with_several_devices(site, tmp_path, devices):
    first = calls(site, tmp_path, devices)
    second = calls(site, tmp_path, devices)
    assert first["devices"] == second["devices"] == devices
    for out in (first, second):
        assert out["same"] and all(out["same"].values()), out["same"]
    assert "layer.pmap" in first["same"] and "layer.shard_map" in first["same"]
    assert ("layer.mesh" in first["same"]) == (devices >= 4)  # the 2x2 variant
    assert {t for tiers in first["tiers"].values() for t in tiers} == {"compiled"}
    assert {t for tiers in second["tiers"].values() for t in tiers} == {"cached"}
    assert first["tiers"].keys() == second["tiers"].keys() >= {"demo.swap", "loss.members"}
    entries = sorted((tmp_path / "executables").glob("*.xla"))
    assert entries and all(entry_devices(e) == (0,) for e in entries)  # one device each


ONE_CALL = """
import json, numpy as np
from jxe_demo import funcs
from hatch_jaxexport.runtime.call.loader import tiered_calls
out = funcs.scale(np.arange(6, dtype=np.float32).reshape(2, 3))
print(json.dumps({"result": np.asarray(out).tolist(),
                  "tiers": [t for c in tiered_calls(funcs.scale) for t in c.tiers.values()]}))
"""


def test_an_entry_for_devices_this_process_lacks_is_a_miss(site, tmp_path):
    written = calls(site, tmp_path, 4, code=ONE_CALL)
    (entry,) = (tmp_path / "executables").glob("*.xla")
    from hatch_jaxexport.runtime.executables._executable_cache import MAGIC

    # the same executable, as an entry of a process whose executable ran on its device 7
    payload, in_tree, out_tree, _ = pickle.load(io.BytesIO(entry.read_bytes()[len(MAGIC):]))
    entry.write_bytes(MAGIC + pickle.dumps((payload, in_tree, out_tree, (7,))))
    missed = calls(site, tmp_path, 4, code=ONE_CALL)
    assert written["tiers"] == missed["tiers"] == ["compiled"]  # a miss: compiled again
    assert missed["result"] == written["result"]
    assert entry_devices(entry) == (0,)  # and written again for this process's devices
