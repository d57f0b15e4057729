"""Calls every function of the ``jxe_ecosystem`` fixture and prints the results as JSON.

Run by ``tests/integration/test_ecosystem.py`` in a fresh process of the venv where the built
wheel is installed: ``python ecosystem_calls.py artifact`` calls the loaded functions (with
``HATCH_JAXEXPORT_STRICT=1`` any fallback to the source raises), ``... source`` calls the
functions' Python bodies (``__wrapped__``) in the same way. ``... x64`` runs only the cases of
``double_precision`` (whose import turns ``jax_enable_x64`` on), from the artifacts and then from
the source, so the float32 cases run in processes that never import it. Each case records its
result's leaves, dtypes and node types, or its error; ``traces`` is how often an exported body
ran.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

RNG = np.random.default_rng(0)
X = jnp.asarray(RNG.standard_normal((5, 3)), jnp.float32)
Y = jnp.asarray(RNG.standard_normal((5, 2)), jnp.float32)
Y0 = jnp.asarray([1.0, 0.5, -0.3], jnp.float32)
RATE = jnp.asarray([0.4, 1.0, 2.0], jnp.float32)
Y0S = jnp.stack([Y0, 2 * Y0, -Y0, 0.5 * Y0])
RATES = jnp.stack([RATE, 0.5 * RATE, 2 * RATE, RATE + 0.1])


def _flax_cases(fn: Callable[[str], Any], models: Any) -> dict[str, Callable[[], Any]]:
    cases: dict[str, Callable[[], Any]] = {}
    for kind in ("linen", "nnx"):
        params = getattr(models, f"{kind}_init")(0)
        forward, loss = fn(f"flax_models.{kind}_forward"), fn(f"flax_models.{kind}_loss")
        cases[f"{kind}-forward"] = lambda f=forward, p=params: f(p, X)
        cases[f"{kind}-loss"] = lambda f=loss, p=params: f(p, X, Y)
        cases[f"{kind}-grad"] = lambda f=loss, p=params: jax.grad(f)(p, X, Y)
        cases[f"{kind}-grad-jit"] = lambda f=loss, p=params: jax.jit(jax.grad(f))(p, X, Y)
        cases[f"{kind}-value_and_grad"] = lambda f=loss, p=params: jax.value_and_grad(f)(p, X, Y)
    return cases


def _eqx_cases(fn: Callable[[str], Any], eqx_models: Any) -> dict[str, Callable[[], Any]]:
    model = eqx_models.Affine(jnp.asarray(RNG.standard_normal((2, 3)), jnp.float32),
                              jnp.asarray([0.1, -0.2], jnp.float32))
    apply, step, make = (fn(f"eqx_models.{name}")
                         for name in ("eqx_apply", "eqx_sgd_step", "eqx_make_linear"))

    def three_steps() -> Any:
        current = model
        for _ in range(3):
            current = step(current, X, Y)
        return current

    def linear_out() -> Any:
        linear = make(model.weight, model.bias)
        return {"module": linear, "static": [linear.in_features, linear.out_features,
                                             linear.use_bias], "called": linear(X[0])}

    import equinox as eqx

    linear = eqx.tree_at(lambda m: (m.weight, m.bias),
                         eqx.nn.Linear(3, 2, key=jax.random.key(1)), (model.weight, model.bias))
    linear_loss = fn("eqx_models.eqx_linear_loss")
    return {"eqx-module-argument": lambda: apply(model, X),
            "eqx-static-fields-argument": lambda: linear_loss(linear, X),
            "eqx-static-fields-argument-grad": lambda: jax.grad(linear_loss)(linear, X),
            "eqx-module-argument-jit": lambda: jax.jit(apply)(model, X),
            "eqx-module-output-fed-back": three_steps,
            "eqx-static-fields-output": linear_out}


def _ode_cases(fn: Callable[[str], Any]) -> dict[str, Callable[[], Any]]:
    solve = fn("ode.solve")

    def total(y0: Any, rate: Any) -> Any:
        return jnp.sum(solve(y0, rate) ** 2)

    transforms = {
        "value": lambda: solve(Y0, RATE),
        "grad": lambda: jax.grad(total, argnums=(0, 1))(Y0, RATE),
        "vmap-all-batched": lambda: jax.vmap(solve)(Y0S, RATES),
        "vmap-rate-shared": lambda: jax.vmap(solve, in_axes=(0, None))(Y0S, RATE),
        "vmap-y0-shared": lambda: jax.vmap(solve, in_axes=(None, 0))(Y0, RATES),
    }
    cases: dict[str, Callable[[], Any]] = {}
    for name, call in transforms.items():
        cases[f"diffrax-{name}"] = call
        cases[f"diffrax-{name}-jit"] = lambda call=call: jax.jit(call)()
    return cases


def _x64_cases(artifact: bool) -> dict[str, Callable[[], Any]]:
    """Cases of ``double_precision``, whose import turns x64 on: run only in ``x64`` processes."""
    from jxe_ecosystem import double_precision

    fn = double_precision.squares_after_first
    fn = fn if artifact else fn.__wrapped__
    x = jnp.asarray([1e3, 1e-3, 3.0, 1e-4, 2.5], jnp.float64)
    return {"x64-value": lambda: fn(x), "x64-value-jit": lambda: jax.jit(fn)(x[:3])}


def _describe(result: Any) -> dict[str, Any]:
    leaves, treedef = jax.tree_util.tree_flatten(result)
    return {"leaves": [np.asarray(leaf).tolist() for leaf in leaves],
            "dtypes": [str(np.asarray(leaf).dtype) for leaf in leaves],
            "tree": str(treedef)}


def _run(cases: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, call in cases.items():
        try:
            results[name] = _describe(call())
        except Exception:
            results[name] = {"error": traceback.format_exc()[-2000:]}
    return results


def _x64_config() -> dict[str, bool]:
    return {"x64": bool(jax.config.jax_enable_x64),
            "x64_module_imported": "jxe_ecosystem.double_precision" in sys.modules}


def main() -> None:
    import jxe_ecosystem

    if sys.argv[1] == "x64":  # the artifacts first (traces must stay 0), then the source
        baked = _run(_x64_cases(artifact=True))
        baked_traces = jxe_ecosystem.TRACES["count"]
        traced = _run(_x64_cases(artifact=False))
        print(json.dumps({"traces": baked_traces, "cases": baked, "source_cases": traced,
                          "source_traces": jxe_ecosystem.TRACES["count"] - baked_traces,
                          **_x64_config()}))
        return
    from jxe_ecosystem import eqx_models, flax_models, ode

    modules = {"flax_models": flax_models, "eqx_models": eqx_models, "ode": ode}
    artifact = sys.argv[1] == "artifact"

    def fn(dotted: str) -> Any:
        module, name = dotted.split(".")
        loaded = getattr(modules[module], name)
        return loaded if artifact else loaded.__wrapped__

    results = _run({**_flax_cases(fn, flax_models), **_eqx_cases(fn, eqx_models),
                    **_ode_cases(fn)})
    from hatch_jaxexport.runtime.call.loader import tiered_calls

    tiers = {name: sorted(t for call in tiered_calls(loaded) for t in call.tiers.values())
             for name, loaded in (("eqx_make_linear", eqx_models.eqx_make_linear),
                                  ("ode_solve", ode.solve))} if artifact else {}
    print(json.dumps({"traces": jxe_ecosystem.TRACES["count"], "cases": results,
                      "tiers": tiers, **_x64_config()}))


if __name__ == "__main__":
    main()
