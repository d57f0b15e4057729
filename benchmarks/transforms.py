"""Transformations of loaded functions: batched vs sequential vmap, loaded vs source jit.

    python benchmarks/transforms.py [--batch 256]

Bakes ``tests/fixtures/jxe_ad`` (``ad_order=2``, with and without ``vmap=True``) into a temp
folder, then times in one process, steady state (compiled, median of repeats):
``jax.vmap`` of a dense layer (256x256) over a batch, with every operand batched and with shared
params (``in_axes=(None, 0)``: the batched artifacts take every operand batched, so the loader
runs those sequentially rather than broadcast the params), batched artifact vs the sequential
fallback (``lax.map``) vs the source, and
``grad``, ``jvp``, ``hessian`` of the loaded function vs the same of the source, all jitted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import statistics, sys, timeit
import jax, jax.numpy as jnp
import jxe_ad as m

B = int(sys.argv[1])
x = jnp.linspace(0.1, 1.0, 64, dtype=jnp.float32)
xs = jnp.stack([x * (1 + i / B) for i in range(B)])

def bench(f, *args):
    f = jax.jit(f)
    jax.block_until_ready(f(*args))
    runs = timeit.repeat(lambda: jax.block_until_ready(f(*args)), number=20, repeat=7)
    return statistics.median(runs) / 20 * 1e6

src = m.array2.__wrapped__
# vmap of a dense layer over a batch of inputs (params shared): one matmul when batched
p = {"w": jnp.full((256, 256), 0.01, jnp.float32), "b": jnp.zeros(256, jnp.float32)}
inputs = jnp.tile(jnp.linspace(0, 1, 256, dtype=jnp.float32), (B, 1))
ps = jax.tree_util.tree_map(lambda a: jnp.stack([a] * B), p)
rows = [
    ("vmap all batched, batched artifact", bench(jax.vmap(m.pytree2), ps, inputs)),
    ("vmap all batched, sequential fallback", bench(jax.vmap(m.pytree2_nobatch), ps, inputs)),
    ("vmap all batched, source", bench(jax.vmap(m.pytree2.__wrapped__), ps, inputs)),
    ("vmap, batched artifact", bench(jax.vmap(m.pytree2, in_axes=(None, 0)), p, inputs)),
    ("vmap, sequential fallback",
     bench(jax.vmap(m.pytree2_nobatch, in_axes=(None, 0)), p, inputs)),
    ("vmap, source", bench(jax.vmap(m.pytree2.__wrapped__, in_axes=(None, 0)), p, inputs)),
]
for name, make in [("grad", lambda f: jax.grad(lambda x: f(x).sum())),
                   ("jvp", lambda f: lambda x: jax.jvp(f, (x,), (x,))),
                   ("hessian", lambda f: jax.hessian(lambda x: f(x).sum()))]:
    rows.append((f"{name}, loaded", bench(make(m.array2), x)))
    rows.append((f"{name}, source", bench(make(src), x)))
width = max(len(r[0]) for r in rows)
for name, us in rows:
    print(f"{name:{width}s} {us:10.1f} us")
t = dict(rows)
for case in ("vmap all batched", "vmap"):
    ratio = t[case + ", sequential fallback"] / t[case + ", batched artifact"]
    print(f"{case}: sequential fallback / batched artifact = {ratio:.2f}")
for name in ("grad", "jvp", "hessian"):
    print(f"{name}: loaded / source = {t[name + ', loaded'] / t[name + ', source']:.2f}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jaxexport-bench-") as tmp:
        site = Path(tmp)
        shutil.copytree(ROOT / "tests" / "fixtures" / "jxe_ad", site / "jxe_ad")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
               "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_CACHE": "0"}
        subprocess.run([sys.executable, "-m", "hatch_jaxexport", "export", "jxe_ad", "--out",
                        str(site / "jxe_ad" / "_jaxexport"), "--path", str(site), "--jobs",
                        "2"], env=env, check=True, capture_output=True)
        subprocess.run([sys.executable, "-c", CHILD, str(args.batch)], env=env, check=True)


if __name__ == "__main__":
    main()
