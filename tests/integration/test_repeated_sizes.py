"""A size that reaches the build several times is baked once, and the wheel serves it.

The case of issue 58: a function that is not shape-polymorphic (``range(len(x))``: its symbolic
export fails, ``on-error = "skip"``), with static values, ``concrete=`` sizes and a
transformation family (``ad_order=1``: its members fail too), built with two workers (a family's
member on another worker than its primal used to bake the same sizes again), and a recording
that repeats the ``concrete=`` sizes and repeats itself. The build wrote those records twice and
every call of the function raised ``corrupt manifest: concrete artifact ... listed twice``. Now
the Hatch hook builds a wheel whose manifest lists each size once (read back by the loader's own
reader before the wheel is finished); unpacked into a fresh folder (it is pure), ``jaxexport
verify`` accepts it and a fresh process, strict, serves every call at those sizes without a
trace of the source.
"""

from __future__ import annotations

import json
import sys
import zipfile

import pytest
from _buildkit import hatch_pyproject, inprocess_build, write_project
from conftest import run

from hatch_jaxexport.formats.signatures import SIGNATURES_NAME, parse_signatures

pytestmark = pytest.mark.slow

MODULE = '''
from hatch_jaxexport import exportable

#: Times the source ran (a trace, or an eager run): served calls never add to it.
TRACES = {"count": 0}


@exportable({"x": ("n", "float32")}, static={"k": [1, 2]}, concrete={"n": [3, 4]}, ad_order=1)
def lengthy(x, k=1):
    """``range(len(x))``: a Python int of a symbolic size, so only concrete sizes are served."""
    TRACES["count"] += 1
    return sum(x[i] * i * k for i in range(len(x)))
'''

CALLS = """
import json, warnings
import numpy as np
warnings.simplefilter("ignore")
import jxe_repeat as m
out = {f"{n},{k}": float(m.lengthy(np.arange(n, dtype=np.float32), k=k))
       for n in (3, 4, 3, 5, 4) for k in (1, 2)}
out["traces"] = m.TRACES["count"]
out["tiers"] = sorted({r.tier for r in m.lengthy.call_report()})
print(json.dumps(out))
"""


def test_a_size_named_and_recorded_twice_is_baked_once_and_served(tmp_path):
    project = write_project(tmp_path / "proj", {
        "pyproject.toml": hatch_pyproject(
            "jxe-repeat", 'jobs = 2\non-error = "skip"\nplatforms = ["cpu"]\n'),
        "jxe_repeat/__init__.py": MODULE})
    record = {"PYTHONPATH": str(project), "HATCH_JAXEXPORT_RECORD": "1",
              "HATCH_JAXEXPORT_CACHE": "0"}
    for _ in range(2):  # the recording repeats itself (and concrete='s sizes)
        recorded = json.loads(run([sys.executable, "-c", CALLS], env=record)
                              .stdout.splitlines()[-1])
    sizes = parse_signatures((project / "jxe_repeat" / SIGNATURES_NAME).read_text(), "s")
    assert sorted(s["n"] for s in sizes["jxe_repeat:lengthy"][0]) == [3, 4, 5]
    assert recorded["traces"] > 0

    (wheel,) = inprocess_build(project, tmp_path / "dist")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    manifest = json.loads((site / "jxe_repeat" / "_jaxexport" / "manifest.json").read_text())
    assert sorted((c["static"]["k"], c["sizes"]["n"]) for c in manifest["concrete"]) == [
        (1, 3), (1, 4), (1, 5), (2, 3), (2, 4), (2, 5)]  # each once
    verified = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_repeat"],
                   env={"PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu"})
    assert verified.stdout.startswith("jxe_repeat: OK"), verified.stdout

    served = json.loads(run([sys.executable, "-c", CALLS], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1",
        "HATCH_JAXEXPORT_CACHE": "0"}).stdout.splitlines()[-1])
    assert served["traces"] == 0 and "traced" not in served["tiers"], served
    assert {k: v for k, v in served.items() if "," in k} == \
        {k: v for k, v in recorded.items() if "," in k}
