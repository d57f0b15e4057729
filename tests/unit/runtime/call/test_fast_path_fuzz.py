"""The fast path is fail-closed: it never serves a call with the wrong executable (issue 36).

``jxe_hot`` is baked once; hypothesis then draws sequences of calls mixing every form the fast
path keys (positional and keyword arrays in either order, numpy and jax arrays, Python and
NumPy scalars, statics by position, keyword and default, ``export_with_kwargs``, dtypes that no
structure accepts, shapes of other ranks, one array passed twice), with ``jax_enable_x64``
toggled between calls and calls made from several threads at once. Every result is compared
with the full path's on the same arguments (``call_exportable``: binding, matching, resolving,
no fast path): an executable resolved for another key (another dtype, weak type, static value,
keyword order or x64 state) would give another dtype, shape or value. Meshes are left out:
this is a one-device machine, and a function with mesh variants keeps its own guarded entry
(``test_sharding``).
"""

from __future__ import annotations

import concurrent.futures
import sys
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import export_into_copy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hatch_jaxexport.runtime.call import _resolved_calls as resolved
from hatch_jaxexport.runtime.call.loader import call_exportable

SIZES = st.sampled_from([1, 2, 3, 5])
DTYPES = st.sampled_from(["float32", "float32", "int32", "float64", "bool"])


@pytest.fixture(scope="module")
def hot(tmp_path_factory: pytest.TempPathFactory) -> Any:
    site = export_into_copy(tmp_path_factory.mktemp("hot-site"), "jxe_hot")
    sys.path.insert(0, str(site))
    sys.modules.pop("jxe_hot", None)
    import jxe_hot

    yield jxe_hot
    sys.path.remove(str(site))
    sys.modules.pop("jxe_hot", None)


@st.composite
def arrays(draw: st.DrawFn, n: int, dtype: str) -> Any:
    shape = (n,) if draw(st.integers(0, 5)) else (n, 2)  # now and then another rank
    values = np.arange(np.prod(shape)).reshape(shape) * 0.5 + draw(st.integers(0, 3))
    array = values.astype(dtype)
    return jnp.asarray(array) if draw(st.booleans()) else array


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """One call of a ``jxe_hot`` function, in one of the forms a user writes."""
    n, dtype = draw(SIZES), draw(DTYPES)
    x = draw(arrays(n, dtype))
    y = draw(arrays(n, dtype if draw(st.integers(0, 4)) else draw(DTYPES)))
    if draw(st.integers(0, 6)) == 0:
        y = x  # one array twice: a later call with two arrays must not reuse one
    kind = draw(st.sampled_from(["add", "reduce", "combine", "shift"]))
    if kind == "add":
        form = draw(st.sampled_from(["pos", "kw", "kw-reversed", "mixed"]))
        return kind, *{"pos": ((x, y), {}), "kw": ((), {"x": x, "y": y}),
                       "kw-reversed": ((), {"y": y, "x": x}), "mixed": ((x,), {"y": y})}[form]
    if kind == "reduce":
        mode = draw(st.sampled_from(["sum", "max", None]))
        if mode is None:
            return kind, (x,), {}
        return kind, *(((x, mode), {}) if draw(st.booleans()) else ((x,), {"mode": mode}))
    if kind == "combine":
        return kind, (x,), {"y": y}
    scalar = draw(st.sampled_from([0.5, 2, True, np.float32(1.5), -1.0]))
    return kind, *(((x, scalar), {}) if draw(st.booleans()) else ((x,), {"s": scalar}))


def _same(got: Any, want: Any, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got, want)
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=what)


def _check(module: Any, call: tuple[str, tuple[Any, ...], dict[str, Any]]) -> None:
    name, args, kwargs = call
    fn = getattr(module, name)
    try:
        want = call_exportable(fn.__exportable__, args, kwargs)
    except Exception as err:  # the full path refuses it: so must the fast one
        with pytest.raises(type(err)):
            fn(*args, **kwargs)
        return
    what = f"{name}{tuple(np.asarray(a).dtype for a in args)} {list(kwargs)}"
    _same(fn(*args, **kwargs), want, what)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(sequence=st.lists(st.tuples(calls(), st.booleans()), min_size=4, max_size=12))
