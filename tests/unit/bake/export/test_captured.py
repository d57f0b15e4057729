"""Captured constants: the arrays a function closes over, found in its trace and named."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hatch_jaxexport.bake.export.captured import (
    captured_constants,
    captured_lines,
    captured_warnings,
)
from hatch_jaxexport.formats.manifest import ArtifactRecord

#: Module-level values the functions below close over (the names the report must find).
WEIGHTS = jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4)
PARAMS = {"w": np.ones((4, 2), np.float32), "b": np.full((2,), 0.5, np.float32)}
GRID = np.linspace(0.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
X = jax.ShapeDtypeStruct((5, 3), jnp.float32)


def _captured(function, *args):
    traced = jax.jit(function).trace(*args)
    return captured_constants(traced.jaxpr, function, f"{__name__}:{function.__name__}")


def _by_name(entries):
    return {entry["name"]: entry for entry in entries}


def test_a_global_jax_array_is_named_with_shape_dtype_and_bytes():
    entries = _captured(lambda x: x @ WEIGHTS, X)
    assert entries == [{"name": f"{__name__}.WEIGHTS", "shape": [3, 4], "dtype": "float32",
                        "bytes": 48}]


def test_pytree_leaves_of_a_global_are_named_by_their_path():
    def mlp(x):
        return jnp.tanh(x[:, :1] @ PARAMS["w"][:1] + PARAMS["b"])

    names = _by_name(_captured(mlp, X))
    assert f"{__name__}.PARAMS['b']" in names
    assert names[f"{__name__}.PARAMS['b']"]["shape"] == [2]


def test_closure_variables_nested_jits_and_views_are_named():
    table = np.arange(6, dtype=np.int32).reshape(3, 2)

    @jax.jit
    def inner(x):
        return x + WEIGHTS[0, :3]

    def outer(x):
        return inner(x) + jnp.sum(table) + x @ GRID.T @ GRID

    entries = _captured(outer, X)
    names = _by_name(entries)
    assert f"table (closure of {__name__}:outer)" in names
    assert names[f"table (closure of {__name__}:outer)"]["dtype"] == "int32"
    assert f"{__name__}.WEIGHTS" in names  # a constant of the inner jit's jaxpr
    assert f"{__name__}.GRID (a view)" in names  # GRID.T
    assert f"{__name__}.GRID" in names
    assert [e["bytes"] for e in entries] == sorted((e["bytes"] for e in entries), reverse=True)


def test_a_constant_made_inside_the_function_has_no_name_and_a_pure_function_none():
    entries = _captured(lambda x: x + jnp.array([1.0, 2.0, 3.0], jnp.float32), X)
    assert entries == [{"name": None, "shape": [3], "dtype": "float32", "bytes": 12}]
    assert _captured(lambda x: jnp.sin(x) * 2.0, X) == []


def test_constants_in_both_branches_of_a_cond_are_found():
    def branchy(x):
        return jax.lax.cond(x.sum() > 0, lambda v: v @ WEIGHTS, lambda v: v @ (2 * WEIGHTS), x)

    assert f"{__name__}.WEIGHTS" in _by_name(_captured(branchy, X))


def _record(function: str, captured: list[dict], kind: str = "primal") -> ArtifactRecord:
    return ArtifactRecord(
        function=function, structure="x: float32[n]", structure_index=0, spec={},
        constraints=[], static={}, platform="cpu", file="f.jaxexport", sha256="0" * 64,
        size=1, fingerprint="", vjp_order=0, kwargs=False, calling_convention=10, in_tree="",
        out_tree="", in_avals=[], out_avals=[], pytree_types=[], kind=kind, batched=False,
        custom_calls=[], captured_constants=captured)


@pytest.mark.parametrize("threshold, warned", [(2**20, True), (2**20 + 1, False)])
def test_warning_at_the_threshold_names_function_value_copies_and_the_way_out(threshold, warned):
    big = {"name": "pkg.m.TABLE", "shape": [262144], "dtype": "float32", "bytes": 2**20}
    records = [_record("pkg.m:f", [big]), _record("pkg.m:f", [big], kind="vjp"),
               _record("pkg.m:g", [])]
    messages = captured_warnings(records, threshold)
    if not warned:
        assert messages == []
        return
    (message,) = messages
    assert message.startswith("pkg.m:f captures pkg.m.TABLE float32[262144] 1.0 MB "
                              "(warning threshold 1.0 MB)")
    assert "each of its 2 artifact(s)" in message and "pass it as an argument" in message


def test_lines_list_each_function_once_without_repeats():
    entry = {"name": None, "shape": [3], "dtype": "float32", "bytes": 12}
    lines = captured_lines([_record("pkg.m:f", [entry]), _record("pkg.m:f", [entry], "vjp"),
                            _record("pkg.m:g", [])])
    assert lines == {"pkg.m:f": ["    captures 1 array(s), 12 B, frozen at build time:",
                                 "      (unnamed) float32[3] 12 B"]}
