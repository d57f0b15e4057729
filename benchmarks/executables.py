"""Precompiled executables, side by side in one run: a fresh machine's first calls.

    python benchmarks/executables.py [--runs 3] [--write-docs]

1. Builds ``example_pkg``'s wheel four times (``pip wheel``, no build isolation, the same
   interpreter): executables off, each x86-64 target alone, and both targets; reports each
   wheel's size and build time (a table).
2. Installs the wheel with both targets into a fresh virtual environment.
3. Measures each workload of ``example_pkg.benchmarks`` and ``jax.grad`` of ``mlp_loss``
   (``vjp_order=1``) and of ``mlp_apply``'s loss (``ad_order`` family) in fresh processes, every
   cache empty (a machine that never ran the package), medians of ``--runs`` with min and max:

   - ``source``: ``jax.jit`` of the Python body (``jax.jit(jax.grad(...))`` for the gradients);
   - ``stablehlo``: the installed artifacts with shipped executables ignored
     (``HATCH_JAXEXPORT_EXECUTABLES=0``): compiled on the first call;
   - ``shipped``: the installed artifacts, shipped executables used where they match;
   - ``floor``: an executable of the same computation deserialized from disk and run.

Then the ratios the issue targets: shipped / floor and shipped / source. ``--write-docs``
appends the tables to ``docs/performance-results.md`` under "Precompiled executables".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"off": None, "x86_64-avx2": ["x86_64-avx2"], "x86_64-avx512": ["x86_64-avx512"],
            "both": ["x86_64-avx2", "x86_64-avx512"]}
WORKLOADS = ["tiny", "mlp", "solve", "deep", "trace_heavy", "grad_vjp", "grad_ad"]
MODES = ["source", "stablehlo", "shipped", "floor"]

PROBE = r'''
import json, os, sys, time
mode, workload, floor_file = sys.argv[1], sys.argv[2], sys.argv[3]
start_all = time.perf_counter()
import jax, numpy as np
import example_pkg.benchmarks as workloads
from example_pkg import nn


def case():
    """(loaded function, source function, arguments) of the workload."""
    if workload == "grad_vjp":  # jax.grad of a vjp_order=1 function (jax's own VJP)
        params, x = nn.init_mlp(0), np.ones((32, 8), np.float32)
        y = np.zeros((32, 4), np.float32)
        return (jax.grad(nn.mlp_loss), jax.jit(jax.grad(nn.mlp_loss.__wrapped__)),
                (params, x, y))
    if workload == "grad_ad":  # jax.grad through the family (mlp_apply bakes ad_order)
        params, x = nn.init_mlp(0), np.ones((32, 8), np.float32)
        loaded = jax.grad(lambda p, v: nn.mlp_apply(p, v).sum())
        source = jax.jit(jax.grad(lambda p, v: nn.mlp_apply.__wrapped__(p, v).sum()))
        return loaded, source, (params, x)
    fn, args = workloads.WORKLOADS[workload]()
    static = tuple(fn.export_spec.static)
    return fn, jax.jit(fn.__wrapped__, static_argnames=static), args


loaded, source, args = case()
out = {}
if mode in ("floor-write", "floor"):
    # the floor: the source's executable, deserialized from disk (measured only, never shipped)
    from jax.experimental import serialize_executable as se
    import pickle
    names = [a for a in range(len(args)) if not isinstance(args[a], str)]
    dynamic = tuple(args[i] for i in names)
    consts = {i: args[i] for i in range(len(args)) if i not in names}
    def call(*values):
        full, it = [], iter(values)
        for i in range(len(args)):
            full.append(consts[i] if i in consts else next(it))
        return source(*full)
    if mode == "floor-write":
        compiled = jax.jit(call).lower(*dynamic).compile()
        lapack = "lapack" in compiled.as_text().lower()
        with open(floor_file, "wb") as f:
            pickle.dump((se.serialize(compiled), lapack), f)
        sys.exit(0)
    start = time.perf_counter()
    with open(floor_file, "rb") as f:
        (payload, in_tree, out_tree), lapack = pickle.load(f)
    if lapack:  # what the executable needs to run: part of the floor
        from hatch_jaxexport.runtime._jaxcompat import initialize_lapack
        initialize_lapack()
    compiled = se.deserialize_and_load(payload, in_tree, out_tree)
    jax.block_until_ready(compiled(*dynamic))
else:
    target = source if mode == "source" else loaded
    start = time.perf_counter()
    jax.block_until_ready(target(*args))
out["first_call_s"] = time.perf_counter() - start
if mode == "loaded":
    from hatch_jaxexport.runtime.loader import tiered_calls
    fn = {"grad_vjp": nn.mlp_loss, "grad_ad": nn.mlp_apply}.get(workload) or \
        workloads.WORKLOADS[workload]()[0]
    out["tiers"] = sorted(t for c in tiered_calls(fn) for t in c.tiers.values())
print(json.dumps(out))
'''


def sh(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], env={**os.environ, **(env or {})}, cwd=cwd,
                          text=True, capture_output=True)
    if proc.returncode:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")
    return proc.stdout


def build_variants(work: Path) -> dict[str, dict]:
    """example_pkg's wheel per executables setting: path, size, build time, executables."""
    wheels = work / "wheels"
    sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, ROOT])
    built = {}
    for name, targets in VARIANTS.items():
        source = work / f"example_pkg-{name}"
        shutil.copytree(ROOT / "example_pkg", source,
                        ignore=shutil.ignore_patterns("__pycache__", "_jaxexport"))
        if targets:
            pyproject = source / "pyproject.toml"
            pyproject.write_text(pyproject.read_text().replace(
                "jobs = 2", f"jobs = 2\nexecutables = {json.dumps(targets)}"))
        out = work / f"dist-{name}"
        start = time.perf_counter()
        sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
            "-w", out, source])
        seconds = time.perf_counter() - start
        (wheel,) = out.glob("example_pkg-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            xla = [i for i in archive.infolist() if i.filename.endswith(".xla")]
        built[name] = {"wheel": str(wheel), "bytes": wheel.stat().st_size,
                       "build_s": seconds, "executables": len(xla),
                       "executable_bytes": sum(i.file_size for i in xla)}
        print(f"  built {name}: {wheel.stat().st_size:,} bytes, {len(xla)} executables, "
              f"{seconds:.1f} s", flush=True)
    return built


def install(work: Path, wheel: str) -> Path:
    venv = work / "venv"
    sh([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    sh([python, "-m", "pip", "install", "-q", "--find-links", work / "wheels", wheel])
    return python


def probe(python: Path, work: Path, mode: str, workload: str) -> dict:
    env = {"HATCH_JAXEXPORT_CACHE": "0", "JAX_PLATFORMS": "cpu",
           "HATCH_JAXEXPORT_EXECUTABLES": "0" if mode == "stablehlo" else "1"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    floor = work / f"floor-{workload}.pkl"
    probe_mode = {"stablehlo": "loaded", "shipped": "loaded"}.get(mode, mode)
    out = sh([python, work / "probe.py", probe_mode, workload, floor], env=env, cwd=work)
    return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}


def measure(python: Path, work: Path, runs: int) -> dict[str, dict[str, list[float]]]:
    (work / "probe.py").write_text(PROBE)
    results: dict[str, dict[str, list[float]]] = {}
    for workload in WORKLOADS:
        probe(python, work, "floor-write", workload)
        results[workload] = {mode: [] for mode in MODES}
        for _ in range(runs):
            for mode in MODES:  # interleaved: machine load hits every mode alike
                found = probe(python, work, mode, workload)
                results[workload][mode].append(found["first_call_s"] * 1e3)
                if "tiers" in found:
                    results[workload].setdefault(f"{mode}_tiers", found["tiers"])
        print(f"  {workload}: " + ", ".join(
            f"{m} {statistics.median(results[workload][m]):.0f} ms" for m in MODES), flush=True)
    return results


def tables(built: dict, results: dict) -> list[str]:
    med = statistics.median
    lines = ["| wheel | size | executables | their bytes | build time |",
             "|---|---:|---:|---:|---:|"]
    for name, b in built.items():
        lines.append(f"| {name} | {b['bytes']:,} | {b['executables']} | "
                     f"{b['executable_bytes']:,} | {b['build_s']:.1f} s |")
    lines += ["", "First call in a fresh process, every cache empty, ms: median (min-max)", "",
              "| workload | " + " | ".join(MODES) + " | shipped/floor | shipped/source | "
              "stablehlo/source | shipped tier |", "|---|" + "---:|" * (len(MODES) + 3) + "---|"]
    for workload, by_mode in results.items():
        cells = [f"{med(by_mode[m]):.0f} ({min(by_mode[m]):.0f}-{max(by_mode[m]):.0f})"
                 for m in MODES]
        ratios = [med(by_mode["shipped"]) / med(by_mode["floor"]),
                  med(by_mode["shipped"]) / med(by_mode["source"]),
                  med(by_mode["stablehlo"]) / med(by_mode["source"])]
        tier = ",".join(by_mode.get("shipped_tiers", [])) or "-"
        lines.append(f"| {workload} | " + " | ".join(cells) + " | " +
                     " | ".join(f"{r:.2f}" for r in ratios) + f" | {tier} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jaxexport-executables-") as tmp:
        work = Path(tmp)
        print("building example_pkg's wheel with and without executables", flush=True)
        built = build_variants(work)
        python = install(work, built["both"]["wheel"])
        print("measuring first calls in fresh processes, caches empty", flush=True)
        results = measure(python, work, options.runs)
    lines = tables(built, results)
    print("\n".join(lines))
    if options.write_docs:
        page = ROOT / "docs" / "performance-results.md"
        text = page.read_text()
        marker = "\n## Precompiled executables\n"
        text = text.split(marker)[0].rstrip() + "\n" + marker + "\n" + \
            "`python benchmarks/executables.py --runs " + str(options.runs) + \
            " --write-docs` on the machine the page was written on.\n\n" + \
            "\n".join(lines) + "\n"
        page.write_text(text)


if __name__ == "__main__":
    main()
