"""Typed PRNG keys as spec leaves: specs, call-time refusals, and loaded calls equal to the source.

``jxe_keys`` is baked in process (``export_into_copy``) and its functions are called in strict
mode (a fallback to the source raises) with a trace counter that must not move; each result is
compared with the undecorated function (``__wrapped__``) on the same typed keys.
"""

from __future__ import annotations

import importlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import export_into_copy

from hatch_jaxexport import SpecError, exportable
from hatch_jaxexport.errors import DtypeMismatch
from hatch_jaxexport.formats.dtype_names import KEY_DTYPES, UNSERIALIZABLE_KEY_DTYPES
from hatch_jaxexport.runtime.jax_dtypes import jax_dtype

X = jnp.linspace(0.1, 1.0, 4, dtype=jnp.float32)
K = jax.random.key(7)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module):
    site = export_into_copy(tmp_path_factory.mktemp("keys-site"), "jxe_keys", jobs=1,
                            executables=True)  # refused for key artifacts, with a note
    monkeypatch_module.setenv("HATCH_JAXEXPORT_STRICT", "1")
    sys.path.insert(0, str(site))
    try:
        yield importlib.import_module("jxe_keys")
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("jxe_keys", None)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def loaded_equals_source(module, run) -> None:
    """``run(f)`` of the loaded functions equals ``run`` of the sources, tracing nothing."""
    before = module.TRACES["count"]
    got = run(lambda name: getattr(module, name))
    assert module.TRACES["count"] == before, "the source was traced"
    want = run(lambda name: getattr(module, name).__wrapped__)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


# ---- specs ---------------------------------------------------------------------------------


def test_key_names_are_every_serializable_impl_of_jax():
    for name, (impl, words) in KEY_DTYPES.items():
        key = jax.random.key(0, impl=impl)
        assert str(key.dtype) == name and jax_dtype(name) == key.dtype
        assert jax.random.key_data(key).shape == (words,)
    for name, impl in UNSERIALIZABLE_KEY_DTYPES.items():
        assert str(jax.random.key(0, impl=impl).dtype) == name


@pytest.mark.parametrize(("given", "stored"), [
    (jax.random.key(0).dtype, "key<fry>"), ("key<fry>", "key<fry>"),
    ("key<threefry2x32>", "key<fry>"), ("key<rbg>", "key<rbg>"),
    ("key<unsafe_rbg>", "key<urbg>"), (jax.random.key(0, impl="unsafe_rbg").dtype, "key<urbg>")])
def test_key_leaves_are_stored_under_jax_name(given, stored):
    fn = exportable({"k": ("b", given), "tree": {"k": ("", given)},
                     "s": jax.ShapeDtypeStruct(jax.export.symbolic_shape("n"), jax_dtype(stored))}
                    )(lambda k, tree, s: k)
    assert fn.export_spec.structures[0].key == \
        f"k: {stored}[b]; tree: {{k: {stored}[]}}; s: {stored}[n]"


@pytest.mark.parametrize(("given", "says"), [
    ("key<phx2>", "'key<phx2>' is a typed PRNG key of impl philox2x32, which jax.export cannot "
                  "serialize; it serializes key<fry> (threefry2x32), key<rbg> (rbg)"),
    (jax.random.key(0, impl="threefry4x32").dtype, "impl threefry4x32, which jax.export cannot"),
    ("key<foo>", "'key<foo>' is not a key dtype name; typed PRNG keys are key<fry>")])
def test_unexportable_key_dtypes_are_refused_at_decoration(given, says):
    with pytest.raises(SpecError, match="argument 'k': bad dtype: ") as info:
        exportable({"k": ("", given)})(lambda k: k)
    assert says in str(info.value)


# ---- refusals at call time (before any artifact is read) ---------------------------------


@exportable({"k": jax.ShapeDtypeStruct((), jax.random.key(0).dtype), "x": ("n", "float32")})
def noisy(k, x):
    return jax.random.normal(k, x.shape) * x


@exportable({"state": {"key": ("", "key<rbg>"), "x": ("n", "float32")}})
def rbg_step(state):
    return state


@exportable({"k": ("2,", "uint32"), "x": ("n", "float32")})
def legacy(k, x):
    return jax.random.normal(k, x.shape) + x


