"""Cold start, side by side in one run: source jit vs baked artifacts, cache cold and warm.

    python benchmarks/cold_start.py [--runs 5] [--quick] [--workloads tiny,mlp] [--write-docs]
                                    [--steady-only] [--jax-cache]

Builds this project's wheel and ``example_pkg``'s wheel (baked by the Hatch hook), installs both
into a fresh virtual environment, then measures each workload of ``example_pkg.benchmarks`` in
fresh processes (medians of ``--runs``, with min and max):

1. source ``jax.jit``, no compile cache (what users do today);
2. source ``jax.jit`` with JAX's persistent compilation cache warm;
3. the installed wheel's artifacts, first process on the machine (caches cold), as shipped:
   tiered compilation where the loader's default turns it on;
3u. the same with tiering off (``HATCH_JAXEXPORT_TIERED=0``);
3t. the same with tiering forced on (``HATCH_JAXEXPORT_TIERED=1``), and the time until the
    optimized executable took over;
4. the installed wheel's artifacts, caches warm (the executable cache hit);
5. the floor: a compiled executable deserialized from disk, plus the LAPACK initialisation it
   needs (measured only, never shipped).

Then the import cost, the steady-state per-call time (tiny), peak memory of 3 vs 1, and the
ratios the project targets. ``--workloads`` measures only the workloads it names (the warm
second process against the floor of tiny and mlp takes minutes, not the whole run's tens).
``--write-docs`` writes ``docs/performance-results.md`` and a plot.

``--jax-cache`` measures instead what JAX's persistent compilation cache adds to the loader's
executable cache: the first call of the loaded ``mlp_loss`` eagerly, under ``jax.jit``, through
eager ``jax.grad`` and ``jax.jit(jax.grad(...))``, in a first process (caches empty) and in a
second one, by default (no jax config changed) and with ``HATCH_JAXEXPORT_JAX_CACHE=1``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).resolve().parent / "_probe.py"
MODES = [("1 source", "source", "nocache"), ("2 source+cache", "source", "warm"),
         ("3 loaded cold", "loaded", "cold"), ("3u cold untiered", "loaded", "cold-untiered"),
         ("3t cold tiered", "loaded", "cold-tiered"), ("4 loaded warm", "loaded", "warm"),
         ("5 floor", "floor", "floor")]
#: ``example_pkg.benchmarks``' workloads, in the order the tables list them.
WORKLOADS = ["tiny", "mlp", "solve", "deep", "trace_heavy"]


def sh(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, env={**os.environ, **(env or {})}, cwd=cwd, text=True,
                          capture_output=True)
    if proc.returncode:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def prepare(work: Path) -> Path:
    """A venv with hatch-jaxexport and the baked example_pkg wheel installed; its python."""
    wheels = work / "wheels"
    sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)])
    sh([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
        str(ROOT / "example_pkg")], env={"PIP_FIND_LINKS": str(wheels)})
    venv = work / "venv"
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if Path(uv).exists():
        sh([uv, "venv", "-q", str(venv), "-p", sys.executable])
        sh([uv, "pip", "install", "-q", "--compile-bytecode", "-p", str(venv / "bin" / "python"),
            "--find-links",
            str(wheels), "hatch-jaxexport", "example-pkg"])
    else:
        sh([sys.executable, "-m", "venv", str(venv)])
        sh([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--find-links",
            str(wheels), "hatch-jaxexport", "example-pkg"])
    return venv / "bin" / "python"


def probe(python: Path, mode: str, workload: str, env: dict[str, str], *extra: str) -> dict:
    out = sh([str(python), str(PROBE), mode, workload, *extra], env=env, cwd=PROBE.parent)
    return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}


def measure(python: Path, work: Path, workloads: list[str], runs: int) -> dict:
    base = {"JAX_PLATFORMS": "cpu"}
    results: dict = {"first_call": {}, "rss": {}, "tier": {}, "tiers_used": {}}
    for workload in workloads:
        jax_warm = work / f"jaxcache-{workload}"
        ours_warm = work / f"ourcache-{workload}"
        floor = work / f"floor-{workload}.bin"
        source_warm = {"JAX_COMPILATION_CACHE_DIR": str(jax_warm),
                       "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                       "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
        probe(python, "source", workload, {**base, **source_warm})  # warm jax's cache
        probe(python, "loaded", workload, {**base, "XDG_CACHE_HOME": str(ours_warm),
                                           "HATCH_JAXEXPORT_TIERED": "0"})  # warm ours
        probe(python, "floor-write", workload, base, str(floor))
        for label, mode, cache in MODES:
            times, rss, tiers, used = [], [], [], []
            for run in range(runs):
                env = dict(base, HATCH_JAXEXPORT_CACHE="0")
                if cache == "warm" and mode == "source":
                    env = {**base, **source_warm}
                elif cache == "warm":
                    env = {**base, "XDG_CACHE_HOME": str(ours_warm)}
                elif cache.startswith("cold"):
                    cold = work / f"cold-{workload}-{label.split()[0]}-{run}"
                    env = {**base, "XDG_CACHE_HOME": str(cold)}
                    if cache == "cold-tiered":
                        env["HATCH_JAXEXPORT_TIERED"] = "1"
                    elif cache == "cold-untiered":
                        env["HATCH_JAXEXPORT_TIERED"] = "0"
                extra = (str(floor),) if mode == "floor" else ()
                out = probe(python, mode, workload, env, *extra)
                if out.get("traced"):
                    raise SystemExit(f"{workload}: the loaded function traced its source")
                times.append(out["first_call_s"])
                rss.append(out["peak_rss_mb"])
                used.append(out.get("tier", ""))
                if "optimized_after_s" in out and cache == "cold-tiered":
                    tiers.append(out["optimized_after_s"])
            results["first_call"].setdefault(workload, {})[label] = times
            results["rss"].setdefault(workload, {})[label] = rss
            results["tiers_used"].setdefault(workload, {})[label] = sorted(set(used))
            if tiers:
                results["tier"][workload] = tiers
            print(f"  {workload:12s} {label:24s} median {statistics.median(times) * 1e3:8.1f} ms"
                  f"  {','.join(sorted(set(used)))}", flush=True)
    imports = [probe(python, "import", workloads[0], base) for _ in range(runs)]
    results["import_pkg_ms"] = [i["import_pkg_s"] * 1e3 for i in imports]
    results["import_jax_ms"] = [i["import_jax_s"] * 1e3 for i in imports]
    results["steady_us"] = measure_steady(python, work, "tiny")
    return results


def measure_steady(python: Path, work: Path, workload: str) -> dict[str, float]:
    """Per-call time once the executable is in: loaded vs ``jax.jit`` (median of 3 processes)."""
    env = {"JAX_PLATFORMS": "cpu", "XDG_CACHE_HOME": str(work / "steady"),
           "HATCH_JAXEXPORT_TIERED": "0"}  # the optimized executable, as after the switch
    runs = [probe(python, "steady", workload, env) for _ in range(3)]
    return {"jit": med([s["jit_call_us"] for s in runs]),
            "loaded": med([s["loaded_call_us"] for s in runs]),
            "compiled": med([s["compiled_call_us"] for s in runs])}


#: ``--jax-cache`` columns: label, the loader's settings, whether a process ran before.
JAX_CACHE_COLUMNS = [("1st process, default", {}, False),
                     ("2nd process, default", {}, True),
                     ("1st process, HATCH_JAXEXPORT_JAX_CACHE=1",
                      {"HATCH_JAXEXPORT_JAX_CACHE": "1"}, False),
                     ("2nd process, HATCH_JAXEXPORT_JAX_CACHE=1",
                      {"HATCH_JAXEXPORT_JAX_CACHE": "1"}, True)]
#: ``--jax-cache`` rows: the probe's mode and how the row names the path.
JAX_CACHE_ROWS = [("eager", "`mlp_loss(...)` eager"), ("jit", "`jax.jit(mlp_loss)`"),
                  ("grad", "`jax.grad(mlp_loss)` eager"),
                  ("jit_grad", "`jax.jit(jax.grad(mlp_loss))`")]


def measure_jax_cache(python: Path, work: Path, runs: int) -> list[str]:
    """First-call medians (ms) of each path of ``JAX_CACHE_ROWS`` under each of
    ``JAX_CACHE_COLUMNS``: a markdown table. Each first process gets an empty cache folder; a
    second process shares one with a process that made the same call before it."""
    base = {"JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_EXECUTABLES": "0"}
    lines = ["| first call of the loaded function | " +
             " | ".join(label for label, _, _ in JAX_CACHE_COLUMNS) + " |",
             "|---|" + "---:|" * len(JAX_CACHE_COLUMNS)]
    for mode, name in JAX_CACHE_ROWS:
        cells = []
        for number, (label, settings, second) in enumerate(JAX_CACHE_COLUMNS):
            times = []
            for run in range(runs):
                folder = work / f"jaxcache-{mode}-{number}-{0 if second else run}"
                env = {**base, **settings, "XDG_CACHE_HOME": str(folder)}
                if second and run == 0:
                    probe(python, mode, "mlp", env)  # the process before
                out = probe(python, mode, "mlp", env)
                if out["jax_cache"] != bool(settings):
                    raise SystemExit(f"{mode} {label}: jax's cache on is {out['jax_cache']}")
                times.append(out["first_call_s"] * 1e3)
            cells.append(f"{med(times):.0f} ({min(times):.0f}-{max(times):.0f})")
            print(f"  {mode:9s} {label:42s} median {med(times):8.1f} ms", flush=True)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def med(values: list[float]) -> float:
    return statistics.median(values)


def report(results: dict) -> list[str]:
    lines = ["| workload | " + " | ".join(label for label, _, _ in MODES) + " |",
             "|---|" + "---:|" * len(MODES)]
    for workload, by_mode in results["first_call"].items():
        cells = [f"{med(v) * 1e3:.0f} ({min(v) * 1e3:.0f}-{max(v) * 1e3:.0f})"
                 for v in (by_mode[label] for label, _, _ in MODES)]
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    lines += ["", "First call in ms: median (min-max) of fresh processes. Column 3 is what a "
              "user gets by default (its tier per workload below). \"4/5, import included\" "
              "adds `import example_pkg` (its median below) to both: a second process "
              "imports the package, then loads its executable.", "",
              "| workload | default tier | 4/5 (target <= 1.5) | 4/5, import included | "
              "4/2 (target <= 0.5 trace-heavy) | 3/1 (target <= 0.8; <= 0.3 trace-heavy) | "
              "3u/1 untiered | 3t/1 tiered | optimized in after | 3 RSS / 1 RSS |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    imported = med(results["import_pkg_ms"]) / 1e3  # the package's import, on both sides
    for workload, m in results["first_call"].items():
        r = {k: med(v) for k, v in m.items()}
        rss = {k: med(v) for k, v in results["rss"][workload].items()}
        waits = results["tier"].get(workload)
        after = f"{med(waits):.2f} s" if waits else "-"
        default = ",".join(results["tiers_used"][workload]["3 loaded cold"])
        lines.append(
            f"| {workload} | {default} | {r['4 loaded warm'] / r['5 floor']:.2f} | "
            f"{(imported + r['4 loaded warm']) / (imported + r['5 floor']):.2f} | "
            f"{r['4 loaded warm'] / r['2 source+cache']:.2f} | "
            f"{r['3 loaded cold'] / r['1 source']:.2f} | "
            f"{r['3u cold untiered'] / r['1 source']:.2f} | "
            f"{r['3t cold tiered'] / r['1 source']:.2f} | {after} | "
            f"{rss['3 loaded cold'] / rss['1 source']:.2f} |")
    added = med(results["import_pkg_ms"])
    steady = results["steady_us"]
    lines += ["", f"- `import example_pkg` after `import jax`: {added:.1f} ms (target <= 5 ms; "
              f"`import jax`: {med(results['import_jax_ms']):.0f} ms)",
              f"- steady state per call (tiny, with its static argument): loaded "
              f"{steady['loaded']:.1f} us vs `jax.jit` {steady['jit']:.1f} us = "
              f"{steady['loaded'] / steady['jit']:.2f}x (target <= 1.1x); the compiled executable"
              f" it runs, called directly: {steady['compiled']:.1f} us = "
              f"{steady['compiled'] / steady['jit']:.2f}x"]
    return lines


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(results["first_call"])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(MODES)
    for i, (label, _, _) in enumerate(MODES):
        values = [med(results["first_call"][w][label]) * 1e3 for w in workloads]
        ax.bar([x + i * width for x in range(len(workloads))], values, width, label=label)
    ax.set_xticks([x + width * (len(MODES) - 1) / 2 for x in range(len(workloads))], workloads)
    ax.set_ylabel("first call, ms (median, fresh process)")
    ax.set_yscale("log")
    ax.set_title("Time to first result: source jit vs baked artifacts")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 runs, tiny and trace-heavy only")
    parser.add_argument("--workloads", type=lambda text: text.split(","), default=None,
                        help=f"comma-separated, of {','.join(WORKLOADS)} (default: all)")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--steady-only", action="store_true",
                        help="only the steady-state per-call time, of every workload")
    parser.add_argument("--jax-cache", action="store_true",
                        help="only what JAX's persistent cache adds to the loader's own: first "
                             "calls (eager, jit, grad, jit of grad) with and without it")
    args = parser.parse_args()
    unknown = sorted(set(args.workloads or ()) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}: of {', '.join(WORKLOADS)}")
    if args.write_docs and args.workloads:
        parser.error("--write-docs writes the results page of every workload: no --workloads")
    if args.write_docs and importlib.util.find_spec("matplotlib") is None:
        parser.error("--write-docs draws docs/performance.png with matplotlib, which this "
                     "interpreter lacks: pip install matplotlib (asked before measuring)")
    with tempfile.TemporaryDirectory(prefix="jaxexport-bench-") as tmp:
        work = Path(tmp)
        print("building wheels and a fresh venv...", flush=True)
        python = prepare(work)
        if args.steady_only:
            print("| workload | `jax.jit` us | loaded us | loaded / jit | executable us |\n"
                  "|---|---:|---:|---:|---:|")
            for workload in args.workloads or WORKLOADS:
                r = measure_steady(python, work, workload)
                print(f"| {workload} | {r['jit']:.1f} | {r['loaded']:.1f} | "
                      f"{r['loaded'] / r['jit']:.2f} | {r['compiled']:.1f} |", flush=True)
            return
        if args.jax_cache:
            print("\n".join(measure_jax_cache(python, work, args.runs)))
            return
        workloads = args.workloads or (["tiny", "trace_heavy"] if args.quick else WORKLOADS)
        results = measure(python, work, workloads, 3 if args.quick else args.runs)
    lines = report(results)
    print("\n".join(lines))
    if args.write_docs:
        docs = ROOT / "docs"
        page = docs / "performance-results.md"
        # benchmarks/executables.py writes the section from this heading on: keep it
        marker = "\n## Precompiled executables\n"
        kept = marker + page.read_text().split(marker, 1)[1] if page.exists() and \
            marker in page.read_text() else ""
        page.write_text(
            "# Benchmark results\n\nMeasured by `python benchmarks/cold_start.py --write-docs` on "
            "a 2-core CPU machine.\n\n![first call](performance.png)\n\n" + "\n".join(lines) +
            "\n" + kept)
        plot(results, docs / "performance.png")
        (docs / "performance-results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
