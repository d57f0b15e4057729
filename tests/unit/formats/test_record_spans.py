"""A manifest's record spans (``formats.record_spans``): a function's first call decodes its own
records from the manifest's bytes, and any manifest the spans do not describe is read whole."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from hatch_jaxexport import ArtifactError
from hatch_jaxexport.formats.manifest_reader import parse_manifest, read_manifest_index
from hatch_jaxexport.formats.record_spans import SPANS_KEY, manifest_text, read_spans

MARKER = f',"{SPANS_KEY}":'.encode()


@pytest.fixture(params=["demo", "exec"])
def manifest_bytes(request, demo_site, exec_site) -> bytes:
    """A manifest written by a real export: ``jxe_demo``'s, and ``jxe_exec``'s (executables)."""
    site, package = {"demo": (demo_site, "jxe_demo"), "exec": (exec_site, "jxe_exec")}[
        request.param]
    return (site / package / "_jaxexport" / "manifest.json").read_bytes()


def _canonical(data: dict) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _without_spans(data: bytes) -> bytes:
    """The same manifest with its spans taken out: what a reader of every record decodes."""
    whole = json.loads(data)
    whole.pop(SPANS_KEY)
    return _canonical(whole) + b"\n"


def _functions(data: bytes) -> list[str]:
    whole = json.loads(data)
    return sorted({r["function"] for r in whole["artifacts"] + whole["skipped"]}
                  | {"pkg:no_such_function"})


def _with_table(body: bytes, table: dict) -> bytes:
    """``body`` (a manifest's bytes before its spans) with ``table`` as its spans, hashed."""
    table = {**table, "sha256": hashlib.sha256(body).hexdigest()}
    return body + MARKER + _canonical(table) + b"}\n"


def test_the_manifest_is_its_canonical_json_then_its_spans_last(manifest_bytes):
    at = manifest_bytes.rfind(MARKER)
    whole = json.loads(manifest_bytes)
    assert list(whole)[-1] == SPANS_KEY
    spans = whole.pop(SPANS_KEY)
    assert manifest_bytes[:at] + b"}" == _canonical(whole)
    assert spans["sha256"] == hashlib.sha256(manifest_bytes[:at]).hexdigest()
    for key, (start, end) in spans["lists"].items():
        assert json.loads(manifest_bytes[start:end]) == whole[key]
    assert set(spans["functions"]) == {r["function"] for r in whole["artifacts"]} | {
        r["function"] for r in whole["skipped"]}


def test_each_function_read_from_its_spans_equals_it_read_whole(manifest_bytes):
    spanned = read_manifest_index(manifest_bytes)
    whole = read_manifest_index(_without_spans(manifest_bytes))
    assert spanned.spans is not None and whole.spans is None
    for function in _functions(manifest_bytes):
        assert spanned.function(function) == whole.function(function), function
    assert spanned.spans is not None  # every function was read from its spans
    assert spanned.full() == whole.full() == parse_manifest(manifest_bytes)
    assert parse_manifest(manifest_bytes).to_bytes() == manifest_bytes


def test_a_function_decodes_its_own_records_and_nothing_else(demo_site):
    """Another function's records are replaced by bytes that are not JSON (the spans hashed
    again): a function's read still succeeds, where reading the manifest whole cannot."""
    data = (demo_site / "jxe_demo" / "_jaxexport" / "manifest.json").read_bytes()
    table = json.loads(data)[SPANS_KEY]
    start, end, _ = table["functions"]["jxe_demo.funcs:poly"]["artifacts"][0]
    body = data[:data.rfind(MARKER)]
    damaged = _with_table(body[:start] + b"#" * (end - start) + body[end:], table)
    index = read_manifest_index(damaged)
    scale = index.function("jxe_demo.funcs:scale")
    assert scale == read_manifest_index(data).function("jxe_demo.funcs:scale")
    assert scale.artifacts and index.spans is not None
    with pytest.raises(ArtifactError, match="not valid JSON"):
        index.function("jxe_demo.funcs:poly")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        read_manifest_index(damaged).full()


def test_a_corrupt_record_of_one_function_is_an_error_for_that_function_only(demo_site):
    whole = json.loads((demo_site / "jxe_demo" / "_jaxexport" / "manifest.json").read_bytes())
    whole.pop(SPANS_KEY)
    victim = next(r for r in whole["artifacts"] if r["function"] == "jxe_demo.funcs:poly")
    victim["sha256"] = "not a digest"
    index = read_manifest_index(manifest_text(whole).encode())
    assert index.function("jxe_demo.funcs:scale").artifacts
    with pytest.raises(ArtifactError, match=r"artifacts\[\d+\]\.sha256 is not a SHA-256"):
        index.function("jxe_demo.funcs:poly")


@pytest.mark.parametrize("edit", [
    "a changed digit", "a record added by hand", "spans not last", "a wrong hash",
    "a truncated table", "compact JSON rewritten with spaces",
])
def test_a_manifest_its_spans_do_not_describe_is_read_whole(demo_site, edit):
    data = (demo_site / "jxe_demo" / "_jaxexport" / "manifest.json").read_bytes()
    whole = json.loads(data)
    if edit == "a changed digit":  # same length, valid JSON: one record's size
        record = whole["artifacts"][0]
        old = f'"size":{record["size"]}'.encode()
        size = record["size"] + (1 if str(record["size"])[-1] != "9" else -1)
        edited = data.replace(old, f'"size":{size}'.encode(), 1)
    elif edit == "a record added by hand":  # the spans still last, no longer its bytes'
        whole["skipped"].append({"function": "jxe_demo.funcs:scale", "structure": "x",
                                 "structure_index": 9, "static": {}, "platform": "cpu",
                                 "reason": "left out", "kind": "primal", "batched": False})
        edited = json.dumps(whole, separators=(",", ":")).encode() + b"\n"
    elif edit == "spans not last":
        edited = _canonical(whole) + b"\n"  # sorted: the spans key lands among the others
    elif edit == "a wrong hash":
        edited = data.replace(whole[SPANS_KEY]["sha256"].encode(), b"0" * 64)
    elif edit == "a truncated table":  # damaged: an error, as any damaged manifest is
        edited = data[:-40] + b"}\n"
        assert read_spans(edited) is None
        with pytest.raises(ArtifactError, match="not valid JSON"):
            read_manifest_index(edited)
        return
    else:
        edited = json.dumps(whole).encode()
    assert read_spans(edited) is None
    index = read_manifest_index(edited)
    assert index.spans is None
    for function in _functions(data):
        assert index.function(function) == read_manifest_index(
            _without_spans(edited)).function(function)


@pytest.mark.parametrize("forge", ["runs swapped", "runs outside the list", "not a list",
                                   "a run inside another record"])
def test_hashed_spans_that_do_not_hold_the_function_s_records_are_not_trusted(demo_site, forge):
    """Spans whose hash matches but which point elsewhere (only a forger writes them) are
    checked against the records they hold: the function is then read from the whole."""
    data = (demo_site / "jxe_demo" / "_jaxexport" / "manifest.json").read_bytes()
    table = json.loads(data)[SPANS_KEY]
    functions = table["functions"]
    poly, scale = functions["jxe_demo.funcs:poly"], functions["jxe_demo.funcs:scale"]
    if forge == "runs swapped":
        poly["artifacts"], scale["artifacts"] = scale["artifacts"], poly["artifacts"]
    elif forge == "runs outside the list":
        scale["artifacts"] = [[1, 5, 0]]
    elif forge == "not a list":
        scale["artifacts"] = {"start": 1}
    else:
        start, end, first = scale["artifacts"][0]
        scale["artifacts"] = [[start + 1, end, first]]
    forged = _with_table(data[:data.rfind(MARKER)], table)
    index = read_manifest_index(forged)
    assert index.function("jxe_demo.funcs:scale") == read_manifest_index(data).function(
        "jxe_demo.funcs:scale")
    assert index.spans is None  # read whole, once it was found out


def test_a_manifest_with_no_records_has_spans_too():
    from hatch_jaxexport.formats.manifest import Manifest

    empty = Manifest(package="pkg", generator="hatch-jaxexport test", jax_version="0.10.2",
                     jaxlib_version="0.10.2", artifacts=())
    data = empty.to_bytes()
    assert read_spans(data) is not None
    assert read_manifest_index(data).function("pkg:f") == read_manifest_index(
        _without_spans(data)).function("pkg:f")


def test_a_first_call_in_a_fresh_process_decodes_a_fraction_of_the_manifest(demo_site):
    """The loader, in a fresh process, strict: a call of ``scale`` is served from its artifact
    while every JSON text the process decodes is far smaller than the manifest (``json.loads``
    wrapped in the child: it calls the standard library's own function and counts sizes)."""

    manifest = demo_site / "jxe_demo" / "_jaxexport" / "manifest.json"
    code = """
import json, sys
import numpy as np
sizes = []
real_loads = json.loads
def counted(text, *args, **kwargs):
    sizes.append(len(text))
    return real_loads(text, *args, **kwargs)
json.loads = counted
import jxe_demo.funcs as funcs
from hatch_jaxexport.runtime.artifacts.package_artifacts import read_package_artifacts
x = np.linspace(0.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
out = np.asarray(funcs.scale(x))
assert np.allclose(out, np.sin(x) * 2.0), out
index = read_package_artifacts("jxe_demo").index
print(json.dumps({"traces": funcs.TRACES["count"], "spans": index.spans is not None,
                  "largest": max(sizes)}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(demo_site),
                               "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_CACHE": "0",
                               "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["traces"] == 0 and found["spans"] is True
    assert found["largest"] < manifest.stat().st_size / 3, (found, manifest.stat().st_size)
