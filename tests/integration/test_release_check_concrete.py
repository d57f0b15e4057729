"""Every artifact kind a wheel serves is compared, counted and listed (issue 42).

One real wheel of ``tests/fixtures/jxe_concrete`` built with the Hatch hook: a symbolic
artifact (``fixed``), concrete-size artifacts of structures whose symbolic export fails
(``lengthy``, ``branchy``) and recorded calls (``free``, spec-less; ``fixed``, a size no
structure accepts), from a committed ``jaxexport-signatures.json``. The release check
(``pytest --jaxexport-check``, in a subprocess through ``pytester``) passes on its own source and
fails, naming the function, after an edit to a concrete-size function and to a spec-less one;
the build summary, ``jaxexport inspect`` and ``jaxexport verify`` count the same artifacts.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from _buildkit import hatch_pyproject, inprocess_build, write_project
from conftest import FIXTURES, run

from hatch_jaxexport.formats.signatures import SIGNATURES_NAME

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow

PKG = "jxe_concrete"
#: The recorded calls, as ``HATCH_JAXEXPORT_RECORD=1`` writes them: sizes of ``lengthy``'s
#: structure, three calls of the spec-less ``free`` told apart by static values only (every
#: argument bound, defaults included), and a call of ``fixed`` that its structure (3 elements)
#: does not accept.
SIGNATURES = {
    "version": 2,
    "functions": {f"{PKG}:lengthy": {"0": [{"n": 3}]}},
    "calls": {f"{PKG}:free": [
        {"mode": {"static": "add"}, "scale": {"static": 2.0}, "x": {"array": [[6], "float32"]}},
        {"mode": {"static": "mul"}, "scale": {"static": 2.0}, "x": {"array": [[6], "float32"]}},
        # another call (an int scale), the same module as the first: stored once
        {"mode": {"static": "add"}, "scale": {"static": 2}, "x": {"array": [[6], "float32"]}}],
              f"{PKG}:fixed": [{"x": {"array": [[5], "float32"]}}]},
}
TIMEOUT = 400


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    """The project, its wheel installed with ``pip install --target`` (real dist-info), and
    the build's log."""
    tmp = tmp_path_factory.mktemp("concrete-check")
    project = write_project(tmp / "proj", {"pyproject.toml": hatch_pyproject("jxe-concrete")})
    shutil.copytree(FIXTURES / PKG, project / PKG,
                    ignore=shutil.ignore_patterns("__pycache__", "_jaxexport", SIGNATURES_NAME))
    (project / PKG / SIGNATURES_NAME).write_text(json.dumps(SIGNATURES))
    log = io.StringIO()
    with contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
        (wheel,) = inprocess_build(project, tmp / "dist")
    site = tmp / "site"
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, wheel])
    return {"project": project, "site": site, "wheel": wheel, "log": log.getvalue()}


def check(pytester: pytest.Pytester, built: dict[str, Path | str],
          monkeypatch: pytest.MonkeyPatch, **edits: tuple[str, str]) -> pytest.RunResult:
    """The release check of the installed wheel against a copy of the source in ``src``,
    with ``(old, new)`` replacements made in it."""
    source = pytester.path / "src" / PKG
    shutil.copytree(Path(built["project"]) / PKG, source,
                    ignore=shutil.ignore_patterns("__pycache__"))
    init = source / "__init__.py"
    text = init.read_text()
    for old, new in edits.values():
        assert old in text, old
        text = text.replace(old, new)
    init.write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(built["site"]))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jaxexport-check", PKG,
                                         "--jaxexport-source", "src", "-rfE", timeout=TIMEOUT)


