"""A linear solve with a symbolic size, for one or several right-hand sides."""

from __future__ import annotations

import jax.numpy as jnp

from hatch_jaxexport import exportable


@exportable("example_pkg.solve",
            {"a": ("n, n", "float32"), "b": ("n,", "float32")},      # one right-hand side
            {"a": ("n, n", "float32"), "b": ("n, k", "float32")},    # k right-hand sides
            executable_sizes={"n": [6, 16], "k": [3]})  # precompiled, when the build asks
def solve(a, b):
    """Solve ``a @ x = b`` for x (LU with partial pivoting), any n."""
    return jnp.linalg.solve(a, b)
