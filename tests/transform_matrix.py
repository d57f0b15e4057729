"""Runs every transformation of the ``jxe_ad`` functions, loaded vs source; prints JSON results.

Run in a fresh process with ``HATCH_JAXEXPORT_STRICT=1`` (any fallback to the source raises) by
``tests/unit/runtime/artifacts/test_transforms.py``. Each case computes the transformation of the
loaded function with tracing of the source forbidden (a counter that must not move), then the
same transformation of the source, and compares.
"""

from __future__ import annotations

import json
import sys
import traceback

import jax
import jax.numpy as jnp
import numpy as np

X = jnp.linspace(0.1, 1.0, 4, dtype=jnp.float32)
XS = jnp.stack([X, 2 * X, 3 * X])
P = {"w": jnp.full((4, 3), 0.3, jnp.float32), "b": jnp.arange(3, dtype=jnp.float32)}
S = jnp.float32(2.0)


def _sum(tree):
    return sum(jnp.sum(leaf) for leaf in jax.tree_util.tree_leaves(tree))


def cases() -> list[str]:
    """Every case name, without importing the functions."""
    return [f"{name}-{t}-{mode}" for name, kind in FUNCTIONS.items()
            for t in transformations(kind) for mode in ("eager", "jit")]


def transformations(kind: str):
    """name -> (lambda f: result) for one function kind."""
    if kind == "array":
        return {
            "call": lambda f: f(X),
            "grad": lambda f: jax.grad(lambda x: _sum(f(x)))(X),
            "value_and_grad": lambda f: jax.value_and_grad(lambda x: _sum(f(x)))(X),
            "vjp": lambda f: jax.vjp(f, X)[1](X),
            "jvp": lambda f: jax.jvp(f, (X,), (2 * X,)),
            "linearize": lambda f: jax.linearize(f, X)[1](X),
            "jacfwd": lambda f: jax.jacfwd(f)(X),
            "jacrev": lambda f: jax.jacrev(f)(X),
            "hessian": lambda f: jax.hessian(lambda x: _sum(f(x)))(X),
            "jacfwd_of_jacrev": lambda f: jax.jacfwd(jax.jacrev(f))(X),
            "vmap": lambda f: jax.vmap(f)(XS),
            "vmap_in_axes_1": lambda f: jax.vmap(f, in_axes=1, out_axes=1)(XS.T),
            "vmap_nested": lambda f: jax.vmap(jax.vmap(f))(jnp.stack([XS, XS])),
            "vmap_of_grad": lambda f: jax.vmap(jax.grad(lambda x: _sum(f(x))))(XS),
            "grad_of_vmap": lambda f: jax.grad(lambda xs: _sum(jax.vmap(f)(xs)))(XS),
            "checkpoint": lambda f: jax.grad(lambda x: _sum(jax.checkpoint(f)(x)))(X),
            "scan_body": lambda f: jax.lax.scan(lambda c, x: (c + _sum(f(x)), f(x)), 0.0, XS),
            "map_body": lambda f: jax.lax.map(f, XS),
        }
    if kind == "pytree":
        return {
            "call": lambda f: f(P, X),
            "grad": lambda f: jax.grad(lambda p: f(p, X)["energy"])(P),
            "grad_both": lambda f: jax.grad(lambda p, x: f(p, x)["energy"], argnums=(0, 1))(P, X),
            "jvp": lambda f: jax.jvp(f, (P, X), (P, X)),
            "jacfwd": lambda f: jax.jacfwd(f, argnums=(0, 1))(P, X),
            "jacrev": lambda f: jax.jacrev(f, argnums=(0, 1))(P, X),
            "hessian": lambda f: jax.hessian(lambda x: f(P, x)["energy"])(X),
            "vmap_params_fixed": lambda f: jax.vmap(f, in_axes=(None, 0))(P, XS),
            "vmap_of_grad": lambda f: jax.vmap(jax.grad(lambda x: f(P, x)["energy"]))(XS),
            "grad_of_vmap": lambda f: jax.grad(
                lambda p: _sum(jax.vmap(f, in_axes=(None, 0))(p, XS)))(P),
        }
    return {
        "call": lambda f: f(X, 2 * X, S),
        "grad": lambda f: jax.grad(lambda x, y, s: _sum(f(x, y, s)), argnums=(0, 1, 2))(X, X, S),
        "jvp": lambda f: jax.jvp(f, (X, X, S), (X, 2 * X, S)),
        "jacfwd": lambda f: jax.jacfwd(f, argnums=(0, 1))(X, X, S),
        "hessian": lambda f: jax.hessian(lambda y: _sum(f(X, y, S)))(X),
        "vmap_mixed_axes": lambda f: jax.vmap(f, in_axes=(0, None, None))(XS, X, S),
        "vmap_nested": lambda f: jax.vmap(jax.vmap(f, in_axes=(0, None, None)),
                                          in_axes=(None, 0, None))(XS, XS, S),
        "vmap_of_grad": lambda f: jax.vmap(jax.grad(lambda x: _sum(f(x, X, S))))(XS),
    }


FUNCTIONS = {  # name in jxe_ad -> kind
    "array2": "array", "array2_nobatch": "array",
    "pytree2": "pytree", "pytree2_nobatch": "pytree",
    "multi2": "multi", "multi2_nobatch": "multi",
}


def close(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.shape(x) == np.shape(y) and np.allclose(np.asarray(x), np.asarray(y), rtol=2e-5,
                                                    atol=2e-5) for x, y in zip(la, lb, strict=True))


def main() -> None:
    import jxe_ad as m

    results = {}
    for name, kind in FUNCTIONS.items():
        loaded = getattr(m, name)
        source = loaded.__wrapped__
        for tname, run in transformations(kind).items():
            for mode in ("eager", "jit"):
                case = f"{name}-{tname}-{mode}"
                wrap = (lambda g: g) if mode == "eager" else jax.jit
                try:
                    before = m.TRACES["count"]
                    got = wrap(lambda run=run, f=loaded: run(f))()
                    traced = m.TRACES["count"] - before
                    want = wrap(lambda run=run, f=source: run(f))()
                    results[case] = {"ok": close(got, want) and traced == 0, "traced": traced,
                                     "equal": close(got, want)}
                except Exception:
                    results[case] = {"ok": False, "error": traceback.format_exc()[-1500:]}
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
