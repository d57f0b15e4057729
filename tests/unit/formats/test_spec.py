"""Spec parsing and decoration-time validation (SpecError messages)."""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hatch_jaxexport import SpecError, exportable
from hatch_jaxexport.formats.dimensions import (
    check_constraint,
    evaluate_dim,
    parse_constraint,
    parse_shape,
)
from hatch_jaxexport.formats.spec import ClassNode, LeafSpec, RegisteredNode
from hatch_jaxexport.formats.structure_reader import parse_dtype, parse_structure


@pytest.mark.parametrize(("raw", "dims"), [
    ("a, b", ("a", "b")),
    ("(a,b)", ("a", "b")),
    ("n,", ("n",)),
    ("", ()),
    ("2*n + 1, 3", ("2 * n + 1", "3")),
    ("max(a, b), mod(c, 2)", ("max(a, b)", "mod(c, 2)")),
    (("batch", 784), ("batch", "784")),
])
def test_parse_shape_forms(raw, dims):
    assert parse_shape(raw) == dims


@pytest.mark.parametrize("raw", ["a b", "a, b)", "a / 2", "x.y", "-1", "lambda: 1", "a, if"])
def test_parse_shape_rejects(raw):
    with pytest.raises(ValueError):
        parse_shape(raw)


@pytest.mark.parametrize(("raw", "name"), [
    ("float32", "float32"), (np.float64, "float64"), (jnp.float32, "float32"),
    (jnp.dtype("int8"), "int8"), ("bfloat16", "bfloat16"), (jnp.bfloat16, "bfloat16"),
    (np.dtype("complex64"), "complex64"), ("bool", "bool"),
])
def test_parse_dtype_forms(raw, name):
    assert parse_dtype(raw) == name


@pytest.mark.parametrize("raw", ["float33", "object", "U5", object, 3])
def test_parse_dtype_rejects(raw):
    with pytest.raises(TypeError):
        parse_dtype(raw)


def test_dims_and_constraints_evaluate():
    env = {"a": 4, "b": 6}
    assert evaluate_dim("2 * a + 1", env) == 9
    assert evaluate_dim("max(a, b)", env) == 6
    assert evaluate_dim("floordiv(b, a)", env) == 1
    assert parse_constraint("a>=2") == "a >= 2"
    assert check_constraint("a >= 2", env)
    assert not check_constraint("b <= a", env)
    with pytest.raises(ValueError, match="one comparison"):
        parse_constraint("a > 2")


def test_structure_key_and_symbols_shared_across_arguments():
    s = parse_structure("f", {"params": {"w": ("i, o", "float32"), "b": ("o,", "float32")},
                              "x": ("n, i", jnp.float32)}, 0)
    assert s.key == "params: {w: float32[i, o], b: float32[o]}; x: float32[n, i]"
    assert s.symbols == {"i", "o", "n"}


def test_structure_leaf_forms():
    Point = collections.namedtuple("Point", "x y")
    s = parse_structure("f", {
        "a": jax.ShapeDtypeStruct((3, 4), jnp.float32),
        "b": Point(("n", "float32"), ("n", "float32")),
        "c": [("n", "int32"), None],
        "d": ("n, m", "float32", ["m >= 2"]),
    }, 0, ["n <= 100"])
    assert "a: float32[3, 4]" in s.key
    assert "b: Point(x=float32[n], y=float32[n])" in s.key
    assert s.constraints == ("m >= 2", "n <= 100")


def _body(x, y=None):
    return x


