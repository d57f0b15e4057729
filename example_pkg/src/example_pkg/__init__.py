"""example_pkg: JAX functions shipped with baked ``jax.export`` artifacts.

Each function below is an ordinary JAX function marked with ``@exportable``. When the wheel is
built, hatch-jaxexport exports it (one StableHLO artifact per structure, static value and
platform); the installed package calls the artifact and never traces the Python body.
"""

from .chain import STEPS, elementwise_chain
from .deep import DEPTH, deep_stack
from .finance import compound_growth, discounted_sum
from .linalg import solve
from .nn import activate, init_mlp, mlp_apply, mlp_loss, mlp_loss_and_grad

__all__ = [
    "DEPTH",
    "STEPS",
    "activate",
    "compound_growth",
    "deep_stack",
    "discounted_sum",
    "elementwise_chain",
    "init_mlp",
    "mlp_apply",
    "mlp_loss",
    "mlp_loss_and_grad",
    "solve",
]
