"""Dtype names in specs: which are accepted, and what to suggest for the rest (pure, no jax).

A spec's dtype must say its size. numpy reads ``"float"`` and Python's ``float`` as float64
while jax's default float is float32, so such a spec silently became a 64-bit structure whose
call then failed with the x64 error; a misspelt name gave no hint. ``parse_dtype`` therefore
accepts only canonical names (``"float32"``), numpy's sized codes (``"f4"``) and dtype objects
(``np.float32``, ``jnp.float64``, ``np.dtype("int8")``), and refuses anything else with the
closest valid names.

Typed PRNG keys (``jax.random.key(0).dtype``, jax's ``key<fry>``) are leaves too: jax.export takes
them as arguments, and a key is not its ``uint32`` data (``jax.random.key_data``). Their names
are plain text here (``KEY_DTYPES``), so reading a spec never imports jax; a key dtype object is
read by its ``str``.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any

import numpy as np

#: The numpy dtypes jax can export, by canonical name.
NUMPY_DTYPE_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                     "uint64", "float16", "float32", "float64", "complex64", "complex128")

#: Typed PRNG key dtypes jax.export can serialize, by jax's name (``str(key.dtype)``): the
#: PRNG implementation (``jax.random.key(seed, impl=...)``) and the ``uint32`` words of one key's
#: data (the last axis of ``jax.random.key_data``, and of a legacy ``uint32`` key).
KEY_DTYPES: dict[str, tuple[str, int]] = {
    "key<fry>": ("threefry2x32", 2), "key<rbg>": ("rbg", 4), "key<urbg>": ("unsafe_rbg", 4)}
#: jax's other key dtypes: jax.export has no serialization for them (``KeyError`` at serialize).
UNSERIALIZABLE_KEY_DTYPES = {"key<phx2>": "philox2x32", "key<phx4>": "philox4x32",
                             "key<fry4>": "threefry4x32"}
#: ``key<impl>`` with the implementation's own name, as ``jax.random.key(0, impl=impl)`` takes it.
_KEY_ALIASES = {f"key<{impl}>": name for name, (impl, _) in KEY_DTYPES.items()}


def is_key_dtype(name: str) -> bool:
    """Whether a canonical dtype name is a typed PRNG key's (``key<fry>``)."""
    return name in KEY_DTYPES


def key_impl(name: str) -> str:
    """The PRNG implementation of a key dtype name (``threefry2x32`` for ``key<fry>``)."""
    return KEY_DTYPES[name][0]


def key_data_words(name: str) -> int:
    """The ``uint32`` words of one key of this dtype (its legacy form's last axis)."""
    return KEY_DTYPES[name][1]


def _key_name(raw: str) -> str:
    """The canonical name of a key dtype's name, or ``TypeError`` naming the ones jax exports."""
    name = _KEY_ALIASES.get(raw, raw)
    if name in KEY_DTYPES:
        return name
    known = ", ".join(f"{n} ({impl})" for n, (impl, _) in KEY_DTYPES.items())
    impl = UNSERIALIZABLE_KEY_DTYPES.get(raw) or next(
        (i for i in UNSERIALIZABLE_KEY_DTYPES.values() if raw == f"key<{i}>"), None)
    if impl is not None:
        raise TypeError(f"{raw!r} is a typed PRNG key of impl {impl}, which jax.export cannot "
                        f"serialize; it serializes {known}")
    raise TypeError(f"{raw!r} is not a key dtype name; typed PRNG keys are {known}")


def _is_key_dtype_object(raw: Any) -> bool:
    """A jax key dtype object (``jax.random.key(0).dtype``), read without importing jax: jax's
    extended dtypes are not numpy dtypes, and their ``str`` is ``key<...>``."""
    return (not isinstance(raw, np.dtype | type) and type(raw).__module__.startswith("jax")
            and str(raw).startswith("key<"))


