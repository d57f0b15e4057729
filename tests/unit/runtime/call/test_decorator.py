"""``@exportable``'s options: every flag is a bool and every order a plain int, or the spec is
refused with the function, the option, what it takes and what was given."""

from __future__ import annotations

import numpy as np
import pytest

from hatch_jaxexport import SpecError, exportable

SPEC = {"x": ("n", "float32")}


def _twice(x):
    return x * 2


def _refusal(**options) -> str:
    with pytest.raises(SpecError) as caught:
        exportable(SPEC, **options)(_twice)
    return str(caught.value)


_WHERE = f"@exportable spec of {__name__}:_twice: "


@pytest.mark.parametrize("option", ["vmap", "skip_jitting", "export_with_kwargs", "tiered"])
@pytest.mark.parametrize(("value", "given"), [
    ("yes", "'yes' (str)"), (0.5, "0.5 (float)"), ("True", "'True' (str)"),
    (1, "1 (int); write True"), (0, "0 (int); write False"), (2, "2 (int)"),
    (np.True_, "np.True_ (numpy.bool); write True"), ([True], "[True] (list)"),
])
def test_every_flag_refuses_what_is_not_a_bool(option, value, given):
    allowed = ("True, False or None (follow HATCH_JAXEXPORT_TIERED)" if option == "tiered"
               else "True or False")
    assert _refusal(**{option: value}) == f"{_WHERE}{option} must be {allowed}, got {given}"


@pytest.mark.parametrize("option", ["vmap", "skip_jitting", "export_with_kwargs"])
def test_none_is_refused_for_flags_without_a_default_to_follow(option):
    assert _refusal(**{option: None}) == \
        f"{_WHERE}{option} must be True or False, got None (NoneType)"


@pytest.mark.parametrize(("option", "value", "allowed", "given"), [
    ("vjp_order", 1.0, "an int >= 0", "1.0 (float); write 1"),
    ("vjp_order", 0.5, "an int >= 0", "0.5 (float)"),
    ("vjp_order", "1", "an int >= 0", "'1' (str)"),
    ("vjp_order", True, "an int >= 0", "True (bool); a bool is not an order: write 1"),
    ("vjp_order", -1, "an int >= 0", "-1 (int)"),
    ("vjp_order", np.int64(2), "an int >= 0", "np.int64(2) (numpy.int64); write int(...), 2"),
    ("ad_order", 1.0, "0, 1 or 2", "1.0 (float); write 1"),
    ("ad_order", "2", "0, 1 or 2", "'2' (str)"),
    ("ad_order", False, "0, 1 or 2", "False (bool); a bool is not an order: write 0"),
    ("ad_order", 3, "0, 1 or 2", "3 (int)"),
    ("ad_order", -1, "0, 1 or 2", "-1 (int)"),
    ("ad_order", None, "0, 1 or 2", "None (NoneType)"),
])
def test_every_order_refuses_what_is_not_a_plain_int_in_range(option, value, allowed, given):
    assert _refusal(**{option: value}) == f"{_WHERE}{option} must be {allowed}, got {given}"


def test_a_name_that_is_not_a_string_is_refused_under_the_default_name():
    assert _refusal(name=3) == (f"{_WHERE}name must be a non-empty string (the function's "
                                "name in the manifest), got 3 (int)")


def test_valid_flags_and_orders_are_kept_as_given():
    spec = exportable(SPEC, vmap=True, skip_jitting=False, export_with_kwargs=True,
                      tiered=None, vjp_order=2, ad_order=2)(_twice).export_spec
    assert (spec.vmap, spec.skip_jitting, spec.export_with_kwargs, spec.tiered) == \
        (True, False, True, None)
    assert (spec.vjp_order, spec.ad_order) == (2, 2)
    assert exportable(SPEC, tiered=False)(_twice).export_spec.tiered is False


@pytest.mark.parametrize(("value", "given"), [
    ("x86_64-avx2", "'x86_64-avx2' (str)"), (["avx3"], "['avx3'] (list)"), ([], "[] (list)"),
    (1, "1 (int)"),
])
def test_executables_takes_none_a_bool_or_known_targets(value, given):
    message = _refusal(executables=value)
    assert message == (f"{_WHERE}executables must be None, True, False or a non-empty list of "
                       f"'x86_64-avx2', 'x86_64-avx512', 'aarch64', 'x86-64-v3', 'x86-64-v4' "
                       f"or TPU hosts such as 'v5e', got {given}")


def test_executable_options_are_kept():
    spec = exportable(SPEC, executables=["x86_64-avx2", "x86_64-avx2"],
                      executable_sizes={"n": [4, 8]})(_twice).export_spec
    assert spec.executables == ("x86_64-avx2",) and spec.executable_sizes == {"n": (4, 8)}
    assert exportable(SPEC)(_twice).export_spec.executables is None
    assert exportable(SPEC, executables=False)(_twice).export_spec.executables is False
    # TPU hosts by their keys, beside CPU targets: compiled by the build without a TPU
    assert exportable(SPEC, executables=["x86-64-v3", "v5e", "v5e:4", "tpu:v5e:1x1"])(
        _twice).export_spec.executables == ("x86_64-avx2", "tpu:v5e:1x1", "tpu:v5e:2x2")


def test_executable_sizes_are_checked_like_concrete_under_their_own_name():
    message = _refusal(executable_sizes={"m": [4]})
    assert "executable_sizes names 'm', which is not a dimension symbol" in message
    assert "must be ints >= 1" in _refusal(executable_sizes={"n": [0]})


def test_every_keyword_option_reaches_its_field_of_the_options_record():
    """``exportable`` builds ``SpecOptions`` by position: its keyword options (the name aside)
    are the record's fields in the same order, and each value lands in its own field."""
    import inspect

    from hatch_jaxexport.formats.export_spec import SpecOptions

    keywords = [name for name, param in inspect.signature(exportable).parameters.items()
                if param.kind == param.KEYWORD_ONLY and name != "name"]
    assert keywords == list(SpecOptions._fields)
    fn = exportable(SPEC, platforms=["cpu", "cuda"], vjp_order=1, ad_order=2, vmap=True,
                    tiered=False, static=None, executables=False, x64=False)(_twice)
    spec = fn.export_spec
    assert (spec.platforms, spec.vjp_order, spec.ad_order, spec.vmap, spec.tiered,
            spec.executables, spec.jax_config["jax_enable_x64"]) == \
        (("cpu", "cuda"), 1, 2, True, False, False, False)
