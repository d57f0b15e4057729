"""Dtypes in specs: names that say their size and dtype objects are accepted; ambiguous aliases,
Python's number types and misspellings are refused with the closest valid names."""

from __future__ import annotations

import re

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from hatch_jaxexport import SpecError, exportable
from hatch_jaxexport.formats.dtype_names import accepted_dtype_names, dtype_name, is_dtype_like


def _scale(x):
    return x * 2


def _refusal(dtype) -> str:
    """The SpecError text of ``@exportable`` with ``dtype`` as the only leaf's dtype."""
    with pytest.raises(SpecError) as caught:
        exportable({"x": ("n", dtype)})(_scale)
    return str(caught.value)


@pytest.mark.parametrize(("dtype", "name"), [
    # the econpizza cacheable_function_with_export form, and every other dtype object
    (jnp.float64, "float64"), (jnp.float32, "float32"), (jnp.int32, "int32"),
    (jnp.bfloat16, "bfloat16"), (np.float32, "float32"), (np.float64, "float64"),
    (np.dtype("float32"), "float32"), (np.dtype("int8"), "int8"), (jnp.dtype("complex64"),
                                                                  "complex64"),
    (ml_dtypes.float8_e4m3fn, "float8_e4m3fn"),
    # names that say their size, numpy's sized codes, and Python's bool (one meaning only)
    ("float32", "float32"), ("uint8", "uint8"), ("bool", "bool"), ("bfloat16", "bfloat16"),
    ("f4", "float32"), ("i8", "int64"), ("c8", "complex64"), (bool, "bool"),
])
def test_dtype_objects_and_sized_names_are_accepted(dtype, name):
    wrapped = exportable({"x": ("n", dtype)})(_scale)
    assert wrapped.export_spec.structures[0].args["x"].dtype == name


@pytest.mark.parametrize(("dtype", "said", "suggested"), [
    ("float", "'float' does not say its size", "did you mean 'float32' or 'float64'?"),
    ("int", "'int' does not say its size", "did you mean 'int32' or 'int64'?"),
    ("complex", "'complex' does not say its size", "did you mean 'complex64' or 'complex128'?"),
    (float, "Python's float does not say its size", "did you mean 'float32' or 'float64'?"),
    (int, "Python's int does not say its size", "did you mean 'int32' or 'int64'?"),
    (complex, "Python's complex does not say its size",
     "did you mean 'complex64' or 'complex128'?"),
])
def test_ambiguous_dtypes_are_refused_with_both_sizes(dtype, said, suggested):
    message = _refusal(dtype)
    assert message.startswith(f"@exportable spec of {__name__}:_scale, structure 0, "
                              "argument 'x': bad dtype: ")
    assert said in message
    assert "numpy reads it as" in message  # what the old silent behaviour was
    assert message.endswith(suggested)


@pytest.mark.parametrize(("dtype", "expected"), [
    ("double", "'double' is numpy's alias of float64: write 'float64'"),
    ("single", "'single' is numpy's alias of float32: write 'float32'"),
    ("b", "'b' is numpy's alias of int8: write 'int8'"),
    ("bool_", "'bool_' is numpy's alias of bool: write 'bool'"),
    ("float128", "'float128' is numpy's float128, which jax cannot export"),
])
def test_numpy_aliases_are_refused_with_the_sized_name(dtype, expected):
    assert f"argument 'x': bad dtype: {expected}" in _refusal(dtype)


@pytest.mark.parametrize(("dtype", "suggested"), [
    ("flaot32", "did you mean 'float32'?"),
    ("Float32", "did you mean 'float32'?"),
    ("bfloat61", "did you mean 'bfloat16'"),
    ("unit8", "did you mean 'uint8'"),
])
def test_misspelt_dtypes_get_the_closest_names(dtype, suggested):
    message = _refusal(dtype)
    assert f"bad dtype: {dtype!r} is not a dtype name; {suggested}" in message


def test_a_name_far_from_any_dtype_lists_the_names():
    message = _refusal("quaternion")
    assert "'quaternion' is not a dtype name (names say their size: bool, int8," in message
    assert "float32" in message and "bfloat16" in message


@pytest.mark.parametrize(("dtype", "shown"), [(object, "<class 'object'> (type)"),
                                             (3, "3 (int)")])
def test_non_dtypes_say_what_was_given(dtype, shown):
    assert f"bad dtype: {shown} is not a dtype: give a name such as 'float32'" in \
        _refusal(dtype)


def test_accepted_names_include_numpy_and_ml_dtypes():
    names = accepted_dtype_names()
    assert {"bool", "int8", "float32", "float64", "complex128", "bfloat16",
            "float8_e4m3fn"} <= set(names)
    assert "float" not in names and "void" not in names
    assert all(dtype_name(name) == name for name in names)


def test_dtype_likeness_ignores_one_letter_codes_that_read_as_symbols():
    assert is_dtype_like("float") and is_dtype_like("f4") and is_dtype_like(jnp.float32)
    assert not is_dtype_like("n") and not is_dtype_like("b") and not is_dtype_like("a, b")
    assert re.fullmatch(r"float\d+", dtype_name(np.zeros(2, np.float32)))
