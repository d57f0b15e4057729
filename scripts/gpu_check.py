"""The GPU check: example_pkg's artifacts of one platform, run against the source, and their
first calls beside the source's, on the machine this runs on. Needs no network.

    bash scripts/gpu_check.sh WHEEL...             # installs the wheels, then runs this (cuda)
    python scripts/gpu_check.py --platform cpu     # the same checks on the CPU (tests run this)

For each workload of ``example_pkg.benchmarks`` (and ``jax.grad`` of ``mlp_loss``), in fresh
processes with every cache off:

1. **correctness**: the installed wheel's artifact, strict (``HATCH_JAXEXPORT_STRICT=1``: a
   fallback to tracing is an error), against ``jax.jit`` of the Python body: the largest
   difference, and how the call was served (``call_report``);
2. **cold start**: the first call's time, source ``jax.jit`` against the artifact, medians of
   ``--runs`` fresh processes, and their ratio.

It prints Markdown tables to paste into ``docs/gpu.md``, and exits 1 if the backend is not the
platform asked for, or any artifact fails or differs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

WORKLOADS = ["tiny", "mlp", "solve", "deep", "trace_heavy", "grad_vjp"]
#: jax's name of each platform's backend.
BACKENDS = {"cpu": "cpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}

PROBE = r"""
import json, sys, time
mode, workload = sys.argv[1], sys.argv[2]
start = time.perf_counter()
import jax, numpy as np
import example_pkg.benchmarks as workloads
from example_pkg import nn
if workload == "grad_vjp":
    args = (nn.init_mlp(0), np.ones((32, 8), np.float32), np.zeros((32, 4), np.float32))
    loaded, source = jax.grad(nn.mlp_loss), jax.jit(jax.grad(nn.mlp_loss.__wrapped__))
    report = nn.mlp_loss
else:
    report, args = workloads.WORKLOADS[workload]()
    loaded = report
    source = jax.jit(report.__wrapped__, static_argnames=tuple(report.export_spec.static))
imported = time.perf_counter()
if mode == "timing-source":
    jax.block_until_ready(source(*args))
elif mode == "timing-loaded":
    jax.block_until_ready(loaded(*args))
first = time.perf_counter()
out = {"backend": jax.default_backend(), "first_ms": (first - imported) * 1e3}
if mode == "check":
    got, want = loaded(*args), source(*args)
    diffs = [float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
             for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want))]
    out["max_diff"] = max(diffs, default=0.0)
    out["tiers"] = sorted({r.tier for r in report.call_report()})
print(json.dumps(out))
"""


def probe(mode: str, workload: str, platform: str, cache: str) -> dict:
    """One fresh process; its JSON line, or ``{"error": ...}``."""
    env = {**os.environ, "JAX_PLATFORMS": platform, "HATCH_JAXEXPORT_STRICT": "1",
           "HATCH_JAXEXPORT_CACHE": "0", "JAX_COMPILATION_CACHE_DIR": cache,
           "JAX_ENABLE_COMPILATION_CACHE": "false"}
    proc = subprocess.run([sys.executable, "-c", PROBE, mode, workload], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", default="cuda", choices=sorted(BACKENDS))
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per timing (3)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    args = parser.parse_args()
    failed = False
    rows = ["| workload | served by | max abs diff | source first call (ms) | "
            "artifact first call (ms) | artifact / source |",
            "| --- | --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as cache:
        for workload in args.workloads.split(","):
            checked = probe("check", workload, args.platform, cache)
            if "error" in checked or checked["backend"] != BACKENDS[args.platform]:
                failed = True
                rows.append(f"| {workload} | FAILED: {checked.get('error') or checked} | | | | |")
                continue
            failed |= checked["max_diff"] > 1e-3
            times = {mode: statistics.median(
                probe(f"timing-{mode}", workload, args.platform, cache).get("first_ms", 0.0)
                for _ in range(args.runs)) for mode in ("source", "loaded")}
            ratio = times["loaded"] / times["source"] if times["source"] else float("nan")
            rows.append(f"| {workload} | {', '.join(checked['tiers'])} | "
                        f"{checked['max_diff']:.2e} | {times['source']:.0f} | "
                        f"{times['loaded']:.0f} | {ratio:.2f}x |")
    import jax

    try:
        devices = sorted({d.device_kind for d in jax.devices(BACKENDS[args.platform])})
    except RuntimeError as err:  # no such backend here: the rows say FAILED
        devices = [f"none ({str(err).splitlines()[0][:80]})"]
    print(f"platform {args.platform}: jax {jax.__version__}, devices {devices}, medians of "
          f"{args.runs} fresh processes, caches off\n")
    print("\n".join(rows))
    print("\nresult:", "FAILED" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
