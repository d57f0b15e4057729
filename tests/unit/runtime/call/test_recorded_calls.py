"""Calls no structure accepts: how they are described and recorded, how a spec-less
``@exportable`` without artifacts falls back, and what the manifest says it serves.

Serving a recorded call from its concrete-size artifact, with tracing forbidden, is end to end
in ``tests/integration/test_concrete_sizes.py``.
"""

from __future__ import annotations

import json
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from hatch_jaxexport import exportable
from hatch_jaxexport.errors import ArtifactError, FallbackWarning
from hatch_jaxexport.formats.coverage import coverage, partial_coverage
from hatch_jaxexport.formats.manifest import ConcreteRecord, Manifest
from hatch_jaxexport.formats.manifest_reader import parse_manifest
from hatch_jaxexport.formats.signatures import SIGNATURES_NAME, parse_calls
from hatch_jaxexport.runtime.call import _recorder as recorder
from hatch_jaxexport.runtime.call.recorded_calls import describe_call, described

RUNS = {"count": 0}


@exportable
def shifted(x, scale=2.0, mode="add", extra=None):
    RUNS["count"] += 1
    y = x[1:] - x[:-1]
    return y * scale if mode == "mul" else y + scale


def test_a_call_is_described_by_its_arrays_types_and_its_other_values():
    signature = describe_call(shifted, (np.ones((3, 2)),), {"mode": "mul",
                                                             "extra": {"k": [1, (2.5, None)]}})
    assert signature == {  # float64 NumPy input: float32, what jax computes in without x64
        "x": {"array": [[3, 2], "float32"]}, "scale": {"static": 2.0},
        "mode": {"static": "mul"},
        "extra": {"dict": {"k": {"list": [{"static": 1}, {"tuple": [{"static": 2.5},
                                                                     {"static": None}]}]}}}}
    _, arrays = described(shifted, (jnp.ones(4), 1.0, "add", [jnp.zeros(2)]), {})
    assert [a.shape for a in arrays] == [(2,), (4,)]  # 'extra' before 'x': by name


@pytest.mark.parametrize("extra", [object(), {1: "not a str key"}, {"s"}])
def test_a_call_that_cannot_be_described_is_not(extra):
    assert describe_call(shifted, (np.ones(3),), {"extra": extra}) is None
    assert describe_call(shifted, (), {}) is None  # does not bind


def test_a_specless_call_without_artifacts_traces_once_with_a_warning_and_strict_refuses(
        monkeypatch, maintainer_warnings):
    shifted.clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = shifted(jnp.arange(4.0))
        second = shifted(jnp.arange(4.0))
    np.testing.assert_allclose(first, [3.0, 3.0, 3.0])
    np.testing.assert_allclose(second, first)
    fallbacks = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fallbacks) == 1 and "no artifact was baked for this call's signature" in \
        str(fallbacks[0].message)
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    shifted.clear_cache()
    with pytest.raises(ArtifactError, match=r"shifted: no usable baked artifact "
                                            r"\(HATCH_JAXEXPORT_STRICT is set\)"):
        shifted(jnp.arange(5.0))


def test_note_call_records_the_whole_signature_into_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HATCH_JAXEXPORT_RECORD", str(tmp_path))
    monkeypatch.setattr(recorder, "RECORDING", True)
    monkeypatch.setattr(recorder, "_SEEN", {})
    monkeypatch.setattr(recorder, "_CALLS", {})
    monkeypatch.setattr(recorder.atexit, "register", lambda fn: None)
    assert recorder.note_call(shifted, (np.ones(3, np.float32),), {"mode": "mul"})
    assert recorder.note_call(shifted, (np.ones(3, np.float32),), {"mode": "mul"})  # once
    assert not recorder.note_call(shifted, (np.ones(3),), {"extra": object()})
    recorder.write_all()
    (path,) = tmp_path.glob(f"*/{SIGNATURES_NAME}")
    calls = parse_calls(path.read_text(), str(path))
    assert calls == {shifted.name: [{"extra": {"static": None}, "mode": {"static": "mul"},
                                     "scale": {"static": 2.0},
                                     "x": {"array": [[3], "float32"]}}]}
    assert json.loads(path.read_text())["version"] == 2


def _concrete(function, index, sizes, inputs, call="", file="a"):
    return ConcreteRecord(function=function, structure_index=index, static={}, platform="cpu",
                          sizes=sizes, inputs=inputs, call=call, file=f"{file}.jaxexport",
                          sha256="0" * 64, size=10, jax_config={"jax_enable_x64": False})


