"""Calls holding a function (issue 61), recorded for real in process, baked from
``jxe_callables`` and called in strict mode: a function left at its default is recorded
without it and served from its artifact (0 traces); a call with a function passed is counted
and named in the recording run's summary, the signatures file, the build log, strict's refusal
and the report's ``traced`` reason."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FIXTURES, import_baked

from hatch_jaxexport.bake import export_package
from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.signatures import SIGNATURES_NAME
from hatch_jaxexport.runtime.artifacts.package_artifacts import forget_package
from hatch_jaxexport.runtime.call import _recorder as recorder
from hatch_jaxexport.runtime.call.recorded_calls import describe_call, unrecorded_reason

PACKAGE = "jxe_callables"
HELD_METRIC = "argument 'metric' holds a function: such calls run the source"
HELD_TRANSFORMS = "argument 'transforms' holds a function: such calls run the source"


def _record(site: Path) -> str:
    """Run the package's calls with ``HATCH_JAXEXPORT_RECORD`` set to ``site`` (the real
    recorder, its exit hook run by hand); what it printed on stderr."""
    a, b = jnp.arange(4.0), jnp.ones(4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HATCH_JAXEXPORT_RECORD", str(site))
        patch.delenv("HATCH_JAXEXPORT_STRICT", raising=False)
        for name, value in (("RECORDING", True), ("_SEEN", {}), ("_CALLS", {}),
                            ("_UNRECORDED", {})):
            patch.setattr(recorder, name, value)
        patch.setattr(recorder.atexit, "register", lambda fn: None)
        patch.syspath_prepend(str(site))
        pkg = __import__(PACKAGE)
        pkg.distance(a, b)  # the default metric: recorded without it
        pkg.distance(a, b, metric=pkg.manhattan)  # passed: counted, twice
        pkg.distance(a, b, metric=pkg.manhattan)
        pkg.transformed(a)
        pkg.transformed(a, transforms=(jnp.exp, jnp.tanh))
        pkg.applied(a, jnp.sin)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            recorder.write_all()
        del sys.modules[PACKAGE]  # imported again, baked, by each test
        forget_package(PACKAGE)  # read before anything was baked
    return stderr.getvalue()


@pytest.fixture(scope="module")
def baked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    site = tmp_path_factory.mktemp("callables-site")
    shutil.copytree(FIXTURES / PACKAGE, site / PACKAGE,
                    ignore=shutil.ignore_patterns("__pycache__"))
    summary = _record(site)
    notes: list[str] = []
    export_package(PACKAGE, site / PACKAGE / "_jaxexport", search_path=[site],
                   on_error="skip", log=notes.append)
    return {"site": site, "summary": summary, "log": "\n".join(notes)}


@pytest.fixture
def pkg(baked: dict[str, Any], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delitem(sys.modules, PACKAGE, raising=False)
    module = import_baked(baked["site"], PACKAGE, monkeypatch)
    yield module
    sys.modules.pop(PACKAGE, None)


def test_a_function_left_at_its_default_is_recorded_without_it(baked) -> None:
    text = (baked["site"] / PACKAGE / SIGNATURES_NAME).read_text()
    calls = json.loads(text)["calls"]
    assert calls[f"{PACKAGE}:distance"] == [{"a": {"array": [[4], "float32"]},
                                             "b": {"array": [[4], "float32"]}}]
    assert calls[f"{PACKAGE}:transformed"] == [{"scale": {"static": 2.0},
                                                "x": {"array": [[4], "float32"]}}]
    assert f"{PACKAGE}:applied" not in calls


def test_a_function_left_at_its_default_is_served_with_0_traces(pkg) -> None:
    a, b = jnp.arange(4.0), jnp.ones(4)
    np.testing.assert_allclose(pkg.distance(a, b), pkg.euclidean(a, b), rtol=1e-6)
    np.testing.assert_allclose(pkg.distance(a, b, metric=pkg.euclidean),  # the default itself
                               pkg.euclidean(a, b), rtol=1e-6)
    np.testing.assert_allclose(pkg.transformed(a), jnp.cos(jnp.sin(a)) * 2.0, rtol=1e-6)
    assert pkg.TRACES["count"] == 0


def test_the_recording_run_counts_and_names_calls_holding_a_function(baked) -> None:
    summary = baked["summary"]
    assert (f"hatch-jaxexport: HATCH_JAXEXPORT_RECORD: 2 call(s) of {PACKAGE}:distance not "
            f"recorded: {HELD_METRIC}") in summary, summary
    assert (f"hatch-jaxexport: HATCH_JAXEXPORT_RECORD: 1 call(s) of {PACKAGE}:transformed not "
            f"recorded: {HELD_TRANSFORMS}") in summary, summary
    written = json.loads((baked["site"] / PACKAGE / SIGNATURES_NAME).read_text())
    assert written["unrecorded"] == {
        f"{PACKAGE}:applied": {"argument 'fn' holds a function": 1},
        f"{PACKAGE}:distance": {"argument 'metric' holds a function": 2},
        f"{PACKAGE}:transformed": {"argument 'transforms' holds a function": 1}}


def test_the_build_log_counts_and_names_them(baked) -> None:
    log = baked["log"]
    assert (f"{PACKAGE}:distance: recorded calls not kept by the recording run: 2 call(s): "
            f"{HELD_METRIC}") in log, log
    assert f"{PACKAGE}:applied has no structure and no recorded call it can bake" in log, log
    assert "run your tests with HATCH_JAXEXPORT_RECORD=1" not in log, log


def test_strict_refuses_a_passed_function_naming_the_argument(pkg) -> None:
    a, b = jnp.arange(4.0), jnp.ones(4)
    with pytest.raises(ArtifactError) as caught:
        pkg.distance(a, b, metric=pkg.manhattan)
    assert f"{PACKAGE}:distance: no usable baked artifact (HATCH_JAXEXPORT_STRICT is set): " \
           f"{HELD_METRIC}" in str(caught.value), str(caught.value)
    with pytest.raises(ArtifactError, match=HELD_TRANSFORMS.replace("(", r"\(")):
        pkg.transformed(a, transforms=(jnp.exp, jnp.tanh))


def test_the_report_names_a_passed_function_and_the_source_answers(
        pkg, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT")
    a, b = jnp.arange(4.0), jnp.ones(4)
    np.testing.assert_allclose(pkg.distance(a, b, metric=pkg.manhattan), 4.0)  # the source
    traced = [r for r in pkg.distance.call_report() if r.tier == "traced"]
    assert traced and HELD_METRIC in traced[0].not_shipped, traced


def test_what_holds_a_function_and_what_does_not() -> None:
    from hatch_jaxexport import exportable

    @exportable
    def f(x, metric=None, dtype=jnp.float32):
        return x

    x = np.ones(3, np.float32)
    assert unrecorded_reason(f, (x,), {"metric": {"k": [np.sin]}}) == \
        "argument 'metric' holds a function"
    assert unrecorded_reason(f, (x,), {"metric": lambda a: a}) == \
        "argument 'metric' holds a function"
    assert unrecorded_reason(f, (x,), {"metric": object()}) is None  # an object: not told
    assert describe_call(f, (x,), {}) == {"x": {"array": [[3], "float32"]},
                                          "metric": {"static": None}}  # jnp.float32 left out
    assert describe_call(f, (x,), {"dtype": jnp.int32}) is None  # a class passed
    assert unrecorded_reason(f, (x,), {"dtype": jnp.int32}) is None