@pytest.mark.parametrize(("make", "message"), [
    (lambda: exportable({"z": ("n", "float32")})(_body),
     r"test_spec:_body, structure 0: unknown argument name 'z' \(test_spec:_body takes x, y\)"),
    (lambda: exportable({"x": ("n", "floaty")})(_body),
     r"argument 'x': bad dtype: 'floaty' is not a dtype"),
    (lambda: exportable({"x": ("n m", "float32")})(_body), r"argument 'x': cannot parse shape"),
    (lambda: exportable({"x": ("n", "float32"), "y": ("n", "float32")},
                        static={"y": [1]})(_body), r"argument 'y' is static"),
    (lambda: exportable({"x": ("n", "float32")}, static={"q": [1]})(_body),
     r"static argument 'q' is not an argument"),
    (lambda: exportable({"x": ("n", "float32")}, static={"y": [[1]]})(_body),
     r"static value \[1\] of 'y' is a list: write a tuple; a static value is a str, an int, "
     r"a finite float, a bool, None, an Enum member, a frozen dataclass"),
    (lambda: exportable({"x": ("n", "float32")}, platforms=["gpu"])(_body),
     r"platforms must be a non-empty list of cpu, cuda, rocm, tpu; got \['gpu'\]"),
    (lambda: exportable({"x": ("n", "float32")}, vjp_order=-1)(_body), r"vjp_order must be"),
    (lambda: exportable({"x": ("n", "float32", ["k >= 2"])})(_body),
     r"constraint 'k >= 2' uses k, which no argument's shape uses"),
    (lambda: exportable({"x": {1: ("n", "float32")}})(_body), r"dict keys must be strings"),
    (lambda: exportable({})(_body), r"expected a non-empty dict"),
    (lambda: exportable(static={"y": [1]})(_body), r"static need\(s\) a structure"),
    (lambda: exportable(concrete={"n": [3]}, vmap=True)(_body),
     r"concrete, vmap need\(s\) a structure"),
    (lambda: exportable("f", {"x": ("n", "float32")}, name="g"), r"name is given twice"),
])
def test_spec_errors_name_function_argument_and_problem(make, message):
    with pytest.raises(SpecError, match=message):
        make()


def test_argument_without_spec_or_default_is_an_error():
    def two(x, y):
        return x + y

    with pytest.raises(SpecError, match=r"argument 'y' has no spec, no default and is not static"):
        exportable({"x": ("n", "float32")})(two)


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)


def test_decoration_traces_nothing_and_keeps_metadata():
    calls = []

    def body(x):
        """Doc of body."""
        calls.append(x)
        return x

    wrapped = exportable("named", {"x": ("n", "float32")}, {"x": ("n, m", "float32")})(body)
    assert calls == []
    assert wrapped.name == "named"
    assert wrapped.__doc__ == "Doc of body."
    assert wrapped.__wrapped__ is body
    assert len(wrapped.export_spec.structures) == 2


def test_default_name_is_module_and_qualname():
    wrapped = exportable({"x": ("n", "float32")})(_body)
    assert wrapped.name == f"{__name__}:_body"


def test_static_combinations_are_the_cartesian_product():
    def f(x, mode="a", k=1):
        return x

    wrapped = exportable({"x": ("n", "float32")}, static={"mode": ["a", "b"], "k": [1, 2, 3]})(f)
    combos = wrapped.export_spec.static_combinations()
    assert len(combos) == 6
    assert {"k": 3, "mode": "b"} in combos


def test_a_tuple_of_leaf_and_shape_dtype_struct_is_two_leaves():
    s = parse_structure("f", {"t": (("n", "float32"), jax.ShapeDtypeStruct((3,), jnp.int32))}, 0)
    assert s.key == "t: (float32[n], int32[3])"


def test_dataclass_instances_are_structure_nodes():
    @dataclasses.dataclass
    class Params:
        w: object
        b: object

    s = parse_structure("f", {"p": Params(("i, o", "float32"), ("o,", "float32"))}, 0)
    assert s.key == "p: Params(w=float32[i, o], b=float32[o])"
    assert s.to_json()["args"]["p"]["kind"] == "dataclass"


