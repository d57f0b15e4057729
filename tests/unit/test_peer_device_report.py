"""The device report's comparison of two sides, and the report plugin's timing of first calls
(``benchmarks/peer_device.py``, ``benchmarks/_peer_report.py``): what the TPU tables read."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def peer_device(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return _load("peer_device")


def _side(results: Path, side: str, tests: dict[str, tuple[float, str]],
          calls: list[tuple[str, str, float, int]]) -> None:
    cases = "".join(
        f'<testcase classname="t" name="{name}" time="{seconds}">'
        + ("<skipped/>" if outcome == "skipped" else "<failure message='x'/>"
           if outcome == "failed" else "") + "</testcase>"
        for name, (seconds, outcome) in tests.items())
    (results / f"junit-{side}.xml").write_text(f"<testsuites><testsuite>{cases}</testsuite>"
                                               "</testsuites>")
    (results / f"served-{side}.json").write_text(json.dumps({"first_calls": [
        {"function": f, "signature": s, "seconds": t, "compiles": c, "compile_seconds": 0.0}
        for f, s, t, c in calls]}))


def test_a_stopped_side_is_compared_on_the_tests_and_first_calls_both_sides_made(
        peer_device: Any, tmp_path: Path) -> None:
    """``PYTEST_LIMIT`` stopped the plain side after two tests, the baked one after three:
    the comparison is the two tests both ran and the first calls both made (a call only the
    plain source made, of a function its other function calls, is left out)."""
    _side(tmp_path, "plain", {"a": (2.0, "passed"), "b": (1.0, "skipped")},
          [("m:f", "float32[3]", 1.5, 9), ("m:inner", "float32[3]", 0.5, 2)])
    _side(tmp_path, "baked", {"a": (0.5, "passed"), "b": (0.25, "skipped"),
                              "c": (4.0, "failed")},
          [("m:f", "float32[3]", 0.01, 0), ("m:f", "float32[4]", 0.2, 1)])
    figures = peer_device.both_ran(tmp_path)
    assert figures["stopped"] and figures["tests"] == 2 and figures["matched_calls"] == 1
    assert figures["plain"] == {"seconds": 3.0, "outcomes": {"passed": 1, "skipped": 1},
                                "call_seconds": 1.5, "call_compiles": 9}
    assert figures["baked"] == {"seconds": 0.8, "outcomes": {"passed": 1, "skipped": 1},
                                "call_seconds": 0.01, "call_compiles": 0}


def test_the_timing_wrapper_keeps_signatures_and_times_methods_once_per_signature(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin times module functions and methods (``module:Class.method``, tinygp's
    distances); a suite reading a function's signature sees its own (dm-pix's ``api_test``
    checks ``getfullargspec``); a Python number is keyed by type, as jax traces it."""
    (tmp_path / "timedpkg.py").write_text(textwrap.dedent('''
        def rot90(image, k=1, *, channel_axis=-1):
            return image

        class Distance:
            def distance(self, x, y):
                return x - y
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    listing = tmp_path / "timed.txt"
    listing.write_text("timedpkg:rot90\ntimedpkg:Distance.distance\n")
    plugin = _load("_peer_report")
    plugin._wrap_timed(str(listing))
    import timedpkg

    try:
        spec = inspect.getfullargspec(timedpkg.rot90)
        assert spec.defaults == (1,) and spec.kwonlydefaults == {"channel_axis": -1}
        timedpkg.rot90(1.0)
        timedpkg.rot90(2.0)  # the same program to jax: no second first call
        assert timedpkg.Distance().distance(3.0, 1.0) == 2.0
        timed = [(c["function"], c["signature"].rsplit("|", 1)[1]) for c in plugin.FIRST_CALLS]
        assert timed == [("timedpkg:rot90", "float"),
                         ("timedpkg:Distance.distance", "Distance,float,float")]
    finally:
        sys.modules.pop("timedpkg", None)