REFUSALS = {
    "legacy key for a typed key": (
        lambda: noisy(jax.random.PRNGKey(0), X),
        "test_keys:noisy: no exported structure accepts this call: structure 0: argument 'k' "
        "expects key<fry>[], got uint32[2]: a legacy uint32 key, not a typed key; wrap it "
        "first: jax.random.wrap_key_data(k)."),
    "legacy key in a dict, rbg": (
        lambda: rbg_step({"key": jax.random.key_data(jax.random.key(0, impl="rbg")), "x": X}),
        "argument \"state['key']\" expects key<rbg>[], got uint32[4]: a legacy uint32 key, not "
        "a typed key; wrap it first: jax.random.wrap_key_data(k, impl='rbg')."),
    "typed key for a legacy key": (
        lambda: legacy(K, X),
        "test_keys:legacy: no exported structure accepts this call: structure 0: argument 'k' "
        "expects uint32[2], got key<fry>[], a typed PRNG key; pass its data, "
        "jax.random.key_data(k)."),
    "key of another impl": (
        lambda: noisy(jax.random.key(0, impl="rbg"), X),
        "argument 'k' expects key<fry>[], got key<rbg>[]: a typed key of impl rbg, not "
        "threefry2x32; make it with jax.random.key(seed)."),
    "key of an impl jax.export cannot serialize": (
        lambda: noisy(jax.random.key(0, impl="philox2x32"), X),
        "argument 'k' expects key<fry>[], got key<phx2>[]: a typed key jax.export cannot "
        "serialize; make it with jax.random.key(seed)."),
    "an int seed for a key": (
        lambda: noisy(0, X),
        "argument 'k' expects a typed PRNG key key<fry>[], got a Python int; pass "
        "jax.random.key(seed)."),
    "a float array for a key": (
        lambda: noisy(X, X),
        "argument 'k' expects key<fry>[], got float32[4]: pass a typed PRNG key: "
        "jax.random.key(seed)."),
    "a batch of keys for one key": (
        lambda: noisy(jax.random.split(K, 3), X),
        "argument 'k' expects rank 0 (key<fry>[]), got shape (3,)"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_key_refusals_name_function_argument_expected_given_and_fix(case, monkeypatch):
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")  # strict mode's refusals (by default the
    call, message = REFUSALS[case]  # source runs and refuses or accepts it on its own)
    with pytest.raises(DtypeMismatch if "rank" not in message else ValueError) as info:
        call()
    assert message in str(info.value)
    assert "Cannot interpret" not in str(info.value)


# ---- loaded calls equal the source ---------------------------------------------------------


def test_loaded_calls_with_typed_keys_equal_the_source(keys):
    ks = jax.random.split(K, 3)
    loaded_equals_source(keys, lambda f: [
        f("noisy")(K, X), jax.jit(f("noisy"))(K, X), f("noisy_native")(K, X),
        f("batch_of_keys")(ks, X), f("rbg_bits")(jax.random.key(3, impl="rbg"))])


def test_a_key_in_a_state_fed_back_over_steps_equals_the_source(keys):
    def run(f):
        state, tree = keys.State(K, X), {"key": K, "x": X}
        for _ in range(4):
            state, tree = f("step")(state), f("step_dict")(tree)
        return state, tree

    loaded_equals_source(keys, run)


def test_vmap_over_keys_and_grad_wrt_floats_equal_the_source(keys):
    ks, xs = jax.random.split(K, 3), jnp.stack([X, 2 * X, 3 * X])

    def loss(f, name):
        return lambda k, x: jnp.sum(f(name)(k, x) ** 2)

    loaded_equals_source(keys, lambda f: [
        jax.vmap(f("noisy"), in_axes=(0, None))(ks, X), jax.vmap(f("noisy"))(ks, xs),
        jax.grad(loss(f, "noisy"), argnums=1)(K, X),
        jax.jit(jax.grad(loss(f, "noisy"), argnums=1))(K, X),
        jax.jvp(lambda x: f("noisy")(K, x), (X,), (X,)),
        jax.vmap(jax.grad(loss(f, "noisy"), argnums=1))(ks, xs),
        jax.grad(loss(f, "noisy_native"), argnums=1)(K, X)])


def test_warmup_calls_key_leaves_with_typed_keys(keys):
    from hatch_jaxexport.bake.warmup import warmup_package

    result = warmup_package("jxe_keys", {"n": [4], "b": [2]}, log=lambda line: None)
    assert result.warmed == 7 and not result.skipped, result
