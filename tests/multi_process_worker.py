"""One process of a 2-process JAX run: the baked data-parallel step of ``jxe_multiproc`` on the
global 4-device mesh, against the source.

Run as ``python multi_process_worker.py PROCESS_ID NUM_PROCESSES PORT MODE`` with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` (2 CPU devices per process) and
``HATCH_JAXEXPORT_STRICT=1`` (tracing the source is an error). ``MODE`` is ``baked`` (a mesh
``data=4`` that has a baked variant: three steps from the artifact, then the same three steps
with ``jax.jit`` of the source on the same global arrays, and once more on one local device
without a mesh) or ``unbaked`` (a mesh ``batch=4``, which has no baked variant: the error).
Prints one JSON object as its last line. ``tests/integration/test_multi_process.py`` starts
the processes and asserts on what they print.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

STEPS = 3
LR = np.float32(0.1)


def global_inputs(mesh: Mesh, axis: str) -> tuple[dict[str, Any], Any, Any, dict[str, Any]]:
    """Parameters (replicated) and a batch of 16 (split over ``axis``) as global arrays, each
    process filling only its own devices' shards; also the same values as NumPy arrays."""
    rng = np.random.default_rng(0)  # the same values in every process
    host = {"w1": rng.standard_normal((8, 16)), "b1": np.zeros(16),
            "w2": rng.standard_normal((16, 4)) * 0.3, "b2": np.zeros(4),
            "x": rng.standard_normal((16, 8)), "y": rng.standard_normal((16, 4))}
    host = {k: v.astype(np.float32) for k, v in host.items()}

    def place(value: np.ndarray, spec: P) -> Any:
        return jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec),
                                            lambda index: value[index])

    params = {k: place(host[k], P()) for k in ("w1", "b1", "w2", "b2")}
    return params, place(host["x"], P(axis)), place(host["y"], P(axis)), host


def local(value: Any) -> list[Any]:
    """A replicated global array's value, read from this process's first shard."""
    return np.asarray(value.addressable_data(0)).tolist()


def train(step: Any, params: Any, x: Any, y: Any) -> dict[str, Any]:
    losses = []
    for _ in range(STEPS):
        params, loss = step(params, x, y, LR)
        losses.append(float(np.asarray(loss.addressable_data(0))
                            if hasattr(loss, "addressable_data") else loss))
    return {"losses": losses, "params": {k: local(v) if hasattr(v, "addressable_data")
                                         else np.asarray(v).tolist() for k, v in params.items()},
            "sharding": placement(params["w1"])}


def placement(value: Any) -> Any:
    """A ``NamedSharding``'s mesh axes and spec entries, else the sharding's type name."""
    sharding = value.sharding
    if isinstance(sharding, NamedSharding):
        return {"mesh": dict(sharding.mesh.shape), "spec": [str(e) for e in sharding.spec]}
    return type(sharding).__name__


def main(mode: str, report: dict[str, Any]) -> None:
    import jxe_multiproc

    from hatch_jaxexport.runtime.call.loader import loaded_from_artifact

    axis = "data" if mode == "baked" else "batch"
    mesh = Mesh(np.array(jax.devices()), (axis,))
    params, x, y, host = global_inputs(mesh, axis)
    try:
        report["baked"] = train(jxe_multiproc.train_step, params, x, y)
    except Exception as err:  # the unbaked mesh: the same error expected in every process
        report["error"] = {"type": type(err).__name__, "message": str(err)}
    report["traces_baked"] = jxe_multiproc.TRACES["count"]
    report["from_artifact"] = {str(k): v for k, v in
                               loaded_from_artifact(jxe_multiproc.train_step).items()}
    if mode == "baked":
        report["source"] = train(jax.jit(jxe_multiproc.train_step.__wrapped__), params, x, y)
        one_device = {k: host[k] for k in ("w1", "b1", "w2", "b2")}
        report["source_one_device"] = train(jax.jit(jxe_multiproc.train_step.__wrapped__),
                                            one_device, host["x"], host["y"])
    report["traces_total"] = jxe_multiproc.TRACES["count"]  # the counter does count


if __name__ == "__main__":
    process_id, num_processes, port, run_mode = (int(sys.argv[1]), int(sys.argv[2]),
                                                 int(sys.argv[3]), sys.argv[4])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=num_processes,
                               process_id=process_id, initialization_timeout=60)
    result: dict[str, Any] = {"process": jax.process_index(), "devices": jax.device_count(),
                              "local_devices": jax.local_device_count(), "jax": jax.__version__}
    try:
        main(run_mode, result)
    except Exception:
        result["crash"] = traceback.format_exc()
    print(json.dumps(result))
    sys.stdout.flush()
    jax.distributed.shutdown()
