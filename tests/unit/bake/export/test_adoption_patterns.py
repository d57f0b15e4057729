"""Patterns real libraries use (issue 61), baked in process from ``jxe_patterns`` and called in
strict mode: a namedtuple bound under another name than its typename is found where it lives;
one that truly cannot be found is refused with the real cause."""

from __future__ import annotations

import collections
import inspect
import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FIXTURES, import_baked

from hatch_jaxexport import exportable
from hatch_jaxexport.bake import export_package
from hatch_jaxexport.runtime.artifacts import pytrees


@pytest.fixture(scope="module")
def patterns_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("patterns-site")
    shutil.copytree(FIXTURES / "jxe_patterns", site / "jxe_patterns",
                    ignore=shutil.ignore_patterns("__pycache__"))
    export_package("jxe_patterns", site / "jxe_patterns" / "_jaxexport", search_path=[site],
                   on_error="skip")
    return site


@pytest.fixture
def pkg(patterns_site: Path, monkeypatch: pytest.MonkeyPatch):
    return import_baked(patterns_site, "jxe_patterns", monkeypatch)


def _manifest(site: Path) -> dict:
    return json.loads((site / "jxe_patterns" / "_jaxexport" / "manifest.json").read_text())


def _records(site: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for record in _manifest(site)["artifacts"]:
        found.setdefault(record["function"], []).append(record)
    return found


def _skipped(site: Path) -> dict[str, str]:
    return {s["function"]: s["reason"] for s in _manifest(site)["skipped"]}


def test_a_renamed_namedtuple_is_named_where_it_lives(patterns_site: Path) -> None:
    (record,) = _records(patterns_site)["jxe_patterns:step"]
    assert record["pytree_types"] == ["jxe_patterns:StepOutput"]


def test_a_renamed_namedtuple_output_is_served_and_equals_the_source(pkg) -> None:
    x = jnp.arange(4, dtype=jnp.float32)
    got = pkg.step(x)
    assert pkg.TRACES["count"] == 0
    assert type(got) is pkg.StepOutput
    want = jax.jit(pkg.step.__wrapped__)(x)
    np.testing.assert_allclose(got.value, want.value)
    np.testing.assert_allclose(got.scale, want.scale)


def test_a_namedtuple_made_in_a_function_is_refused_with_the_real_cause(
        patterns_site: Path) -> None:
    reason = _skipped(patterns_site)["jxe_patterns:local_pair"]
    assert "jxe_patterns:local_pair: cannot serialize pytree type 'jxe_patterns:LocalPair': " \
           "no module-level name of 'jxe_patterns' holds it (made inside a function? each " \
           "call makes a new class, which the loader cannot find again); make it once at " \
           "module level and bind it to a name there (e.g. LocalPair = ...)" in reason, reason


def test_a_class_defined_in_a_function_is_named_so() -> None:
    def make() -> type:
        class Local(tuple):
            _fields = ("a",)
        return Local

    assert pytrees._not_found_again(make()) == (
        "it is defined inside a function (test_a_class_defined_in_a_function_is_named_so."
        "<locals>.make.<locals>.Local): each call makes a new class, which the loader cannot "
        "find again; define it at module level")


def test_a_class_bound_to_no_module_name_says_so() -> None:
    cls = collections.namedtuple("Orphan", ["a"])
    cls.__module__ = __name__
    assert pytrees.type_ref(cls) == f"{__name__}:Orphan"
    assert pytrees._not_found_again(cls) == (
        f"no module-level name of {__name__!r} holds it (made inside a function? each call "
        f"makes a new class, which the loader cannot find again); make it once at module level "
        f"and bind it to a name there (e.g. Orphan = ...)")
    globals()["Renamed"] = cls
    try:
        assert pytrees.type_ref(cls) == f"{__name__}:Renamed"
        assert pytrees._not_found_again(cls) == ""
    finally:
        del globals()["Renamed"]


@pytest.mark.parametrize("name", ["scaled_sin", "clipped", "softplus"])
def test_a_custom_derivative_function_is_named_as_the_users(pkg, name: str) -> None:
    fn = getattr(pkg, name)
    assert fn.name == f"jxe_patterns:{name}"
    assert fn.__name__ == name and fn.__module__ == "jxe_patterns"
    assert next(iter(inspect.signature(fn).parameters)) == "x"


@pytest.mark.parametrize("name, rule", [("scaled_sin", 3.0), ("clipped", 5.0),
                                        ("softplus", 7.0)])
def test_a_custom_derivative_function_is_served_with_its_rule(pkg, name: str,
                                                              rule: float) -> None:
    fn = getattr(pkg, name)
    x = jnp.linspace(-2, 2, 5, dtype=jnp.float32)
    got = fn(x)
    got_grad = jax.grad(lambda v: fn(v).sum())(x)
    assert pkg.TRACES["count"] == 0
    source = fn.__wrapped__
    np.testing.assert_allclose(got, jax.jit(source)(x), rtol=1e-6)
    want_grad = jax.grad(lambda v: source(v).sum())(x)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-6)
    np.testing.assert_allclose(got_grad, np.full(5, rule, np.float32))


def test_jax_wrappers_exported_once_each(patterns_site: Path) -> None:
    records = _records(patterns_site)
    for name in ("scaled_sin", "clipped", "softplus"):
        assert {r["vjp_order"] for r in records[f"jxe_patterns:{name}"]} == {1}


def test_a_decoration_error_of_a_jax_wrapper_is_kept_not_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hatch_jaxexport import SpecError
    from hatch_jaxexport.runtime.call import decorator

    @jax.custom_vjp
    def halve(x):
        return x / 2

    halve.defvjp(lambda x: (x / 2, None), lambda _, g: (g / 2,))
    before = {m: list(e) for m, e in decorator.DECORATION_ERRORS.items()}
    try:
        f = exportable({"y": ("n", "float32")})(halve)  # no argument 'y': never raised here
        (error,) = decorator.decoration_errors_in(__name__)
        assert str(error).startswith(
            f"@exportable spec of {__name__}:test_a_decoration_error_of_a_jax_wrapper_is_kept_"
            f"not_raised.<locals>.halve"), error
        assert "'y'" in str(error), error
        x = jnp.arange(3, dtype=jnp.float32)
        np.testing.assert_allclose(f(x), x / 2)  # default mode: the source
        monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
        with pytest.raises(SpecError) as raised:
            f(x)
        assert raised.value is error
    finally:
        decorator.DECORATION_ERRORS.clear()
        decorator.DECORATION_ERRORS.update(before)


def test_the_message_for_an_unreadable_wrapper_names_the_line_and_the_way_out() -> None:
    from hatch_jaxexport.runtime.call import decorator

    @jax.custom_gradient
    def f(x):
        return x, lambda g: (g,)

    text = decorator._unreadable_wrapper(f)
    # jax's wrapper names itself (``custom_gradient.<locals>.wrapped_fun`` on jax 0.10, the
    # user's qualname on jax 0.12, which wraps it with functools.wraps)
    assert f"cannot read the parameters of the function this jax {type(f).__name__} wraps " \
           f"({f.__qualname__} is jax's wrapper, and this jax does not " \
           "expose the function inside it); put @exportable on a plain function that calls it " \
           "(def f(x): return wrapped(x)), or write the rule with jax.custom_vjp" in text, text
    assert text.startswith(f"@exportable at {__file__}:"), text
