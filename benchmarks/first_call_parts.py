"""Where a first call's milliseconds go: the source's ``jax.jit`` beside the baked artifact, part
by part, in fresh processes, side by side in one run.

    python benchmarks/first_call_parts.py [--runs 5]

Exports a small package (the issue's four rows: a weighted sine, a dense layer with pytree
parameters, ``jax.grad`` of the weighted sine, and a trace-heavy chain of 400 unrolled steps)
into a temporary folder with ``export_package``, then, for each row, in fresh processes with
every cache off (medians of ``--runs``):

- ``source``: ``jax.jit`` of the Python body: trace and lower, compile, run (for the gradient,
  ``jax.jit(jax.grad(f))``, one program; and in a row of its own ``jax.grad(jax.jit(f))``,
  what a user of a library whose function is jitted gets: two programs, forward and backward);
- for the gradient baked at its size, also ``jax.jit(jax.value_and_grad(f))``: the work an
  eager ``jax.grad`` cannot leave out (the value), in one program; and, after the table, the
  cotangent of ones every eager ``jax.grad`` makes (jax's first eager op in the process);
- ``baked``: the decorated function's first call, as a user makes it, and, in another process,
  its parts done by hand: importing the loader's modules (what the first call imports),
  reading and deserializing the blob, lowering the artifact's call (the wrapper, and shape
  refinement for symbolic shapes), compile, run.

Both compile the same kind of module; the compile is the floor jax imposes on both. Python's
bytecode is written before the runs (``PYTHONDONTWRITEBYTECODE`` unset in the children and one
untimed run of each), as a pip install compiles it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PACKAGE = '''
import jax
import jax.numpy as jnp

from hatch_jaxexport import exportable


@exportable({"x": ("n", "float32"), "w": ("n", "float32")}, vjp_order=1)
def weighted_sin(x, w):
    return jnp.sum(jnp.sin(x) * w)


@exportable({"params": {"w": ("8, 4", "float32"), "b": ("4", "float32")},
             "x": ("batch, 8", "float32")})
def dense(params, x):
    return jnp.tanh(x @ params["w"] + params["b"])


@exportable({"x": ("n", "float32"), "w": ("n", "float32")}, vjp_order=1,
            executable_sizes={"n": [64]})
def weighted_sin_sized(x, w):
    return jnp.sum(jnp.sin(x) * w)


@exportable({"params": {"w": ("8, 4", "float32"), "b": ("4", "float32")},
             "x": ("batch, 8", "float32")}, executable_sizes={"batch": [16]})
def dense_sized(params, x):
    return jnp.tanh(x @ params["w"] + params["b"])


@exportable({"x": ("n", "float32"), "w": ("n", "float32")}, concrete={"n": [64]})
def weighted_sin_unrolled(x, w):  # not shape-polymorphic: a concrete-size artifact at n=64
    return sum(jnp.sin(x[i]) * w[i] for i in range(0, len(x), 8))


@exportable({"x": ("8, 16", "float32")})
def trace_heavy(x):
    for i in range(400):
        x = jnp.sin(x) * 0.5 + x * (0.001 * i)
    return x
'''

ROWS = {  # row: (function, call expression on the module `m`)
    "weighted sin": ("weighted_sin", "m.weighted_sin(*args)"),
    "dense layer, pytree params": ("dense", "m.dense(*args)"),
    "weighted sin, baked at its size": ("weighted_sin_sized", "m.weighted_sin_sized(*args)"),
    "dense layer, baked at its size": ("dense_sized", "m.dense_sized(*args)"),
    "jax.grad of weighted sin": ("weighted_sin", "jax.grad(m.weighted_sin)(*args)"),
    "jax.grad of weighted sin, source jax.grad(jax.jit(f))": (
        "weighted_sin", "jax.grad(m.weighted_sin)(*args)"),
    "jax.grad of weighted sin, baked at its size": (
        "weighted_sin_sized", "jax.grad(m.weighted_sin_sized)(*args)"),
    "jax.grad of weighted sin, baked at its size, source jax.jit(jax.value_and_grad(f))": (
        "weighted_sin_sized", "jax.grad(m.weighted_sin_sized)(*args)"),
    "not shape-polymorphic, a concrete-size artifact": (
        "weighted_sin_unrolled", "m.weighted_sin_unrolled(*args)"),
    "trace-heavy (400 steps)": ("trace_heavy", "m.trace_heavy(*args)"),
}
#: The row whose source is what a plain library's user gets from ``jax.grad`` of its jitted
#: function: jax compiles the forward and the backward apart, as the baked function does.
GRAD_OF_JIT = "jax.grad of weighted sin, source jax.grad(jax.jit(f))"

ARGS = {
    "weighted_sin": "(np.linspace(0, 1, 64, dtype=np.float32), np.ones(64, np.float32))",
    "dense": '({"w": np.ones((8, 4), np.float32), "b": np.zeros(4, np.float32)}, '
             "np.ones((16, 8), np.float32))",
    "trace_heavy": "(np.ones((8, 16), np.float32),)",
    "weighted_sin_unrolled": "(np.linspace(0, 1, 64, dtype=np.float32), "
                             "np.ones(64, np.float32))",
    "weighted_sin_sized": "(np.linspace(0, 1, 64, dtype=np.float32), np.ones(64, np.float32))",
    "dense_sized": '({"w": np.ones((8, 4), np.float32), "b": np.zeros(4, np.float32)}, '
                   "np.ones((16, 8), np.float32))",
}

PROBE = '''
import json, os, sys, time
t = time.perf_counter()
import numpy as np, jax
PLATFORM = os.environ["JXE_PARTS_PLATFORM"]
parts = {}
def mark(name):
    global t
    now = time.perf_counter(); parts[name] = (now - t) * 1e3; t = now
mark("import jax")
jax.devices(); mark("backend start")  # 7 s on a TPU: left out of every part after it
mode, row, function, call = sys.argv[1:5]
args = ARGS[function]
import jxe_parts as m
mark("import package")
if mode == "source-grad-of-jit":
    body = getattr(m, function).__wrapped__
    jax.block_until_ready(jax.grad(jax.jit(body))(*args)); mark("first call")
elif mode == "ones-op":  # the cotangent jax.grad makes: jax's first eager op here
    jax.block_until_ready(jax.lax.full_like(np.float32(0.5), 1, shape=())); mark("first call")
elif mode == "refine-floor":  # the least a symbolic module's first call needs of jax
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from hatch_jaxexport.runtime.artifacts.package_artifacts import (
        load_package_artifacts, read_record, deserialize_record)
    package = load_package_artifacts("jxe_parts")
    record = next(r for r in package.records(f"jxe_parts:{function}").manifest.artifacts
                  if r.kind == "primal" and r.platform == PLATFORM)
    exported = deserialize_record(package, record, read_record(package, record))
    mark("read+deserialize")
    context = mlir.make_ir_context(); mark("MLIR context")
    with context, mlir.ir.Location.unknown():
        module = _jax.mlir.deserialize_portable_artifact(exported.mlir_module_serialized)
        bytecode = mlir.module_to_bytecode(module)
    _jax.mlir.refine_polymorphic_shapes(mlir_module=bytecode, enable_shape_assertions=False,
                                        validate_static_shapes=False, enable_shardy=False)
    mark("parse+refine")
elif mode == "source":
    body = getattr(m, function).__wrapped__
    target = jax.value_and_grad(body) if "value_and_grad" in row else \
        jax.grad(body) if call.startswith("jax.grad") else body
    lowered = jax.jit(target).lower(*args); mark("trace+lower")
    compiled = lowered.compile(); mark("compile")
    jax.block_until_ready(compiled(*args)); mark("run")
elif mode == "baked":
    jax.block_until_ready(eval(call)); mark("first call")
else:  # the baked first call's parts, by hand
    from hatch_jaxexport.runtime.call import loader  # what the first call imports
    from hatch_jaxexport.runtime.artifacts.package_artifacts import (
        load_package_artifacts, load_concrete, read_record, deserialize_record)
    from hatch_jaxexport.runtime.executables.direct_module import DirectModule, exact_types
    mark("our modules")
    package = load_package_artifacts("jxe_parts")
    manifest = package.records(f"jxe_parts:{function}").manifest
    for concrete in manifest.concrete:  # a concrete-size artifact: compiled from its bytes
        exported = load_concrete(package, {"file": concrete.file, "size": concrete.size,
                                           "sha256": concrete.sha256})
        mark("read+deserialize")
        lowered = DirectModule.of(exported, False).lower(*args); mark("lower (+refine)")
        compiled = lowered.compile(); mark("compile")
        jax.block_until_ready(compiled(*args)); mark("run")
        print(json.dumps(parts)); sys.exit()
    record = next(r for r in manifest.artifacts if r.kind == "primal" and r.platform == PLATFORM)
    from hatch_jaxexport.runtime.jaxcompat import lapack_init_skipped, needs_lapack
    sized = [e for e in record.sized if e.get("form", "call") in ("call", "vjp")]  # not text

    def gradient_parts(forward, backward):  # an eager jax.grad's two programs, from bytes
        mark("lower (+refine)")
        compiled_forward = DirectModule.of(forward, False).compile()
        compiled_backward = DirectModule.of(backward, False).compile(); mark("compile")
        jax.block_until_ready(compiled_forward(*args))
        jax.block_until_ready(compiled_backward(*args, np.ones((), np.float32))); mark("run")
        print(json.dumps(parts)); sys.exit()

    if sized and call.startswith("jax.grad"):  # the forms of the call and its VJP
        forward, backward = (load_concrete(package, e) for e in sized)
        mark("read+deserialize")
        gradient_parts(forward, backward)
    if sized:  # a concrete-size form: compiled from its bytes, nothing lowered
        exported = load_concrete(package, sized[0])
        mark("read+deserialize")
        lowered = DirectModule.of(exported, False).lower(*args)
    else:
        from hatch_jaxexport.runtime.artifacts.program import ArtifactProgram
        from hatch_jaxexport.runtime.executables.direct_module import refined
        program = ArtifactProgram(package, record, eager=True)
        exported, text = program.exported(), program.module_text()
        mark("read+deserialize")
        target = (lambda *a: jax.grad(lambda *b: exported.call(*b))(*a)) \\
            if call.startswith("jax.grad") else exported.call
        types = tuple((tuple(np.shape(a)), np.asarray(a).dtype.name)
                      for a in jax.tree_util.tree_leaves(args))
        if exact_types(exported) is not None and not call.startswith("jax.grad"):  # no symbol
            lowered = DirectModule.of(exported, False).lower(*args)
        elif text is not None and not call.startswith("jax.grad"):  # refined from its text
            lowered = DirectModule.of(refined(exported, text, types), False).lower(*args)
        elif text is not None and (vjp_text := program.module_text("vjp")) is not None:
            forward = refined(exported, text, types)  # the gradient: both from their texts
            cotangents = tuple((tuple(a.shape), a.dtype.name) for a in forward.out_avals)
            gradient_parts(forward, refined(exported.vjp(), vjp_text, types + cotangents))
        else:
            with lapack_init_skipped(not needs_lapack(record.custom_calls)):  # as the loader
                lowered = jax.jit(target).lower(*args)
    mark("lower (+refine)")
    compiled = lowered.compile(); mark("compile")
    jax.block_until_ready(compiled(*args)); mark("run")
print(json.dumps(parts))
'''


def probe(python: str, site: Path, mode: str, row: str, platform: str = "cpu"
          ) -> dict[str, float]:
    function, call = ROWS[row]
    script = "import numpy as np\nARGS = {" + ", ".join(
        f"{k!r}: {v}" for k, v in ARGS.items()) + "}\n" + PROBE
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"PYTHONPATH": os.pathsep.join(filter(None, [str(site), str(ROOT),
                                                            os.environ.get("PYTHONPATH")])),
                "JAX_PLATFORMS": platform, "JXE_PARTS_PLATFORM": platform,
                "HATCH_JAXEXPORT_CACHE": "0", "HATCH_JAXEXPORT_TIERED": "0",
                "HATCH_JAXEXPORT_STRICT": "1"})
    proc = subprocess.run([python, "-c", script, mode, row, function, call], env=env,
                          text=True, capture_output=True)
    if proc.returncode:
        raise SystemExit(f"{mode} {row} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--platform", default="cpu",
                        help="the platform to export for and run on (tpu on a TPU machine: the "
                             "backend's start is left out of every part)")
    parser.add_argument("--rows", help="a comma-separated subset of the rows' functions "
                                       "(weighted_sin,dense,trace_heavy...)")
    args = parser.parse_args(argv)
    from hatch_jaxexport.bake import export_package

    with tempfile.TemporaryDirectory(prefix="first-call-parts-") as tmp:
        site = Path(tmp)
        (site / "jxe_parts").mkdir()
        (site / "jxe_parts" / "__init__.py").write_text(textwrap.dedent(PACKAGE))
        export_package("jxe_parts", site / "jxe_parts" / "_jaxexport", search_path=[site],
                       platforms=[args.platform])
        python = sys.executable
        print(f"jax {__import__('jax').__version__}, Python {sys.version.split()[0]}, "
              f"{os.cpu_count()} CPUs, platform {args.platform}; ms after the backend's "
              f"start, median of {args.runs} fresh processes\n")
        print("| row | source: trace+lower | compile | run | first call | baked: first call "
              "| ratio | our modules | read+deserialize | lower (+refine) | compile | run |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        wanted = args.rows.split(",") if args.rows else None
        for row in [r for r in ROWS if wanted is None or ROWS[r][0] in wanted]:
            source_mode = "source-grad-of-jit" if row == GRAD_OF_JIT else "source"
            modes = (source_mode, "baked", "parts")
            for mode in modes:
                probe(python, site, mode, row, args.platform)  # bytecode written, files cached
            runs = {mode: [probe(python, site, mode, row, args.platform)
                           for _ in range(args.runs)] for mode in modes}
            med = {mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                   for mode, rs in runs.items()}
            if row == GRAD_OF_JIT:  # one first call: its parts are jax's own
                med["source"] = {"trace+lower": float("nan"), "compile": float("nan"),
                                 "run": float("nan")}
                source = med[source_mode]["first call"]
            else:
                source = med["source"]["trace+lower"] + med["source"]["compile"] + \
                    med["source"]["run"]
            baked = med["baked"]["first call"]
            p = med["parts"]
            print(f"| {row} | {med['source']['trace+lower']:.1f} | {med['source']['compile']:.1f}"
                  f" | {med['source']['run']:.1f} | {source:.1f} | {baked:.1f} | "
                  f"{baked / source:.2f} | {p['our modules']:.1f} | {p['read+deserialize']:.1f}"
                  f" | {p['lower (+refine)']:.1f} | {p['compile']:.1f} | {p['run']:.1f} |")
        ones = statistics.median(probe(python, site, "ones-op", "weighted sin",
                                       args.platform)["first call"] for _ in range(args.runs))
        floor = [probe(python, site, "refine-floor", "weighted sin", args.platform)
                 for _ in range(args.runs)]
        context, refine = (statistics.median(f[k] for f in floor)
                           for k in ("MLIR context", "parse+refine"))
        print(f"\nA symbolic artifact at a size not baked (weighted sin): jax's lowering "
              f"of it needs jax's first MLIR context in the process ({context:.1f} ms) and "
              f"the parse and refinement passes ({refine:.1f} ms), before its call_exported "
              "wrapper. Its text form (the module as the build's jaxlib printed it) needs "
              "the parse and refinement alone, in C++, with no MLIR context in Python: its "
              "lower (+refine) column, whose floor that refinement is.")
        print(f"\nFloor of an eager jax.grad: the cotangent of ones it makes "
              f"(jax.lax.full_like), jax's first eager op in a process, {ones:.1f} ms; and "
              "the value, which jax.jit(jax.grad(f)) leaves out and every eager gradient "
              "computes (the row beside jax.jit(jax.value_and_grad(f))).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
