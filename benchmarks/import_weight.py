"""What ``import mylib`` and its first call import and cost: the loader's own weight.

    python benchmarks/import_weight.py [--runs 5] [--list]

Exports a small package (a weighted sine and a dense layer with pytree parameters, each with a
precompiled executable of one size for this machine: ``executable_sizes``) into a temporary
folder, then, in fresh processes (medians of ``--runs``), after ``import jax`` and
``jax.devices()`` (left out: every JAX user pays them):

- ``import``: ``import mylib``: how many of hatch-jaxexport's modules it imports, and its time;
- a first call served three ways: ``shipped`` (the wheel's executable for this machine),
  ``cached`` (a second process on the per-user executable cache the first one wrote) and
  ``stablehlo`` (the executables and the cache off: the artifact's module compiled), each with
  our modules it imported beyond ``import mylib``, every other module it imported (jax's
  own, the standard library's), and its time;

each with three kinds of bytecode for our modules (``PYTHONDONTWRITEBYTECODE=1`` in every child,
so each finds what its copy has): ``pip`` (a pip install compiles it), ``none`` (a ``uv pip
install`` without ``--compile-bytecode`` into a container with that variable set: every module
of ours compiled from source at its import) and ``wheel`` (this project's ``cpXY-none-any``
wheel, built here with ``hatch_build.py``: the checked-hash bytecode it carries, whatever the
installer did); the last column divides each row's import + call by the pip row's.
``--list`` prints the modules of ours each step imports. The figures are the loader's weight
only: jax's own first-call work (the executable's load, a compile) is in the call's time on
every row alike.
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
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PACKAGE = '''
import jax.numpy as jnp

from hatch_jaxexport import exportable


@exportable({"x": ("n", "float32"), "w": ("n", "float32")}, executable_sizes={"n": [64]})
def weighted_sin(x, w):
    return jnp.sum(jnp.sin(x) * w)


@exportable({"params": {"w": ("8, 4", "float32"), "b": ("4", "float32")},
             "x": ("batch, 8", "float32")}, executable_sizes={"batch": [16]})
def dense(params, x):
    return jnp.tanh(x @ params["w"] + params["b"])
'''

CHILD = textwrap.dedent('''
    import json, sys, time
    import numpy as np, jax
    jax.devices()
    before = set(sys.modules)
    start = time.perf_counter()
    import iw_pkg
    imported = time.perf_counter() - start
    at_import = set(sys.modules)
    x, w = np.linspace(0, 1, 64, dtype=np.float32), np.ones(64, np.float32)
    start = time.perf_counter()
    jax.block_until_ready(iw_pkg.weighted_sin(x, w))
    called = time.perf_counter() - start
    after = set(sys.modules)
    ours = lambda names: sorted(n for n in names if n.split(".")[0] == "hatch_jaxexport")
    print(json.dumps({
        "import_ms": imported * 1e3, "call_ms": called * 1e3,
        "ours_at_import": ours(at_import - before), "ours_at_call": ours(after - at_import),
        "ours_before": ours(before),
        "others_at_call": sorted(n for n in after - at_import
                                 if n.split(".")[0] != "hatch_jaxexport"),
        "tier": [r.tier for r in iw_pkg.weighted_sin.call_report()],
        "origin": __import__("hatch_jaxexport").__file__}))
''')


def export(folder: Path) -> Path:
    """The package, exported with this machine's executables, in ``folder``."""
    from hatch_jaxexport.bake.workers.orchestrate import export_package

    package = folder / "pkgs" / "iw_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(PACKAGE)
    export_package("iw_pkg", package / "_jaxexport", search_path=[str(package.parent)],
                   executables=True)
    return package.parent


#: How our modules' bytecode got there: a pip install's (``compileall``), none (an installer
#: that compiles nothing, as uv by default), or our ``cpXY-none-any`` wheel's (``hatch_build.py``).
BYTECODE = ("pip", "none", "wheel")


