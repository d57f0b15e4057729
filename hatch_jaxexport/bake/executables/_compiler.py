"""``python -m hatch_jaxexport.bake.executables._compiler REQUEST.json``: compile one target.

Started by ``compiling.compile_executables`` with the target's ``XLA_FLAGS``. For each plan it
deserializes the artifact the export workers wrote, compiles its call for each concrete
signature, and writes the executable's plain bytes; a signature that cannot stand alone as an
executable (constants passed as arguments, host callbacks) is a note, not a failure: its calls
compile the StableHLO as before.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.executables.compiling import EXECUTABLE_SUFFIX, builder_machine
from hatch_jaxexport.bake.export.search_path import restore_search_path
from hatch_jaxexport.bake.protocol import CompileRequest, CompileResult
from hatch_jaxexport.formats.cpu_targets import TARGETS, executable_system, required_features
from hatch_jaxexport.formats.device_targets import (
    DeviceDescription,
    backend_flags,
    device_target_name,
)
from hatch_jaxexport.formats.manifest import ExecutableRecord, sha256_hex
from hatch_jaxexport.formats.tpu_targets import is_tpu_key, parse_tpu_target
from hatch_jaxexport.runtime.jax_dtypes import has_keys
from hatch_jaxexport.runtime.jaxcompat import (
    backend_identity,
    concrete_shape,
    no_locations,
    serialize_compiled,
    x64_context,
)

# Imported in functions: the package's pytree serializations, only for artifacts whose trees hold
# its classes.


class Deviceless:
    """A TPU target compiled without its device: the described host's first device (what the
    executable is compiled for) and the topology's name (``v5e:2x2``, recorded)."""

    __slots__ = ("device", "topology")

    def __init__(self, device: Any, topology: str) -> None:
        self.device, self.topology = device, topology


def deviceless_target(key: str) -> tuple[str, DeviceDescription, Deviceless]:
    """A TPU target's key (``tpu:v5e:2x2``) as the record's target name, the description a
    TPU host of it gives (libtpu's, read off the described devices: the same platform version
    a real host reports) and the device to compile for."""
    import jax
    import jaxlib
    from jax.experimental import topologies

    tpu = parse_tpu_target(key)
    if tpu is None:
        raise ValueError(f"not a TPU target: {key!r}")
    described = topologies.get_topology_desc(
        platform="tpu", topology_name=tpu.topology_name,
        chip_config_name=tpu.generation.chip_config, chips_per_host_bounds=tpu.host_bounds,
        num_slices=1)
    devices = list(described.devices)
    first = devices[0]
    description = DeviceDescription("tpu", str(first.device_kind), len(devices),
                                    str(first.client.platform_version), jax.__version__,
                                    jaxlib.__version__, backend_flags("tpu", os.environ))
    name = device_target_name("tpu", description.device_kind, len(devices))
    return name, description, Deviceless(first, tpu.topology_name)


def compile_plan(plan: Mapping[str, Any], target: str, out_dir: Path, package: str,
                 notes: list[str], device: DeviceDescription | None = None,
                 blobs: Path | None = None, deviceless: Deviceless | None = None
                 ) -> list[ExecutableRecord]:
    """Every executable of one artifact for ``target``: its call for each concrete signature
    and, for an artifact serialized with jax's VJP (``vjp_order``), that VJP's too.
    ``device``: a device target's description (``device_compile``, or a TPU described by
    libtpu: ``deviceless``, the device it compiles for), ``None`` for a CPU target;
    ``blobs``: the folder holding the artifact (default ``out_dir``)."""
    import jax

    from hatch_jaxexport.runtime.artifacts.pytrees import load_type

    if plan["pytree_types"]:  # the function's module first, as a user's process has it: the
        # types of the libraries it imports (flax, equinox...) are then allowed to resolve
        importlib.import_module(plan["function"].partition(":")[0])
    for ref in plan["pytree_types"]:
        load_type(ref, package)
    exported = jax.export.deserialize(bytearray(((blobs or out_dir) / plan["file"])
                                                .read_bytes()))
    if has_keys([*exported.in_avals, *exported.out_avals]):
        notes.append(f"no {target} executable for {plan['artifact']}: typed PRNG keys in its "
                     "inputs or outputs; its calls compile the StableHLO")
        return []
    calls = [(0, exported)]
    if plan.get("native_vjp"):
        vjp = exported.vjp()
        if any(a.dtype == jax.dtypes.float0 for a in vjp.in_avals):
            notes.append(f"no {target} executable for the VJP of {plan['artifact']}: integer "
                         "outputs have float0 cotangents; its eager gradients compile the "
                         "StableHLO")
        else:
            calls.append((1, vjp))
    records = []
    for sizes in plan["sizes"]:
        for native_vjp, call in calls:
            record = _compile_signature(plan, target, out_dir, call, sizes, native_vjp, notes,
                                        device, deviceless)
            if record is not None:
                records.append(record)
    return records