@dataclasses.dataclass
class _Layer:
    """equinox's ``field(static=True)`` and flax's ``pytree_node=False``, spelled by hand."""

    w: object
    sizes: tuple = dataclasses.field(default=(), metadata={"static": True})
    name: str = dataclasses.field(default="", metadata={"pytree_node": False})


class _Custom(_Layer):
    def __init__(self, fan_in):  # like eqx.nn.Linear(in_features, out_features, key=...)
        raise AssertionError("build must not call a custom __init__")


def test_static_dataclass_fields_are_part_of_the_node_not_children():
    s = parse_structure("f", {"p": _Layer(("i, o", "float32"), (3, (4, 5)), "dense")}, 0)
    assert s.key == "p: _Layer(w=float32[i, o], sizes=(3, (4, 5)), name='dense')"
    node = s.args["p"]
    assert (node.fields, node.static) == (("w",), (("sizes", (3, (4, 5))), ("name", "dense")))
    assert s.to_json()["args"]["p"]["static"] == {"sizes": (3, (4, 5)), "name": "dense"}
    assert s != parse_structure("f", {"p": _Layer(("i, o", "float32"), (3,), "dense")}, 0)
    built = node.build(["W"])
    assert (built.w, built.sizes, built.name) == ("W", (3, (4, 5)), "dense")


def test_a_node_with_static_fields_is_built_without_its_custom_init():
    raw = object.__new__(_Custom)
    for name, value in (("w", ("n", "float32")), ("sizes", (2,)), ("name", "x")):
        object.__setattr__(raw, name, value)
    built = parse_structure("f", {"p": raw}, 0).args["p"].build(["W"])
    assert type(built) is _Custom and (built.w, built.sizes) == ("W", (2,))


def test_a_static_field_that_is_not_json_is_a_spec_error():
    with pytest.raises(SpecError, match=r"argument 'p'\.name: a static field of _Layer must "
                                        r"hold a JSON scalar or a tuple of them .* got <built-in"):
        parse_structure("f", {"p": _Layer(("n", "float32"), (), len)}, 0)


# --------------------------------------------------------------------------------------------
# Registered pytree nodes: read by jax's registry before their shape


def test_a_chex_dataclass_is_its_node_not_the_dict_it_also_is():
    chex = pytest.importorskip("chex")

    @chex.dataclass
    class State:
        w: object
        b: object

    raw = State(w=("n, m", "float32"), b=("m", "float32"))
    assert isinstance(raw, collections.abc.Mapping)
    s = parse_structure("f", {"s": raw}, 0)
    assert s.key == "s: State(w=float32[n, m], b=float32[m])"
    node = s.args["s"]
    assert type(node) is ClassNode and node.kind == "dataclass" and node.type is State
    assert type(node.build([1, 2])) is State


def _bcoo_spec(data, indices, shape=(5, 4)):
    from jax.experimental import sparse

    info = {"shape": shape, "indices_sorted": False, "unique_indices": False}
    return sparse.BCOO.tree_unflatten(info, (data, indices))


_BCOO_AUX = "{'shape': (5, 4), 'indices_sorted': False, 'unique_indices': False}"


def test_a_concrete_bcoo_is_a_node_of_its_childrens_shapes_not_a_dense_leaf():
    from jax.experimental import sparse

    m = sparse.BCOO.fromdense(jnp.eye(4, 3, dtype=jnp.float32))
    assert (m.shape, m.dtype) == ((4, 3), jnp.float32)  # what made it a dense leaf
    s = parse_structure("f", {"m": m}, 0)
    assert s.key == ("m: BCOO(data=float32[3], indices=int32[3, 2]; {'shape': (4, 3), "
                     "'indices_sorted': True, 'unique_indices': True})")
    node = s.args["m"]
    assert type(node) is RegisteredNode and node.fields == ("data", "indices")
    assert s.to_json()["args"]["m"]["kind"] == "node"
    built = node.build([jax.ShapeDtypeStruct((3,), jnp.float32),
                        jax.ShapeDtypeStruct((3, 2), jnp.int32)])
    assert type(built) is sparse.BCOO and built.shape == (4, 3)


