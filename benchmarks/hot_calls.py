"""Hot calls: every call form of a baked function against ``jax.jit`` of its source, per call.

    python benchmarks/hot_calls.py [--calls 2000] [--batches 7] [--only NAME] [--markdown]

Copies ``tests/fixtures/jxe_hot`` (functions covering the call forms a library's users make),
bakes it with ``python -m hatch_jaxexport export`` into a temp folder, then, in one fresh
process, times each form steady state: after warm-up, the median over ``--batches`` batches of
``--calls`` calls (each result blocked on), the baked call and ``jax.jit`` of the same source
(``static_argnames`` for its static arguments) measured side by side, row by row, in
alternating batches. Prints the machine, the versions, and per form: baked us, source us, the
ratio (issue 36's target: every row <= 1.10), and the floor: ``jax.jit`` of the source called
through one Python function (``def forward(*args, **kwargs)``), the least any drop-in written
in Python adds, as a ratio to ``jax.jit``. ``--markdown`` prints the table for
``docs/performance.md``.

The last row, "drop-in fallback", calls the baked function with a dtype no structure accepts
(int32 where float32 is baked): the loader traces the source (once) and then runs that trace;
its reference is ``jax.jit`` of the source on the same int32 input.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, platform, statistics, sys, time
import numpy as np
import jax, jax.numpy as jnp
import jaxlib
import jxe_hot as m

CALLS, BATCHES, ONLY = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
n = 16
x = jnp.linspace(0.0, 1.0, n, dtype=jnp.float32)
y = jnp.linspace(1.0, 2.0, n, dtype=jnp.float32)
xn, yn = np.asarray(x), np.asarray(y)
params = {"w": jnp.eye(n, dtype=jnp.float32), "b": y}
pair, node = m.Pair(x, y), m.Node(x, y)
leaves = [x + i for i in range(128)]
xi = jnp.arange(n, dtype=jnp.int32)

def src(fn):
    return getattr(fn, "__wrapped__", fn)

def jit(fn, **kw):
    return jax.jit(src(fn), **kw)

apply_src = jax.jit(lambda x: x * 3.0)
ROWS = [
    ("jax arrays, positional", lambda: m.add(x, y), jit(m.add), lambda f: f(x, y)),
    ("jax arrays, by keyword", lambda: m.add(x=x, y=y), jit(m.add), lambda f: f(x=x, y=y)),
    ("numpy arrays", lambda: m.add(xn, yn), jit(m.add), lambda f: f(xn, yn)),
    ("params dict and an array", lambda: m.dense(params, x), jit(m.dense),
     lambda f: f(params, x)),
    ("NamedTuple output", lambda: m.stats(x), jit(m.stats), lambda f: f(x)),
    ("Python float scalar", lambda: m.shift(x, 0.5), jit(m.shift), lambda f: f(x, 0.5)),
    ("numpy float32 scalar", lambda: m.shift(x, np.float32(0.5)), jit(m.shift),
     lambda f: f(x, np.float32(0.5))),
    ("static by position", lambda: m.reduce(x, "max"),
     jit(m.reduce, static_argnames="mode"), lambda f: f(x, "max")),
    ("static by keyword", lambda: m.reduce(x, mode="max"),
     jit(m.reduce, static_argnames="mode"), lambda f: f(x, mode="max")),
    ("static left to its default", lambda: m.reduce(x),
     jit(m.reduce, static_argnames="mode"), lambda f: f(x)),
    ("export_with_kwargs", lambda: m.combine(x, y=y), jit(m.combine),
     lambda f: f(x, y=y)),
    ("dataclass pytree", lambda: m.swap(pair), jit(m.swap), lambda f: f(pair)),
    ("registered node", lambda: m.node_sum(node), jit(m.node_sum), lambda f: f(node)),
    ("list of 128 leaves", lambda: m.many(leaves), jit(m.many), lambda f: f(leaves)),
    ("static method", lambda: m.Layer.apply(x), apply_src, lambda f: f(x)),
    ("concrete-size artifact", lambda: m.unrolled(x), jit(m.unrolled), lambda f: f(x)),
    ("drop-in fallback (int32)", lambda: m.add(xi, xi), jit(m.add), lambda f: f(xi, xi)),
]

def batch(call):
    start = time.perf_counter()
    for _ in range(CALLS):
        jax.block_until_ready(call())
    return (time.perf_counter() - start) / CALLS * 1e6

import warnings
warnings.simplefilter("ignore")
def one_frame(reference):
    """The floor of any Python drop-in: jax.jit of the source behind one Python frame."""
    def forward(*args, **kwargs):
        return reference(*args, **kwargs)
    return forward

out = []
for name, baked, reference, call_ref in ROWS:
    if ONLY and ONLY not in name:
        continue
    ref = lambda: call_ref(reference)
    framed = one_frame(reference)
    floor = lambda: call_ref(framed)
    for _ in range(3):  # warm-up: resolve, settle the fast path, compile both
        jax.block_until_ready(baked()); jax.block_until_ready(ref()); floor()
    for _ in range(200):
        baked(); ref(); floor()
    b, s, f = [], [], []
    for _ in range(BATCHES):  # alternating batches: drift hits all sides alike
        b.append(batch(baked)); s.append(batch(ref)); f.append(batch(floor))
    out.append((name, statistics.median(b), statistics.median(s), statistics.median(f)))
print(json.dumps({"rows": out, "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                  "python": platform.python_version()}))
'''


def machine() -> str:
    """The CPU model and core count, as the table's caption says."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()}"


def main() -> int:
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--only", default="", help="only the rows whose name contains this")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jaxexport-hot-") as tmp:
        site = Path(tmp)
        shutil.copytree(ROOT / "tests" / "fixtures" / "jxe_hot", site / "jxe_hot",
                        ignore=shutil.ignore_patterns("__pycache__", "_jaxexport"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
               "HATCH_JAXEXPORT_CACHE": str(site / "cache")}
        env.pop("HATCH_JAXEXPORT_STRICT", None)
        subprocess.run([sys.executable, "-m", "hatch_jaxexport", "export", "jxe_hot", "--out",
                        str(site / "jxe_hot" / "_jaxexport"), "--path", str(site)],
                       env=env, check=True, capture_output=True)
        done = subprocess.run([sys.executable, "-c", CHILD, str(args.calls), str(args.batches),
                               args.only], env=env, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"machine: {machine()}; Python {result['python']}, jax {result['jax']}, "
          f"jaxlib {result['jaxlib']}")
    print(f"steady state, median of {args.batches} batches of {args.calls} calls\n")
    width = max(len(r[0]) for r in result["rows"])
    if args.markdown:
        print("| call | baked | source `jax.jit` | ratio | floor: `jax.jit` + 1 frame |"
              "\n|---|---:|---:|---:|---:|")
    else:
        print(f"{'call':{width}s} {'baked':>11s} {'jax.jit':>11s} {'ratio':>6s} "
              f"{'floor':>6s}")
    worst = 0.0
    for name, baked, source, floor in result["rows"]:
        ratio = baked / source
        worst = max(worst, ratio)
        if args.markdown:
            print(f"| {name} | {baked:.1f} us | {source:.1f} us | {ratio:.2f} | "
                  f"{floor / source:.2f} |")
        else:
            flag = "" if ratio <= 1.10 else "  > 1.10"
            print(f"{name:{width}s} {baked:8.1f} us {source:8.1f} us {ratio:6.2f} "
                  f"{floor / source:6.2f}{flag}")
    print(f"\nworst ratio: {worst:.2f} (target <= 1.10); floor: the same jax.jit called "
          "through one Python function, the least any Python drop-in adds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