def test_the_check_compares_concrete_and_recorded_artifacts_and_fails_on_edits(
        pytester, built, monkeypatch):
    fresh = check(pytester, built, monkeypatch)
    assert fresh.ret == 0, fresh.stdout.str()
    out = fresh.stdout.str()
    # 1 symbolic, 2 structures served at sizes, their 2 sizes, 4 recorded calls
    fresh.assert_outcomes(passed=9)
    assert "skipped (the export failed at build time)" not in out
    assert "served only at concrete sizes (the symbolic export fails, as at build time): 2" \
        in out
    assert f"    {PKG}:lengthy/0/cpu" in out and f"    {PKG}:branchy/0/cpu" in out

    shutil.rmtree(pytester.path / "src")
    edited = check(pytester, built, monkeypatch,
                   branchy=("return x * 2 if", "return x * 4 if"),
                   free=("return y * scale if", "return y * scale * 3 if"))
    assert edited.ret == 1
    edited.assert_outcomes(passed=7, failed=2)
    text = edited.stdout.str()
    assert re.search(rf"{PKG}:branchy/0/cpu#float32\[5\]: stale: the wheel's artifact differs "
                     rf"from a fresh export of {PKG}:branchy \(", text), text
    # its call with mode="mul" only; one call key, whether or not pytest's short summary repeats
    # the message (it does not truncate it where CI is set)
    stale_free_calls = set(re.findall(
        rf"{PKG}:free/-1/cpu#float32\[6\]#call=([0-9a-f]{{16}}): stale: the wheel's artifact "
        rf"differs from a fresh export of {PKG}:free \(", text))
    assert len(stale_free_calls) == 1, text
    assert "module text differs (locations stripped):" in text
    assert "output: max abs difference" in text  # the numbers too, at the artifact's shape
    assert "stale (the wheel's artifact differs from a fresh export): 2" in text


def _counts(line: str) -> tuple[int, ...]:
    """``(functions, artifacts, symbolic, concrete-size, recorded)`` of a counting line."""
    found = re.search(r"(\d+) function\(s\), (\d+) artifact\(s\) \((\d+) symbolic, (\d+) "
                      r"concrete-size, (\d+) recorded call\(s\)\)", line)
    assert found, line
    return tuple(int(g) for g in found.groups())


def test_summary_inspect_and_verify_count_every_artifact_kind_alike(built):
    env = {"PYTHONPATH": str(built["site"])}
    summary = next(line for line in str(built["log"]).splitlines()
                   if line.startswith(f"jaxexport: {PKG}:") and "function(s)" in line)
    inspect = run([sys.executable, "-m", "hatch_jaxexport", "inspect", PKG], env=env).stdout
    verify = run([sys.executable, "-m", "hatch_jaxexport", "verify", PKG], env=env).stdout
    # fixed (symbolic + a recorded call), lengthy (1 size), branchy (1 size), free (3 calls)
    want = (4, 7, 1, 2, 4)
    assert _counts(summary) == _counts(inspect.splitlines()[0]) == _counts(verify) == want
    assert re.search(r"adds [0-9.]+ kB to the wheel \(\d+ file\(s\)", summary), summary
    # lengthy and branchy: their symbolic exports failed, and they are served at their sizes
    assert "symbolic export(s) failed but served at concrete sizes" in summary, summary
    assert " skipped" not in summary, summary
    rows = [line for line in inspect.splitlines()
            if line.startswith(f"{PKG}:") and not line.startswith(f"{PKG}: ")]
    assert len(rows) == want[1], inspect  # one row per artifact, whatever its kind
    # the static values that tell two recorded calls with the same arrays apart
    assert f"serves: {PKG}:free: only its recorded calls (mode='add', scale=2, x=float32[6]; " \
        "mode='add', scale=2.0, x=float32[6]; mode='mul', scale=2.0, x=float32[6])" in inspect
    assert verify.startswith(f"{PKG}: OK, ")


SERVE_SHARED = """
import json
import numpy as np
import jxe_concrete as m
x = np.arange(6.0, dtype=np.float32)
print(json.dumps({"int": np.asarray(m.free(x, 2)).tolist(),
                  "plain": np.asarray(m.free(x)).tolist(), "traces": m.TRACES["count"]}))
"""


def test_identical_modules_are_stored_once_and_still_served(built):
    manifest = json.loads((Path(built["site"]) / PKG / "_jaxexport" / "manifest.json")
                          .read_bytes())
    free = [c for c in manifest["concrete"] if c["function"] == f"{PKG}:free"]
    files = {c["file"] for c in free}
    assert len(free) == 3 and len(files) == 2  # scale=2 and scale=2.0: one file
    on_disk = {p.name for p in (Path(built["site"]) / PKG / "_jaxexport").iterdir()}
    assert files <= on_disk
    assert "1 artifact(s) share another's identical file" in str(built["log"])
    served = json.loads(run([sys.executable, "-c", SERVE_SHARED], env={
        "PYTHONPATH": str(built["site"]), "HATCH_JAXEXPORT_STRICT": "1",
        "HATCH_JAXEXPORT_CACHE": "0"}).stdout.splitlines()[-1])
    assert served == {"int": [4.0] * 4, "plain": [4.0] * 4, "traces": 0}
