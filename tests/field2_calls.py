"""Calls every function of the ``jxe_field2`` fixture and prints the results as JSON.

Run by ``tests/integration/test_field2.py`` in a fresh process of the venv where the built wheel
is installed: ``python field2_calls.py artifact`` calls the loaded functions (with
``HATCH_JAXEXPORT_STRICT=1`` any fallback to the source raises), ``... source`` the functions'
Python bodies (``__wrapped__``) under ``jax.jit``. Each case records its result's leaves and
dtypes, or its error; ``traces`` is how often an exported body ran.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jxe_field2 as pkg
import numpy as np
from flax import nnx
from jax.experimental import sparse

MODE = sys.argv[1]
X = jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32)


def fn(name: str) -> Callable[..., Any]:
    """The loaded function, or its source under ``jax.jit`` (by attribute path)."""
    target: Any = pkg
    for part in name.split("."):
        target = getattr(target, part)
    return target if MODE == "artifact" else jax.jit(target.__wrapped__)


def sampler_run() -> Any:
    """Eight MALA steps, the chain's own key fed back each time."""
    step = fn("mala_step")
    position = jnp.zeros(3, jnp.float32)
    chain = pkg.Chain(jax.random.key(0), pkg.MALA.init(position))
    rates = []
    for _ in range(8):
        chain, rate = step(chain)
        rates.append(rate)
    return chain.state, jnp.stack(rates), jax.random.key_data(chain.key)


def operator_maps() -> Any:
    if MODE == "artifact":
        op = pkg.FFTOp(8)
        return op(X), op.adjoint(op(X)), op.jacobian(X)
    apply = pkg.FFTOp.apply.__wrapped__
    adjoint = pkg.FFTOp.adjoint_apply.__wrapped__
    return apply(X), adjoint(apply(X)), jax.jacfwd(apply)(X)


def cases() -> dict[str, Callable[[], Any]]:
    key, mu, sigma = jax.random.key(1), jnp.float32(0.5), jnp.float32(2.0)
    draws = fn("normal_draws")
    params = pkg.Affine(w=jnp.asarray(np.arange(6.0).reshape(3, 2) / 6, jnp.float32),
                        b=jnp.asarray([0.1, -0.2], jnp.float32))
    inputs = jnp.asarray(np.linspace(-1, 1, 12).reshape(4, 3), jnp.float32)
    affine = fn("affine")
    matvec = fn("sparse_matvec")
    matrix = sparse.BCOO((jnp.asarray([1.0, -2.0, 0.5], jnp.float32),
                          jnp.asarray([[0, 1], [2, 3], [4, 0]], jnp.int32)), shape=(5, 4))
    vector = jnp.asarray([0.3, -0.1, 0.2, 0.4], jnp.float32)
    return {
        "blackjax-chain-fed-back": sampler_run,
        "numpyro-draws": lambda: draws(key, mu, sigma),
        "numpyro-vmap-keys": lambda: jax.vmap(draws, in_axes=(0, None, None))(
            jax.random.split(key, 3), mu, sigma),
        "numpyro-grad-mu-sigma": lambda: jax.grad(lambda m, s: draws(key, m, s).sum(),
                                                  argnums=(0, 1))(mu, sigma),
        "nnx-dropout": lambda: fn("nnx_dropout")(nnx.Rngs(0).dropout(), X),
        "chex-dataclass": lambda: affine(params, inputs),
        "chex-dataclass-grad": lambda: jax.grad(lambda p: affine(p, inputs).sum())(params),
        "operator-class": operator_maps,
        "sparse-matvec": lambda: matvec(matrix, vector),
        "sparse-matvec-grad": lambda: jax.grad(lambda v: matvec(matrix, v).sum())(vector),
    }


def leaves(value: Any) -> dict[str, Any]:
    out = jax.tree.leaves(value)
    return {"leaves": [np.asarray(a).tolist() for a in out],
            "dtypes": [str(np.asarray(a).dtype) for a in out],
            "types": sorted({type(n).__name__ for n in jax.tree.leaves(
                value, is_leaf=lambda n: n is not value and not isinstance(n, jax.Array))})}


def vmap_refusal() -> str:
    """``jax.vmap`` of a ``vjp_order``-only function: the error's message (strict mode)."""
    try:
        jax.vmap(pkg.softplus_sum)(jnp.ones((3, 4), jnp.float32))
    except Exception as err:  # the test asserts which class and what it says
        return f"{type(err).__name__}: {err}"
    return "no error"


results = {}
for name, case in cases().items():
    try:
        results[name] = leaves(case())
    except Exception as err:  # recorded: the test names the case that failed
        results[name] = {"error": f"{type(err).__name__}: {err}"}
print(json.dumps({"cases": results, "traces": pkg.TRACES["count"],
                  "vmap_refusal": vmap_refusal() if MODE == "artifact" else None}))