def test_a_bcoo_of_eval_shape_or_of_leaf_specs_with_a_symbolic_nse():
    from jax.experimental import sparse

    shaped = jax.eval_shape(lambda: sparse.BCOO.fromdense(jnp.ones((5, 4)), nse=3))
    assert parse_structure("f", {"m": shaped}, 0).key.startswith(
        "m: BCOO(data=float32[3], indices=int32[3, 2]; ")
    s = parse_structure("f", {"m": _bcoo_spec(("nse", "float32"), ("nse, 2", "int32"))}, 0)
    assert s.key == f"m: BCOO(data=float32[nse], indices=int32[nse, 2]; {_BCOO_AUX})"
    assert s.symbols == {"nse"}


def test_a_bad_child_of_a_registered_node_names_its_position():
    with pytest.raises(SpecError, match=r"argument 'm'\.indices: bad dtype: 'int' does not say"):
        parse_structure("f", {"m": _bcoo_spec(("nse", "float32"), ("nse, 2", "int"))}, 0)


class _Pair:
    """A ``register_pytree_node`` class whose children are not attributes."""

    def __init__(self, items, tag):
        self.items, self.tag = items, tag


jax.tree_util.register_pytree_node(_Pair, lambda p: (p.items, p.tag),
                                   lambda tag, items: _Pair(tuple(items), tag))


def test_a_registered_class_is_a_node_with_its_aux_data():
    s = parse_structure("f", {"p": _Pair((("n", "float32"), ("", "int32")), "t")}, 0)
    assert s.key == "p: _Pair(item0=float32[n], item1=int32[]; 't')"
    built = s.args["p"].build([1, 2])
    assert type(built) is _Pair and (built.items, built.tag) == ((1, 2), "t")


@dataclasses.dataclass
class _Meta:
    """Registered with a meta field that no field metadata marks."""

    x: object
    n: int


jax.tree_util.register_dataclass(_Meta, data_fields=["x"], meta_fields=["n"])


def test_a_dataclass_whose_registration_differs_from_its_fields_is_read_by_jax():
    s = parse_structure("f", {"p": _Meta(("n", "float32"), 3)}, 0)
    assert type(s.args["p"]) is RegisteredNode and s.args["p"].fields == ("x",)
    assert s.key == "p: _Meta(x=float32[n]; (3,))"
    built = s.args["p"].build([1.0])
    assert type(built) is _Meta and (built.x, built.n) == (1.0, 3)


def test_plain_mappings_stay_dicts():
    proxy = types.MappingProxyType({"a": ("n", "float32")})
    ordered = collections.OrderedDict(a=("n", "float32"))
    s = parse_structure("f", {"p": proxy, "o": ordered}, 0)
    assert s.args["p"] == {"a": LeafSpec(("n",), "float32")} and type(s.args["p"]) is dict
    assert type(s.args["o"]) is collections.OrderedDict


# --------------------------------------------------------------------------------------------
# Structure errors: which position of which argument, and what it expected there


def _structure_refusal(spec) -> str:
    with pytest.raises(SpecError) as caught:
        exportable({"x": spec})(_body)
    return str(caught.value)


_WHERE = f"@exportable spec of {__name__}:_body, structure 0, argument 'x'"
_EXPECTED = ("expected a leaf ((shape, dtype), (shape, dtype, [constraints]) or a "
             "jax.ShapeDtypeStruct), None, or a dict/list/tuple/namedtuple/dataclass of them")


