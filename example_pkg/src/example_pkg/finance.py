"""A float64 computation: compounding a long series of small returns."""

from __future__ import annotations

import jax.numpy as jnp

from hatch_jaxexport import exportable


@exportable({"returns": ("n", "float64")})
def compound_growth(returns):
    """Growth factors ``prod(1 + r[:t+1])`` for every t, in float64 (with ``jax_enable_x64``).

    Summing ``log1p`` in float64 keeps long series exact to ~1e-15, where float32 drifts.
    """
    return jnp.exp(jnp.cumsum(jnp.log1p(returns)))
