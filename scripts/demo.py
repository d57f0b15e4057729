#!/usr/bin/env python3
"""The hatch-jaxexport demo: bake exports into a wheel, install it, call it without tracing.

    python scripts/demo.py [--workdir DIR] [--installer auto|pip|uv]

1. builds hatch-jaxexport's own wheel, then ``example_pkg``'s wheel with an ordinary front end
   (``pip wheel`` or ``uv build``) and ``executables = true``: the Hatch hook exports every
   ``@exportable`` into it and compiles executables for this machine, for the sizes the
   package names (``executable_sizes=``, the sizes this demo calls);
2. installs that wheel into a fresh virtual environment (jax comes from the package index);
3. calls each function in fresh processes with tracing forbidden: ``HATCH_JAXEXPORT_STRICT=1``
   (no fallback to tracing) and every function body replaced by one that raises (so a body
   that ran, i.e. a trace, would show up): twice on the StableHLO path (shipped executables
   off: compiled in the first process, from the executable cache in the second), then once
   with the shipped executables, every cache empty;
4. calls the same functions traced from source (``jax.jit``) in another fresh process, and
   prints every first-call time and the largest difference between the results.

Needs only Python >= 3.11 and pip (uv is used when it is on PATH); everything else is
installed into the work folder (a temporary one unless ``--workdir`` is given).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_pkg"
PACKAGE = "example_pkg"


# -- the runner: executed inside the demo's venv, in a fresh process ---------------------------

def _cases() -> list[dict[str, Any]]:
    """The calls the demo makes: (label, function name, args, static kwargs, grad?)."""
    import numpy as np

    import example_pkg

    rng = np.random.default_rng(0)
    params = example_pkg.init_mlp(seed=0)
    f32 = np.float32
    a = (rng.standard_normal((6, 6)) + 6 * np.eye(6)).astype(f32)
    return [
        dict(label="mlp_apply, batch 5", fn="mlp_apply",
             args=(params, rng.standard_normal((5, 8)).astype(f32))),
        dict(label="mlp_apply, batch 1000", fn="mlp_apply",
             args=(params, rng.standard_normal((1000, 8)).astype(f32))),
        dict(label="grad of mlp_loss (vjp)", fn="mlp_loss", grad=True,
             args=(params, rng.standard_normal((32, 8)).astype(f32),
                   rng.standard_normal((32, 4)).astype(f32))),
        dict(label="solve, b of shape (n,)", fn="solve",
             args=(a, rng.standard_normal(6).astype(f32))),
        dict(label="solve, b of shape (n, k)", fn="solve",
             args=(a, rng.standard_normal((6, 3)).astype(f32))),
        dict(label="activate, kind='relu'", fn="activate",
             args=(rng.standard_normal((4, 7)).astype(f32),), static={"kind": "relu"}),
        dict(label="activate, kind='tanh'", fn="activate",
             args=(rng.standard_normal((4, 7)).astype(f32),), static={"kind": "tanh"}),
        dict(label="compound_growth, float64", fn="compound_growth",
             args=(np.full(10_000, 1e-4, np.float64),), x64=True),
        dict(label=f"deep_stack ({example_pkg.DEPTH} unrolled blocks)", fn="deep_stack",
             args=(rng.standard_normal((64, 16)).astype(f32),)),
    ]


def _forbidden(*args: Any, _name: str = "?", **kwargs: Any) -> Any:
    """Stands in for every function body: records the call and raises.

    Its code is swapped into the real functions, so it may use only locals and builtins (no
    closure, and the globals it sees are the package module's).
    """
    import builtins

    builtins._jaxexport_bodies_ran.append(_name)
    raise AssertionError(f"the body of {_name} ran: something traced it")


def forbid_bodies(package: str = PACKAGE) -> list[str]:
    """Replace each @exportable's Python body in ``package`` with ``_forbidden``.

    Returns the list that collects the names of functions whose body ran anyway.
    """
    import builtins

    from hatch_jaxexport.runtime.call.decorator import registered_in

    ran: list[str] = builtins.__dict__.setdefault("_jaxexport_bodies_ran", [])
    for fn in registered_in(package):
        # a decorated transformation (mlp_loss_and_grad: jax.value_and_grad of the loss) is
        # guarded through the function it wraps, the Python code that tracing would run
        source = inspect.unwrap(fn.__wrapped__)
        if getattr(source, "__closure__", None) is not None or not hasattr(source, "__code__"):
            raise SystemExit(f"demo: cannot guard {fn.name}: its body is not a plain function")
        if source.__code__ is _forbidden.__code__:
            continue  # guarded already, as the body of another decorated function
        source.__code__ = _forbidden.__code__
        source.__defaults__ = None
        source.__kwdefaults__ = {"_name": fn.name}
    return ran


def run_cases(mode: str, out: str) -> None:
    """Call every case once (first call) and again (steady state); save results and times."""
    import jax
    import numpy as np

    start = time.perf_counter()
    import example_pkg

    import_s = time.perf_counter() - start
    ran = forbid_bodies() if mode == "artifact" else []
    jax.block_until_ready(jax.numpy.zeros(1) + 1)  # backend start-up, outside the timings
    results, rows = {}, []
    for case in _cases():
        fn = getattr(example_pkg, case["fn"])
        static = case.get("static", {})
        row: dict[str, Any] = {"label": case["label"]}
        # float64 only where it is needed: each artifact runs under the jax config it was
        # exported under (x64 off for the float32 functions, on for compound_growth)
        with jax.enable_x64(True) if case.get("x64") else contextlib.nullcontext():
            if mode == "artifact":
                call = jax.grad(fn) if case.get("grad") else fn
                served_before = len(fn.call_report())
                t0 = time.perf_counter()
                value = jax.block_until_ready(call(*case["args"], **static))
                row["first_s"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                jax.block_until_ready(call(*case["args"], **static))
                row["second_s"] = time.perf_counter() - t0
                from hatch_jaxexport.runtime.call.loader import (
                    export_platform,
                    loaded_from_artifact,
                )

                used = loaded_from_artifact(fn)
                row["ran"] = (f"artifact ({export_platform()})" if used and all(used.values())
                              else "TRACED")
                # how this case's first calls were served (a gradient: forward and backward)
                row["tiers"] = sorted({s.tier for s in fn.call_report()[served_before:]})
            else:
                source = fn.__wrapped__
                target = jax.grad(source) if case.get("grad") else source
                jitted = jax.jit(target, static_argnames=tuple(static))
                t0 = time.perf_counter()
                traced = jitted.trace(*case["args"], **static)
                t1 = time.perf_counter()
                lowered = traced.lower()
                t2 = time.perf_counter()
                compiled = lowered.compile()
                t3 = time.perf_counter()
                value = jax.block_until_ready(compiled(*case["args"]))
                t4 = time.perf_counter()
                row.update(first_s=t4 - t0, trace_s=t1 - t0, lower_s=t2 - t1, compile_s=t3 - t2,
                           ran="traced from source")
        for i, leaf in enumerate(jax.tree_util.tree_leaves(value)):
            results[f"{case['label']}|{i}"] = np.asarray(leaf)
        rows.append(row)
    np.savez(out, **results)
    print(json.dumps({"mode": mode, "import_s": import_s, "rows": rows, "bodies_ran": ran,
                      "jax": jax.__version__, "strict": os.environ.get("HATCH_JAXEXPORT_STRICT")}))


# -- the driver: builds, installs, runs, compares ----------------------------------------------

def _step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def _run(cmd: list[str], *, env: dict[str, str] | None = None, show: bool = True,
         cwd: Path | None = None) -> str:
    if show:
        print("    $ " + " ".join(str(c) for c in cmd), flush=True)
    proc = subprocess.run([str(c) for c in cmd], env={**os.environ, **(env or {})}, text=True,
                          capture_output=True, cwd=cwd)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-8000:] + proc.stderr[-8000:])
        raise SystemExit(f"demo: command failed ({proc.returncode}): {' '.join(map(str, cmd))}")
    return proc.stdout + proc.stderr


def _links_env(wheels: Path) -> dict[str, str]:
    """Offer the local hatch-jaxexport wheel to isolated builds (keeping configured links)."""
    env = {}
    for var in ("PIP_FIND_LINKS", "UV_FIND_LINKS"):
        extra = os.environ.get(var, "")
        env[var] = f"{wheels} {extra}".strip() if var == "PIP_FIND_LINKS" else \
            ",".join(filter(None, [str(wheels), extra]))
    return env


def _hook_line(line: str) -> bool:
    """Whether a line of the front end's output is the hook's (its messages, a function's), or
    one of pip's steps (``Installing build dependencies: started``...), so a pip build is not
    silent while pip sets up the isolated build environment."""
    text = line.strip()
    return text.startswith("jaxexport:") or text.startswith(f"{PACKAGE}:") or \
        text.startswith(f"{PACKAGE}.") or text.startswith("captures ") or \
        text.endswith(": started") or ": finished with status" in text


def _stream(cmd: list[Any], *, env: dict[str, str] | None = None,
            show: Any = lambda line: True) -> str:
    """Run ``cmd`` and print the lines ``show`` keeps as they arrive (indented, flushed).

    The build's progress lines then appear while it runs, not all at once at the end. Returns
    the whole output; on failure prints its end and exits.
    """
    print("    $ " + " ".join(str(c) for c in cmd), flush=True)
    lines: list[str] = []
    with subprocess.Popen([str(c) for c in cmd], env={**os.environ, **(env or {})}, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if show(line) and line.strip():
                print("    " + line.rstrip(), flush=True)  # indentation kept
    output = "".join(lines)
    if proc.returncode != 0:
        sys.stderr.write(output[-16000:])
        raise SystemExit(f"demo: command failed ({proc.returncode}): {' '.join(map(str, cmd))}")
    return output


def with_executables(folder: Path) -> Path:
    """A copy of example_pkg in ``folder`` whose hook table asks for executables (the
    repository's own leaves them off: its tests build it often)."""
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns(
        "__pycache__", "_jaxexport", "dist", "build", "*.egg-info"))
    pyproject = folder / "pyproject.toml"
    table = "[tool.hatch.build.targets.wheel.hooks.jaxexport]\n"
    text = pyproject.read_text()
    if table not in text:
        raise SystemExit(f"demo: {pyproject} has no {table.strip()} table")
    pyproject.write_text(text.replace(table, table + "executables = true\n"))
    return folder


def build_wheels(work: Path, installer: str) -> Path:
    """Build hatch-jaxexport's wheel and example_pkg's (with its exports); return the latter."""
    wheels = work / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    env = _links_env(wheels)
    uv = shutil.which("uv") if installer != "pip" else None
    _step("building the hatch-jaxexport wheel")
    start = time.perf_counter()
    if uv:
        _run([uv, "build", "--wheel", "-q", "-o", wheels, ROOT])
    else:
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, ROOT])
    print(f"    built in {time.perf_counter() - start:.1f} s", flush=True)
    _step("building the example_pkg wheel with executables = true: the Hatch hook exports "
          "every @exportable (one line per function as it finishes) and compiles executables "
          "for this machine")
    start = time.perf_counter()
    source = with_executables(work / "example_pkg")
    # uv build shows the backend's output as it comes; pip only with -v (which also shows
    # pip's own debug lines: only the hook's are printed here).
    if uv:
        _stream([uv, "build", "--wheel", "-o", wheels, source], env=env, show=_hook_line)
    else:
        _stream([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", wheels,
                 source], env=env, show=_hook_line)
    (wheel,) = wheels.glob(f"{PACKAGE}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        blobs = [i for i in archive.infolist() if "/_jaxexport/" in i.filename]
        metadata = archive.read(next(n for n in archive.namelist()
                                     if n.endswith(".dist-info/METADATA"))).decode()
    jax_req = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: jax")]
    print(f"    built {wheel.name} in {time.perf_counter() - start:.1f} s: "
          f"{wheel.stat().st_size:,} bytes, {len(blobs)} files in {PACKAGE}/_jaxexport/ "
          f"({sum(i.file_size for i in blobs):,} bytes); {', '.join(jax_req)}", flush=True)
    return wheel


def install(work: Path, wheel: Path, installer: str) -> Path:
    """A fresh venv with the wheel (and jax, from the index) installed; returns its python."""
    venv_dir = work / "venv"
    if venv_dir.exists():
        shutil.rmtree(venv_dir)
    uv = shutil.which("uv") if installer != "pip" else None
    _step("installing the wheel into a fresh virtual environment (jax and its dependencies "
          "come from the package index)")
    start = time.perf_counter()
    links = ["--find-links", str(wheel.parent)]
    if uv:
        _run([uv, "venv", "-q", "-p", sys.executable, venv_dir])
        python = venv_dir / "bin" / "python"
        _stream([uv, "pip", "install", "-p", python, *links, wheel])
    else:
        _run([sys.executable, "-m", "venv", venv_dir])
        python = venv_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        _stream([python, "-m", "pip", "install", "--progress-bar", "off", *links, wheel],
                show=lambda line: not line.startswith((" ", "WARNING: Location")))
    print(f"    installed in {time.perf_counter() - start:.1f} s", flush=True)
    return python


def call_in_fresh_process(python: Path, mode: str, out: Path, cache: Path,
                          shipped: bool = False) -> dict[str, Any]:
    """Run the cases in a fresh process of the venv; ``cache``: its compilation cache folder;
    ``shipped``: whether the wheel's precompiled executables may serve the calls."""
    env = {"JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    if mode == "artifact":
        # The loader keeps its executable cache (and turns JAX's persistent compilation cache
        # on) in this folder.
        env.update(HATCH_JAXEXPORT_STRICT="1", HATCH_JAXEXPORT_CACHE=str(cache),
                   HATCH_JAXEXPORT_EXECUTABLES="1" if shipped else "0")
    else:
        # The same cache, configured by hand for plain jax.jit.
        env.update(JAX_COMPILATION_CACHE_DIR=str(cache),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    # Run outside the repository, so `import example_pkg` can only find the installed wheel.
    output = _run([python, str(Path(__file__).resolve()), "--run", mode, "--out", str(out)],
                  env=env, show=False, cwd=out.parent)
    return json.loads(output.strip().splitlines()[-1])


def compare(artifact_file: Path, source_file: Path) -> dict[str, float]:
    import numpy as np

    worst: dict[str, float] = {}
    with np.load(artifact_file) as baked, np.load(source_file) as traced:
        if sorted(baked.files) != sorted(traced.files):
            raise SystemExit("demo: the artifact and source runs returned different outputs")
        for key in baked.files:
            label = key.split("|")[0]
            a, b = baked[key], traced[key]
            if a.shape != b.shape or a.dtype != b.dtype:
                raise SystemExit(f"demo: {label}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}")
            diff = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
            worst[label] = max(worst.get(label, 0.0), diff)
    return worst


#: The runs of the demo's table, in its column order: (name, runner mode, shipped executables).
RUNS = (("stablehlo cold", "artifact", False), ("stablehlo warm", "artifact", False),
        ("shipped", "artifact", True), ("source cold", "source", False),
        ("source warm", "source", False))


def report(runs: dict[str, dict[str, Any]], worst: dict[str, float]) -> bool:
    """Print the comparison table; whether every call ran its artifact and matched the source."""
    baked = [runs[name] for name, mode, _ in RUNS if mode == "artifact"]
    ordered = [runs[name] for name, _, _ in RUNS]
    _step(f"first calls, each run in a fresh process (jax {baked[0]['jax']}, CPU), in ms; "
          "cold: empty caches, warm: the second process; shipped: the wheel's executables, "
          "empty caches")
    print(f"    {'':<36} {'StableHLO path':>15} {'shipped':>8} {'traced from source':>29} "
          f"{'max':>9}")
    print(f"    {'call':<36} {'cold':>7} {'warm':>7} {'cold':>8} {'cold':>7} {'warm':>7} "
          f"{'trace+lower':>13} {'|diff|':>9}")
    ok = True
    for rows in zip(*(run["rows"] for run in ordered), strict=True):
        label = rows[0]["label"]
        diff = worst.get(label, float("nan"))
        tol = 1e-12 if "float64" in label else 1e-4
        ok &= diff <= tol and all(r["ran"].startswith("artifact") for r in rows[:3])
        times = " ".join(f"{1000 * r['first_s']:>{8 if i == 2 else 7}.0f}"
                         for i, r in enumerate(rows))
        tracing = 1000 * (rows[4]["trace_s"] + rows[4]["lower_s"])
        print(f"    {label:<36} {times} {tracing:>13.0f} {diff:>9.1e}")
    totals = " ".join(f"{1000 * sum(r['first_s'] for r in run['rows']):>{8 if i == 2 else 7}.0f}"
                      for i, run in enumerate(ordered))
    tracing = 1000 * sum(r["trace_s"] + r["lower_s"] for r in ordered[4]["rows"])
    print(f"    {'all first calls':<36} {totals} {tracing:>13.0f}")
    served = [r for r in runs["shipped"]["rows"] if r["tiers"] == ["shipped"]]
    print(f"    shipped run: {len(served)} of {len(runs['shipped']['rows'])} calls served only by "
          "shipped executables" + "".join(f"; {r['label']}: {', '.join(r['tiers'])}"
                                          for r in runs["shipped"]["rows"] if r not in served))
    ran = sorted({r["ran"] for run in baked for r in run["rows"]})
    bodies = [body for run in baked for body in run["bodies_ran"]]
    print(f"    baked runs: every call ran {', '.join(ran)}; HATCH_JAXEXPORT_STRICT="
          f"{baked[0]['strict']}; function bodies that ran: {bodies or 'none'}")
    print("    Baked artifacts skip tracing and lowering. On the StableHLO path XLA still "
          "compiles each\n    on its first call, unless the executable cache already holds it; "
          "a shipped executable\n    is loaded and run.")
    return ok and not bodies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a "
                        "temporary folder, removed afterwards)")
    parser.add_argument("--installer", choices=("auto", "pip", "uv"), default="auto",
                        help="use uv when on PATH (auto), or always pip")
    parser.add_argument("--run", choices=("artifact", "source"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        run_cases(args.run, args.out)
        return 0
    if args.installer == "uv" and not shutil.which("uv"):
        parser.error("--installer uv: uv is not on PATH")
    temporary = None
    work = args.workdir
    if work is None:
        temporary = tempfile.TemporaryDirectory(prefix="jaxexport-demo-")
        work = Path(temporary.name)
    work = work.resolve()
    for stale in work.glob("cache-*"):
        shutil.rmtree(stale)
    try:
        wheel = build_wheels(work, args.installer)
        python = install(work, wheel, args.installer)
        listing = _run([python, "-m", "hatch_jaxexport", "inspect", PACKAGE], cwd=work)
        lines = listing.strip().splitlines()
        total = next(line for line in reversed(lines) if line[:1].isdigit())  # "N artifact(s)"
        print(f"    {lines[0]}\n    ... one row per artifact (function, structure, static "
              f"values, platform, bytes) ...\n    {total}")
        _step("calling each function in fresh processes, tracing forbidden "
              "(HATCH_JAXEXPORT_STRICT=1, bodies replaced by one that raises): twice without "
              "the shipped executables, once with them")
        runs = {}
        for name, mode, shipped in RUNS:
            if name == "source cold":
                _step("calling the same functions traced from source (jax.jit), twice")
            tag = name.split()[0]  # a run's results and caches: the warm run reuses the cold's
            runs[name] = call_in_fresh_process(python, mode, work / f"{tag}.npz",
                                               work / f"cache-{tag}", shipped)
        # numpy is in the demo's venv; compare there so the driver needs nothing installed.
        worst: dict[str, float] = {}
        for tag in ("stablehlo", "shipped"):
            found = json.loads(_run([python, "-c", (
                "import json, sys; sys.path.insert(0, sys.argv[1]); import demo; "
                "print(json.dumps(demo.compare(*map(demo.Path, sys.argv[2:]))))"),
                str(Path(__file__).resolve().parent), str(work / f"{tag}.npz"),
                str(work / "source.npz")], show=False, cwd=work))
            worst = {k: max(v, worst.get(k, 0.0)) for k, v in found.items()}
        ok = report(runs, worst)
    finally:
        if temporary is not None:
            temporary.cleanup()
    print("\ndemo: OK" if ok else "\ndemo: FAILED (see the table above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
