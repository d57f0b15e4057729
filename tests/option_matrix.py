"""Runs every transformation of every ``jxe_options`` cell, loaded vs source; prints JSON.

Run in a fresh process with ``HATCH_JAXEXPORT_STRICT=1`` by
``tests/unit/runtime/artifacts/test_option_matrix.py``. Each case transforms the loaded
function with a trace counter that must not move, then the source, and compares; a case that
raises records the error's type and message.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

X = jnp.linspace(0.1, 1.0, 4, dtype=jnp.float32)
XS = jnp.stack([X, 2 * X, 3 * X])

TRANSFORMATIONS = {
    "call": lambda f: f(X),
    "grad": lambda f: jax.grad(lambda x: f(x)[1])(X),
    "value_and_grad": lambda f: jax.value_and_grad(lambda x: f(x)[1])(X),
    "vjp": lambda f: jax.vjp(f, X)[1]((X, jnp.float32(1.0))),
    "jacrev": lambda f: jax.jacrev(lambda x: f(x)[0])(X),
    "vmap_of_grad": lambda f: jax.vmap(jax.grad(lambda x: f(x)[1]))(XS),
    "grad_of_vmap": lambda f: jax.grad(lambda xs: jnp.sum(jax.vmap(f)(xs)[1]))(XS),
    "grad_of_grad": lambda f: jax.grad(lambda x: jnp.sum(jax.grad(lambda z: f(z)[1])(x)))(X),
    "jvp": lambda f: jax.jvp(f, (X,), (2 * X,)),
    "linearize": lambda f: jax.linearize(f, X)[1](X),
    "jacfwd": lambda f: jax.jacfwd(lambda x: f(x)[0])(X),
    "hessian": lambda f: jax.hessian(lambda x: f(x)[1])(X),
    "vmap": lambda f: jax.vmap(f)(XS),
}
MODES = ("eager", "jit")


def close(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.shape(x) == np.shape(y) and np.allclose(np.asarray(x), np.asarray(y), rtol=2e-5,
                                                    atol=2e-5) for x, y in zip(la, lb, strict=True))


def run_case(m, loaded, transform, mode: str) -> dict:
    wrap = (lambda g: g) if mode == "eager" else jax.jit
    before = m.TRACES["count"]
    try:
        got = wrap(lambda: transform(loaded))()
    except Exception as err:  # the documented error, checked by the test
        return {"error": f"{type(err).__name__}: {err}"[:600],
                "traced": m.TRACES["count"] - before}
    traced = m.TRACES["count"] - before
    want = wrap(lambda: transform(loaded.__wrapped__))()
    return {"traced": traced, "equal": close(got, want)}


def main() -> None:
    import jxe_options as m

    results = {}
    for v, a, b in m.CELLS:
        name = f"f_v{v}_a{a}_m{b}"
        for tname, transform in TRANSFORMATIONS.items():
            for mode in MODES:
                results[f"{name}-{tname}-{mode}"] = run_case(m, getattr(m, name), transform,
                                                             mode)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
