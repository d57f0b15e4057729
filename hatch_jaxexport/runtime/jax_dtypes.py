"""The jax dtype of a spec's dtype name, typed PRNG keys included, and a value's dtype name.

A spec stores dtypes by canonical name (``float32``, ``bfloat16``, ``key<fry>``). numpy knows no
key dtype (``jnp.dtype("key<fry>")`` raises numpy's ``Cannot interpret 'key<fry>' as a data
type``), so every place that turns a leaf's name back into a dtype, at build and at call time,
goes through ``jax_dtype``, and every place that names a value's dtype through ``dtype_text``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from hatch_jaxexport.formats.dtype_names import is_key_dtype, key_data_words, key_impl
from hatch_jaxexport.formats.spec import numpy_dtype


@functools.cache
def jax_dtype(name: str) -> Any:
    """The dtype jax takes for a canonical dtype name: a numpy dtype, or jax's key dtype for a
    typed PRNG key name (read from an abstract key: nothing runs on a device)."""
    if is_key_dtype(name):
        import jax

        impl = key_impl(name)
        return jax.eval_shape(lambda: jax.random.key(0, impl=impl)).dtype
    return numpy_dtype(name)


def is_key(dtype: Any) -> bool:
    """Whether a dtype object is a typed PRNG key's (without numpy, which cannot read one)."""
    if dtype is None or isinstance(dtype, np.dtype):
        return False
    import jax

    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:
        return False


def dtype_text(dtype: Any) -> str:
    """A dtype's name as messages and signatures show it: numpy's name, or jax's for a key
    (``key<fry>``), never numpy's ``TypeError`` for a dtype it cannot read."""
    if is_key(dtype):
        return str(dtype)
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def has_keys(avals: Any) -> bool:
    """Whether any of an artifact's avals is a typed key: a compiled executable's or a
    concrete-size module's record names dtypes numpy must read back, which a key's cannot."""
    return any(is_key(a.dtype) for a in avals)


def leaf_value(shape: tuple[int, ...], name: str, words: Any = None) -> Any:
    """A concrete value for a leaf of dtype ``name`` (warm-up, the release check's inputs):
    zeros, or typed keys made from ``words`` (``uint32`` data; zeros when not given)."""
    if not is_key_dtype(name):
        return np.zeros(shape, numpy_dtype(name)) if words is None else \
            np.asarray(words).astype(numpy_dtype(name))
    import jax

    data = np.zeros((*shape, key_data_words(name)), np.uint32) if words is None else \
        np.asarray(words).astype(np.uint32)
    return jax.random.wrap_key_data(data, impl=key_impl(name))


def plain(value: Any) -> Any:
    """A value numpy can read: a typed key's ``uint32`` data, anything else as it is (for
    comparing outputs, where two keys are equal when their data is)."""
    if is_key(getattr(value, "dtype", None)):
        import jax

        return jax.random.key_data(value)
    return value


__all__ = ["dtype_text", "has_keys", "is_key", "jax_dtype", "leaf_value", "plain"]
