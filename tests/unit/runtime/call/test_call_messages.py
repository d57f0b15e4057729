"""What a user reads at call time: the fix for a missing platform, warnings attributed to the
user's own line (also from inside a transformation), and long structures abbreviated in the
``Accepted: ...`` tail of a refused call (whole with ``HATCH_JAXEXPORT_FULL_STRUCTURES=1``)."""

from __future__ import annotations

import sys
import warnings

import jax
import jax.numpy as jnp
import pytest

from hatch_jaxexport import FallbackWarning, exportable
from hatch_jaxexport.errors import CallMismatch, PytreeMismatch, SignatureMismatch
from hatch_jaxexport.formats.settings import FULL_STRUCTURES_ENV
from hatch_jaxexport.runtime.call import loader
from hatch_jaxexport.runtime.call.refusals import SOURCE_REFUSES, STRICT_FIX


def _fallbacks(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, FallbackWarning)]


def test_a_missing_platform_says_where_to_add_it_when_the_function_names_its_own(demo,
                                                                                 maintainer_warnings):
    demo.gpu_only.clear_cache()
    with pytest.warns(FallbackWarning) as caught:
        demo.gpu_only(jnp.ones(2))
    assert str(caught[0].message) == (
        "jxe_demo.funcs:gpu_only: no usable baked artifact, tracing the source instead: "
        "artifacts were built for cuda, but this process runs on cpu; to run it here, add 'cpu' "
        "to @exportable(..., platforms=['cuda']) of jxe_demo.funcs:gpu_only and rebuild the "
        "wheel")


def test_a_missing_platform_names_the_build_option_when_the_function_names_none(
        demo, monkeypatch, maintainer_warnings):
    monkeypatch.setattr(loader, "export_platform", lambda backend=None: "tpu")
    demo.stats.clear_cache()
    try:
        with pytest.warns(FallbackWarning) as caught:
            demo.stats(jnp.ones(3))
    finally:
        demo.stats.clear_cache()  # forget the fallback resolved for "tpu"
    assert str(caught[0].message) == (
        "jxe_demo.funcs:stats: no usable baked artifact, tracing the source instead: artifacts "
        "were built for cpu, but this process runs on tpu; to run it here, add 'tpu' to the "
        "build's `platforms` (in [tool.hatch.build.targets.wheel.hooks.jaxexport], "
        "[tool.jaxexport] with setuptools, or --platform of jaxexport export), or to "
        "@exportable(..., platforms=[...]) of jxe_demo.funcs:stats alone, and rebuild the wheel")


def test_a_fallback_warning_points_at_the_callers_line(demo, maintainer_warnings):
    demo.gpu_only.clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno
        demo.gpu_only(jnp.ones(2))
    (warning,) = _fallbacks(caught)
    assert (warning.filename, warning.lineno) == (__file__, line + 1)


def test_a_fallback_warning_inside_jit_points_at_the_users_line(demo, maintainer_warnings):
    demo.gpu_only.clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno
        jax.jit(lambda x: demo.gpu_only(x) * 2)(jnp.ones(2))
    (warning,) = _fallbacks(caught)
    assert (warning.filename, warning.lineno) == (__file__, line + 1)


@pytest.mark.parametrize("transform", ["jvp", "jvp under jit", "hessian"])
def test_a_transformation_fallback_points_at_the_users_line(demo, transform, maintainer_warnings):
    """``jax.jvp`` of a function baked without ``ad_order`` traces the source for the jvp: the
    warning comes from the family's primitive rules, deep inside jax, yet names this line."""
    x = jnp.linspace(0.1, 1.0, 4).reshape(2, 2)
    run = {"jvp": lambda: jax.jvp(demo.scale, (x,), (x,)),
           "jvp under jit": lambda: jax.jit(lambda v: jax.jvp(demo.scale, (v,), (v,)))(x),
           "hessian": lambda: jax.hessian(lambda v: demo.scale(v).sum())(x)}[transform]
    demo.scale.clear_cache()  # a new family: it warns again
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
    finally:
        demo.scale.clear_cache()
    found = _fallbacks(caught)
    assert found and all("tracing the source: " in str(w.message) for w in found)
    assert {w.filename for w in found} == {__file__}, [(w.filename, w.lineno) for w in found]
    assert {w.lineno for w in found} <= set(range(_line_of("run = {"), _line_of("}[transform]")
                                                  + 1))


def _line_of(text: str) -> int:
    """The line of this file that holds ``text`` (the lambdas above)."""
    with open(__file__, encoding="utf-8") as source:
        return next(i for i, line in enumerate(source, 1) if text in line)


#: A flax-like parameter tree: its structure text is long (about 250 characters).
LAYERS = {f"Dense_{i}": {"bias": ("h,", "float32"), "kernel": ("h, h", "float32")}
          for i in range(4)}


@exportable({"params": {"params": LAYERS}, "x": ("n, h", "float32")})
def mlp(params, x):
    for layer in params["params"].values():
        x = jnp.tanh(x @ layer["kernel"] + layer["bias"])
    return x


@exportable({"x": ("n", "float32")})
def shifted(x, offset=1.0):
    return x + offset


LONG = mlp.export_spec.structures[0].key


@pytest.fixture
def strict(monkeypatch):
    """Refusals are strict mode's; by default these calls run the source."""
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")


