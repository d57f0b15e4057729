"""One module, the ways a first call can compile it, timed in turn in one process.

    python benchmarks/compile_variants.py [mlp|tiny|solve|...] [ROUNDS]

Run where example_pkg is installed (``scripts/accelerator_check.sh``'s site folder on
``PYTHONPATH``), on any backend (``JAX_PLATFORMS=tpu`` on a TPU). After one compile that takes
the compiler's start out of the way, each round compiles the row's program: by jax (the
source lowered and compiled, ``jax.clear_caches()`` first), and by the loader's direct path
(``jaxcompat.compile_stablehlo``) from the sized form's bytes (``jax.export`` at the call's
sizes), from jax's own MLIR bytecode of the source, with jax's sharding propagation lists set,
and without detailed logging. It prints the median per variant: whether a first call's
compile is slower for the module or for the options (docs/gpu.md, "the three rows left").
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any


def variants(name: str) -> dict[str, Any]:
    """The row's compiles, by name (each a function that compiles once)."""
    import jax
    import numpy as np
    from jax._src import compiler
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import accelerator_check

    row = accelerator_check.workload(name)
    specs = jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype), row.args)
    jax.jit(lambda x: x + 1)(np.ones(3, np.float32))  # the compiler's start, out of the way
    exported = jax.export.export(row.source, platforms=[jax.default_backend()])(*specs)
    device = jax.devices()[0]
    jax_bytes = mlir.module_to_bytecode(row.source.lower(*row.args).compiler_ir("stablehlo"))

    def direct(module: bytes, jax_lists: bool = False, detailed: bool = True) -> Any:
        options = compiler.get_compile_options(
            num_replicas=1, num_partitions=1, device_assignment=np.array([[device]]),
            backend=device.client, detailed_logging=detailed)
        if jax_lists:  # what jax's pjit sets for a jitted function without shardings
            build = options.executable_build_options
            build.allow_spmd_sharding_propagation_to_parameters = \
                [False] * len(exported.in_avals)
            build.allow_spmd_sharding_propagation_to_output = [False]
        return device.client.compile_and_load(module, xla_client.DeviceList((device,)),
                                              options)

    def by_jax() -> Any:
        jax.clear_caches()
        return row.source.lower(*row.args).compile()

    sized = exported.mlir_module_serialized
    return {"jax: lower and compile the source": by_jax,
            "ours: the sized form's bytes": lambda: direct(sized),
            "ours: jax's own bytecode of the source": lambda: direct(jax_bytes),
            "ours, with jax's sharding propagation lists": lambda: direct(sized, True),
            "ours, no detailed logging": lambda: direct(sized, False, False)}


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    compiles = variants(name)
    times: dict[str, list[float]] = {key: [] for key in compiles}
    for index in range(rounds):  # in turn, the order reversed every other round
        order = list(compiles.items())
        for key, compile_once in order if index % 2 else order[::-1]:
            start = time.perf_counter()
            compile_once()
            times[key].append((time.perf_counter() - start) * 1e3)
    base = statistics.median(times["ours: the sized form's bytes"])
    for key, values in times.items():
        median = statistics.median(values)
        print(f"{name} {key}: median {median:.1f} ms (min {min(values):.1f}), "
              f"{median / base:.2f}x of the sized form's")


if __name__ == "__main__":
    main()
