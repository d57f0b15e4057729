"""What a build says of code that is not shape-polymorphic, without recorded sizes: a
structure with ``concrete=`` sizes is served at them (a warning, not a failure), one without
is not served (its hint says how to fix it), a spec-less function without recorded calls
bakes nothing (a note says how to record them); the log names what each function serves."""

from __future__ import annotations

import json
import shutil
import sys

from conftest import FIXTURES, run


def test_the_build_log_says_what_each_function_serves(tmp_path):
    shutil.copytree(FIXTURES / "jxe_concrete", tmp_path / "jxe_concrete",
                    ignore=shutil.ignore_patterns("__pycache__", "_jaxexport", "*.json"))
    out = run([sys.executable, "-m", "hatch_jaxexport", "export", "jxe_concrete", "--out",
               tmp_path / "out", "--on-error", "skip"], env={"PYTHONPATH": str(tmp_path)})
    log = out.stderr
    assert "jaxexport: serves: jxe_concrete:branchy: only at sizes: structure 0 (n=5)" in log
    assert "jaxexport: serves: jxe_concrete:lengthy: not served: structure 0" in log
    assert "serves: jxe_concrete:fixed" not in log  # served symbolically in full: no line
    assert "served only at concrete sizes (no symbolic artifact): jxe_concrete:branchy" in log
    assert "skipped jxe_concrete:lengthy" in log and "HATCH_JAXEXPORT_RECORD=1" in log
    assert "jxe_concrete:free has no structure and no recorded call" in log
    assert "wrote 1 artifact(s) and 1 concrete-size artifact(s)" in out.stdout
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (concrete,) = manifest["concrete"]
    assert (concrete["function"], concrete["sizes"], concrete["inputs"]) == (
        "jxe_concrete:branchy", {"n": 5}, [[[5], "float32"]])
    assert {s["function"] for s in manifest["skipped"]} == {"jxe_concrete:branchy",
                                                            "jxe_concrete:lengthy"}