#: Names that do not say their size: each means two dtypes to someone, so neither is guessed.
#: (numpy's reading of them is given in the message: it is what the old behaviour was.)
AMBIGUOUS_DTYPE_NAMES: dict[str, tuple[str, str]] = {
    "float": ("float32", "float64"), "int": ("int32", "int64"), "uint": ("uint32", "uint64"),
    "complex": ("complex64", "complex128"), "long": ("int32", "int64"),
    "ulong": ("uint32", "uint64"), "int_": ("int32", "int64"), "intp": ("int32", "int64"),
    "uintp": ("uint32", "uint64"), "float_": ("float32", "float64"),
    "complex_": ("complex64", "complex128"), "cfloat": ("complex64", "complex128"),
}

#: Python's number types, read by numpy as 64-bit ones; refused like their names.
_PYTHON_TYPES: dict[type, str] = {float: "float", int: "int", complex: "complex"}

#: numpy's sized codes: a kind letter and the size in bytes (``f4``, ``i8``, ``c8``, ``b1``).
_SIZED_CODE = r"[<=|]?[biufc]\d{1,2}"
#: A single dtype name or code (numpy would read a text with commas as a structured dtype).
_SIMPLE_NAME = r"[<>=|]?[\w?]+"  # (patterns compile on first use: not at import)


@functools.cache
def accepted_dtype_names() -> tuple[str, ...]:
    """Every canonical dtype name a spec may use: numpy's and ml_dtypes' (``bfloat16``,
    ``float8_e4m3fn``, ``int4``...), as installed (ml_dtypes comes with jax)."""
    try:
        import ml_dtypes
    except ImportError:  # only the error messages lose the ml_dtypes names
        return NUMPY_DTYPE_NAMES
    extra = []
    for name in sorted(dir(ml_dtypes)):
        try:
            if not name.startswith("_") and np.dtype(getattr(ml_dtypes, name)).name == name:
                extra.append(name)
        except TypeError:  # finfo, iinfo, functions
            continue
    return NUMPY_DTYPE_NAMES + tuple(extra)


