"""A float64 computation (compounding a long series of small returns) and a float32 one with a
scalar argument (discounting), which any kind of scalar serves: a Python float, a numpy scalar,
a 0-d array or a jax array (``benchmarks/executables.py``'s argument-kind rows)."""

from __future__ import annotations

import jax.numpy as jnp

from hatch_jaxexport import exportable


@exportable({"returns": ("n", "float64")}, executable_sizes={"n": [10_000]})
def compound_growth(returns):
    """Growth factors ``prod(1 + r[:t+1])`` for every t, in float64 (with ``jax_enable_x64``).

    Summing ``log1p`` in float64 keeps long series exact to ~1e-15, where float32 drifts.
    """
    return jnp.exp(jnp.cumsum(jnp.log1p(returns)))


@exportable({"cashflows": ("n", "float32"), "rate": ("", "float32")},
            executable_sizes={"n": [12]})
def discounted_sum(cashflows, rate):
    """The present value ``sum(c[t] / (1 + rate) ** t)`` of a series of cash flows."""
    periods = jnp.arange(cashflows.shape[0], dtype=cashflows.dtype)
    return jnp.sum(cashflows / (1 + rate) ** periods)
