"""Static arguments beyond JSON scalars: tuples, Enum members, frozen dataclasses, and values a
structure pins for itself. Matching a call's value to its structure's baked values, and the
``jxe_statics`` fixture baked and called in strict mode without tracing its source."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import export_into_copy, import_baked

from hatch_jaxexport import exportable, static
from hatch_jaxexport.errors import SpecError, StaticValueMismatch
from hatch_jaxexport.formats.statics import static_key
from hatch_jaxexport.runtime.call.loader import loaded_from_artifact
from hatch_jaxexport.runtime.call.matching import plan_call


class Side(enum.Enum):
    LEFT = 0
    RIGHT = 1


@dataclasses.dataclass(frozen=True)
class Knots:
    count: int = 4
    closed: bool = False


def _body(x, flags=(1, True), side=Side.LEFT, knots=Knots(), axis=-1):
    return x


def _spec(**options):
    return exportable({"x": ("n", "float32")}, **options)(_body)


# --------------------------------------------------------------------------------------------
# Matching a call's value


def test_a_tuple_static_matches_item_by_item_with_type():
    fn = _spec(static={"flags": [(1, True), (1, 1)]})
    assert fn.export_spec.static["flags"] == ((1, True), (1, 1))  # both kept: not merged
    x = np.ones(3, np.float32)
    assert plan_call(fn, (x,), {"flags": (1, True)}).static_key == '{"flags":{"tuple":[1,true]}}'
    assert plan_call(fn, (x,), {"flags": (1, 1)}).static_key == '{"flags":{"tuple":[1,1]}}'
    with pytest.raises(StaticValueMismatch, match=r"static argument 'flags' got \(1, 1.0\)"):
        plan_call(fn, (x,), {"flags": (1, 1.0)})
    with pytest.raises(StaticValueMismatch):
        plan_call(fn, (x,), {"flags": [1, True]})  # a list is not the baked tuple


def test_an_enum_and_a_frozen_dataclass_match_by_value():
    fn = _spec(static={"side": [Side.LEFT, Side.RIGHT], "knots": [Knots(), Knots(8, True)]})
    x = np.ones(3, np.float32)
    plan = plan_call(fn, (x,), {"side": Side.RIGHT, "knots": Knots(8, True)})  # a new instance
    assert plan.static == {"side": Side.RIGHT, "knots": Knots(8, True)}
    assert plan.static_key == static_key({"side": Side.RIGHT, "knots": Knots(8, True)})
    with pytest.raises(StaticValueMismatch, match=r"Knots\(count=8, closed=1\)"):
        plan_call(fn, (x,), {"knots": Knots(8, 1)})  # 1 is not True inside the dataclass
    with pytest.raises(StaticValueMismatch, match=r"the baked values are <Side.LEFT: 0>"):
        plan_call(fn, (x,), {"side": 0})


def test_the_same_value_always_gives_the_same_key():
    fn = _spec(static={"side": [Side.LEFT], "knots": [Knots()], "flags": [(1, True)]})
    x = np.ones(3, np.float32)
    keys = {plan_call(fn, (x,), {}).static_key for _ in range(3)}
    assert keys == {'{"flags":{"tuple":[1,true]},"knots":{"dataclass":"' + __name__ + ':Knots",'
                    '"fields":{"closed":false,"count":4}},"side":{"enum":"' + __name__ + ':Side",'
                    '"name":"LEFT"}}'}


# --------------------------------------------------------------------------------------------
# Values a structure pins for itself


def _pinned():
    return exportable({"x": ("m, 2", "float32"), "axis": static(-1)},
                      {"x": ("2, n", "float32"), "axis": static(0)},
                      static={"side": [Side.LEFT, Side.RIGHT]})(_body)


def test_each_structure_exports_only_its_own_values():
    spec = _pinned().export_spec
    assert spec.static == {"side": (Side.LEFT, Side.RIGHT), "axis": (-1, 0)}
    assert spec.static_combinations(0) == [{"axis": -1, "side": Side.LEFT},
                                           {"axis": -1, "side": Side.RIGHT}]
    assert spec.static_combinations(1) == [{"axis": 0, "side": Side.LEFT},
                                           {"axis": 0, "side": Side.RIGHT}]
    assert len(spec.static_combinations()) == 4  # not the 2 x 2 x 2 of every value everywhere
    from hatch_jaxexport.bake.export.exporter import tasks_for

    tasks = tasks_for(_pinned(), ("cpu",))
    assert sorted((t.structure_index, t.static["axis"]) for t in tasks) == \
        [(0, -1), (0, -1), (1, 0), (1, 0)]


def test_a_structure_refuses_a_value_another_structure_pins():
    spec = _pinned().export_spec
    assert spec.static_refusal(0, {"axis": -1, "side": Side.LEFT}) is None
    assert spec.static_refusal(0, {"axis": 0, "side": Side.LEFT}) == (
        "static argument 'axis' is 0, but this structure is exported with -1 only")
    assert spec.static_refusal(1, {"axis": 0, "side": Side.RIGHT}) is None
    assert _spec(static={"axis": [-1, 0]}).export_spec.static_refusal(0, {"axis": 0}) is None


def test_a_structure_without_values_for_a_pinned_argument_is_refused():
    with pytest.raises(SpecError, match=r"structure 1: static argument 'axis' has no values here "
                                        r"\(structure 0 pins it\): pin it here too"):
        exportable({"x": ("m, 2", "float32"), "axis": static(-1)},
                   {"x": ("2, n", "float32")})(_body)
    both = exportable({"x": ("m, 2", "float32"), "axis": static(-1)}, {"x": ("2, n", "float32")},
                      static={"axis": [0, 1]})(_body)  # static= gives the other's values
    assert both.export_spec.statics_of(1) == {"axis": (0, 1)}


@pytest.mark.parametrize(("pin", "message"), [
    (static([1]), r"structure 0: static value \[1\] of 'axis' is a list: write a tuple"),
    (static(), r"structure 0: static argument 'axis' lists no values"),
])
def test_a_pinned_value_is_checked_like_static_values(pin, message):
    with pytest.raises(SpecError, match=message):
        exportable({"x": ("n", "float32"), "axis": pin})(_body)
    with pytest.raises(SpecError, match=r"static argument 'q' is not an argument"):
        exportable({"x": ("n", "float32"), "q": static(1)})(_body)


# --------------------------------------------------------------------------------------------
# The fixture package, baked and called without tracing


@pytest.fixture(scope="module")
def statics_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_into_copy(tmp_path_factory.mktemp("statics-site"), "jxe_statics")


def test_baked_statics_are_called_from_artifacts_like_their_source(statics_site, monkeypatch):
    pkg = import_baked(statics_site, "jxe_statics", monkeypatch)
    x = jnp.linspace(-1.0, 2.0, 7, dtype=jnp.float32)
    wide, tall = jnp.arange(10.0, dtype=jnp.float32).reshape(5, 2), \
        jnp.arange(10.0, dtype=jnp.float32).reshape(2, 5)
    calls = [
        (pkg.clip, (x,), {}), (pkg.clip, (x,), {"extrap": (False, False)}),
        (pkg.clip, (x, (True, True)), {}),
        (pkg.pairwise, (wide,), {}), (pkg.pairwise, (wide, -1), {}),
        (pkg.pairwise, (tall,), {"axis": 0}),
        *[(pkg.smooth_reduce, (x,), {"mode": mode, "smoothing": smoothing})
          for mode in pkg.Reduction
          for smoothing in (pkg.Smoothing(), pkg.Smoothing(passes=2, weight=0.25))],
    ]
    expected = [fn.__wrapped__(*args, **kwargs) for fn, args, kwargs in calls]
    pkg.TRACES["count"] = 0
    for (fn, args, kwargs), want in zip(calls, expected, strict=True):
        np.testing.assert_allclose(fn(*args, **kwargs), want, rtol=1e-6)
    assert pkg.TRACES["count"] == 0, "a baked static value traced its source"
    assert all(loaded_from_artifact(pkg.smooth_reduce).values())
    assert len(loaded_from_artifact(pkg.smooth_reduce)) == 4
    with pytest.raises(StaticValueMismatch, match="the baked values are"):
        pkg.clip(x, extrap=[True, False])


def test_the_manifest_records_tagged_json_one_artifact_per_own_combination(statics_site):
    manifest = json.loads((statics_site / "jxe_statics" / "_jaxexport" / "manifest.json")
                          .read_text())
    assert manifest["skipped"] == []
    static = {(a["function"].split(":")[1], a["structure_index"]): [] for a in
              manifest["artifacts"]}
    for record in manifest["artifacts"]:
        static[record["function"].split(":")[1], record["structure_index"]].append(
            record["static"])
    assert static["pairwise", 0] == [{"axis": -1}] and static["pairwise", 1] == [{"axis": 0}]
    assert {"extrap": {"tuple": [False, False]}} in static["clip", 0]
    assert {"mode": {"enum": "jxe_statics:Reduction", "name": "MAX"},
            "smoothing": {"dataclass": "jxe_statics:Smoothing",
                          "fields": {"ends": {"tuple": ["clip", "clip"]}, "passes": 2,
                                     "weight": 0.25}}} in static["smooth_reduce", 0]


def test_a_call_matches_a_structure_only_with_its_own_values():
    square = np.ones((2, 2), np.float32)  # fits both structures' shapes
    assert plan_call(_pinned(), (square,), {"axis": 0}).structure_index == 1
