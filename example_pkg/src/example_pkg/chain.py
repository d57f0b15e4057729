"""A trace-heavy function: a long elementwise chain written as a Python loop.

Tracing runs the loop body ``STEPS`` times and lowering emits every operation, while XLA fuses
the whole chain into a few kernels: tracing and lowering are close to half of a cold first
call from source. An installed wheel skips both.
"""

from __future__ import annotations

import jax.numpy as jnp

from hatch_jaxexport import exportable

#: Number of steps the Python loop unrolls (the chain measured in the tiered-compilation issue).
STEPS = 400


@exportable({"x": ("batch, n", "float32")}, executable_sizes={"batch": [8], "n": [16]})
def elementwise_chain(x):
    """``STEPS`` unrolled steps of ``x = sin(x) * 1.01 + 0.1 * cos(x)``."""
    for _ in range(STEPS):
        x = jnp.sin(x) * 1.01 + 0.1 * jnp.cos(x)
    return x
