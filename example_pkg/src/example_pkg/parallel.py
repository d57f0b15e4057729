"""Data-parallel training of the MLP, baked for a 2x2 device mesh (and for one device).

The batch is split over the mesh's ``data`` axis; the two hidden layers are split over its
``model`` axis (the first by columns, the second by rows), so each device holds half of them.
jax's SPMD partitioner inserts the collectives when the step is exported; the installed wheel
runs the baked step on any 2x2 mesh (``jax.set_mesh(jax.make_mesh((2, 2), ("data",
"model")))``) and the single-device variant elsewhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from hatch_jaxexport import exportable

from .nn import PARAMS_SPEC, _forward

#: The mesh the step is baked for.
MESH = {"data": 2, "model": 2}

#: Where each parameter lives on the mesh (a pytree prefix of the parameters).
PARAMS_SHARDING = [{"w": P(None, "model"), "b": P("model")},   # 8 -> 32, columns split
                   {"w": P("model", None), "b": P()},          # 32 -> 32, rows split
                   {"w": P(), "b": P()}]                       # 32 -> 4, replicated


@exportable({"params": PARAMS_SPEC, "x": ("2*batch, 8", "float32"),
             "y": ("2*batch, 4", "float32"), "lr": ("", "float32")},
            mesh=MESH, in_specs={"params": PARAMS_SHARDING, "x": P("data"), "y": P("data")},
            out_specs=(PARAMS_SHARDING, P()))
def train_step(params, x, y, lr):
    """One SGD step on the mean squared error: ``(new_params, loss)``.

    The batch size must be even (it is split over the ``data`` axis).
    """

    def loss(p):
        return jnp.mean((_forward(p, x) - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), value
