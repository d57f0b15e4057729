"""A small multi-layer perceptron: parameters as a pytree, a symbolic batch size."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from hatch_jaxexport import exportable

#: Layer widths: 8 inputs, two hidden layers of 32, 4 outputs.
SIZES = (8, 32, 32, 4)

#: The parameter pytree's structure: a list of {"w", "b"} dicts, one per layer.
PARAMS_SPEC = [{"w": (f"{m}, {n}", "float32"), "b": (f"{n},", "float32")}
               for m, n in itertools.pairwise(SIZES)]


def init_mlp(seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random parameters (plain NumPy: creating them needs no tracing)."""
    rng = np.random.default_rng(seed)
    return [{"w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             "b": np.zeros(n, np.float32)}
            for m, n in itertools.pairwise(SIZES)]


def _forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


@exportable({"params": PARAMS_SPEC, "x": ("batch, 8", "float32")}, concrete={"batch": [4]},
            ad_order=1, executable_sizes={"batch": [5, 32, 1000]})
def mlp_apply(params, x):
    """The MLP's outputs for a batch of any size: (batch, 8) -> (batch, 4)."""
    return _forward(params, x)


LOSS_SPEC = {"params": PARAMS_SPEC, "x": ("batch, 8", "float32"), "y": ("batch, 4", "float32")}


@exportable(LOSS_SPEC, vjp_order=1, executable_sizes={"batch": [32]})
def mlp_loss(params, x, y):
    """Mean squared error; exported with its VJP, so ``jax.grad`` works on the artifact."""
    return jnp.mean((_forward(params, x) - y) ** 2)


#: The loss and its gradient as one decorated function: one artifact and one executable per
#: size serve what an eager ``jax.grad(mlp_loss)`` runs as a forward and a backward pass (and
#: jax's own seed). ``name=``: ``jax.value_and_grad`` copies the loss's name onto its result.
mlp_loss_and_grad = exportable(LOSS_SPEC, executable_sizes={"batch": [32]},
                               name="example_pkg.nn:mlp_loss_and_grad")(
    jax.value_and_grad(mlp_loss.__wrapped__))


@exportable({"x": ("batch, n", "float32")}, static={"kind": ["relu", "gelu", "tanh"]},
            executable_sizes={"batch": [4], "n": [7, 8]})
def activate(x, kind="gelu"):
    """An activation chosen by a static option: one artifact per kind."""
    if kind == "relu":
        return jax.nn.relu(x)
    if kind == "gelu":
        return jax.nn.gelu(x)
    return jnp.tanh(x)