def source_copy(folder: Path, bytecode: str) -> Path:
    """hatch-jaxexport's package in a folder of its own, with the bytecode ``bytecode`` says."""
    import compileall
    import zipfile

    target = folder / f"bytecode-{bytecode}"
    if bytecode == "wheel":
        built = folder / "wheel"
        subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", built,
                        ROOT], check=True, capture_output=True, cwd=folder,
                       env={**os.environ, "HATCH_BUILD_HOOK_ENABLE_CUSTOM": "true"})
        (wheel,) = built.glob("hatch_jaxexport-*-cp*-none-any.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target, [n for n in archive.namelist()
                                        if n.startswith("hatch_jaxexport/")])
        return target
    shutil.copytree(ROOT / "hatch_jaxexport", target / "hatch_jaxexport",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if bytecode == "pip":
        compileall.compile_dir(target, quiet=1)
    return target


def run_child(path: list[Path], env: dict[str, str]) -> dict:
    full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(map(str, path)),
            "JAX_PLATFORMS": "cpu"}
    full.pop("HATCH_JAXEXPORT_STRICT", None)
    done = subprocess.run([sys.executable, "-c", CHILD], env=full, text=True,  # not this
                          capture_output=True, timeout=600, cwd=path[-1])  # checkout's folder

    if done.returncode:
        raise SystemExit(f"child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def measure(way: str, bytecode: str, work: Path, packages: Path, copy: Path,
            runs: int) -> list[dict]:
    """``runs`` fresh processes of one way of serving the first call (after one untimed, which
    reads every file once: the times are not the disk's)."""
    path = [copy, packages]
    env = {"PYTHONDONTWRITEBYTECODE": "1"}  # nothing written: each run finds what the copy has
    results = []
    for run in range(-1, runs):
        cache = work / f"cache-{way}-{bytecode}-{run}"
        if way == "shipped":
            env.update(HATCH_JAXEXPORT_CACHE="0")
        elif way == "stablehlo":
            env.update(HATCH_JAXEXPORT_CACHE="0", HATCH_JAXEXPORT_EXECUTABLES="0")
        else:  # cached: a first process writes the cache, the measured second reads it
            env.update(HATCH_JAXEXPORT_CACHE=str(cache), HATCH_JAXEXPORT_EXECUTABLES="0")
            run_child(path, env)
            env["HATCH_JAXEXPORT_BACKGROUND"] = "0"
        found = run_child(path, env)
        if not found["origin"].startswith(str(copy)):
            raise SystemExit(f"the child imported {found['origin']}, not the copy in {copy}")
        if run >= 0:
            results.append(found)
    return results


def row(way: str, bytecode: str, results: list[dict], floor: float | None) -> tuple[str, float]:
    """The table's row, and its import + call time (the pip row's is the next rows' floor)."""
    first = results[0]
    median = lambda key: statistics.median(r[key] for r in results)  # noqa: E731
    total = median("import_ms") + median("call_ms")
    return (f"| {way} | {bytecode} | {len(first['ours_at_import'])} | "
            f"{median('import_ms'):.1f} | {'/'.join(sorted(set(first['tier'])))} | "
            f"{len(first['ours_at_call'])} | {len(first['others_at_call'])} | "
            f"{median('call_ms'):.1f} | {total:.1f} | "
            f"{total / (floor or total):.2f}x |"), total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--list", action="store_true", help="name the modules of each step")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="import-weight-") as scratch:
        work = Path(scratch)
        packages = export(work)
        copies = {bytecode: source_copy(work, bytecode) for bytecode in BYTECODE}
        print(f"medians of {args.runs} fresh processes; times after `import jax` and "
              "jax.devices()\n")
        print("| first call | our bytecode | our modules at `import mylib` | import (ms) | "
              "served | our modules at the call | other modules at the call | call (ms) | "
              "import + call (ms) | of pip's |")
        print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|")
        listed = {}
        for way in ("shipped", "cached", "stablehlo"):
            floor = None
            for bytecode in BYTECODE:
                results = measure(way, bytecode, work, packages, copies[bytecode],
                                  args.runs)
                line, total = row(way, bytecode, results, floor)
                floor = floor or total
                print(line, flush=True)
                listed[way] = results[0]
        if args.list:
            for way, first in listed.items():
                print(f"\n{way}: `import mylib` imports {', '.join(first['ours_at_import'])}")
                print(f"{way}: the first call imports {', '.join(first['ours_at_call'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
