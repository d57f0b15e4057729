"""The runtime loader against real exports of ``jxe_demo``: round trips, dispatch, bad input."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hatch_jaxexport import ArtifactError, FallbackWarning
from hatch_jaxexport.runtime.call.loader import loaded_from_artifact


def source(fn):
    """The same function traced from source (what users would do without baked artifacts)."""
    return jax.jit(fn.__wrapped__, static_argnames=tuple(fn.export_spec.static))


def assert_tree_close(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-6)


@pytest.fixture
def no_fallback(recwarn):
    yield
    fallbacks = [w for w in recwarn if issubclass(w.category, FallbackWarning)]
    assert not fallbacks, [str(w.message) for w in fallbacks]


def _calls(demo):
    rng = np.random.default_rng(0)

    def arr(*shape):
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)

    params = {"w": arr(4, 3), "b": arr(3)}
    return [
        ("scale", (arr(3, 4),), {}),
        ("reduce", (arr(2, 5),), {}),
        ("reduce", (arr(2, 3, 5),), {}),
        ("poly", (arr(6),), {}),
        ("poly", (arr(6),), {"mode": "exact"}),
        ("combine", (arr(5),), {"y": arr(5)}),
        ("dense", (params, arr(7, 4)), {}),
        ("stats", (arr(9),), {}),
        ("split", (arr(4),), {}),
        ("constrained", (arr(3, 2), arr(2)), {}),
        ("listy", ([arr(2), arr(2)], jnp.float32(3.0)), {}),
        ("power", (arr(3),), {"k": 2}),
        ("pytree_in", (demo.Stats(arr(3), arr(3)), None,
                       collections.OrderedDict([("z", arr(3)), ("a", arr(3))])), {}),
        ("swap", (demo.Pair(arr(2), arr(2)),), {}),
        ("lookup", (arr(5, 4),), {}),
    ]


@pytest.mark.parametrize("index", range(15))
def test_round_trip_equals_source_and_uses_the_artifact(demo, no_fallback, index):
    name, args, kwargs = _calls(demo)[index]
    fn = getattr(demo, name)
    expected = (fn.__wrapped__ if fn.export_spec.skip_jitting else source(fn))(*args, **kwargs)
    got = fn(*args, **kwargs)
    assert_tree_close(got, expected)
    assert loaded_from_artifact(fn) and all(loaded_from_artifact(fn).values())


def test_alternative_structure_is_chosen_by_rank(demo, no_fallback):
    demo.reduce(jnp.ones((2, 3)))
    demo.reduce(jnp.ones((2, 3, 4)))
    chosen = {key[0] for key in loaded_from_artifact(demo.reduce)}
    assert chosen == {0, 1}


def test_static_values_each_have_an_artifact(demo, no_fallback, monkeypatch):
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")  # an unbaked value: refused, not traced
    x = jnp.arange(4.0)
    np.testing.assert_allclose(demo.poly(x, mode="fast"), x * 2)
    np.testing.assert_allclose(demo.poly(x, "exact"), x**3 - 1)
    with pytest.raises(ValueError, match=r"jxe_demo.funcs:poly: static argument 'mode' got "
                                         r"'slow'; the baked values are 'fast', 'exact'"):
        demo.poly(x, mode="slow")


def test_namedtuple_and_dataclass_outputs_keep_their_types(demo, no_fallback):
    stats = demo.stats(jnp.arange(4.0))
    assert type(stats).__name__ == "Stats" and float(stats.spread) == 3.0
    pair = demo.split(jnp.arange(4.0))
    assert type(pair) is demo.Pair
    np.testing.assert_array_equal(pair.right, [1.0, 2.0, 3.0])


def test_grad_through_artifact_with_vjp_order(demo, no_fallback):
    params = {"w": jnp.ones((4, 3)) * 0.1, "b": jnp.zeros(3)}
    x = jnp.ones((2, 4))

    def loss(f):
        return lambda p: jnp.sum(f(p, x) ** 2)

    expected = jax.grad(loss(source(demo.dense)))(params)
    assert_tree_close(jax.grad(loss(demo.dense))(params), expected)


def test_loaded_function_works_inside_jit(demo, no_fallback):
    x = jnp.ones((3, 4))
    np.testing.assert_allclose(jax.jit(lambda x: demo.scale(x) + 1)(x), source(demo.scale)(x) + 1,
                               rtol=1e-6)


def test_python_scalars_and_numpy_inputs(demo, no_fallback):
    out = demo.listy([np.ones(2, np.float32), np.ones(2, np.float32)], 2.0)
    np.testing.assert_allclose(out[0], [2.0, 2.0])


def test_float64_numpy_input_with_x64_off_is_what_jit_would_see(demo, no_fallback):
    x = np.ones((2, 2), np.float64)
    assert demo.scale(x).dtype == jnp.float32


Bad = collections.namedtuple("Bad", "call error message")
BAD_CALLS = [
    Bad(lambda d: d.scale(jnp.ones(3)), TypeError,
        r"jxe_demo.funcs:scale: no exported structure accepts this call: structure 0: argument "
        r"'x' expects rank 2 \(float32\[a, b\]\), got shape \(3,\). Accepted: \[0\] x: "
        r"float32\[a, b\]"),
    Bad(lambda d: d.scale(jnp.ones((2, 2), jnp.int32)), TypeError,
        r"argument 'x' expects dtype float32 \(float32\[a, b\]\), got int32"),
    Bad(lambda d: d.scale("hello"), TypeError,
        r"argument 'x' expects an array float32\[a, b\], got str 'hello'"),
    Bad(lambda d: d.reduce(jnp.ones(3)), TypeError,
        r"jxe_demo.reduce: .*Accepted: \[0\] x: float32\[a, b\]; \[1\] x: float32\[a, b, c\]"),
    Bad(lambda d: d.constrained(jnp.ones((1, 3)), jnp.ones(3)), ValueError,
        r"constrained: .*a = 1, b = 3, which violates the constraint 'a >= 2'"),
    Bad(lambda d: d.constrained(jnp.ones((2, 3)), jnp.ones(4)), ValueError,
        r"argument 'y' has shape \(4,\): axis 0 is b = 4, but b = 3 from argument 'x' axis 1"),
    Bad(lambda d: d.scale(jnp.ones((0, 3))), ValueError,
        r"gives a = 0; symbolic dimensions are >= 1"),
    Bad(lambda d: d.dense({"w": jnp.ones((4, 2))}, jnp.ones((2, 4))), TypeError,
        r"argument 'params' expects a dict with keys \['b', 'w'\], got a dict with keys \['w'\]"),
    Bad(lambda d: d.listy((jnp.ones(2), jnp.ones(2)), 1.0), TypeError,
        r"argument 't' expects a list of 2, got \(float32\[2\], float32\[2\]\)"),
    Bad(lambda d: d.scale(), TypeError, r"jxe_demo.funcs:scale: missing a required argument: 'x'"),
    Bad(lambda d: d.scale(jnp.ones((2, 2)), jnp.ones(2)), TypeError,
        r"jxe_demo.funcs:scale: too many positional arguments"),
    Bad(lambda d: d.combine(jnp.ones(2), jnp.ones(2)), TypeError,
        r"jxe_demo.funcs:combine: too many positional arguments"),
    Bad(lambda d: d.precise(jnp.ones(3)), TypeError,
        r"argument 'x' expects float64\[n\], a 64-bit dtype, got float32, but jax_enable_x64 is "
        r"off; turn it on before the call \(jax.config.update\('jax_enable_x64', True\), or "
        r"JAX_ENABLE_X64=1 in the environment\) and pass float64 \(.astype\('float64'\)\)"),
    Bad(lambda d: d.power(jnp.ones(3), k=3), ValueError,
        r"static argument 'k' got 3; the baked values are 1, 2"),
    Bad(lambda d: d.pytree_in((jnp.ones(2), jnp.ones(2)), None, {}), TypeError,
        r"argument 's' expects a Stats, got \(float32\[2\], float32\[2\]\)"),
    Bad(lambda d: d.pytree_in(d.Stats(jnp.ones(2), jnp.ones(2)), jnp.ones(2), {}), TypeError,
        r"argument 'extra' expects None, got float32\[2\]"),
    Bad(lambda d: d.swap((jnp.ones(2), jnp.ones(2))), TypeError,
        r"argument 'pair' expects a Pair, got \(float32\[2\], float32\[2\]\)"),
    Bad(lambda d: d.scale([[1.0, 2.0]]), TypeError,
        r"argument 'x' expects an array float32\[a, b\], got \[\[float 1.0, float 2.0\]\]"),
    Bad(lambda d: d.power(jnp.ones(3), k=True), ValueError,
        r"static argument 'k' got True"),
]


@pytest.mark.parametrize("bad", BAD_CALLS, ids=[b.message[:40] for b in BAD_CALLS])
def test_bad_input_messages_name_function_argument_and_what_is_accepted(demo, bad, monkeypatch):
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")  # by default these calls run the source
    with pytest.raises(bad.error, match=bad.message):
        bad.call(demo)


def test_no_artifact_for_platform_falls_back_with_one_warning(demo, maintainer_warnings):
    demo.gpu_only.clear_cache()  # other tests of the session may have resolved it already
    with pytest.warns(FallbackWarning, match=r"jxe_demo.funcs:gpu_only: no usable baked artifact, "
                                             r"tracing the source instead: artifacts were built "
                                             r"for cuda, but this process runs on cpu"):
        out = demo.gpu_only(jnp.ones(2))
    np.testing.assert_allclose(out, [2.0, 2.0])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        demo.gpu_only(jnp.ones(3))  # warned once only


def test_strict_mode_raises_artifact_error(demo, monkeypatch):
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    demo.gpu_only.clear_cache()
    with pytest.raises(ArtifactError, match=r"gpu_only: no usable baked artifact "
                                            r"\(HATCH_JAXEXPORT_STRICT is set\): artifacts were "
                                            r"built for cuda"):
        demo.gpu_only(jnp.ones(2))


def test_committed_arguments_choose_their_device_platform(demo, no_fallback):
    from hatch_jaxexport.runtime.call.matching import committed_platform

    x = jax.device_put(jnp.ones((2, 2)), jax.devices("cpu")[0])
    assert committed_platform({"x": x}) == "cpu"
    assert committed_platform({"x": jnp.ones(2)}) is None  # uncommitted: the default backend
    np.testing.assert_allclose(demo.scale(x), source(demo.scale)(x), rtol=1e-6)


class ArrayLike:
    """Not an array, but convertible: ``__array__`` (like pandas or xarray objects)."""

    def __init__(self, data):
        self.data = np.asarray(data, np.float32)

    def __array__(self, dtype=None, copy=None):
        return self.data


class DLPackOnly:
    """Only ``__dlpack__`` (like a torch tensor whose dtype numpy does not know)."""

    def __init__(self, data):
        self.data = np.asarray(data, np.float32)
        self.shape = self.data.shape
        self.dtype = "torch.float32"

    def __dlpack__(self, **kwargs):
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()


@pytest.mark.parametrize("wrap", [np.asarray, ArrayLike, DLPackOnly, jnp.asarray])
def test_array_like_inputs_are_accepted(demo, no_fallback, wrap):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(demo.scale(wrap(data)), source(demo.scale)(data), rtol=1e-6)
