"""Types from a manifest's text (``float32[batch,8]``): what a loader types a family member from
without deserializing it. Checked against jax itself: each function is exported with symbolic
shapes and its ``out_avals`` text, bound to a call, must give what ``jax.eval_shape`` of the
``Exported`` gives; every text it cannot read exactly gives ``None``, never a guess."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import export

from hatch_jaxexport.formats.dimensions import aval_parts, typed_outputs

#: name -> (function, its symbolic input shapes, calls: each argument's concrete shape)
FUNCTIONS = {
    "same shape": (lambda x: jnp.sin(x), ["b, 8"], [[(3, 8)], [(1, 8)]]),
    "doubled": (lambda x: jnp.concatenate([x, x]), ["n"], [[(5,)], [(1,)]]),
    "halved": (lambda x: x[::2], ["n"], [[(7,)], [(8,)]]),
    "matmul": (lambda w, x: x @ w, ["i, o", "n, i"], [[(4, 3), (2, 4)], [(1, 1), (9, 1)]]),
    "reduced and scalar": (lambda x, k: (jnp.sum(x, axis=0), k * 2), ["a, b", ""],
                           [[(2, 6), ()]]),
    "outer": (lambda x, y: jnp.outer(x, y), ["n", "m"], [[(3,), (5,)], [(2,), (2,)]]),
}


def _exported(fn, shapes):
    scope = export.SymbolicScope()
    args = [jax.ShapeDtypeStruct(export.symbolic_shape(s, scope=scope), jnp.float32)
            for s in shapes]
    return export.export(jax.jit(fn))(*args)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_typed_outputs_equal_jax_eval_shape_of_the_exported(name):
    fn, shapes, calls = FUNCTIONS[name]
    exported = _exported(fn, shapes)
    in_texts, out_texts = [str(a) for a in exported.in_avals], [str(a) for a in exported.out_avals]
    for call in calls:
        structs = [jax.ShapeDtypeStruct(shape, jnp.float32) for shape in call]
        expected = [(tuple(o.shape), str(o.dtype)) for o in
                    jax.tree_util.tree_leaves(jax.eval_shape(exported.call, *structs))]
        got = typed_outputs(in_texts, out_texts, [(shape, "float32") for shape in call])
        assert got == expected, (in_texts, out_texts, call)


def test_a_call_the_texts_do_not_describe_gives_none():
    in_texts, out_texts = ["float32[32]", "float32[batch,8]"], ["float32[batch,4]"]
    assert typed_outputs(in_texts, out_texts, [((32,), "float32"), ((5, 8), "float32")]) \
        == [((5, 4), "float32")]
    for wrong in ([((31,), "float32"), ((5, 8), "float32")],  # a fixed size differs
                  [((32,), "float16"), ((5, 8), "float32")],  # a dtype differs
                  [((32,), "float32"), ((5, 8, 1), "float32")],  # a rank differs
                  [((32,), "float32")]):  # an argument is missing
        assert typed_outputs(in_texts, out_texts, wrong) is None


def test_a_symbol_bound_twice_must_agree_and_an_unbound_one_gives_none():
    assert typed_outputs(["float32[n]", "float32[n]"], ["float32[n]"],
                         [((3,), "float32"), ((4,), "float32")]) is None
    # ``2*n`` alone binds nothing: the output's ``n`` is unknown, so the text cannot say it
    assert typed_outputs(["float32[2*n]"], ["float32[n]"], [((6,), "float32")]) is None
    # an input dimension that is an expression is checked once its symbols are bound
    assert typed_outputs(["float32[n]", "float32[2*n]"], ["float32[n]"],
                         [((3,), "float32"), ((7,), "float32")]) is None


@pytest.mark.parametrize("text", ["key<fry>[]", "float32[]{weak_type=True}", "float32",
                                  "float32[n", "float32[a // 2]", "x: float32[n]", ""])
def test_texts_outside_the_grammar_are_not_read(text):
    assert aval_parts(text) is None
    assert typed_outputs([text], ["float32[]"], [((), "float32")]) is None
    assert typed_outputs(["float32[]"], [text], [((), "float32")]) is None
