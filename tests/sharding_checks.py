"""Sharded artifacts of ``jxe_sharded`` on simulated CPU devices, against the source.

Run in a fresh process with ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (4 or 8) and
``jxe_sharded`` (with its artifacts) on ``PYTHONPATH``; prints one JSON object: per check, what
ran (artifact or source), whether results equal the source's under the same mesh, the outputs'
shardings, and the messages of warnings and errors.
``tests/unit/runtime/artifacts/test_sharding.py`` asserts on it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jxe_sharded import funcs

from hatch_jaxexport import ArtifactError, FallbackWarning
from hatch_jaxexport.runtime.call.loader import loaded_from_artifact

RESULTS: dict[str, Any] = {"devices": jax.device_count(), "jax": jax.__version__}
rng = np.random.default_rng(0)
x = rng.standard_normal((6, 8)).astype(np.float32)
w = rng.standard_normal((8, 4)).astype(np.float32)
params = {"w": w, "b": rng.standard_normal(4).astype(np.float32)}
xs = rng.standard_normal((16, 8)).astype(np.float32)
ys = rng.standard_normal((16, 4)).astype(np.float32)


def mesh_2x2(offset: int = 0) -> Any:
    return jax.make_mesh((2, 2), ("data", "model"), devices=jax.devices()[offset:offset + 4])


def spec_of(value: Any) -> Any:
    sharding = getattr(value, "sharding", None)
    if isinstance(sharding, NamedSharding):
        spec = [list(e) if isinstance(e, tuple) else e for e in sharding.spec]
        while spec and spec[-1] is None:  # P("data", None) is P("data")
            spec.pop()
        return {"mesh": dict(sharding.mesh.shape), "spec": spec}
    return type(sharding).__name__


def same(a: Any, b: Any) -> bool:
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        np.allclose(np.asarray(p), np.asarray(q), rtol=1e-5, atol=1e-5)
        for p, q in zip(leaves_a, leaves_b, strict=True))


def check(name: str, loaded: Callable[[], Any], source: Callable[[], Any] | None = None,
          fn: Any = None) -> None:
    """Run ``loaded`` (warnings recorded), compare with ``source``, note what ran."""
    entry: dict[str, Any] = {}
    before = dict(funcs.TRACES)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", DeprecationWarning)  # `with mesh:` on newer jax
        try:
            out = loaded()
        except Exception as err:
            entry["error"] = f"{type(err).__name__}: {err}"
            out = None
    entry["traced"] = sum(funcs.TRACES.values()) - sum(before.values())
    entry["warnings"] = [str(w.message) for w in caught
                         if issubclass(w.category, FallbackWarning)]
    if out is not None:
        entry["sharding"] = jax.tree_util.tree_map(spec_of, out)
        if source is not None:
            entry["equal"] = same(out, source())
    if fn is not None:
        entry["from_artifact"] = {str(k): v for k, v in loaded_from_artifact(fn).items()}
    RESULTS[name] = entry


def main() -> None:
    mesh = mesh_2x2()
    data = NamedSharding(mesh, P("data", None))
    model = NamedSharding(mesh, P(None, "model"))
    xd, wd = jax.device_put(x, data), jax.device_put(w, model)
    source_layer = jax.jit(funcs.layer.__wrapped__)

    def layer_loss(f: Callable[..., Any]) -> Callable[..., Any]:
        return lambda a, b: jnp.sum(f(a, b) ** 2)

    check("layer_numpy_no_mesh", lambda: funcs.layer(x, w), lambda: source_layer(x, w),
          funcs.layer)
    check("layer_committed", lambda: funcs.layer(xd, wd), lambda: source_layer(xd, wd),
          funcs.layer)
    with jax.set_mesh(mesh):
        check("layer_numpy_set_mesh", lambda: funcs.layer(x, w), lambda: source_layer(x, w))
        check("layer_jit_set_mesh", lambda: jax.jit(lambda a, b: funcs.layer(a, b) * 2.0)(xd, wd),
              lambda: 2.0 * source_layer(x, w))
        check("layer_grad_set_mesh",
              lambda: jax.grad(layer_loss(funcs.layer), argnums=(0, 1))(xd, wd),
              lambda: jax.grad(layer_loss(funcs.layer.__wrapped__), argnums=(0, 1))(xd, wd))
        check("layer_jvp_set_mesh", lambda: jax.jvp(funcs.layer, (xd, wd), (xd, wd)),
              lambda: jax.jvp(funcs.layer.__wrapped__, (xd, wd), (xd, wd)))
        ws = np.stack([w, 2 * w, 3 * w])
        check("layer_vmap_set_mesh", lambda: jax.vmap(funcs.layer, in_axes=(None, 0))(xd, ws),
              lambda: jax.vmap(funcs.layer.__wrapped__, in_axes=(None, 0))(x, ws))
        check("loss_set_mesh", lambda: funcs.loss(params, xs, ys),
              lambda: funcs.loss.__wrapped__(params, xs, ys), funcs.loss)
        check("loss_grad_set_mesh", lambda: jax.grad(funcs.loss)(params, xs, ys),
              lambda: jax.grad(funcs.loss.__wrapped__)(params, xs, ys))
        check("stats_set_mesh", lambda: funcs.stats(x[:, :4], scale=3.0),
              lambda: funcs.stats.__wrapped__(x[:, :4], scale=3.0), funcs.stats)
        check("sharded_only_set_mesh", lambda: funcs.sharded_only(x),
              lambda: jnp.sin(x) * 2.0)
    with mesh:  # the older spelling (deprecated in newer jax, still honoured)
        check("layer_numpy_with_mesh", lambda: funcs.layer(x, w), lambda: source_layer(x, w))
    check("sharded_only_no_mesh", lambda: funcs.sharded_only(x), lambda: jnp.sin(x) * 2.0)
    other = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
    check("sharded_only_other_mesh",
          lambda: funcs.sharded_only(jax.device_put(x[:4], NamedSharding(other, P("data")))),
          lambda: jnp.sin(x[:4]) * 2.0)
    with jax.set_mesh(other):
        check("layer_other_mesh", lambda: funcs.layer(x[:4], w), lambda: source_layer(x[:4], w))
    os.environ["HATCH_JAXEXPORT_STRICT"] = "1"
    funcs.sharded_only.clear_cache()
    check("sharded_only_no_mesh_strict", lambda: funcs.sharded_only(x))
    del os.environ["HATCH_JAXEXPORT_STRICT"]
    if jax.device_count() >= 8:
        last = mesh_2x2(offset=4)  # another four devices
        with jax.set_mesh(last):
            check("layer_last_devices", lambda: funcs.layer(x, w), lambda: source_layer(x, w))
        eight = jax.make_mesh((8,), ("data",))
        with jax.set_mesh(eight):
            check("loss_data8", lambda: funcs.loss(params, xs, ys),
                  lambda: funcs.loss.__wrapped__(params, xs, ys), funcs.loss)
            check("loss_grad_data8", lambda: jax.grad(funcs.loss)(params, xs, ys),
                  lambda: jax.grad(funcs.loss.__wrapped__)(params, xs, ys))
    RESULTS["artifact_error"] = ArtifactError.__name__


if __name__ == "__main__":
    try:
        main()
    except Exception:
        RESULTS["crash"] = traceback.format_exc()
    json.dump(RESULTS, sys.stdout, default=str)
