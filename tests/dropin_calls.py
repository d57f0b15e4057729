"""Calls the functions of the ``jxe_addrnodes`` or ``jxe_stacked`` fixture and prints the
results as JSON.

Run by ``tests/unit/runtime/artifacts/test_aux_keys.py`` and
``tests/integration/test_stacked.py`` in a fresh process, ``python dropin_calls.py
addrnodes|stacked``, with the baked fixture on ``sys.path`` and ``HATCH_JAXEXPORT_STRICT=1``
(any fallback to a source raises). A fresh process matters: ``jxe_addrnodes.Body``'s aux data
prints with another memory address in each one. ``traces`` is how often an exported body ran
(0: every call was served from artifacts).
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import jax.numpy as jnp
import numpy as np

X = jnp.linspace(-1.0, 1.0, 5, dtype=jnp.float32)
STACKED = ("typed_inner", "typed_outer", "filtered_inner", "filtered_outer", "logged_inner",
           "logged_outer")


def _list(value: Any) -> list[float]:
    return np.asarray(value).tolist()


def addrnodes(pkg: Any) -> dict[str, Any]:
    """``step`` on a ``Body`` whose aux data equals the baked one but is another object, then
    on its own output (aux data that jax unflattened from the artifact's output tree)."""
    body = pkg.Body(jnp.array([1.0, 0.5, -1.0], jnp.float32), jnp.zeros(3, jnp.float32),
                    pkg.Frozen([1.0, 2.0, 4.0]))
    out = pkg.step(body, jnp.float32(0.1))
    again = pkg.step(out, 0.1)
    return {"qpos": _list(out.qpos), "qvel": _list(out.qvel), "again": _list(again.qpos),
            "type": type(again).__name__, "same_mass": again.mass == body.mass,
            "mass_repr": repr(body.mass)}


def stacked(pkg: Any) -> dict[str, Any]:
    """Each stacked function on ``X``, and ``typed_outer`` on int32 (jaxtyping refuses it)."""
    results: dict[str, Any] = {name: _list(getattr(pkg, name)(X)) for name in STACKED}
    try:
        pkg.typed_outer(jnp.arange(5, dtype=jnp.int32))
        results["typed_outer_int32"] = "accepted"
    except Exception as err:
        results["typed_outer_int32"] = type(err).__name__
    results["logged"] = pkg.LOGGED["count"]
    return results


def main() -> None:
    which = sys.argv[1]
    pkg = importlib.import_module(f"jxe_{which}")
    results = (addrnodes if which == "addrnodes" else stacked)(pkg)
    print(json.dumps({**results, "traces": pkg.TRACES["count"]}))


if __name__ == "__main__":
    main()
