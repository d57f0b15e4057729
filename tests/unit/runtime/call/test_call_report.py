"""How a call was served, in public: ``fn.call_report()`` and ``HATCH_JAXEXPORT_REPORT=1``.

Each first eager call of a signature says its tier, its time and, where no shipped executable
served it, why: switched off, another jaxlib, or no artifact at all (``traced``).
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, run

from hatch_jaxexport.formats.manifest import MANIFEST_NAME
from hatch_jaxexport.runtime.executables.entries import NO_CACHE

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the fixture compiles the x86-64 targets")

SCRIPT = """
import json, warnings
import numpy as np, jxe_scalars as m
warnings.simplefilter("ignore")
x = np.arange(4, dtype=np.float32)
m.scaled(x, 2.0)
m.scaled(x, 3.0)  # the same signature: no second entry, no second line
print(json.dumps([r._asdict() for r in m.scaled.call_report()]))
"""


def report(site: Path, **env: str) -> tuple[list[dict], list[str]]:
    proc = run([sys.executable, "-c", SCRIPT], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_REPORT": "1", "HATCH_JAXEXPORT_TIERED": "0",
        "HATCH_JAXEXPORT_CACHE": "0", **env})
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hatch-jaxexport: ")]
    return json.loads(proc.stdout.splitlines()[-1]), lines


def test_a_shipped_call_reports_its_tier_and_time(scalars_site):
    (served,), lines = report(scalars_site)
    assert {k: served[k] for k in ("function", "signature", "tier", "not_shipped")} == {
        "function": "jxe_scalars:scaled", "signature": "float32[4],float32[]", "tier": "shipped",
        "not_shipped": None}
    assert 0 < served["seconds"] < 60
    assert lines == [f"hatch-jaxexport: jxe_scalars:scaled float32[4],float32[] shipped in "
                     f"{served['seconds'] * 1e3:.1f} ms"]


def test_the_reason_when_no_shipped_executable_serves_it(scalars_site, tmp_path):
    (off,), lines = report(scalars_site, HATCH_JAXEXPORT_EXECUTABLES="0")
    assert (off["tier"], off["not_shipped"]) == ("compiled",
                                                 "HATCH_JAXEXPORT_EXECUTABLES=0 turns them off")
    assert lines[0].endswith("(no shipped executable: HATCH_JAXEXPORT_EXECUTABLES=0 turns them "
                             f"off) (not cached for the next process: {NO_CACHE})")
    assert off["not_cached"] == NO_CACHE  # this test's processes run with the cache off
    site = tmp_path / "site"
    shutil.copytree(scalars_site, site)
    path = site / "jxe_scalars" / "_jaxexport" / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    for record in manifest["executables"]:
        record["jaxlib_version"] = "0.0.1"
    path.write_text(json.dumps(manifest))
    (other,), _ = report(site)
    assert other["tier"] == "compiled"
    assert "compiled for jaxlib 0.0.1, this process has " in other["not_shipped"]


def test_without_artifacts_the_call_is_reported_traced_with_the_reason():
    served, lines = report(FIXTURES)  # the fixture's source folder: nothing baked
    assert [(s["tier"], s["signature"]) for s in served] == [("traced", "-")]
    assert "has no baked artifacts" in served[0]["not_shipped"]
    # the REPORT line says what call_report() says, for a fallback as for a served call
    assert lines == [f"hatch-jaxexport: jxe_scalars:scaled - traced "
                     f"({served[0]['not_shipped']})"]


LABELLED = """
import json, warnings
import numpy as np, jax
from jxe_demo import funcs
warnings.simplefilter("ignore")
x = np.arange(4, dtype=np.float32)
funcs.poly(x, mode="fast"); funcs.poly(x, mode="exact")
params = {"w": np.ones((4, 2), np.float32), "b": np.zeros(2, np.float32)}
jax.grad(lambda p: funcs.dense(p, x[None]).sum())(params)
print(json.dumps({"poly": [r.line() for r in funcs.poly.call_report()],
                  "dense": [r.line() for r in funcs.dense.call_report()],
                  "staged": [r.line() for f in (funcs.poly, funcs.dense)
                             for r in f.staged_report()]}))
"""


def test_report_lines_name_static_values_and_members_and_call_report_agrees(demo_site):
    """Issue 37: two static values print two different lines, a ``jax.grad`` names the
    member that ran, and ``call_report()`` lists exactly what was printed."""
    proc = run([sys.executable, "-c", LABELLED], env={
        "PYTHONPATH": str(demo_site), "HATCH_JAXEXPORT_REPORT": "1",
        "HATCH_JAXEXPORT_TIERED": "0", "HATCH_JAXEXPORT_CACHE": "0"})
    printed = [line for line in proc.stderr.splitlines() if line.startswith("hatch-jaxexport: ")]
    reported = json.loads(proc.stdout.splitlines()[-1])
    # every line printed is a first eager call's (call_report) or a staged one's
    # (staged_report: jax.grad stages dense into its trace), each printed once
    assert sorted(printed) == sorted(reported["poly"] + reported["dense"] + reported["staged"])
    assert reported["staged"] == ["hatch-jaxexport: jxe_demo.funcs:dense staged under grad: "
                                  "served"], reported["staged"]
    assert len(set(printed)) == len(printed)  # no two lines alike
    poly = sorted(line.split(" float32")[0] for line in reported["poly"])
    assert poly == ["hatch-jaxexport: jxe_demo.funcs:poly(mode='exact')",
                    "hatch-jaxexport: jxe_demo.funcs:poly(mode='fast')"]
    assert any(line.startswith("hatch-jaxexport: jxe_demo.funcs:dense vjp ")
               for line in reported["dense"]), reported["dense"]
