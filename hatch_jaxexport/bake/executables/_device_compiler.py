"""``python -m hatch_jaxexport.bake.executables._device_compiler REQUEST.json``: compile a
baked package's artifacts for the device this process sees.

Started by ``device_compile.compile_wheel`` with the unpacked wheel first on the search path.
It describes the device (jax's default backend: its platform, device kind, platform version,
jax, jaxlib and the backend options from the environment; ``formats.device_targets``), imports
the package as a user's process would (``discover``), plans each artifact of that platform at
the sizes its function names or its calls recorded (``compiling.plans_for_worker``, as a CPU
build plans its own), and compiles them with ``_compiler.compile_plan``: the artifacts'
StableHLO, as the wheel holds it, compiled for one device and serialized without pickle.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from hatch_jaxexport.bake.executables._compiler import compile_plan
from hatch_jaxexport.bake.executables.compiling import plans_for_worker, size_gap_lines
from hatch_jaxexport.bake.export.discovery import discover
from hatch_jaxexport.bake.export.search_path import restore_search_path
from hatch_jaxexport.bake.protocol import CompileRequest, CompileResult
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.device_targets import (
    DeviceDescription,
    backend_flags,
    device_target_name,
)
from hatch_jaxexport.formats.manifest import MANIFEST_NAME
from hatch_jaxexport.formats.manifest_reader import parse_manifest
from hatch_jaxexport.runtime.call.matching import export_platform
from hatch_jaxexport.runtime.jaxcompat import device_identity


def this_device(platform: str) -> DeviceDescription:
    """The device this process compiles for: jax's default backend, which must be
    ``platform`` where one is asked for (``ExportError`` otherwise), and not the CPU unless
    asked for (a CPU's executables are the build's: ``executables = true``)."""
    import jax
    import jaxlib

    default = export_platform()
    if platform and platform != default:
        raise ExportError([f"jax's default backend here is {default}, not {platform}: run "
                           f"where a {platform} device is, with JAX_PLATFORMS unset or "
                           f"{platform}"])
    if not platform and default == "cpu":
        raise ExportError(["jax's default backend here is cpu: there is no accelerator to "
                           "compile for (a CPU's executables come from the build, "
                           "executables = true); --platform cpu compiles for this CPU anyway"])
    identity = device_identity(default)
    if identity is None:
        raise ExportError([f"jax has no local {default} device here"])
    version, kind, count = identity
    # The backend options this process compiles under (LIBTPU_INIT_ARGS, which TPU VM images
    # set in every process): recorded, and a user's process must set the same. ``count``: the
    # host's devices, whose topology the executable is compiled within.
    return DeviceDescription(default, kind, count, version, jax.__version__, jaxlib.__version__,
                             backend_flags(default, os.environ))


def compile_package(request: CompileRequest, outcome: CompileResult) -> None:
    """Every executable of the request's package for this device, into ``outcome``."""
    import jax

    jax.config.update("jax_enable_compilation_cache", False)  # XLA must really compile
    device = this_device(request.platform)
    outcome.device = device.to_json()
    target = device_target_name(device.platform, device.device_kind, device.device_count)
    blobs = Path(request.blobs)
    manifest = parse_manifest((blobs / MANIFEST_NAME).read_bytes(), where=str(blobs))
    functions = {fn.name: fn for fn in discover(request.package, isolate_config=True)}
    absent = sorted({r.function for r in manifest.artifacts} - set(functions))
    if absent:
        raise ExportError([f"the wheel's manifest lists {', '.join(absent)}, which importing "
                           f"{request.package} did not define: not the same source"])
    plans = plans_for_worker(functions, [r._asdict() for r in manifest.artifacts], [target],
                             platform=device.platform)
    outcome.notes += size_gap_lines(plans)
    for plan in plans:
        if not plan["sizes"]:
            continue
        try:
            records = compile_plan(plan, target, Path(request.out_dir), request.package,
                                   outcome.notes, device, blobs)
        except Exception as err:  # one artifact: a note, the rest still compile
            outcome.notes.append(f"no {target} executable for {plan['artifact']}: "
                                 f"{type(err).__name__}: {err}")
            continue
        outcome.records += [record._asdict() for record in records]


def main(request_path: str) -> int:
    """Entry point (``python -m hatch_jaxexport.bake.executables._device_compiler``)."""
    restore_search_path()  # the unpacked wheel, ahead of any installed copy of the package
    request = CompileRequest.read(Path(request_path))
    outcome = CompileResult()
    try:
        compile_package(request, outcome)
    except ExportError as err:
        outcome.fatal = list(err.failures)
    except Exception:
        outcome.fatal = [f"the device compiler failed: {traceback.format_exc(limit=3)}"]
    outcome.write(Path(request.result))
    return 0 if not outcome.fatal else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