def _or_list(names: tuple[str, ...] | list[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _ambiguous(label: str, numpy_name: str, choices: tuple[str, str]) -> str:
    return (f"{label} does not say its size (numpy reads it as {numpy_name}, jax's default is "
            f"the 32-bit one); did you mean {_or_list(choices)}?")


def _unknown_name(raw: str) -> str:
    import difflib

    wanted = raw.lower().strip()
    names = accepted_dtype_names()
    if wanted in names:  # "Float32", " float32"
        return f"{raw!r} is not a dtype name; did you mean {wanted!r}?"
    # the common names first, so that 'flaot32' does not also suggest 'float6_e3m2fn'
    close = (difflib.get_close_matches(wanted, (*NUMPY_DTYPE_NAMES, "bfloat16"), n=3, cutoff=0.6)
             or difflib.get_close_matches(wanted, names, n=3, cutoff=0.6))
    if close:
        return f"{raw!r} is not a dtype name; did you mean {_or_list(close)}?"
    return (f"{raw!r} is not a dtype name (names say their size: "
            f"{', '.join(NUMPY_DTYPE_NAMES)}, bfloat16, float8_e4m3fn, ...)")


def _numpy_reading(raw: str) -> np.dtype | None:
    """numpy's dtype of a single name or code (not a structured spec such as ``"a, b"``),
    without numpy's deprecation warnings for old codes; ``None`` if numpy knows no such name."""
    if not re.fullmatch(_SIMPLE_NAME, raw):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return np.dtype(raw)
        except TypeError:
            return None


def _dtype_of_name(raw: str) -> np.dtype:
    """The dtype of an accepted string, or ``TypeError`` with what to write instead."""
    if raw in AMBIGUOUS_DTYPE_NAMES:
        numpy_dtype = _numpy_reading(raw)
        numpy_name = "a 64-bit type" if numpy_dtype is None else numpy_dtype.name
        raise TypeError(_ambiguous(repr(raw), numpy_name, AMBIGUOUS_DTYPE_NAMES[raw]))
    if raw in NUMPY_DTYPE_NAMES:  # the common case, without looking at ml_dtypes
        return np.dtype(raw)
    if raw in accepted_dtype_names():
        return np.dtype(_ml_dtype(raw))
    dtype = _numpy_reading(raw)
    if dtype is None or dtype.kind not in "biufc":  # unknown, or "str", "U5", "O"
        raise TypeError(_unknown_name(raw))
    if dtype.name not in accepted_dtype_names():
        raise TypeError(f"{raw!r} is numpy's {dtype.name}, which jax cannot export")
    if not re.fullmatch(_SIZED_CODE, raw):  # numpy's aliases: "double", "single", "b", "l"...
        raise TypeError(f"{raw!r} is numpy's alias of {dtype.name}: write {dtype.name!r} "
                        "(a dtype name says its size)")
    return dtype


def _ml_dtype(name: str) -> Any:
    import ml_dtypes

    return getattr(ml_dtypes, name)


def dtype_name(raw: Any) -> str:
    """The canonical name of a dtype given as a name, a numpy or jax dtype or scalar type, or
    an array; ``TypeError`` with the closest valid names otherwise."""
    if isinstance(raw, str) and raw.startswith("key<"):
        return _key_name(raw)
    if _is_key_dtype_object(raw):
        return _key_name(str(raw))
    if isinstance(raw, str):
        dtype = _dtype_of_name(raw)
    elif isinstance(raw, type) and raw in _PYTHON_TYPES:
        word = _PYTHON_TYPES[raw]
        raise TypeError(_ambiguous(f"Python's {word}", np.dtype(raw).name,
                                  AMBIGUOUS_DTYPE_NAMES[word]))
    elif isinstance(getattr(raw, "dtype", None), np.dtype):  # jnp.float32, arrays
        dtype = raw.dtype
    elif isinstance(raw, np.dtype) or (isinstance(raw, type) and
                                       (issubclass(raw, np.generic) or raw is bool)):
        dtype = np.dtype(raw)
    else:
        raise TypeError(f"{raw!r} ({type(raw).__name__}) is not a dtype: give a name such as "
                        "'float32' or a numpy/jax dtype such as jnp.float32 (a typed PRNG key: "
                        "'key<fry>' or jax.random.key(0).dtype)")
    if dtype.name not in NUMPY_DTYPE_NAMES and dtype.name not in accepted_dtype_names():
        raise TypeError(f"{raw!r} is {dtype.name}, which jax cannot export (it takes "
                        f"{', '.join(NUMPY_DTYPE_NAMES)}, bfloat16, float8_e4m3fn, ...)")
    return dtype.name


def is_dtype_like(value: Any) -> bool:
    """Whether a value was probably meant as a dtype (for messages about misplaced ones)."""
    if _is_key_dtype_object(value):
        return True
    if isinstance(value, str):
        if value.startswith("key<") and value.endswith(">"):
            return True
        if value in AMBIGUOUS_DTYPE_NAMES or value in accepted_dtype_names():
            return True
        # numpy's aliases ("double", "f4"); not its one-letter codes, which read as symbols
        numpy_dtype = _numpy_reading(value) if len(value) > 1 else None
        return numpy_dtype is not None and numpy_dtype.kind in "biufc"
    if isinstance(value, type):
        return value in _PYTHON_TYPES or value is bool or issubclass(value, np.generic) or \
            isinstance(getattr(value, "dtype", None), np.dtype)
    return isinstance(value, np.dtype)


__all__ = ["AMBIGUOUS_DTYPE_NAMES", "KEY_DTYPES", "NUMPY_DTYPE_NAMES",
           "UNSERIALIZABLE_KEY_DTYPES", "accepted_dtype_names", "dtype_name", "is_dtype_like",
           "is_key_dtype", "key_data_words", "key_impl"]