def test_concrete_records_round_trip_and_coverage_says_what_each_function_serves(
        maintainer_warnings):
    manifest = Manifest(package="p", generator="g", jax_version="1", jaxlib_version="1",
                        artifacts=(), concrete=(
                            _concrete("p:f", 0, {"n": 8}, [[[8], "float32"]], file="a"),
                            _concrete("p:f", 0, {"n": 16}, [[[16], "float32"]], file="b"),
                            _concrete("p:g", -1, {}, [[[3, 2], "float32"]], call="{}",
                                      file="c")))
    again = parse_manifest(manifest.to_bytes())
    assert again.concrete == tuple(sorted(manifest.concrete, key=lambda c: c.id))
    assert coverage(again) == {"p:f": "only at sizes: structure 0 (n=16; n=8)",
                               "p:g": "only its recorded calls (float32[3,2])"}
    assert partial_coverage(again) == coverage(again)
    raw = json.loads(manifest.to_bytes())
    raw["concrete"][0]["file"] = "../escape"
    with pytest.raises(ArtifactError, match="unsafe artifact file"):
        parse_manifest(json.dumps(raw).encode())


@exportable
def checked(x, mode="add"):
    """A library's own check of its arguments: the source rejects ``mode='bad'``."""
    RUNS["count"] += 1
    if mode not in ("add", "mul"):
        raise ValueError(f"unknown mode {mode!r}")
    return x + 1 if mode == "add" else x * 2


STRICT_REJECTS = (" [HATCH_JAXEXPORT_STRICT is set: the source itself rejects this call, and a "
                  "recording (HATCH_JAXEXPORT_RECORD=1) never keeps a call its source rejects, "
                  "so no artifact serves it and recording again changes nothing; without "
                  "HATCH_JAXEXPORT_STRICT the call raises this error, as the source does]")


def test_strict_refuses_a_call_the_source_rejects_with_the_sources_own_error_first(
        monkeypatch):
    """Recording keeps only calls that return: "record it and rebuild" would record nothing."""
    checked.clear_cache()
    with pytest.raises(ValueError, match="unknown mode 'bad'"):  # default: the source's error
        checked(jnp.ones(3), mode="bad")
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    checked.clear_cache()
    with pytest.raises(ArtifactError) as refused:
        checked(jnp.ones(3), mode="bad")
    assert str(refused.value) == \
        f"{checked.name}: ValueError: unknown mode 'bad'{STRICT_REJECTS}"
    assert isinstance(refused.value.__cause__, ValueError)  # the source's own, chained
    with pytest.raises(ArtifactError) as unbound:  # it does not bind: Python's TypeError
        checked(jnp.ones(3), 1, 2)
    assert str(unbound.value) == \
        f"{checked.name}: TypeError: too many positional arguments{STRICT_REJECTS}"


def test_strict_names_the_call_and_what_was_recorded(monkeypatch):
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    checked.clear_cache()
    with pytest.raises(ArtifactError) as refused:
        checked(jnp.ones((2, 3)), mode="mul")
    assert str(refused.value).split("; ") == [
        f"{checked.name}: no usable baked artifact (HATCH_JAXEXPORT_STRICT is set): no artifact "
        "was baked for this call's signature (record it with HATCH_JAXEXPORT_RECORD=1 and "
        "rebuild)",
        "this call: (mode='mul', x=float32[2,3])",
        "no call of it was recorded and baked for cpu"]


def test_the_nearest_recorded_calls_come_first_with_what_differs():
    from hatch_jaxexport.formats.coverage import nearest_calls
    from hatch_jaxexport.formats.signatures import call_key

    def key(shape, dtype="float32", mode="add"):
        return call_key({"x": {"array": [shape, dtype]}, "mode": {"static": mode}})

    recorded = [key([4, 2], mode="mul"), key([6], mode="mul"), key([6]), key([5], "int32"),
                key([5], mode="sum")]
    assert nearest_calls(key([5]), recorded) == [
        "(mode='add', x=float32[6]) differs in x",  # same dtype and rank, another size
        "(mode='add', x=int32[5]) differs in x",  # another dtype, the same shape
        "(mode='sum', x=float32[5]) differs in mode"]
    assert nearest_calls(key([5]), recorded, count=5)[-1] == \
        "(mode='mul', x=float32[4,2]) differs in mode, x"
    assert nearest_calls(key([5]), [key([5])]) == ["(mode='add', x=float32[5])"]
    assert nearest_calls("not json", recorded) == []