def _refusal() -> str:
    """The refusal's message, less the fix strict mode ends every refusal with."""
    with pytest.raises(PytreeMismatch) as info:
        mlp({"params": {}}, jnp.ones((2, 3)))
    assert str(info.value).endswith(STRICT_FIX)
    return str(info.value).removesuffix(STRICT_FIX)


def test_a_long_structure_is_abbreviated_in_the_accepted_tail(monkeypatch, strict):
    monkeypatch.delenv(FULL_STRUCTURES_ENV, raising=False)
    assert len(LONG) > 200
    message = _refusal()
    head, _, tail = message.partition(". Accepted: ")
    assert head.startswith("test_call_messages:mlp: no exported structure accepts this call: ")
    assert tail == ("[0] params: {params: {Dense_0: {bias: float32[h], \u2026}, \u2026}}; "
                    f"x: float32[n, h] (abbreviated: {FULL_STRUCTURES_ENV}=1 shows them whole)")
    assert LONG not in message


def test_the_switch_shows_the_whole_structure(monkeypatch, strict):
    monkeypatch.setenv(FULL_STRUCTURES_ENV, "1")
    assert _refusal().endswith(f". Accepted: [0] {LONG}")


def test_a_short_structure_is_shown_whole(demo, monkeypatch, strict):
    monkeypatch.delenv(FULL_STRUCTURES_ENV, raising=False)
    with pytest.raises(TypeError, match=r"\. Accepted: \[0\] x: float32\[a, b\] "
                       r"\[HATCH_JAXEXPORT_STRICT is set"):
        demo.scale(jnp.ones(3))


def test_a_default_the_structure_leaves_out_is_a_signature_mismatch(strict):
    with pytest.raises(SignatureMismatch, match=r"^test_call_messages:shifted: no exported "
                       r"structure accepts this call: structure 0: argument 'offset' is not "
                       r"part of this structure \(its default 1.0 is baked in\)"):
        shifted(jnp.ones(2), offset=2.0)


def test_refusals_need_no_artifacts(recwarn, strict):
    """The checks run before anything is resolved: this module has no baked artifacts, and no
    refused call above warned about that."""
    with pytest.raises(PytreeMismatch):
        mlp({"params": {}}, jnp.ones((2, 3)))
    assert not [w for w in recwarn if issubclass(w.category, FallbackWarning)]


# -- issue 37: every refusal keeps its cause ------------------------------------------------


@exportable({"x": ("n", "float32"), "xq": None}, {"x": ("n", "float32"), "xq": ("", "float32")})
def _two_structures(x, xq=None):
    return x if xq is None else x * xq


@exportable({"params": {"w": ("n", "float32"), "b": ("n", "float32")}})
def _keyed(params):
    return params["w"] + params["b"]


def _strict_refusal(monkeypatch: pytest.MonkeyPatch, call) -> str:
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    with pytest.raises(Exception) as info:
        call()
    return str(info.value)


def test_a_refusal_names_every_structure_s_own_reason(monkeypatch):
    text = _strict_refusal(monkeypatch, lambda: _two_structures(jnp.ones(3), (1.0, 2.0)))
    assert "structure 0: argument 'xq' expects None, got (float 1.0, float 2.0)" in text
    assert "structure 1: argument 'xq' expects " in text


def test_a_dict_refusal_names_the_missing_and_the_unexpected_key(monkeypatch):
    text = _strict_refusal(monkeypatch, lambda: _keyed({"w": jnp.ones(3), "bias": jnp.ones(3)}))
    assert "expects a dict with keys ['b', 'w'], got a dict with keys ['bias', 'w'] " \
           "(missing 'b'; unexpected 'bias')" in text


def test_an_unknown_keyword_is_named_before_the_argument_it_left_missing(monkeypatch):
    text = _strict_refusal(monkeypatch, lambda: _keyed(inputs=jnp.ones(3)))
    assert "got an unexpected keyword argument 'inputs' (missing a required argument: " \
           "'params')" in text
    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT")
    with pytest.raises(TypeError, match="unexpected keyword argument 'inputs'") as info:
        _keyed(inputs=jnp.ones(3))  # not strict: the source's own error, ours as a note
    assert any("unexpected keyword argument 'inputs'" in note
               for note in getattr(info.value, "__notes__", []))


def test_strict_refusal_of_a_call_the_source_refuses_too_suggests_no_structure(strict):
    """Too many positional arguments: no structure or recording could serve the call, so the
    refusal says the source refuses it too instead of suggesting one."""
    with pytest.raises(SignatureMismatch) as info:
        shifted(jnp.ones(3), 1.0, 2.0)
    message = str(info.value)
    assert message.startswith("test_call_messages:shifted: too many positional arguments")
    assert message.endswith(SOURCE_REFUSES) and STRICT_FIX not in message


def test_without_strict_mode_a_call_the_source_refuses_raises_the_sources_error(monkeypatch):
    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT", raising=False)
    with pytest.raises(TypeError) as info:
        shifted(jnp.ones(3), 1.0, 2.0)
    assert not isinstance(info.value, CallMismatch)  # the source's own error
    assert any("shifted: too many positional arguments" in note
               for note in getattr(info.value, "__notes__", []))
