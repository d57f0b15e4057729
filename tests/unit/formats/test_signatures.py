"""The signatures file (``jaxexport-signatures.json``): version 2 adds whole call signatures,
version 1 files still read, and a bad file is an error naming the file, function and fault."""

from __future__ import annotations

import json

import pytest

from hatch_jaxexport.formats.signatures import (
    SIGNATURES_VERSION,
    call_key,
    merged_calls,
    parse_calls,
    parse_signatures,
    rebuild,
    signatures_text,
)

CALL = {"x": {"array": [[4, 2], "float32"]}, "mode": {"static": "mul"},
        "pair": {"tuple": [{"array": [[], "int32"]}, {"static": None}]},
        "opts": {"dict": {"b": {"array": [[3], "float32"]}, "a": {"static": 1.5}}}}


def test_version_2_writes_sizes_and_calls_and_reads_them_back():
    text = signatures_text({"p:f": {0: [{"n": 3}]}}, {"p:g": [CALL]})
    assert json.loads(text)["version"] == SIGNATURES_VERSION == 2
    assert parse_signatures(text, "x") == {"p:f": {0: [{"n": 3}]}}
    assert parse_calls(text, "x") == {"p:g": [CALL]}
    assert "calls" not in json.loads(signatures_text({"p:f": {0: [{"n": 3}]}}))


def test_a_version_1_file_still_reads_with_no_calls():
    text = '{"version": 1, "functions": {"p:f": {"0": [{"n": 3}]}}}'
    assert parse_signatures(text, "x") == {"p:f": {0: [{"n": 3}]}}
    assert parse_calls(text, "x") == {}
    with pytest.raises(ValueError, match=r"f\.json: expected \{\"version\": 2"):
        parse_calls('{"version": 3, "functions": {}}', "f.json")


def test_the_call_key_is_canonical_and_merging_keeps_each_call_once():
    reordered = json.loads(json.dumps(CALL, sort_keys=True))
    assert call_key(reordered) == call_key(CALL)
    other = {"x": {"array": [[8], "float32"]}}
    assert merged_calls({"p:g": [CALL, other]}, {"p:g": [reordered]}) == {
        "p:g": sorted([CALL, other], key=call_key)}


@pytest.mark.parametrize(("call", "fault"), [
    ({"x": {"array": [[-1], "float32"]}}, "malformed array node"),
    ({"x": {"static": [1]}}, "is not a JSON scalar"),
    ({"x": {"set": []}}, "unknown node kind 'set'"),
    ({"x": {"list": [{"array": [[2], 3]}]}}, "malformed array node"),
    ([1], "expected an object"),
])
def test_a_bad_call_names_the_file_the_function_and_the_fault(call, fault):
    text = json.dumps({"version": 2, "functions": {}, "calls": {"p:g": [call]}})
    with pytest.raises(ValueError, match=rf"sig\.json: a call of p:g: .*{fault}"):
        parse_calls(text, "sig.json")


def test_rebuild_gives_the_arrays_in_the_loaders_canonical_order():
    """Parameters by name, dict keys sorted: the order the build's flat function takes the
    arrays in is the order ``runtime.call.recorded_calls.described`` hands a call's arrays."""
    seen = []
    values = rebuild(CALL, lambda dims, dtype: seen.append((dims, dtype)) or f"{dtype}{dims}")
    assert seen == [((3,), "float32"), ((), "int32"), ((4, 2), "float32")]
    assert values == {"mode": "mul", "opts": {"a": 1.5, "b": "float32(3,)"},
                      "pair": ("int32()", None), "x": "float32(4, 2)"}
