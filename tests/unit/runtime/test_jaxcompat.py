"""``runtime.jaxcompat`` helpers that read jax's serialized modules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

from hatch_jaxexport.runtime.jaxcompat import module_needs_lapack, no_locations


def _serialized(fn, *args):
    """``fn`` exported as the build exports (``no_locations``: no traceback in locations, so
    no caller's name, such as this test's, is in the bytes)."""
    with no_locations():
        return export.export(jax.jit(fn), platforms=["cpu"])(*args).mlir_module_serialized


def test_a_module_is_said_to_need_lapack_only_where_it_calls_a_lapack_kernel():
    # a concrete-size artifact's record lists no custom-call targets: the bytes tell
    matrix, vector = np.eye(3, dtype=np.float32) * 2, np.ones(3, np.float32)
    assert module_needs_lapack(_serialized(jnp.linalg.solve, matrix, vector))
    assert not module_needs_lapack(_serialized(lambda x: jnp.sin(x) * 2, vector))