def _compile_signature(plan: Mapping[str, Any], target: str, out_dir: Path, exported: Any,
                       sizes: Mapping[str, int], native_vjp: int, notes: list[str],
                       device: DeviceDescription | None = None,
                       deviceless: Deviceless | None = None) -> ExecutableRecord | None:
    """One executable: ``exported``'s call for the concrete ``sizes`` (``None``, with a note,
    where it would not stand alone)."""
    import jax
    import jaxlib

    avals = [jax.ShapeDtypeStruct(concrete_shape(a.shape, sizes), a.dtype)
             for a in exported.in_avals]
    # no_locations: XLA:TPU keeps each op's source location in the executable, which would be
    # this file's path on the builder (a build path in the wheel, other bytes per builder)
    with x64_context(plan["x64"]), no_locations():
        compiled = _compiled(exported, avals, deviceless)
    blob = serialize_compiled(compiled, len(avals))
    what = "the VJP of " if native_vjp else ""
    if blob is None:
        notes.append(f"no {target} executable for {what}{plan['artifact']} with "
                     f"{dict(sizes) or 'its static shapes'}: it does not stand alone as an "
                     "executable (constants as arguments or host callbacks); its calls compile "
                     "the StableHLO")
        return None
    inputs = [[list(a.shape), a.dtype.name] for a in avals]
    outputs = [[list(o.shape), o.dtype.name] for o in jax.tree_util.tree_leaves(
        compiled.out_info)]
    digest = hashlib.sha256(json.dumps([plan["sha256"], inputs, jaxlib.__version__, native_vjp])
                            .encode()).hexdigest()
    vjp = ".vjp" if native_vjp else ""
    file = f"{Path(plan['file']).stem}{vjp}.{target}.{digest[:16]}{EXECUTABLE_SUFFIX}"
    (out_dir / file).write_bytes(blob)
    return ExecutableRecord(
        artifact=plan["artifact"], artifact_sha256=plan["sha256"], target=target,
        topology=deviceless.topology if deviceless is not None else "",
        inputs=inputs, outputs=outputs, file=file, sha256=sha256_hex(blob), size=len(blob),
        jax_version=jax.__version__, jaxlib_version=jaxlib.__version__,
        machine=builder_machine(), native_vjp=native_vjp,
        system=executable_system(blob) or platform.system(), **_target_fields(target, blob,
                                                                              device))


def _compiled(exported: Any, avals: list[Any], deviceless: Deviceless | None) -> Any:
    """``exported``'s call compiled for ``avals``: for this process's default device, or,
    ``deviceless``, for the described TPU's first device (every input and output on it alone,
    as an eager call on that device places them)."""
    import jax

    if deviceless is None:
        args, kwargs = exported.in_tree.unflatten(avals)
        return jax.jit(exported.call, keep_unused=True).lower(*args, **kwargs).compile()
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    one = NamedSharding(Mesh(np.array([deviceless.device]), ("device",)), PartitionSpec())
    placed = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=one) for a in avals]
    args, kwargs = exported.in_tree.unflatten(placed)  # their shardings place the inputs
    return jax.jit(exported.call, keep_unused=True, out_shardings=one
                   ).lower(*args, **kwargs).compile()


def _target_fields(target: str, blob: bytes, device: DeviceDescription | None
                   ) -> dict[str, Any]:
    """What an executable's record says of its target: a CPU target's backend, flags and the
    CPU features it needs; a device target's backend and description (its one device, the
    backend options it was compiled under), and CPU features only where the device is the CPU
    (a stand-in: its code is the host's)."""
    if device is None:
        backend, version = backend_identity("cpu")
        return {"backend": backend, "platform_version": version,
                "xla_flags": list(TARGETS[target].xla_flags),
                "cpu_features": required_features(blob)}
    return {"backend": device.platform, "platform_version": device.platform_version,
            "xla_flags": [], "device_kind": device.device_kind, "device_count": 1,
            "host_device_count": device.device_count, "backend_flags": device.backend_flags,
            "cpu_features": required_features(blob) if device.platform == "cpu" else []}


def main(request_path: str) -> int:
    """Entry point (``python -m hatch_jaxexport.bake.executables._compiler``)."""
    restore_search_path()  # the package's own classes are imported: see _search_path
    request = CompileRequest.read(Path(request_path))
    outcome = CompileResult()
    try:
        import jax

        jax.config.update("jax_enable_compilation_cache", False)  # XLA must really compile
        target, device, deviceless = request.target, None, None
        if is_tpu_key(request.target):  # a TPU libtpu describes: the record's name is its own
            target, device, deviceless = deviceless_target(request.target)
        for plan in request.plans:
            try:
                records = compile_plan(plan, target, Path(request.out_dir), request.package,
                                       outcome.notes, device, deviceless=deviceless)
            except Exception as err:  # one artifact: a note, the rest still compile
                outcome.notes.append(f"no {request.target} executable for "
                                        f"{plan['artifact']}: {type(err).__name__}: {err}")
                continue
            outcome.records += [record._asdict() for record in records]
    except Exception:
        outcome.notes.append(f"the {request.target} executable compiler failed: "
                                f"{traceback.format_exc(limit=3)}")
    outcome.write(Path(request.result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
