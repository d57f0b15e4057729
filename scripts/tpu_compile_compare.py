"""Is a TPU executable compiled without a TPU the one the TPU compiles? Bytes and results.

    python scripts/tpu_compile_compare.py compile --deviceless v5e:1x1 --out DIR
    python scripts/tpu_compile_compare.py compile --device --out DIR        (on the TPU)
    python scripts/tpu_compile_compare.py compare DIR_A DIR_B [...]
    python scripts/tpu_compile_compare.py run DIR                           (on the TPU)

``compile`` compiles the same programs, in the same order, in one fresh process (XLA:TPU
numbers the programs a process compiles, and the number is in the bytes: a comparison needs
the same order on both sides), each lowered on ``ShapeDtypeStruct``s placed on one device, as
the build's deviceless compile does (``bake.executables._compiler``), and writes each
executable's plain bytes and an index (``index.json``: SHA-256, size, the platform version,
``LIBTPU_INIT_ARGS``). ``--deviceless`` compiles for a described host (libtpu, no TPU, jax's
CPU backend), ``--device`` on this process's first TPU, as ``jaxexport compile-executables``
does. ``compare`` prints, per program, whether the folders hold the same bytes. ``run`` loads
each executable of a folder onto this process's first device (``deserialize_executable``, as
the loader does), runs it and compares the result with ``jax.jit`` of the same program here:
the maximum absolute difference.

Used to decide what an executable's backend options must match (docs/gpu.md): the lent TPU
sets ``LIBTPU_INIT_ARGS=--xla_tpu_use_enhanced_launch_barrier=true`` in every process; a
deviceless build sets none.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path


def programs():
    """The programs, in their compile order: name -> (function, argument shapes)."""
    import jax.numpy as jnp

    def tiny(x):
        return jnp.sin(x) * 2.0 + 1.0

    def mlp(x, w1, w2):
        return jnp.tanh(jnp.tanh(x @ w1) @ w2).sum(axis=0)

    def chain(x):
        for i in range(50):
            x = jnp.cos(x) * (1.0 + i / 100.0)
        return x

    def reduce(x):
        return jnp.cumsum(jnp.exp(-x * x), axis=1).max(axis=0)

    return {"tiny": (tiny, [(128,)]), "mlp": (mlp, [(32, 64), (64, 128), (128, 16)]),
            "chain": (chain, [(256, 256)]), "reduce": (reduce, [(64, 512)])}


def _device(args: argparse.Namespace):
    """The device to compile for, and the topology's name (``""`` on a device)."""
    import jax

    if args.device:
        return jax.devices()[0], ""  # the default backend: the TPU there
    from jax.experimental import topologies

    name = args.deviceless
    generation, topology = name.split(":")
    sizes = [int(s) for s in topology.split("x")] + [1, 1, 1]
    chip = "megacore" if generation in ("v4", "v5p") else "default"
    described = topologies.get_topology_desc(platform="tpu", topology_name=name,
                                             chip_config_name=chip,
                                             chips_per_host_bounds=tuple(sizes[:3]),
                                             num_slices=1)
    return described.devices[0], name


def compile_all(args: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    device, topology = _device(args)
    one = NamedSharding(Mesh(np.array([device]), ("device",)), PartitionSpec())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index = {"platform_version": str(device.client.platform_version),
             "device_kind": str(device.device_kind), "topology": topology,
             "libtpu_init_args": os.environ.get("LIBTPU_INIT_ARGS", ""), "programs": {}}
    for name, (fn, shapes) in programs().items():
        placed = [jax.ShapeDtypeStruct(s, jnp.float32, sharding=one) for s in shapes]
        compiled = jax.jit(fn, out_shardings=one).lower(*placed).compile()
        executable = compiled._executable.xla_executable
        client = getattr(executable, "client", None)
        blob = bytes(client.serialize_executable(executable) if client is not None
                     else executable.serialize())
        (out / f"{name}.xla").write_bytes(blob)
        index["programs"][name] = {"sha256": hashlib.sha256(blob).hexdigest(),
                                   "size": len(blob)}
    (out / "index.json").write_text(json.dumps(index, indent=1))
    print(json.dumps({k: v for k, v in index.items() if k != "programs"}))
    for name, entry in index["programs"].items():
        print(f"{name}: {entry['size']:,} bytes, sha256 {entry['sha256'][:16]}")
    return 0


def compare(args: argparse.Namespace) -> int:
    indexes = {folder: json.loads((Path(folder) / "index.json").read_text())
               for folder in args.folders}
    first = next(iter(indexes.values()))
    print("| program | " + " | ".join(
        f"{Path(f).name} ({i['topology'] or 'device'}, LIBTPU_INIT_ARGS "
        f"'{i['libtpu_init_args']}')" for f, i in indexes.items()) + " | same bytes |")
    print("| --- |" + " --- |" * (len(indexes) + 1))
    differ = 0
    for name in first["programs"]:
        entries = [i["programs"][name] for i in indexes.values()]
        same = len({e["sha256"] for e in entries}) == 1
        differ += not same
        print(f"| {name} | " + " | ".join(f"{e['size']:,} B {e['sha256'][:12]}"
                                          for e in entries) + f" | {'yes' if same else 'NO'} |")
    versions = {i["platform_version"] for i in indexes.values()}
    print(f"platform versions: {len(versions)} distinct: {sorted(versions)}")
    return 1 if differ else 0


def run(args: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax._src.lib import xla_client

    device = jax.devices()[0]
    rng = np.random.default_rng(0)
    worst = 0.0
    for name, (fn, shapes) in programs().items():
        inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        blob = (Path(args.folder) / f"{name}.xla").read_bytes()
        loaded = device.client.deserialize_executable(blob, xla_client.DeviceList((device,)))
        placed = [jax.device_put(x, device) for x in inputs]
        result = loaded.execute_sharded(placed)
        got = np.asarray(result.disassemble_into_single_device_arrays()[0][0])
        want = np.asarray(jax.jit(fn)(*[jnp.asarray(x) for x in inputs]))
        diff = float(np.max(np.abs(got - want)))
        worst = max(worst, diff)
        print(f"{name}: loaded and ran, max abs diff {diff} against jax.jit here")
    return 0 if worst == 0.0 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    made = sub.add_parser("compile")
    where = made.add_mutually_exclusive_group(required=True)
    where.add_argument("--deviceless", metavar="TOPOLOGY", help="v5e:1x1, v5e:2x2, ...")
    where.add_argument("--device", action="store_true")
    made.add_argument("--out", required=True)
    compared = sub.add_parser("compare")
    compared.add_argument("folders", nargs="+")
    ran = sub.add_parser("run")
    ran.add_argument("folder")
    args = parser.parse_args()
    return {"compile": compile_all, "compare": compare, "run": run}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
