"""Sizes from real calls, end to end: record the calls a script makes, build the wheel, and the
installed wheel serves those calls from shipped executables, compiling nothing.

``HATCH_JAXEXPORT_RECORD=1`` writes ``jaxexport-signatures.json`` beside the package (the source
is traced: nothing is baked yet); the Hatch hook with ``executables = true`` reads it, so the
functions whose symbols have no ``executable_sizes=`` get executables of the recorded sizes; the
wheel, unpacked into a fresh folder (it is pure), runs them in a fresh process, strict.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import zipfile

import pytest
from _buildkit import hatch_pyproject, inprocess_build, write_project
from conftest import FIXTURES, run

from hatch_jaxexport.formats.signatures import SIGNATURES_NAME

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the build compiles this machine's x86-64 targets")

#: A fresh process's start: jax's backend compiles counted in ``compiles``.
COUNTING = """
import json, sys, warnings
import numpy as np, jax
warnings.simplefilter("ignore")
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: compiles.append(event)
    if event == "/jax/core/compile/backend_compile_duration" else None)
"""

CALLS = COUNTING + """
import jxe_unsized as m
out = {}
for n in (3, 7):
    before = len(compiles)
    out[n] = [np.asarray(m.unsized(np.ones(n, np.float32))).tolist(), len(compiles) - before]
out["tiers"] = sorted(r.tier for r in m.unsized.call_report())
print(json.dumps(out))
"""


def test_recorded_calls_get_shipped_executables(tmp_path):
    project = write_project(tmp_path / "proj", {
        "pyproject.toml": hatch_pyproject("jxe-unsized", "executables = true\n")})
    shutil.copytree(FIXTURES / "jxe_unsized", project / "jxe_unsized",
                    ignore=shutil.ignore_patterns("__pycache__"))
    recorded = run([sys.executable, "-c", CALLS], env={
        "PYTHONPATH": str(project), "HATCH_JAXEXPORT_RECORD": "1", "HATCH_JAXEXPORT_CACHE": "0"})
    assert json.loads(recorded.stdout.splitlines()[-1])["tiers"] == ["traced"]
    signatures = json.loads((project / "jxe_unsized" / SIGNATURES_NAME).read_text())
    assert signatures == {"version": 2, "functions": {
        "jxe_unsized:unsized": {"0": [{"n": 3}, {"n": 7}]}}}

    (wheel,) = inprocess_build(project, tmp_path / "dist")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    manifest = json.loads((site / "jxe_unsized" / "_jaxexport" / "manifest.json").read_text())
    sizes = {tuple(e["inputs"][0][0]) for e in manifest["executables"]
             if e["artifact"].startswith("jxe_unsized:unsized/")}
    assert sizes == {(3,), (7,)}
    served = run([sys.executable, "-c", CALLS], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_CACHE": "0",
        "HATCH_JAXEXPORT_TIERED": "0"})
    out = json.loads(served.stdout.splitlines()[-1])
    assert out == {"3": [[2.0] * 3, 0], "7": [[2.0] * 7, 0], "tiers": ["shipped", "shipped"]}


def test_recording_merges_with_what_the_file_holds_and_a_bad_file_is_named(tmp_path):
    from hatch_jaxexport.formats.signatures import merged, parse_signatures, signatures_text

    before = parse_signatures(signatures_text({"p:f": {0: [{"n": 3}]}}), "x")
    assert merged(before, {"p:f": {0: [{"n": 7}, {"n": 3}]}, "p:g": {1: [{"a": 2}]}}) == {
        "p:f": {0: [{"n": 3}, {"n": 7}]}, "p:g": {1: [{"a": 2}]}}
    with pytest.raises(ValueError, match=r"^jxe/jaxexport-signatures.json: p:f structure 0: "
                                         r"expected a list of \{symbol: size\} objects"):
        parse_signatures('{"version": 1, "functions": {"p:f": {"0": [{"n": "3"}]}}}',
                         "jxe/jaxexport-signatures.json")
    with pytest.raises(ValueError, match="not JSON"):
        parse_signatures("{", "f")


BATCHED_PACKAGE = '''
import jax.numpy as jnp

from hatch_jaxexport import exportable


@exportable({"x": ("n", "float32"), "y": ("n", "float32")}, vmap=True)
def distance(x, y):
    return jnp.sqrt(jnp.sum(jnp.square(x - y)))
'''

BATCHED_CALLS = COUNTING + """
import jxe_batched as m
x, y = np.ones((4, 3), np.float32), np.zeros((4, 3), np.float32)
before = len(compiles)
single = np.asarray(jax.vmap(m.distance)(x, y)).tolist()
out = {"single": [single, len(compiles) - before]}
nested = jax.vmap(jax.vmap(m.distance, (None, 0)), (0, None))(x, y)
out["nested"] = np.asarray(nested).shape
out["report"] = sorted((r.label.strip(), r.tier) for r in m.distance.call_report())
print(json.dumps(out))
"""


def test_eager_vmap_calls_get_the_batched_members_executables(tmp_path):
    """An eager ``jax.vmap`` of a function baked with ``vmap=True`` is served by its batched
    member, whose batch size is any: the recording run notes each eager vmap's batch size
    (nested ones multiplied, as the loader folds them), the build compiles the batched member
    for it, and the installed wheel serves that call ``shipped``, compiling nothing (on a TPU,
    0.1-0.2 s a new batch shape otherwise: tinygp's kernels)."""
    project = write_project(tmp_path / "proj", {
        "pyproject.toml": hatch_pyproject("jxe-batched", "executables = true\n"),
        "jxe_batched/__init__.py": BATCHED_PACKAGE})
    run([sys.executable, "-c", BATCHED_CALLS], env={
        "PYTHONPATH": str(project), "HATCH_JAXEXPORT_RECORD": "1", "HATCH_JAXEXPORT_CACHE": "0"})
    signatures = json.loads((project / "jxe_batched" / SIGNATURES_NAME).read_text())
    noted = signatures["functions"]["jxe_batched:distance"]["0"]
    assert sorted(noted, key=lambda env: env.get("jxe_batch", 0)) == [
        {"n": 3}, {"jxe_batch": 4, "n": 3}, {"jxe_batch": 16, "n": 3}], signatures

    (wheel,) = inprocess_build(project, tmp_path / "dist")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    manifest = json.loads((site / "jxe_batched" / "_jaxexport" / "manifest.json").read_text())
    batched = {tuple(e["inputs"][0][0]) for e in manifest["executables"]
               if e["artifact"].endswith("+batched")}
    assert batched == {(4, 3), (16, 3)}, manifest["executables"]
    served = json.loads(run([sys.executable, "-c", BATCHED_CALLS], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_CACHE": "0",
        "HATCH_JAXEXPORT_TIERED": "0", "HATCH_JAXEXPORT_REPORT": "1"}).stdout.splitlines()[-1])
    values, compiles = served["single"]
    assert values == pytest.approx([3 ** 0.5] * 4) and compiles == 0, served
    assert served["nested"] == [4, 4]
    assert ["primal+batched", "shipped"] in served["report"], served["report"]
