"""Which tier serves a call, for each kind of argument that becomes the artifact's input type.

An artifact's input is a plain ``float32[]``: a Python float, a 0-d numpy array, a numpy scalar
of either width (x64 off: jax canonicalizes float64 to float32), a float64 0-d array and a jax
array, weak-typed or not, all become that input without changing its value, so all of them
run the one shipped executable, and with shipped executables off all of them share one entry
of the executable cache. Each call runs in a fresh process, strict (no tracing), counting XLA
compiles.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest
from conftest import run

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the fixture compiles the x86-64 targets")

#: Argument kind -> the expression of the scalar passed as ``scale``.
KINDS = {
    "python float": "2.0",
    "0-d float32 array": "np.asarray(2.0, np.float32)",
    "0-d float64 array": "np.asarray(2.0)",
    "numpy float32 scalar": "np.float32(2.0)",
    "numpy float64 scalar": "np.float64(2.0)",
    "jax float32": "jnp.float32(2.0)",
    "jax weak-typed": "jnp.asarray(2.0)",
}

SCRIPT = """
import json, sys
import numpy as np, jax, jax.numpy as jnp
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: compiles.append(event)
    if event == "/jax/core/compile/backend_compile_duration" else None)
import jxe_scalars as m
from hatch_jaxexport.runtime.call.loader import tiered_calls
scale = eval(sys.argv[1])
x = np.arange(4, dtype=np.float32)
before = len(compiles)
value = m.scaled(x, scale)
print(json.dumps({"compiles": len(compiles) - before, "result": np.asarray(value).tolist(),
                  "tiers": sorted(t for c in tiered_calls(m.scaled) for t in c.tiers.values())}))
"""


def call(site: Path, kind: str, **env: str) -> dict:
    proc = run([sys.executable, "-c", SCRIPT, KINDS[kind]], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_TIERED": "0",
        "HATCH_JAXEXPORT_CACHE": "0", **env})
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_of_scalar_runs_the_shipped_executable(scalars_site, kind):
    served = call(scalars_site, kind)
    assert served == {"compiles": 0, "result": [1.0, 3.0, 5.0, 7.0], "tiers": ["shipped"]}


def test_every_kind_shares_one_entry_of_the_executable_cache(scalars_site, tmp_path):
    """Shipped executables off: the first process compiles and caches; each other kind, in a
    later process, loads that entry and compiles nothing."""
    cache = {"HATCH_JAXEXPORT_EXECUTABLES": "0", "HATCH_JAXEXPORT_CACHE": str(tmp_path)}
    first = call(scalars_site, "numpy float32 scalar", **cache)
    assert first["compiles"] >= 1 and first["tiers"] == ["compiled"]
    for kind in sorted(set(KINDS) - {"numpy float32 scalar"}):
        later = call(scalars_site, kind, **cache)
        assert (kind, later) == (kind, {"compiles": 0, "result": [1.0, 3.0, 5.0, 7.0],
                                        "tiers": ["cached"]})