@pytest.mark.parametrize(("spec", "message"), [
    # a tuple shape with None: the user meant a size known at call time
    (((None, 3), "float32"),
     ": in the leaf ((None, 3), 'float32'), the shape (None, 3) has None at position 0: None is "
     "not a dimension: a size known only at call time needs a symbol: write ('n', 3) or 'n, 3'"),
    (((3.0, 4), "float32"),
     ": in the leaf ((3.0, 4), 'float32'), the shape (3.0, 4) has 3.0 at position 0: a "
     "dimension is an int >= 0, or a string such as 'n' or '2*n'"),
    ((("a, b",), "float32"),
     ": the shape ('a, b',) has 'a, b' at position 0: one item is one dimension (write the "
     "whole shape as one string, 'a, b', or each dimension as an item, ('a', 'b'))"),
    ((None, "float32"),
     ": in the leaf (None, 'float32'), None is not a shape: write '' for a scalar, or a shape "
     "such as 'n, 3'"),
    # a dtype without a shape, a shape without a dtype
    ("float32", f": 'float32' is a dtype without a shape: write ('', 'float32') for a scalar or "
                f"('n', 'float32') for a vector ({_EXPECTED})"),
    (jnp.float32, ": <class 'jax.numpy.float32'> is a dtype without a shape: write "
                  "('', 'float32') for a scalar"),
    (("float32",), ": ('float32',) has a dtype but no shape: write ('', 'float32') for a scalar "
                   "or ('n', 'float32') for a vector"),
    ("a, b", f": 'a, b' is a shape without a dtype: write ('a, b', 'float32') ({_EXPECTED})"),
    (("a, b",), ": ('a, b',) has a shape but no dtype: write ('a, b', 'float32')"),
    (("a, b", None), ": the leaf ('a, b', None) has no dtype (None): write ('a, b', 'float32') "
                     "or another dtype"),
    # wrong nesting or order
    (["a, b", "float32"],
     ": ['a, b', 'float32'] is a list, which a spec reads as a list of leaves, yet it holds a "
     "shape and a dtype: write the leaf as a tuple, ('a, b', 'float32')"),
    (("float32", "a, b"), ": ('float32', 'a, b') gives the dtype first: a leaf is (shape, "
                          "dtype), write ('a, b', 'float32')"),
    ([("n", "float32"), 3], f"[1]: {_EXPECTED}; got 3 (int)"),
    ({"w": ("n", "float32"), "b": {"c": 2.5}}, f"['b']['c']: {_EXPECTED}; got 2.5 (float)"),
    (3, f": {_EXPECTED}; got 3 (int)"),
])
def test_structure_errors_name_the_position_and_what_it_expected(spec, message):
    assert _structure_refusal(spec).startswith(_WHERE + message)


@pytest.mark.parametrize(("shape", "dims"), [
    ((3, 4), ("3", "4")), (("n", 3), ("n", "3")), ([2, "2*n"], ("2", "2 * n")),
    ((np.int64(5), "m"), ("5", "m")), ((), ()),
])
def test_tuple_shapes_of_ints_and_dimension_strings_are_accepted(shape, dims):
    wrapped = exportable({"x": (shape, "float32")})(_body)
    assert wrapped.export_spec.structures[0].args["x"].shape == dims


def test_numpy_dtype_objects_are_leaf_dtypes():
    """``np.dtype("float32")`` has a ``.shape``; it is still the dtype of a (shape, dtype) leaf."""
    wrapped = exportable({"x": ("n", np.dtype("float32")), "y": ("n", np.float64)})(_body)
    assert wrapped.export_spec.structures[0].key == "x: float32[n]; y: float64[n]"


def test_specless_exportable_bare_and_called():
    """``@exportable`` and ``@exportable()`` with no structure are allowed: no structure, no
    layout, registered for discovery like any other."""
    from hatch_jaxexport.runtime.call.decorator import registered_in

    bare = exportable(_body)
    called = exportable(name="specless_called")(_body)
    for fn in (bare, called):
        assert fn.export_spec.structures == () and fn.layouts == ()
        assert fn.__exportable__ in registered_in(_body.__module__)
    assert called.name == "specless_called"
