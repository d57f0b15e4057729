"""Precompiled executables of concrete-size artifacts: a recorded call of a spec-less function,
and a ``concrete=`` size of a structure whose symbolic export fails, are loaded, not compiled,
by a fresh process's first call of exactly those arrays (on a TPU, the eager first calls of a
library's recorded calls were all compiled before: issue 66's dm-pix run)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="compiles the x86-64 targets")

MODULE = '''
import jax.numpy as jnp

from hatch_jaxexport import exportable


@exportable()
def recorded(x, y):
    return jnp.sin(x) * y + x.shape[0]


@exportable({"x": ("n", "float32")}, concrete={"n": [4]})
def unrolled(x):  # not shape-polymorphic: a concrete-size artifact at n=4
    return sum(jnp.cos(x[i]) for i in range(len(x)))
'''

CALLS = """
import json, sys, numpy as np, jxe_cx as m
out = {
    "recorded3": m.recorded(np.arange(3, dtype=np.float32), np.float32(2)).tolist(),
    "recorded5": m.recorded(np.ones(5, np.float32), np.ones(5, np.float32)).tolist(),
    "unrolled": float(m.unrolled(np.arange(4, dtype=np.float32))),
    "again": m.recorded(np.arange(3, dtype=np.float32), np.float32(2)).tolist(),
}
out["tiers"] = sorted((r.function.split(":")[1], r.signature, r.tier, r.not_shipped or "")
                      for f in (m.recorded, m.unrolled) for r in f.call_report())
print(json.dumps(out))
"""


def python(site: Path, script: str, **env: str) -> dict:
    full = {**os.environ, "PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu",
            "HATCH_JAXEXPORT_CACHE": "0", **env}
    full.pop("HATCH_JAXEXPORT_STRICT", None)
    done = subprocess.run([sys.executable, "-c", script], env=full, text=True,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    """jxe_cx, its calls recorded in a fresh process, exported with this machine's targets."""
    site = tmp_path_factory.mktemp("concrete-executables")
    (site / "jxe_cx").mkdir()
    (site / "jxe_cx" / "__init__.py").write_text(MODULE)
    plain = python(site, CALLS, HATCH_JAXEXPORT_RECORD="1")
    run([sys.executable, "-m", "hatch_jaxexport", "export", "jxe_cx", "--out",
         site / "jxe_cx" / "_jaxexport", "--executables"],
        env={"PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu"})
    return site, plain


@pytest.mark.slow
def test_recorded_calls_and_concrete_sizes_load_their_executables(baked):
    site, plain = baked
    manifest = json.loads((site / "jxe_cx" / "_jaxexport" / "manifest.json").read_text())
    concrete = {c["file"]: c for c in manifest["concrete"]}
    compiled_from = {e["artifact"] for e in manifest["executables"]}
    assert len(concrete) == 3  # two recorded calls, one concrete= size
    assert len(compiled_from) == 3
    served = python(site, CALLS)
    for name in ("recorded3", "recorded5", "unrolled", "again"):
        assert served[name] == plain[name], name
    assert [(f, s, t) for f, s, t, _ in served["tiers"]] == [
        ("recorded", "float32[3],float32[]", "shipped"),
        ("recorded", "float32[5],float32[5]", "shipped"),
        ("unrolled", "float32[4]", "shipped")]
    verified = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_cx"],
                   env={"PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu"})
    assert verified.stdout.startswith("jxe_cx: OK"), verified.stdout


@pytest.mark.slow
def test_without_executables_the_concrete_artifacts_compile_and_say_why(baked):
    site, plain = baked
    served = python(site, CALLS, HATCH_JAXEXPORT_EXECUTABLES="0")
    assert served["recorded3"] == plain["recorded3"]
    assert {t for _, _, t, _ in served["tiers"]} == {"compiled"}
    assert {why for *_, why in served["tiers"]} == {"HATCH_JAXEXPORT_EXECUTABLES=0 turns them off"}
