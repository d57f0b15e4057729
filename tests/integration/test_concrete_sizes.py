"""Code that is not shape-polymorphic still ships: record the calls a script makes, build the
wheel with the Hatch hook, and the installed wheel serves exactly those calls (and
``jax.grad`` of them) from concrete-size artifacts in a fresh process, strict, its source never
running.

``jxe_concrete`` holds ``range(len(x))`` and a Python ``if`` on a size (their symbolic exports
fail) and a spec-less ``@exportable`` (no structure: its artifacts are its recorded calls).
The build, ``on-error`` left at ``fail``, succeeds: each failed structure is served at the
sizes it knows, and ``jaxexport inspect`` says so per function.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile

import pytest
from _buildkit import hatch_pyproject, inprocess_build, write_project
from conftest import FIXTURES, run

from hatch_jaxexport.formats.signatures import SIGNATURES_NAME, parse_calls, parse_signatures

pytestmark = pytest.mark.slow

CALLS = """
import json, warnings
import jax, numpy as np
warnings.simplefilter("ignore")
import jxe_concrete as m
out = {"lengthy": [float(m.lengthy(np.ones(n, np.float32))) for n in (3, 4)],
       "branchy": np.asarray(m.branchy(np.ones(5, np.float32))).tolist(),
       "free": [np.asarray(m.free(np.arange(6.0, dtype=np.float32))).tolist(),
                np.asarray(m.free(np.ones((4, 2), np.float32), 3.0, mode="mul")).tolist(),
                # the same array as the first call, other non-array values: another artifact
                np.asarray(m.free(np.arange(6.0, dtype=np.float32), mode="mul")).tolist()]}
out["grad"] = np.asarray(jax.grad(m.lengthy)(np.ones(3, np.float32))).tolist()
out["traces"] = m.TRACES["count"]
try:
    m.lengthy(np.ones(9, np.float32))
    out["other size"] = "served"
except Exception as err:
    out["other size"] = type(err).__name__
# the fast path holds the size-3 artifact: a size-4 call after it is served right, untraced
out["again"] = [float(m.lengthy(np.ones(n, np.float32))) for n in (3, 4, 3)]
out["traces after"] = m.TRACES["count"] - out["traces"]
print(json.dumps(out))
"""

VMAPPED = """
import json, warnings
import jax, numpy as np
warnings.simplefilter("ignore")
import jxe_concrete as m
xs = np.stack([np.arange(6.0, dtype=np.float32), np.ones(6, np.float32)])
# a recorded size, under vmap: the concrete artifact's batching rule maps it (lax.map)
got = jax.vmap(m.free)(xs)
# a structure served only at concrete sizes (n=3), under vmap: the same
rows = np.stack([np.ones(3, np.float32), np.arange(3.0, dtype=np.float32)])
sized = jax.vmap(m.lengthy)(rows)
# nested: vmap of vmap, and vmap of a jax.jit that staged a vmap (each level maps the rule)
cube = np.random.default_rng(0).normal(size=(6, 3, 2)).astype(np.float32)
nested = jax.vmap(jax.vmap(m.free, in_axes=1), in_axes=2)(cube)
staged = jax.vmap(jax.jit(jax.vmap(m.free, in_axes=1)), in_axes=2)(cube)
blocks = np.random.default_rng(1).normal(size=(2, 3, 2)).astype(np.float32)
sized_nested = jax.vmap(jax.vmap(m.lengthy, in_axes=1))(blocks)
traces = m.TRACES["count"]
try:  # what no concrete-size artifact can serve: the strict refusal says what would
    jax.jvp(m.free, (xs[0],), (xs[1],))
    forward = "served"
except Exception as err:
    forward = f"{type(err).__name__}: {err}"
want = jax.vmap(jax.vmap(m.free.__wrapped__, in_axes=1), in_axes=2)(cube)
print(json.dumps({
    "same": bool(np.allclose(got, jax.vmap(m.free.__wrapped__)(xs))), "shape": list(got.shape),
    "sized": bool(np.allclose(sized, jax.vmap(m.lengthy.__wrapped__)(rows))),
    "nested": bool(np.allclose(nested, want)) and bool(np.allclose(staged, want)),
    "sized nested": bool(np.allclose(sized_nested, jax.vmap(jax.vmap(
        m.lengthy.__wrapped__, in_axes=1))(blocks))),
    "traces": traces, "forward": forward}))
"""

REFUSED = """
import json
import numpy as np
import jxe_concrete as m
from hatch_jaxexport.runtime.call.recorded_calls import recorded_call
run, _ = recorded_call(m.fixed, (np.ones(5, np.float32),), {})
none, why = recorded_call(m.fixed, (np.ones(6, np.float32),), {})
assert none is None
direct = float(m.fixed(np.ones(5, np.float32)))  # strict, yet covered: served
traces = m.TRACES["count"]
try:  # a spec-less call at a size not recorded: strict names it and the nearest recorded
    m.free(np.ones(5, np.float32), mode="mul")
    near = "served"
except Exception as err:
    near = str(err)
print(json.dumps({"fixed": float(run()), "direct": direct, "traces": traces,
                  "other": why, "near": near}))
