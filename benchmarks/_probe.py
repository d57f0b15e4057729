"""One fresh-process measurement for ``benchmarks/cold_start.py`` (prints one JSON line).

Usage: ``python _probe.py MODE WORKLOAD [FLOOR_FILE]`` where MODE is ``source`` (``jax.jit`` of
the function's Python body), ``loaded`` (the installed package's baked artifact), ``floor``
(a compiled executable deserialized from FLOOR_FILE; written first with ``floor-write``),
``steady`` (per-call time, loaded vs jit), ``import`` (import cost of the package), or one of
``TRANSFORMS`` (a first call of the loaded ``mlp_loss`` through that path: eager, ``jax.jit``,
eager ``jax.grad``, ``jax.jit(jax.grad(...))``; WORKLOAD is ignored).
"""

from __future__ import annotations

import json
import resource
import sys
import time


def source_jit(fn):
    """``jax.jit`` of the function's Python body, its static arguments marked static."""
    import jax

    return jax.jit(fn.__wrapped__, static_argnames=tuple(fn.export_spec.static))


#: First-call paths of ``jax_cache_probe``: the loaded function eagerly and under transformations.
TRANSFORMS = ("eager", "jit", "grad", "jit_grad")


def jax_cache_probe(mode: str) -> dict[str, float]:
    """One first call of the loaded ``example_pkg.nn.mlp_loss`` (``vjp_order=1``) through
    ``mode`` (``TRANSFORMS``); its time, and whether jax's persistent cache was on."""
    import jax
    import numpy as np
    from example_pkg.nn import init_mlp, mlp_loss

    def loss(params, x, y):
        return mlp_loss(params, x, y)

    fn = {"eager": mlp_loss, "jit": jax.jit(mlp_loss), "grad": jax.grad(loss),
          "jit_grad": jax.jit(jax.grad(loss))}[mode]
    args = (init_mlp(0), np.ones((32, 8), np.float32), np.zeros((32, 4), np.float32))
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return {"first_call_s": time.perf_counter() - start,
            "jax_cache": bool(jax.config.jax_compilation_cache_dir)}


def main() -> None:
    mode, workload = sys.argv[1], sys.argv[2]
    if mode in TRANSFORMS:
        print(json.dumps(jax_cache_probe(mode)))
        return
    t0 = time.perf_counter()
    import jax
    import numpy as np

    t1 = time.perf_counter()
    import example_pkg.benchmarks as workloads  # the workloads live in the installed package

    t2 = time.perf_counter()
    fn, args = workloads.WORKLOADS[workload]()
    out: dict[str, float | str | bool] = {"import_jax_s": t1 - t0, "import_pkg_s": t2 - t1}
    if mode == "import":
        print(json.dumps(out))
        return
    if mode in ("floor-write", "floor"):
        from jax.experimental import serialize_executable as se

        # the executable takes the dynamic arguments only (static ones are compiled in)
        bound = fn.signature.bind(*args)
        static = {n: v for n, v in bound.arguments.items() if n in fn.export_spec.static}
        names = [n for n in bound.arguments if n not in static]
        args = tuple(bound.arguments[n] for n in names)
        body = fn.__wrapped__

        def dynamic_only(*values):
            return body(**dict(zip(names, values, strict=True)), **static)

        path = sys.argv[3]
        if mode == "floor-write":
            compiled = jax.jit(dynamic_only).lower(*args).compile()
            payload, in_tree, out_tree = se.serialize(compiled)
            lapack = "lapack" in compiled.as_text().lower()
            import pickle  # the floor is measured only; never shipped (it is pickle-based)

            with open(path, "wb") as f:
                pickle.dump((payload, in_tree, out_tree, lapack), f)
            return
        import pickle

        from hatch_jaxexport.runtime.jaxcompat import initialize_lapack

        start = time.perf_counter()
        with open(path, "rb") as f:
            payload, in_tree, out_tree, lapack = pickle.load(f)
        if lapack:
            initialize_lapack()  # what the executable needs to run: part of the floor
        compiled = se.deserialize_and_load(payload, in_tree, out_tree)
        jax.block_until_ready(compiled(*args))
        out["first_call_s"] = time.perf_counter() - start
    elif mode == "steady":
        import timeit

        jitted = source_jit(fn)
        jax.block_until_ready(jitted(*args))
        jax.block_until_ready(fn(*args))
        hot = fn.calls.hot
        if hot is None:
            raise SystemExit("the loaded function has no compiled executable in use")
        # the executable takes the call's leading values (its trailing statics left out),
        # then the constants the hot call adds
        compiled = hot.call
        direct = (*args[:hot.arity - len(hot.tail)], *hot.constants)
        for name, f, a in (("jit", jitted, args), ("loaded", fn, args),
                           ("compiled", compiled, direct)):
            out[f"{name}_call_us"] = min(timeit.repeat(lambda f=f, a=a: f(*a), number=2000,
                                                      repeat=7)) / 2000 * 1e6
    else:
        target = source_jit(fn) if mode == "source" else fn
        start = time.perf_counter()
        jax.block_until_ready(target(*args))
        out["first_call_s"] = time.perf_counter() - start
        if mode == "loaded":
            from hatch_jaxexport.runtime.call.loader import tiered_calls

            calls = tiered_calls(fn)
            out["tier"] = ",".join(t for c in calls for t in c.tiers.values()) or "untiered"
            if calls and "quick" in out["tier"]:
                for call in calls:
                    call.wait()
                out["optimized_after_s"] = time.perf_counter() - start
        out["traced"] = bool(getattr(workloads, "TRACES", {}).get("count", 0))
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    _ = np
    print(json.dumps(out))


if __name__ == "__main__":
    main()
