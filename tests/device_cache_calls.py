"""One process of the multi-device executable cache check: baked calls against the source's.

Run in a fresh process with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``,
``HATCH_JAXEXPORT_STRICT=1`` (tracing the source is an error) and ``jxe_demo`` and
``jxe_sharded`` (with their artifacts) on ``PYTHONPATH``. Calls eager signatures the executable
cache serves (a static value, a namedtuple and a registered dataclass, the family's primal and
the members of an eager ``jax.grad``), ``jax.pmap`` and ``shard_map`` over all local devices of
a baked function, and with 4 devices or more a call under a 2x2 mesh (its sharded variant).
Prints one JSON object: per call whether it equals the source's, and the tier of each eager
signature (``compiled``, then ``cached`` in a second process sharing the cache folder).
``tests/integration/test_multi_device_cache.py`` asserts on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec as P
from jxe_demo import funcs as demo
from jxe_sharded import funcs as sharded

from hatch_jaxexport.runtime.call.loader import tiered_calls

N = jax.local_device_count()
rng = np.random.default_rng(0)
f32 = np.float32
x8 = np.arange(8, dtype=f32)
x = rng.standard_normal((6, 8)).astype(f32)
w = rng.standard_normal((8, 4)).astype(f32)
xs = rng.standard_normal((8, 8)).astype(f32)
ys = rng.standard_normal((8, 4)).astype(f32)
params = {"w": w, "b": rng.standard_normal(4).astype(f32)}


def same(a: Any, b: Any) -> bool:
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        np.shape(p) == np.shape(q) and np.allclose(np.asarray(p), np.asarray(q), rtol=1e-5,
                                                   atol=1e-5)
        for p, q in zip(leaves_a, leaves_b, strict=True))


def on_line_mesh(f: Any) -> Any:
    """``f`` under ``shard_map`` over all local devices, its ``x`` split and its ``w``
    replicated (placed there first: ``jax.make_mesh``'s axes are ``Explicit``)."""
    mesh = jax.make_mesh((N,), ("d",))
    split = jax.device_put(np.concatenate([x[:2]] * N), jax.NamedSharding(mesh, P("d")))
    whole = jax.device_put(w, jax.NamedSharding(mesh, P()))
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("d"), P()), out_specs=P("d")))(
        split, whole)


#: name -> (the baked function, how it is called): the same call runs the source's body.
CALLS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "demo.scale": (demo.scale, lambda f: f(x8.reshape(2, 4))),
    "demo.poly": (demo.poly, lambda f: f(x8, "exact")),
    "demo.stats": (demo.stats, lambda f: f(x8)),
    "demo.swap": (demo.swap, lambda f: f(demo.Pair(x8[:3], x8[3:6]))),
    "layer": (sharded.layer, lambda f: f(x, w)),
    "loss.grad": (sharded.loss, lambda f: jax.grad(f)(params, xs, ys)),
    "layer.pmap": (sharded.layer, lambda f: jax.pmap(f)(np.stack([x[:2] + i for i in range(N)]),
                                                        np.stack([w] * N))),
    "demo.scale.pmap": (demo.scale, lambda f: jax.pmap(f)(np.stack([x8.reshape(2, 4)] * N))),
    "layer.shard_map": (sharded.layer, on_line_mesh),
}
if N >= 4:  # the 2x2 variant, on the first four devices
    def on_mesh(f: Any) -> Any:
        with jax.set_mesh(jax.make_mesh((2, 2), ("data", "model"), devices=jax.devices()[:4])):
            return f(x[:4], w)

    CALLS["layer.mesh"] = (sharded.layer, on_mesh)


def source_of(name: str, baked: Any) -> Any:
    """The source's body, jitted where the baked call is an eager one (as a plain library's
    user would call it, the same numerics as an artifact's executable)."""
    body = baked.__wrapped__
    return body if "pmap" in name or "shard_map" in name or name == "demo.poly" \
        else jax.jit(body)


out: dict[str, Any] = {"devices": N, "same": {}, "tiers": {}}
for name, (baked, call) in CALLS.items():
    result = call(baked)
    out["same"][name] = same(result, call(source_of(name, baked)))
for name, fn in [("demo.scale", demo.scale), ("demo.poly", demo.poly), ("demo.stats", demo.stats),
                 ("demo.swap", demo.swap), ("layer", sharded.layer), ("loss", sharded.loss)]:
    for call in tiered_calls(fn):
        out["tiers"].setdefault(name, []).extend(call.tiers.values())
        for member in call.member_calls():
            out["tiers"].setdefault(name + ".members", []).extend(member.tiers.values())
print(json.dumps(out))