"""


def test_recorded_calls_of_non_polymorphic_and_specless_functions_ship(tmp_path):
    project = write_project(tmp_path / "proj", {
        "pyproject.toml": hatch_pyproject("jxe-concrete")})
    shutil.copytree(FIXTURES / "jxe_concrete", project / "jxe_concrete",
                    ignore=shutil.ignore_patterns("__pycache__", "_jaxexport", SIGNATURES_NAME))
    recorded = json.loads(run([sys.executable, "-c", CALLS], env={
        "PYTHONPATH": str(project), "HATCH_JAXEXPORT_RECORD": "1",
        "HATCH_JAXEXPORT_CACHE": "0"}).stdout.splitlines()[-1])
    assert recorded["traces"] >= 5 and recorded["other size"] == "served"  # the source ran
    assert recorded["grad"] == [0.0, 1.0, 2.0]
    text = (project / "jxe_concrete" / SIGNATURES_NAME).read_text()
    assert parse_signatures(text, "s")["jxe_concrete:lengthy"] == {
        0: [{"n": 3}, {"n": 4}, {"n": 9}]}
    assert len(parse_calls(text, "s")["jxe_concrete:free"]) == 3
    signatures = json.loads(text)
    signatures["functions"]["jxe_concrete:lengthy"]["0"] = [{"n": 3}, {"n": 4}]  # 9 dropped
    # a call no structure of `fixed` accepts, as the loader's fallback path records it
    signatures["calls"]["jxe_concrete:fixed"] = [{"x": {"array": [[5], "float32"]}}]
    (project / "jxe_concrete" / SIGNATURES_NAME).write_text(json.dumps(signatures))

    (wheel,) = inprocess_build(project, tmp_path / "dist")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    manifest = json.loads((site / "jxe_concrete" / "_jaxexport" / "manifest.json").read_text())
    assert [a["function"] for a in manifest["artifacts"]] == ["jxe_concrete:fixed"]
    assert sorted((c["function"], c["structure_index"], json.dumps(c["sizes"]))
                  for c in manifest["concrete"]) == [
        ("jxe_concrete:branchy", 0, '{"n": 5}'), ("jxe_concrete:fixed", -1, "{}"),
        ("jxe_concrete:free", -1, "{}"), ("jxe_concrete:free", -1, "{}"),
        ("jxe_concrete:free", -1, "{}"),
        ("jxe_concrete:lengthy", 0, '{"n": 3}'), ("jxe_concrete:lengthy", 0, '{"n": 4}')]

    served = json.loads(run([sys.executable, "-c", CALLS], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1",
        "HATCH_JAXEXPORT_CACHE": "0"}).stdout.splitlines()[-1])
    assert recorded["again"] == [3.0, 6.0, 3.0]
    assert served == {**recorded, "traces": 0, "other size": "ArtifactError",
                      "traces after": 0}
    # what the fallback path of a call no structure accepts runs first: never a trace
    refused = run([sys.executable, "-c", REFUSED], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1"}).stdout.splitlines()[-1]
    refused = json.loads(refused)
    assert refused.pop("near").split("; ")[1:] == [
        "this call: (mode='mul', scale=2.0, x=float32[5])",
        "the nearest recorded: (mode='mul', scale=2.0, x=float32[6]) differs in x",
        "(mode='add', scale=2.0, x=float32[6]) differs in mode, x",
        "(mode='mul', scale=3.0, x=float32[4,2]) differs in scale, x"]
    assert refused == {"fixed": 5.0, "direct": 5.0, "traces": 0,
                                   "other": "no artifact was baked "
                                   "for this call's signature (record it with "
                                   "HATCH_JAXEXPORT_RECORD=1 and rebuild)"}

    vmapped = run([sys.executable, "-c", VMAPPED], env={  # strict: a refusal would raise
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1",
        "HATCH_JAXEXPORT_CACHE": "0"}).stdout.splitlines()[-1]
    vmapped = json.loads(vmapped)
    refused, *fix = vmapped.pop("forward").split("; ")  # jax's own words in parentheses
    assert refused.startswith(
        "ArtifactError: jxe_concrete:free: no usable baked artifact (HATCH_JAXEXPORT_STRICT is "
        "set): its artifact cannot run under this transformation: forward-mode differentiation "
        "(jax.jvp, jax.jacfwd, jax.linearize, jax.hessian...) has no rule in a concrete-size "
        "artifact, which carries jax's serialized VJP only (jax: ")
    assert fix == [
        "to serve it, give the function a structure that exports with symbolic sizes "
        "(shape-polymorphic code) and ad_order=1 in @exportable(...)",
        "until then the source serves such calls",
        "this call: (mode='add', scale=2.0, x=float32[6])"]  # strict names a spec-less call
    assert vmapped == {"same": True, "shape": [2, 4], "sized": True, "nested": True,
                       "sized nested": True, "traces": 0}

    run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_concrete"],
        env={"PYTHONPATH": str(site)})  # every concrete-size file listed, its SHA-256 right
    inspect = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_concrete"],
                  env={"PYTHONPATH": str(site)}).stdout
    assert "serves: jxe_concrete:lengthy: only at sizes: structure 0 (n=3; n=4)" in inspect
    assert "serves: jxe_concrete:free: only its recorded calls (mode='add', scale=2.0, " \
        "x=float32[6]; mode='mul', scale=2.0, x=float32[6]; mode='mul', scale=3.0, " \
        "x=float32[4,2])" in inspect  # the static values tell the two of float32[6] apart
