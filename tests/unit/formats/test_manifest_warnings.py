"""The manifest's ``warnings`` of a record: written only when there are some, validated, and
ignored by a reader that does not know the field (as every optional field is)."""

from __future__ import annotations

import json

import pytest

from hatch_jaxexport import ArtifactError
from hatch_jaxexport.formats.manifest import (
    MAX_TRACED_WARNINGS,
    ConcreteRecord,
    Manifest,
)
from hatch_jaxexport.formats.manifest_reader import parse_manifest

WARNED = {"category": "builtins:PendingDeprecationWarning", "lineno": 12,
          "message": "legacy_scale is deprecated", "module": "pkg.core"}


def _manifest(warnings: list[dict]) -> Manifest:
    record = ConcreteRecord(
        function="pkg:f", structure_index=-1, static={}, platform="cpu", sizes={},
        inputs=[[[6], "float32"]], call='{"x":{"array":[[6],"float32"]}}',
        file="f.jaxexport", sha256="a" * 64, size=10, warnings=warnings)
    return Manifest(package="pkg", generator="hatch-jaxexport test", jax_version="0.10.2",
                    jaxlib_version="0.10.2", artifacts=(), concrete=(record,))


def test_warnings_round_trip_and_an_empty_list_is_not_written():
    raw = _manifest([WARNED]).to_bytes()
    assert parse_manifest(raw).concrete[0].warnings == [WARNED]
    assert parse_manifest(raw).to_bytes() == raw
    quiet = _manifest([]).to_bytes()
    assert b'"warnings"' not in quiet  # a package that warns of nothing: as before the field
    assert parse_manifest(quiet).concrete[0].warnings == []


def test_a_reader_that_does_not_know_the_field_ignores_it():
    """What ``_from_json`` does with any key it does not know: an older reader reads a newer
    manifest's records as before, without the warnings."""
    data = json.loads(_manifest([WARNED]).to_bytes())
    data["concrete"][0]["a_field_from_the_future"] = [1, 2]
    assert parse_manifest(json.dumps(data).encode()).concrete[0].warnings == [WARNED]


@pytest.mark.parametrize(("entry", "message"), [
    ({**WARNED, "path": "/home/me/pkg/core.py"}, "must be an object with exactly category"),
    ({k: v for k, v in WARNED.items() if k != "lineno"}, "must be an object with exactly"),
    ({**WARNED, "category": "PendingDeprecationWarning"}, "'category' must be 'module:qualname'"),
    ({**WARNED, "category": "os:system; rm"}, "'category' must be 'module:qualname'"),
    ({**WARNED, "message": 3}, "'message' must be a string"),
    ({**WARNED, "message": "x" * 5000}, "'message' must be a string of at most 4096"),
    ({**WARNED, "module": "/etc/passwd"}, "'module' must be a module's dotted name"),
    ({**WARNED, "module": ""}, "'module' must be a module's dotted name"),
    ({**WARNED, "lineno": True}, "'lineno' must be an int >= 0"),
    ({**WARNED, "lineno": -1}, "'lineno' must be an int >= 0"),
    ("text", "must be an object with exactly"),
])
def test_a_malformed_warning_is_a_corrupt_manifest(entry, message):
    data = json.loads(_manifest([WARNED]).to_bytes())
    data["concrete"][0]["warnings"] = [entry]
    del data["record_spans"]
    with pytest.raises(ArtifactError, match=r"concrete\[0\]\.warnings\[0\] " + message):
        parse_manifest(json.dumps(data).encode())


def test_warnings_are_bounded_and_typed():
    data = json.loads(_manifest([WARNED]).to_bytes())
    del data["record_spans"]
    data["concrete"][0]["warnings"] = [WARNED] * (MAX_TRACED_WARNINGS + 1)
    with pytest.raises(ArtifactError, match=f"more than {MAX_TRACED_WARNINGS}"):
        parse_manifest(json.dumps(data).encode())
    data["concrete"][0]["warnings"] = {"a": 1}
    with pytest.raises(ArtifactError, match=r"warnings must be list\[dict\[str, Any\]\]"):
        parse_manifest(json.dumps(data).encode())
