"""``formats.records.Record``: the manifest's records as tuples with named fields, their
classes made without compiling anything."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
from typing import Any

import pytest

from hatch_jaxexport.formats.manifest import ArtifactRecord, JaxSet, Manifest
from hatch_jaxexport.formats.records import Record


class Point(Record):
    __slots__ = ()
    x: int
    y: int
    label: str = ""
    tags: list[str] = []  # noqa: RUF012 - read only, like every field


def test_fields_defaults_and_construction() -> None:
    assert Point._fields == ("x", "y", "label", "tags")
    assert Point._field_defaults == {"label": "", "tags": []}
    point = Point(1, y=2)
    assert (point.x, point.y, point.label, point.tags) == (1, 2, "", [])
    assert point == (1, 2, "", []) and isinstance(point, tuple)
    assert Point(1, 2, "a") < Point(1, 2, "b")  # ordered as tuples, as NamedTuples are
    assert hash(Point(1, 2, "a", ())) == hash((1, 2, "a", ()))
    x, y, *_ = point
    assert (x, y) == (1, 2)
    assert json.dumps(Point(1, 2)) == '[1, 2, "", []]'
    assert repr(Point(1, 2, "a")) == "Point(x=1, y=2, label='a', tags=[])"


def test_replace_asdict_copy_and_pickle() -> None:
    point = Point(1, 2, "a")
    moved = point._replace(y=5)
    assert type(moved) is Point and moved == (1, 5, "a", []) and point.y == 2
    assert point._asdict() == {"x": 1, "y": 2, "label": "a", "tags": []}
    assert copy.copy(point) == point and copy.deepcopy(point) == point
    assert pickle.loads(pickle.dumps(point)) == point
    assert type(pickle.loads(pickle.dumps(point))) is Point


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: Point(1), TypeError, "Point needs field 'y'"),
    (lambda: Point(1, 2, z=3), TypeError, "Point has no field 'z'"),
    (lambda: Point(1, 2, "a", [], 5), TypeError, "Point takes 4 fields, 5 given"),
    (lambda: Point(1, 2)._replace(z=3), ValueError, "Point has no field 'z'"),
])
def test_a_wrong_field_is_a_clear_error(make: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        make()


def test_a_record_cannot_be_changed() -> None:
    point = Point(1, 2)
    with pytest.raises(AttributeError):
        point.x = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        point.other = 3  # type: ignore[attr-defined]


def test_a_field_without_a_default_after_one_with_it_is_refused() -> None:
    with pytest.raises(TypeError, match="a field without a default follows one with it"):
        class Broken(Record):
            __slots__ = ()
            a: int = 0
            b: int


def test_the_manifest_records_are_records() -> None:
    for cls in (ArtifactRecord, JaxSet, Manifest):
        assert issubclass(cls, Record) and cls.__slots__ == ()
    jax_set = JaxSet("manifest-jax-0.8.1.json", "0.8.1", "0.8.1", "2025-11-18")
    assert jax_set.manifest == "manifest-jax-0.8.1.json" and jax_set[3] == "2025-11-18"


def test_making_a_record_class_compiles_nothing() -> None:
    """A NamedTuple class evaluates the source of its ``__new__`` (an audit event
    ``compile``); a Record class does not (measured in a fresh process: nothing cached)."""
    code = """
import sys
from typing import Any, NamedTuple
from hatch_jaxexport.formats.records import Record
compiled = []
sys.addaudithook(lambda event, args: compiled.append(event) if event == "compile" else None)
def counted(base):
    compiled.clear()
    class R(base):
        a: int
        b: dict[str, Any] = {}
    return len(compiled)
print(counted(NamedTuple), counted(Record))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert int(out[0]) >= 1 and int(out[1]) == 0, out
