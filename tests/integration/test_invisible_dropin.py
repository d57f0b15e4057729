"""The drop-in is invisible: a baked wheel, called in fresh processes with warnings as errors.

A library's own suite under ``filterwarnings = error`` (most scientific projects run theirs
so) must pass on its baked wheel as on the plain one, and so must its users'. ``jxe_dropin``
has a function with a spec and a spec-less one; a recording run under ``-W error`` records what
the source completed (not what it refused), the Hatch hook bakes it, and the installed wheel is
called in fresh processes with ``-W error``:

- covered calls are served (``call_report()``: every artifact kind reported);
- uncovered calls (another dtype, an unrecorded size) give the source's result and no warning;
- calls the source refuses raise the source's own exception type, our reason as a note;
- the ``hatch_jaxexport`` logger and ``HATCH_JAXEXPORT_REPORT=1`` tell whoever asks;
- ``HATCH_JAXEXPORT_WARNINGS=1``, the maintainer's switch, turns the notices into warnings,
  after the source ran: a refused call still raises the source's own error first.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile

import pytest
from _buildkit import hatch_pyproject, inprocess_build, write_project
from conftest import FIXTURES, run

from hatch_jaxexport.formats.signatures import SIGNATURES_NAME, parse_calls

pytestmark = pytest.mark.slow

RECORD = """
import numpy as np
import jxe_dropin as m
m.window(np.arange(8, dtype=np.float32), 3)
try:
    m.window(np.arange(8, dtype=np.float32), 0)   # the source refuses it: not recorded
except ValueError:
    pass
m.scaled(np.ones(5, np.float32))
m.traced_sum(np.ones(3, np.float32), True)   # recorded; its export fails at build time
"""

CALLS = """
import json, logging, sys
import numpy as np
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append([record.levelname, record.getMessage()])
logging.getLogger("hatch_jaxexport").addHandler(Keep())
logging.getLogger("hatch_jaxexport").setLevel(logging.INFO)
import jxe_dropin as m
out = {}
out["scaled"] = np.asarray(m.scaled(np.ones(4, np.float32))).tolist()
out["scaled_int"] = np.asarray(m.scaled(np.arange(3, dtype=np.int32))).tolist()
out["window"] = np.asarray(m.window(np.arange(8, dtype=np.float32), 3)).tolist()
out["window_new_size"] = np.asarray(m.window(np.arange(6, dtype=np.float32), 3)).tolist()
refused = {}
for name, call in (("scaled", lambda: m.scaled(np.ones((2, 2), np.float32))),
                   ("window", lambda: m.window(np.arange(8, dtype=np.float32), 0))):
    try:
        call()
    except Exception as err:
        refused[name] = [type(err).__name__, str(err), getattr(err, "__notes__", [])]
out["refused"] = refused
out["report"] = {name: sorted([r.signature, r.tier] for r in getattr(m, name).call_report())
                 for name in ("scaled", "window")}
