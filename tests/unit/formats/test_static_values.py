"""Static values' canonical text (tagged JSON): the keys of every kind, unchanged for JSON
scalars, the same in a fresh process, through the manifest's JSON, and the refusals that say
what a value is and what to write."""

from __future__ import annotations

import collections
import dataclasses
import enum
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hatch_jaxexport.formats.manifest import artifact_id
from hatch_jaxexport.formats.statics import (
    encode_static,
    encoded_static_key,
    same_static,
    static_key,
    static_problem,
    static_text,
    unique_statics,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


class Color(enum.Enum):
    RED = 1
    BLUE = 2


@dataclasses.dataclass(frozen=True)
class Grid:
    size: int
    ends: tuple = (True, False)
    color: Color = Color.RED
    label: str = dataclasses.field(default="", compare=False)  # not part of ==: not recorded


def test_json_scalars_keep_the_key_text_of_earlier_versions():
    values = {"mode": "fast", "k": -3, "w": 0.25, "flag": True, "none": None, "é": "ü"}
    assert static_key(values) == json.dumps(values, sort_keys=True, separators=(",", ":"))
    assert encode_static(values) == values


@pytest.mark.parametrize(("value", "text"), [
    ((True, False), '{"tuple":[true,false]}'),
    ((1, (2.5, None), ()), '{"tuple":[1,{"tuple":[2.5,null]},{"tuple":[]}]}'),
    (Color.BLUE, '{"enum":"' + __name__ + ':Color","name":"BLUE"}'),
    (Grid(3, label="ignored"), '{"dataclass":"' + __name__ + ':Grid","fields":{"color":{"enum":"'
     + __name__ + ':Color","name":"RED"},"ends":{"tuple":[true,false]},"size":3}}'),
])
def test_each_kind_has_a_tagged_json_text(value, text):
    assert static_key({"v": value}) == '{"v":' + text + "}"


@pytest.mark.parametrize("value", [(1, True), Color.RED, Grid(2), (Grid(1), (Color.BLUE, -1))])
def test_the_key_survives_the_manifest_json_round_trip(value):
    recorded = json.loads(json.dumps(encode_static({"v": value}), sort_keys=True, indent=1))
    assert encoded_static_key(recorded) == static_key({"v": value})


def test_the_key_is_the_same_in_fresh_processes():
    """Two processes with other hash seeds give the key text written here (the fixture is not
    imported in this process: the baked-fixture tests import their own copy)."""
    code = ("import jxe_statics as p; from hatch_jaxexport.formats.statics import static_key;"
            "print(static_key({'axis': -1, 'extrap': (True, False), 'mode': p.Reduction.MAX, "
            "'cfg': p.Smoothing(passes=2, weight=0.25)}))")
    expected = ('{"axis":-1,"cfg":{"dataclass":"jxe_statics:Smoothing","fields":{"ends":'
                '{"tuple":["clip","clip"]},"passes":2,"weight":0.25}},"extrap":{"tuple":[true,'
                'false]},"mode":{"enum":"jxe_statics:Reduction","name":"MAX"}}')
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed,
               "PYTHONPATH": os.pathsep.join([str(FIXTURES), *sys.path])}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert out == expected


@pytest.mark.parametrize(("value", "problem"), [
    ([1, 2], "a list: write a tuple"),
    ({"a": 1}, "a dict: write a frozen dataclass or a tuple of pairs"),
    (float("nan"), "a float that is not finite (nan)"),
    ((1, (2, [3])), "a list at [1][1]: write a tuple"),
    (np.float64(1.5), "a numpy.float64: write float(...)"),
    (np.int32(2), "a numpy.int32: write int(...)"),
    (collections.namedtuple("P", "a")(1),
     "a P, a tuple subclass: write a plain tuple or a frozen dataclass"),
    (object(), "an object, which has no stable text"),
    (Grid(1, ends=[1]), "a list at .ends: write a tuple"),
])
def test_values_without_a_stable_text_are_refused_saying_what_they_are(value, problem):
    assert static_problem(value) == problem


def test_mutable_identity_and_local_classes_are_refused():
    @dataclasses.dataclass
    class Mutable:
        a: int = 1

    @dataclasses.dataclass(frozen=True, eq=False)
    class ByIdentity:
        a: int = 1

    class Local(enum.Enum):
        A = 1

    assert "that is not frozen" in static_problem(Mutable())
    assert "eq=False" in static_problem(ByIdentity())
    assert "is defined inside a function" in static_problem(Local.A)
    assert static_problem(Grid(1)) is None and static_problem((Color.RED, None, -0.5)) is None


@pytest.mark.parametrize(("a", "b", "same"), [
    ((1, True), (1, True), True), ((1, True), (1, 1), False), (1, True, False), (1, 1.0, False),
    (0.0, -0.0, False), (Grid(2), Grid(2, label="x"), True), (Grid(2), Grid(2, ends=(1, 0)), False),
    (Color.RED, Color.RED, True), (Color.RED, 1, False), ((), (), True), ("a", "a", True),
])
def test_same_static_is_same_type_and_equal_item_by_item(a, b, same):
    assert same_static(a, b) is same
    assert same is (static_key({"v": a}) == static_key({"v": b}))


def test_repeats_are_dropped_by_text_not_by_hash():
    assert unique_statics([1, True, 1, (1, True), (1, 1), 1.0]) == (1, True, (1, True), (1, 1), 1.0)


def test_artifact_ids_show_static_values_as_python_writes_them():
    encoded = encode_static({"extrap": (True,), "mode": Color.BLUE, "g": Grid(2), "k": "a"})
    from_manifest = json.loads(json.dumps(encoded, sort_keys=True))  # fields reordered
    assert artifact_id("p:f", 0, encoded, "cpu") == artifact_id("p:f", 0, from_manifest, "cpu")
    assert artifact_id("p:f", 0, encoded, "cpu") == (
        "p:f/0/extrap=(True,),g=Grid(color=Color.RED, ends=(True, False), size=2),k='a',"
        "mode=Color.BLUE/cpu")
    assert artifact_id("p:f", 0, {"mode": "fast", "k": 2}, "cpu") == "p:f/0/k=2,mode='fast'/cpu"
    assert static_text(None) == "None"
