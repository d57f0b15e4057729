"""Precompiled executables, side by side in one run: a fresh machine's first calls.

    python benchmarks/executables.py [--runs 3] [--write-docs]

1. Builds ``example_pkg``'s wheel four times (``pip wheel``, no build isolation, the same
   interpreter): executables off, each x86-64 target alone, and both targets; reports each
   wheel's size and build time (a table).
2. Installs the wheel with both targets into a fresh virtual environment.
3. Measures each workload of ``example_pkg.benchmarks`` and ``jax.grad`` of ``mlp_loss``
   (``vjp_order=1``) and of ``mlp_apply``'s loss (``ad_order`` family), and ``mlp_loss_and_grad``
   (``jax.value_and_grad`` of the loss, itself decorated: ``grad_decorated``, against the
   source's ``jax.jit(jax.grad(...))``) in fresh processes, every cache empty (a machine that
   never ran the package), medians of ``--runs`` with min and max:

   - ``source``: ``jax.jit`` of the Python body (``jax.jit(jax.grad(...))`` for the gradients);
   - ``source_eager`` (the gradients): the same eager ``jax.grad`` of a plain library's
     jitted function (``jax.grad(jax.jit(f))``): two programs and jax's eager operations, the
     work an eager gradient does without executables, which ``stablehlo`` is compared with;
   - ``jax_export`` (the gradients): jax's own runtime of the same StableHLO, no loader: the
     function exported by ``jax.export`` with its VJP (``vjp_order=1``), deserialized and
     called under the same eager ``jax.grad``;
   - ``stablehlo``: the installed artifacts with shipped executables ignored
     (``HATCH_JAXEXPORT_EXECUTABLES=0``): compiled on the first call;
   - ``shipped``: the installed artifacts, shipped executables used where they match;
   - ``floor``: an executable of the same computation deserialized from disk and run
     (for the gradients: ``jax.jit(jax.grad(...))`` as one executable);
   - ``eager_floor`` (the gradients): what an eager ``jax.grad`` runs at the least, the
     function's and its VJP's executables deserialized from disk under a ``jax.custom_vjp``, no
     loader, jax's own eager seed included.

4. For the gradients, without shipped executables and with the caches on as a user has them:
   a first process on an empty cache and a second one right after it, against the source with
   jax's persistent cache (every entry kept), with the XLA compiles each process ran: the
   loaded function with the loader's caches only (the default), and with jax's persistent
   cache too, as a user who configured it for the source has it for every library (it also
   keeps the eager operations jax compiles around an eager ``jax.grad``); and the second
   process's floor: ``eager_floor`` with jax's persistent cache (both executables at hand,
   jax's eager operations from its cache); and the caller's same eager ``jax.grad`` on the
   plain library (``source_eager``) with jax's persistent cache, first and second process.

5. Each argument kind a scalar ``float32[]`` input is given as (a Python float, numpy scalars
   of both widths, 0-d arrays, jax arrays, weak-typed or not): which tier served the first
   call (``call_report()``) and its time against the source's.

Then the ratios the issue targets: shipped / floor and shipped / source; for the gradients
also ``stablehlo`` against ``source + jax's eager ops``: the source's one program plus what an
eager ``jax.grad`` adds to any gradient (``eager_floor - floor``: jax's seed and the caller's
eager operations, each lowered and compiled in the process): what an eager gradient compiled
on the machine costs at the least, give or take the source's tracing (its VJP's program is the
source's forward and backward). ``--write-docs`` appends the tables to
``docs/performance-results.md`` under "Precompiled executables".
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"off": None, "x86_64-avx2": ["x86_64-avx2"], "x86_64-avx512": ["x86_64-avx512"],
            "both": ["x86_64-avx2", "x86_64-avx512"]}
WORKLOADS = ["tiny", "mlp", "solve", "deep", "trace_heavy", "grad_vjp", "grad_ad",
             "grad_decorated"]
MODES = ["source", "source_eager", "jax_export", "stablehlo", "shipped", "floor", "eager_floor"]
#: The modes measured for the gradients only.
GRAD_MODES = ("source_eager", "jax_export", "eager_floor")
GRADS = ("grad_vjp", "grad_ad")

PROBE = r'''
import json, os, sys, time
mode, workload, floor_file = sys.argv[1], sys.argv[2], sys.argv[3]
start_all = time.perf_counter()
import jax, numpy as np
compiles, hits = [], []  # XLA compiles in this process; jax times a persistent-cache hit
jax.monitoring.register_event_duration_secs_listener(  # as a compile too: count those apart
    lambda event, secs, **kw: compiles.append(event)
    if event == "/jax/core/compile/backend_compile_duration" else None)
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(event)
    if event == "/jax/compilation_cache/cache_hits" else None)
import example_pkg.benchmarks as workloads
from example_pkg import nn


def case():
    """(loaded function, source function, arguments) of the workload."""
    if workload == "grad_vjp":  # jax.grad of a vjp_order=1 function (jax's own VJP)
        params, x = nn.init_mlp(0), np.ones((32, 8), np.float32)
        y = np.zeros((32, 4), np.float32)
        return (jax.grad(nn.mlp_loss), jax.jit(jax.grad(nn.mlp_loss.__wrapped__)),
                (params, x, y))
    if workload == "grad_decorated":  # the gradient function itself decorated: one executable
        params, x = nn.init_mlp(0), np.ones((32, 8), np.float32)
        y = np.zeros((32, 4), np.float32)
        return (nn.mlp_loss_and_grad, jax.jit(jax.grad(nn.mlp_loss.__wrapped__)),
                (params, x, y))
    if workload == "grad_ad":  # jax.grad through the family (mlp_apply bakes ad_order)
        params, x = nn.init_mlp(0), np.ones((32, 8), np.float32)
        loaded = jax.grad(lambda p, v: nn.mlp_apply(p, v).sum())
        source = jax.jit(jax.grad(lambda p, v: nn.mlp_apply.__wrapped__(p, v).sum()))
        return loaded, source, (params, x)
    fn, args = workloads.WORKLOADS[workload]()
    static = tuple(fn.export_spec.static)
    return fn, jax.jit(fn.__wrapped__, static_argnames=static), args


def eager_parts():
    """(body, post, primals) of a gradient: the function's Python body, what the caller does
    with its result, and the arguments the eager ``jax.grad`` runs on."""
    body, post = {"grad_vjp": (nn.mlp_loss.__wrapped__, lambda r: r),
                  "grad_ad": (nn.mlp_apply.__wrapped__, lambda r: r.sum())}[workload]
    return body, post, (args[:2] if workload == "grad_ad" else args)


loaded, source, args = case()
out = {}
if mode == "source-eager":  # a plain library's jitted function under an eager jax.grad
    body, post, primals = eager_parts()
    jitted = jax.jit(body)
    start = time.perf_counter()
    jax.block_until_ready(jax.grad(lambda *p: post(jitted(*p)))(*primals))
elif mode in ("jax-export-write", "jax-export"):
    # jax's own runtime of the same StableHLO: the function exported by jax.export with its VJP
    # (vjp_order=1), deserialized and called under the same eager jax.grad, no loader
    body, post, primals = eager_parts()
    if mode == "jax-export-write":
        exported = jax.export.export(jax.jit(body))(*primals)
        with open(floor_file + ".jxe", "wb") as f:
            f.write(exported.serialize(vjp_order=1))
        sys.exit(0)
    start = time.perf_counter()
    with open(floor_file + ".jxe", "rb") as f:
        exported = jax.export.deserialize(bytearray(f.read()))
    jax.block_until_ready(jax.grad(lambda *p: post(exported.call(*p)))(*primals))
elif mode in ("eager-floor-write", "eager-floor"):
    # an eager jax.grad's floor: the same two executables a loader runs (the function's and its
    # VJP's, from its Python body) deserialized from disk under a jax.custom_vjp, no loader
    from jax.experimental import serialize_executable as se
    import pickle
    body, post, primals = eager_parts()
    leaves, tree = jax.tree_util.tree_flatten(primals)
    flat_body = lambda *ls: body(*jax.tree_util.tree_unflatten(tree, ls))
    if mode == "eager-floor-write":
        fwd = jax.jit(flat_body).lower(*leaves).compile()
        ct = np.ones(fwd.out_info.shape, fwd.out_info.dtype)
        bwd = jax.jit(lambda *a: jax.vjp(flat_body, *a[:-1])[1](a[-1])).lower(
            *leaves, ct).compile()
        with open(floor_file + ".eager", "wb") as f:
            pickle.dump((se.serialize(fwd), se.serialize(bwd)), f)
        sys.exit(0)
    start = time.perf_counter()
    with open(floor_file + ".eager", "rb") as f:
        fwd_blob, bwd_blob = pickle.load(f)
    fwd, bwd = se.deserialize_and_load(*fwd_blob), se.deserialize_and_load(*bwd_blob)
    g = jax.custom_vjp(lambda *ls: fwd(*ls))
    g.defvjp(lambda *ls: (fwd(*ls), ls), lambda res, ct: tuple(bwd(*res, ct)))
    grad = jax.grad(lambda *p: post(g(*jax.tree_util.tree_leaves(p))))  # as loaded: argnums 0
    jax.block_until_ready(grad(*primals))
elif mode in ("floor-write", "floor"):
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
        from hatch_jaxexport.runtime.jaxcompat import initialize_lapack
        initialize_lapack()
    compiled = se.deserialize_and_load(payload, in_tree, out_tree)
    jax.block_until_ready(compiled(*dynamic))
else:
    target = source if mode == "source" else loaded
    start = time.perf_counter()
    jax.block_until_ready(target(*args))
out["first_call_s"] = time.perf_counter() - start
out["compiles"] = len(compiles) - len(hits)
if mode == "loaded":  # how each first call was served: the public report
    fn = {"grad_vjp": nn.mlp_loss, "grad_ad": nn.mlp_apply,
          "grad_decorated": nn.mlp_loss_and_grad}.get(workload) or \
        workloads.WORKLOADS[workload]()[0]
    out["tiers"] = sorted(served.tier for served in fn.call_report())
print(json.dumps(out))
'''


#: Argument kind -> the expression of the scalar ``rate`` passed to ``finance.discounted_sum``,
#: whose artifact takes a plain ``float32[]`` (``tests/unit/runtime/call/test_argument_kinds.py``).
KINDS = {
    "python float": "0.05",
    "0-d float32 array": "np.asarray(0.05, np.float32)",
    "0-d float64 array": "np.asarray(0.05)",
    "numpy float32 scalar": "np.float32(0.05)",
    "numpy float64 scalar": "np.float64(0.05)",
    "jax float32": "jnp.float32(0.05)",
    "jax weak-typed": "jnp.asarray(0.05)",
}

KIND_PROBE = r'''
import json, sys, time
import numpy as np, jax, jax.numpy as jnp
from example_pkg import finance
mode, rate = sys.argv[1], eval(sys.argv[2])  # made before the clock starts, like an argument
cashflows = np.linspace(1.0, 2.0, 12, dtype=np.float32)
fn = finance.discounted_sum if mode == "loaded" else jax.jit(finance.discounted_sum.__wrapped__)
start = time.perf_counter()
jax.block_until_ready(fn(cashflows, rate))
out = {"first_call_s": time.perf_counter() - start}
if mode == "loaded":
    (served,) = fn.call_report()
    out.update(tier=served.tier, not_shipped=served.not_shipped)
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


def probe(python: Path, work: Path, mode: str, workload: str, **extra: str) -> dict:
    env = {"HATCH_JAXEXPORT_CACHE": "0", "JAX_PLATFORMS": "cpu",
           "HATCH_JAXEXPORT_EXECUTABLES": "0" if mode == "stablehlo" else "1", **extra}
    floor = work / f"floor-{workload}.pkl"
    probe_mode = "loaded" if mode in ("stablehlo", "shipped") else mode.replace("_", "-")
    out = sh([python, work / "probe.py", probe_mode, workload, floor], env=env, cwd=work)
    return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}


def cache_pairs(python: Path, work: Path, workload: str, run: int) -> dict[str, float]:
    """Without shipped executables, caches on as a user has them: a first process on an empty
    cache, then a second right after it. Source: ``jax.jit`` with jax's persistent cache (every
    entry kept); loaded: the loader's own caches (``HATCH_JAXEXPORT_CACHE``), and those with
    jax's persistent cache too (a folder of its own); and the eager floor (``eager_floor``)
    with jax's persistent cache: what a second process's eager ``jax.grad`` costs when both
    executables are at hand and jax's own eager operations come from its cache; and, with
    jax's persistent cache too, the same eager ``jax.grad`` of a plain library's jitted
    function (``source_eager``): the caller's code unchanged, on the library before it
    adopted the loader."""
    def jax_cache(name: str) -> dict[str, str]:
        return {"JAX_COMPILATION_CACHE_DIR": str(work / f"jax-cache-{name}-{workload}-{run}"),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}

    def ours(name: str) -> dict[str, str]:
        return {"HATCH_JAXEXPORT_CACHE": str(work / f"our-cache-{name}-{workload}-{run}")}
    found = {}
    for name, mode, env in (("source_cache", "source", jax_cache("source")),
                            ("eager_cache", "source_eager", jax_cache("eager")),
                            ("loaded_cache", "stablehlo", ours("loaded")),
                            ("both_cache", "stablehlo", {**ours("both"), **jax_cache("both")}),
                            ("floor_cache", "eager_floor", jax_cache("floor"))):
        for phase in ("cold", "warm"):
            result = probe(python, work, mode, workload, **env)
            found[f"{name}_{phase}"] = result["first_call_s"] * 1e3
            found[f"{name}_{phase}_compiles"] = result["compiles"]
    return found


def measure(python: Path, work: Path, runs: int) -> dict[str, dict[str, list[float]]]:
    (work / "probe.py").write_text(PROBE)
    results: dict[str, dict[str, list[float]]] = {}
    for workload in WORKLOADS:
        probe(python, work, "floor-write", workload)
        modes = [m for m in MODES if workload in GRADS or m not in GRAD_MODES]
        if workload in GRADS:
            probe(python, work, "eager-floor-write", workload)
            probe(python, work, "jax-export-write", workload)
        results[workload] = {mode: [] for mode in modes}
        for _ in range(runs):
            for mode in modes:  # interleaved: machine load hits every mode alike
                found = probe(python, work, mode, workload)
                results[workload][mode].append(found["first_call_s"] * 1e3)
                if "tiers" in found:
                    results[workload].setdefault(f"{mode}_tiers", found["tiers"])
            if workload in GRADS:
                for key, value in cache_pairs(python, work, workload, len(
                        results[workload]["source"])).items():
                    results[workload].setdefault(key, []).append(value)
        print(f"  {workload}: " + ", ".join(
            f"{m} {statistics.median(results[workload][m]):.0f} ms" for m in modes), flush=True)
    return results


def measure_kinds(python: Path, work: Path, runs: int) -> dict[str, dict[str, Any]]:
    """Each argument kind of ``KINDS``: the first call of the installed function (shipped
    executables on) and of the source ``jax.jit``, fresh processes, caches empty; the tier."""
    (work / "kind_probe.py").write_text(KIND_PROBE)
    env = {**os.environ, "HATCH_JAXEXPORT_CACHE": "0", "JAX_PLATFORMS": "cpu"}
    found: dict[str, dict[str, Any]] = {kind: {"loaded": [], "source": []} for kind in KINDS}
    for _ in range(runs):
        for kind, expression in KINDS.items():  # interleaved, as the workloads
            for mode in ("loaded", "source"):
                out = json.loads(sh([python, work / "kind_probe.py", mode, expression],
                                    env=env, cwd=work).strip().splitlines()[-1])
                found[kind][mode].append(out["first_call_s"] * 1e3)
                if mode == "loaded":
                    found[kind]["tier"] = out["tier"]
                    found[kind]["not_shipped"] = out["not_shipped"]
    return found


def kinds_table(kinds: dict[str, dict[str, Any]]) -> list[str]:
    """One row per argument kind: which tier served it, its first call against the source."""
    med = statistics.median
    lines = ["", "Argument kinds: `finance.discounted_sum(cashflows, rate)`, `rate` a "
             "`float32[]` input given as each kind, shipped executables on, ms: median", "",
             "| argument kind | tier | loaded | source | loaded/source | why not shipped |",
             "|---|---|---:|---:|---:|---|"]
    for kind, row in kinds.items():
        loaded, source = med(row["loaded"]), med(row["source"])
        lines.append(f"| {kind} | {row['tier']} | {loaded:.0f} | {source:.0f} | "
                     f"{loaded / source:.2f} | {row['not_shipped'] or '-'} |")
    return lines

def tables(built: dict, results: dict) -> list[str]:
    med = statistics.median
    lines = ["| wheel | size | executables | their bytes | build time |",
             "|---|---:|---:|---:|---:|"]
    for name, b in built.items():
        lines.append(f"| {name} | {b['bytes']:,} | {b['executables']} | "
                     f"{b['executable_bytes']:,} | {b['build_s']:.1f} s |")
    lines += ["", "First call in a fresh process, every cache empty, ms: median (min-max)", "",
              "| workload | " + " | ".join(MODES) + " | shipped/floor | shipped/eager_floor | "
              "shipped/source | stablehlo/source | stablehlo/source_eager | "
              "stablehlo/jax_export | source + jax's eager ops | stablehlo/that | shipped tier |",
              "|---|" + "---:|" * (len(MODES) + 8) + "---|"]
    for workload, by_mode in results.items():
        cells = [f"{med(by_mode[m]):.0f} ({min(by_mode[m]):.0f}-{max(by_mode[m]):.0f})"
                 if m in by_mode else "-" for m in MODES]
        shipped = med(by_mode["shipped"])
        ratios = [f"{shipped / med(by_mode['floor']):.2f}",
                  f"{shipped / med(by_mode['eager_floor']):.2f}" if "eager_floor" in by_mode
                  else "-", f"{shipped / med(by_mode['source']):.2f}",
                  f"{med(by_mode['stablehlo']) / med(by_mode['source']):.2f}",
                  *(f"{med(by_mode['stablehlo']) / med(by_mode[m]):.2f}" if m in by_mode
                    else "-" for m in ("source_eager", "jax_export"))]
        if "eager_floor" in by_mode:  # the source's one program plus what jax's eager
            # jax.grad adds to any gradient (its seed and the caller's eager operations)
            eager_ops = med(by_mode["eager_floor"]) - med(by_mode["floor"])
            with_ops = med(by_mode["source"]) + eager_ops
            ratios += [f"{with_ops:.0f}", f"{med(by_mode['stablehlo']) / with_ops:.2f}"]
        else:
            ratios += ["-", "-"]
        tier = ",".join(by_mode.get("shipped_tiers", [])) or "-"
        lines.append(f"| {workload} | " + " | ".join(cells + ratios) + f" | {tier} |")
    return lines + cache_table(results)


def cache_table(results: dict) -> list[str]:
    """The gradients without shipped executables: a first and a second process, caches on."""
    med = statistics.median
    lines = ["", "Without shipped executables, caches on (empty before the first process), "
             "ms: median; XLA compiles in the process", "",
             "| workload | source 1st | loaded 1st | loaded/source 1st | source 2nd | "
             "loaded 2nd | loaded/source 2nd | compiles 1st: source, loaded | "
             "compiles 2nd: source, loaded | loaded 2nd, jax's cache too | its ratio | "
             "its compiles 2nd | eager floor 2nd, jax's cache | floor/source 2nd | "
             "loaded with jax's cache/floor 2nd | plain library's eager grad 2nd, jax's cache | "
             "loaded with jax's cache/that |",
             "|---|" + "---:|" * 6 + "---|---|---:|---:|---|" + "---:|" * 5]
    for workload, found in results.items():
        if "source_cache_cold" not in found:
            continue
        cold_s, cold_l = med(found["source_cache_cold"]), med(found["loaded_cache_cold"])
        warm_s, warm_l = med(found["source_cache_warm"]), med(found["loaded_cache_warm"])
        counts = [f"{max(found[f'source_cache_{p}_compiles'])}, "
                  f"{max(found[f'loaded_cache_{p}_compiles'])}" for p in ("cold", "warm")]
        warm_b, warm_f = med(found["both_cache_warm"]), med(found["floor_cache_warm"])
        warm_e = med(found["eager_cache_warm"])
        lines.append(f"| {workload} | {cold_s:.0f} | {cold_l:.0f} | {cold_l / cold_s:.2f} | "
                     f"{warm_s:.0f} | {warm_l:.0f} | {warm_l / warm_s:.2f} | {counts[0]} | "
                     f"{counts[1]} | {warm_b:.0f} | {warm_b / warm_s:.2f} | "
                     f"{max(found['both_cache_warm_compiles'])} | {warm_f:.0f} | "
                     f"{warm_f / warm_s:.2f} | {warm_b / warm_f:.2f} | {warm_e:.0f} | "
                     f"{warm_b / warm_e:.2f} |")
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
        print("measuring each argument kind of a scalar input", flush=True)
        kinds = measure_kinds(python, work, options.runs)
    lines = tables(built, results) + kinds_table(kinds)
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
