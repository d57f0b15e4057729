"""A compile-heavy function: a deep residual stack written as a Python loop.

Tracing runs the loop body ``DEPTH`` times and stages every operation; lowering then emits all
of them, and XLA compiles a kernel per block (most of a cold first call). An installed wheel
skips tracing and lowering: it runs the baked artifact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from hatch_jaxexport import exportable

#: Number of residual blocks the Python loop unrolls.
DEPTH = 96
WIDTH = 16

_rng = np.random.default_rng(1234)
#: Fixed weights, closed over: they are baked into the artifact as constants.
WEIGHTS = (_rng.standard_normal((DEPTH, WIDTH, WIDTH)) / (2 * np.sqrt(WIDTH))).astype(np.float32)
BIASES = (_rng.standard_normal((DEPTH, WIDTH)) / 10).astype(np.float32)


@exportable({"x": ("batch, 16", "float32")}, concrete={"batch": [8]},
            executable_sizes={"batch": [8, 64]})
def deep_stack(x):
    """``DEPTH`` residual blocks (dense, tanh, RMS norm), unrolled by Python."""
    for i in range(DEPTH):
        x = x + jnp.tanh(x @ WEIGHTS[i] + BIASES[i])
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    return x