out["log"] = records
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def baked_site(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("dropin")
    project = write_project(tmp / "proj", {"pyproject.toml": hatch_pyproject("jxe-dropin")})
    shutil.copytree(FIXTURES / "jxe_dropin", project / "jxe_dropin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    # the recording run under warnings as errors, with the maintainer's switch on: recording
    # issues no drop-in warning, so every call is recorded (and a refused one is not)
    run([sys.executable, "-W", "error", "-c", RECORD], env={
        "PYTHONPATH": str(project), "HATCH_JAXEXPORT_RECORD": "1",
        "HATCH_JAXEXPORT_WARNINGS": "1", "HATCH_JAXEXPORT_CACHE": "0"})
    signatures = project / "jxe_dropin" / SIGNATURES_NAME
    calls = parse_calls(signatures.read_text(), str(signatures))
    (wheel,) = inprocess_build(project, tmp / "dist")
    site = tmp / "site"
    zipfile.ZipFile(wheel).extractall(site)
    return site, calls, signatures.stat().st_mode & 0o777


def _call(site, **env: str) -> tuple[dict, str]:
    done = run([sys.executable, "-W", "error", "-c", CALLS],
               env={"PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": "0", **env})
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_recording_under_warnings_as_errors_records_what_the_source_completed(baked_site):
    _, calls, mode = baked_site
    recorded = calls["jxe_dropin:window"]
    assert len(recorded) == 1  # width=3 only: the refused width=0 was not recorded
    assert recorded[0]["width"] == {"static": 3}
    assert mode & 0o044  # readable by group and others, as any file written under umask 022


def test_uncovered_calls_give_the_sources_result_and_no_warning(baked_site):
    site, _, _ = baked_site
    out, stderr = _call(site)  # -W error: any warning would have ended the process
    assert out["scaled"] == [3.0] * 4
    assert out["scaled_int"] == [1, 3, 5]  # the source's result, in the source's dtype
    assert out["window"] == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert out["window_new_size"] == pytest.approx([1.0, 2.0, 3.0, 4.0])
    assert "Warning" not in stderr
    # the source's own errors, of its own types, our reason as a note
    kind, message, notes = out["refused"]["scaled"]
    assert kind == "ValueError" and "expects a vector" in message
    assert any("no baked artifact covers this call" in n for n in notes)
    kind, message, notes = out["refused"]["window"]
    assert kind == "ValueError" and "width must be at least 1" in message


def test_every_first_call_is_reported_and_logged(baked_site):
    site, _, _ = baked_site
    out, stderr = _call(site, HATCH_JAXEXPORT_REPORT="1")
    tiers = {name: [tier for _, tier in entries] for name, entries in out["report"].items()}
    assert "traced" in tiers["scaled"] and set(tiers["scaled"]) - {"traced"}  # served too
    assert sorted(tiers["window"]) == ["compiled", "traced"]  # the recorded call, the new one
    assert ["float32[8]", "compiled"] in out["report"]["window"]
    lines = [line for line in stderr.splitlines() if line.startswith("hatch-jaxexport: ")]
    assert any("jxe_dropin:window(width=3, x=float32[8]) float32[8] compiled" in line
               for line in lines), lines
    assert sum(" traced " in line for line in lines) == 2, lines
    logged = [message for level, message in out["log"] if level == "INFO"]
    assert any("jxe_dropin:scaled" in m and "tracing the source instead" in m for m in logged)
    assert any("jxe_dropin:window" in m and "tracing the source instead" in m for m in logged)


def test_a_recorded_call_whose_export_failed_keeps_the_builds_reason(baked_site):
    site, _, _ = baked_site
    manifest = json.loads((site / "jxe_dropin" / "_jaxexport" / "manifest.json").read_text())
    (failed,) = manifest["failed_calls"]
    assert failed["function"] == "jxe_dropin:traced_sum" and "callback" in failed["reason"]
    done = run([sys.executable, "-W", "error", "-c",
                "import numpy as np, jxe_dropin as m\n"
                "m.traced_sum(np.ones(3, np.float32), True)\n"],
               env={"PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": "0",
                    "HATCH_JAXEXPORT_STRICT": "1"}, check=False)
    assert done.returncode != 0 and "ArtifactError" in done.stderr
    assert "this call was recorded, but its export failed at build time" in done.stderr
    assert "callback" in done.stderr and "HATCH_JAXEXPORT_RECORD=1" not in done.stderr


def test_the_maintainers_switch_turns_the_notices_into_warnings(baked_site):
    site, _, _ = baked_site
    done = run([sys.executable, "-W", "error", "-c",
                "import numpy as np, jxe_dropin as m\n"
                "try:\n"
                "    m.scaled(np.ones((2, 2), np.float32))\n"
                "except ValueError as err:\n"
                "    print('source error first:', err)\n"
                "m.scaled(np.arange(3, dtype=np.int32))\n"],
               env={"PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": "0",
                    "HATCH_JAXEXPORT_WARNINGS": "1"}, check=False)
    assert "source error first: scaled expects a vector" in done.stdout
    assert done.returncode != 0 and "FallbackWarning" in done.stderr
    assert "expects dtype float32" in done.stderr


LEGACY = """
import json, sys, warnings
import numpy as np, pytest
import jxe_dropin as m
x = np.ones(4, np.float32)
out = {}
with pytest.warns(PendingDeprecationWarning, match="legacy_scaled is deprecated") as caught:
    out["result"] = np.asarray(m.legacy_scaled(x)).tolist()
out["warned"] = [[w.category.__name__, str(w.message), w.filename.split("site-packages")[-1]
                  .replace("\\\\", "/").rsplit("/", 2)[-2:], w.lineno] for w in caught.list]
with warnings.catch_warnings(record=True) as again:
    warnings.simplefilter("default")
    m.legacy_scaled(x)  # the same kind of call: jax traces it once, the artifact serves it
out["again"] = len([w for w in again if w.category is PendingDeprecationWarning])
out["tiers"] = [r.tier for r in m.legacy_scaled.call_report()]
print(json.dumps(out))
"""

UNDER_ERROR = """
import numpy as np, jxe_dropin as m
for _ in range(2):  # each call traces again on the plain library, which raises again
    try:
        m.legacy_scaled(np.ones(4, np.float32))
    except PendingDeprecationWarning as err:
        print("raised", type(err).__name__, err)
"""


def test_what_the_body_warns_while_traced_reaches_the_baked_wheels_users(baked_site):
    """A library's own warning, issued by its body while jax traces it, reaches its users
    from the baked wheel (whose call never traces) as from the plain library: same category,
    message and origin, caught by ``pytest.warns``; under ``-W error`` both raise it."""
    site, _, _ = baked_site
    manifest = json.loads((site / "jxe_dropin" / "_jaxexport" / "manifest.json").read_text())
    (record,) = [r for r in manifest["artifacts"] if r["function"] == "jxe_dropin:legacy_scaled"]
    assert record["warnings"] == [{"category": "builtins:PendingDeprecationWarning",
                                   "lineno": record["warnings"][0]["lineno"],
                                   "message": "legacy_scaled is deprecated; use scaled",
                                   "module": "jxe_dropin"}]
    plain = site.parent / "proj"  # the library's source tree: no artifacts
    assert not (plain / "jxe_dropin" / "_jaxexport").exists()
    seen = {}
    for name, where in (("baked", site), ("plain", plain)):
        done = run([sys.executable, "-c", LEGACY],
                   env={"PYTHONPATH": str(where), "HATCH_JAXEXPORT_CACHE": "0"})
        seen[name] = json.loads(done.stdout.splitlines()[-1])
        errors = run([sys.executable, "-W", "error", "-c", UNDER_ERROR],
                     env={"PYTHONPATH": str(where), "HATCH_JAXEXPORT_CACHE": "0"}).stdout
        assert errors.splitlines() == ["raised PendingDeprecationWarning legacy_scaled is "
                                       "deprecated; use scaled"] * 2, (name, errors)
    assert seen["baked"]["warned"] == seen["plain"]["warned"] == [[
        "PendingDeprecationWarning", "legacy_scaled is deprecated; use scaled",
        ["jxe_dropin", "__init__.py"], record["warnings"][0]["lineno"]]]
    assert seen["baked"]["result"] == seen["plain"]["result"] == [3.0] * 4
    assert seen["baked"]["again"] == seen["plain"]["again"] == 0
    assert "traced" not in seen["baked"]["tiers"] and seen["plain"]["tiers"] == ["traced"]


CALLERS = """
import json, warnings
import numpy as np
import jxe_dropin as m
x = np.ones(4, np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = m.legacy_offset(x)  # LINE
    m.legacy_offset(x)  # the same kind of call: jax traced it once, the artifact serves it
print(json.dumps({"result": np.asarray(first).tolist(),
                  "warned": [[w.category.__name__, str(w.message), w.filename, w.lineno]
                             for w in caught if w.category is not UserWarning],
                  "tiers": [r.tier for r in m.legacy_offset.call_report()]}))
"""


def test_a_body_warning_with_a_stacklevel_above_the_body_reaches_the_caller(baked_site):
    """``stacklevel=2`` in the decorated body and ``3`` in a helper it calls (the usual
    deprecation idioms): the baked wheel's caller gets the plain library's warnings, the same
    categories and messages as often, pointing at the caller's line (the plain library's jit
    trace points into jax), and under ``-W error`` the first raises as the source's."""
    site, _, _ = baked_site
    manifest = json.loads((site / "jxe_dropin" / "_jaxexport" / "manifest.json").read_text())
    (record,) = [r for r in manifest["artifacts"] if r["function"] == "jxe_dropin:legacy_offset"]
    assert record["warnings"] == [  # in the order the body issues them
        {"category": "builtins:FutureWarning", "lineno": 0,
         "message": "legacy_offset's offset will change", "module": "jxe_dropin"},
        {"category": "builtins:DeprecationWarning", "lineno": 0,
         "message": "legacy_offset is deprecated; call scaled", "module": "jxe_dropin"}]
    line = CALLERS.splitlines().index("    first = m.legacy_offset(x)  # LINE") + 1
    seen = {}
    for name, where in (("baked", site), ("plain", site.parent / "proj")):
        done = run([sys.executable, "-c", CALLERS],
                   env={"PYTHONPATH": str(where), "HATCH_JAXEXPORT_CACHE": "0"})
        seen[name] = json.loads(done.stdout.splitlines()[-1])
        raised = run([sys.executable, "-W", "error", "-c",
                      "import numpy as np, jxe_dropin as m\n"
                      "try:\n    m.legacy_offset(np.ones(4, np.float32))\n"
                      "except FutureWarning as err:\n    print('raised', err)"],
                     env={"PYTHONPATH": str(where), "HATCH_JAXEXPORT_CACHE": "0"}).stdout
        assert raised.strip() == "raised legacy_offset's offset will change", (name, raised)
    assert seen["baked"]["result"] == seen["plain"]["result"] == [2.0] * 4
    assert [w[:2] for w in seen["plain"]["warned"]] == \
        [w[:2] for w in seen["baked"]["warned"]] == [
            ["FutureWarning", "legacy_offset's offset will change"],
            ["DeprecationWarning", "legacy_offset is deprecated; call scaled"]]
    assert all(w[2:] == ["<string>", line] for w in seen["baked"]["warned"]), seen["baked"]
    assert all("jxe_dropin" not in w[2] for w in seen["plain"]["warned"]), seen["plain"]
    assert "traced" not in seen["baked"]["tiers"] and seen["plain"]["tiers"] == ["traced"]