def test_every_fast_call_matches_the_source(hot: Any, sequence: list[Any]) -> None:
    """A sequence of calls, each made twice (the second may take the fast path), with x64
    toggled before some."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for call, toggle in sequence:
                if toggle:
                    jax.config.update("jax_enable_x64", not jax.config.jax_enable_x64)
                _check(hot, call)
                _check(hot, call)
        finally:
            jax.config.update("jax_enable_x64", False)


def test_a_float64_call_after_x64_is_turned_on_is_not_served_the_float32_executable(hot):
    """With x64 off a float64 array is canonicalized to float32 and the float32 artifact
    serves it; with x64 on the same call (same shapes, same dtypes) is another call."""
    x = np.linspace(0.0, 1.0, 3)
    for x64 in (False, True, False, True):
        jax.config.update("jax_enable_x64", x64)
        try:
            got = hot.add(x, x)
            assert got.dtype == ("float64" if x64 else "float32"), x64
        finally:
            jax.config.update("jax_enable_x64", False)


def test_one_array_passed_twice_does_not_route_a_later_call_to_one_array(hot):
    a, b = jnp.ones(4, jnp.float32), jnp.arange(4, dtype=jnp.float32)
    for _ in range(2):  # the second call of each form takes the keyed cache
        _same(hot.add(x=a, y=a), a, "add(x=a, y=a)")
    _same(hot.add(x=a, y=b), a * 2.0 - b, "add(x=a, y=b) after add(x=a, y=a)")
    _same(hot.combine(b, y=b), b, "combine(b, y=b)")
    _same(hot.combine(b, y=a), b * 2.0 - a, "combine(b, y=a) after combine(b, y=b)")
    # keywords against the signature's order: identity cannot tell which slot took ``a``
    for fn in (hot.add, hot.combine):
        fn.clear_cache()
    for _ in range(2):
        _same(hot.add(y=a, x=a), a, "add(y=a, x=a)")
    _same(hot.add(y=a, x=b), b * 2.0 - a, "add(y=a, x=b) after add(y=a, x=a)")


def test_threads_calling_at_once_get_their_own_results(hot: Any) -> None:
    """Eight threads, each its own sizes and forms, interleaved on one function's fast path."""
    def work(seed: int) -> int:
        rng = np.random.default_rng(seed)
        for _ in range(40):
            n = int(rng.integers(1, 5))
            x = rng.random(n).astype("float32" if seed % 2 else "int32")
            y = jnp.asarray(rng.random(n).astype("float32"))
            got = hot.add(x, y) if seed % 3 else hot.add(y=y, x=x)
            _same(got, call_exportable(hot.add.__exportable__, (x, y), {}), f"thread {seed}")
        return seed

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            assert sorted(pool.map(work, range(8))) == list(range(8))


def test_the_fuzzed_forms_do_take_the_fast_path(hot: Any) -> None:
    """The fuzz would prove nothing if these forms never reached the fast path: after one
    call each, the keyed cache holds them."""
    x, y = jnp.ones(3, jnp.float32), np.zeros(3, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for call in [lambda: hot.add(y=y, x=x), lambda: hot.reduce(x, mode="max"),
                     lambda: hot.combine(x, y=y), lambda: hot.shift(x, 0.5),
                     lambda: hot.add(np.arange(3, dtype=np.int32), x)]:
            call()
    for fn in (hot.add, hot.reduce, hot.combine, hot.shift):
        assert fn.calls.fast, fn.name
    assert Path(hot.__file__).with_name("_jaxexport").is_dir()


def test_each_call_form_settles_its_own_hot_form_and_is_served_by_it(hot: Any) -> None:
    """Issue 36's call forms each get the cheapest hot form that fits them (``HotCall``), and
    the second call, served by it, equals the full path's result."""
    x, y = jnp.linspace(0.0, 1.0, 4, dtype=jnp.float32), jnp.ones(4, jnp.float32)
    xi = jnp.arange(4, dtype=jnp.int32)
    forms = [
        (hot.add, (x, y), {}, resolved.POSITIONAL),
        (hot.add, (), {"x": x, "y": y}, resolved.SPREAD),
        (hot.reduce, (x,), {"mode": "max"}, resolved.STATIC_KEYWORDS),
        (hot.reduce, (x, "max"), {}, resolved.STATIC_POSITIONAL),
        (hot.combine, (x,), {"y": y}, resolved.SPREAD),  # a twin taking ``y`` positionally
        (hot.shift, (x, 0.5), {}, resolved.GENERAL),  # 0.5 is taken as a float32 constant
        (hot.add, (xi, xi), {}, resolved.POSITIONAL),  # drop-in: jax's executable of the trace
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn, args, kwargs, form in forms:
            fn.clear_cache()
            first = fn(*args, **kwargs)
            assert fn.calls.hot is not None and fn.calls.hot.form == form, (fn.name, kwargs)
            _same(fn(*args, **kwargs), first, f"{fn.name} {kwargs}")
            assert fn.calls.hot_misses == 0
            _same(first, call_exportable(fn.__exportable__, args, kwargs), fn.name)
        # the drop-in's hot executable refuses float32: the artifact serves it, not the trace
        assert hot.add.calls.hot.form == resolved.POSITIONAL
        _same(hot.add(x, y), x * 2.0 - y, "float32 after the int32 drop-in")
        assert hot.add.calls.hot_misses == 1
        # reordered keywords take the same executable
        hot.add(x=x, y=y)
        _same(hot.add(y=y, x=x), x * 2.0 - y, "add(y=y, x=x)")
