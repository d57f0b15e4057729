"""Executables compiled where the device is: a baked wheel's artifacts compiled for a TPU or GPU.

A build exports on any machine (jax lowers for every platform on a CPU), but an accelerator's
executable can only be compiled by that accelerator's backend. So a machine that has the
device (a CI runner with a TPU or a GPU) takes the wheel the build made, compiles its
artifacts of that platform at their executable sizes, and writes the same wheel with those
executables added (``jaxexport compile-executables``). That wheel is another builder's wheel
to ``jaxexport merge`` and the hook's ``executables-from``: the same checks (one StableHLO,
nothing else different) put the device's executables beside the CPU builders'.

This process never starts a backend: the compile runs in a child process
(``_device_compiler``) that imports the package from the unpacked wheel, as a user's process
would, and holds the device alone while it compiles.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.executables.merge import add_to_wheel
from hatch_jaxexport.bake.export.search_path import SEARCH_PATH_ENV, search_path_value
from hatch_jaxexport.bake.protocol import CompileRequest, CompileResult
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.manifest import ARTIFACT_DIR, MANIFEST_NAME, ExecutableRecord
from hatch_jaxexport.formats.manifest_reader import parse_manifest


class DeviceCompile:
    """What ``compile_wheel`` wrote: the wheel, the executables added (and their bytes), the
    device they were compiled for (``DeviceDescription.to_json``) and the compile's seconds."""

    __slots__ = ("device", "records", "seconds", "wheel")

    def __init__(self, wheel: Path, records: list[ExecutableRecord], device: dict[str, Any],
                 seconds: float) -> None:
        self.wheel, self.records, self.device, self.seconds = wheel, records, device, seconds


def compile_wheel(wheel: str | Path, out_dir: str | Path, platform: str = "",
                  log: Callable[[str], None] = print) -> DeviceCompile:
    """Compile ``wheel``'s artifacts for the device of this machine (``platform``, or jax's
    default backend) and write the wheel with them into ``out_dir``. ``ExportError``: the
    device is not the one asked for, the wheel carries no artifacts, or the compile failed;
    an artifact that does not compile is a warning line (its calls compile the StableHLO)."""
    wheel = Path(wheel)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jaxexport-device-") as tmp:
        site = Path(tmp) / "site"
        with zipfile.ZipFile(wheel) as archive:
            folders = sorted(n[: -len(MANIFEST_NAME) - 1] for n in archive.namelist()
                             if n.endswith(f"/{ARTIFACT_DIR}/{MANIFEST_NAME}"))
            if not folders:
                raise ExportError([f"{wheel.name} carries no baked artifacts "
                                   f"(no {ARTIFACT_DIR}/{MANIFEST_NAME})"])
            archive.extractall(site)
        added: dict[str, list[tuple[ExecutableRecord, bytes]]] = {}
        device: dict[str, Any] = {}
        for folder in folders:
            staging = Path(tmp) / "out" / folder.replace("/", "_")
            staging.mkdir(parents=True)
            outcome = _compile_folder(site, folder, staging, platform, Path(tmp))
            device = outcome.device or device
            for note in outcome.notes:
                log(f"warning: {note}")
            added[folder] = _new_executables(site / folder, staging, outcome, log)
        seconds = time.perf_counter() - started
        out = add_to_wheel(wheel, added, out_dir)
    records = [record for pairs in added.values() for record, _ in pairs]
    return DeviceCompile(out, records, device, seconds)


def _compile_folder(site: Path, folder: str, staging: Path, platform: str, tmp: Path
                    ) -> CompileResult:
    """One package's executables, compiled by a child process (``_device_compiler``)."""
    package = folder.split("/")[0]
    request, result = tmp / f"{package}.request.json", tmp / f"{package}.result.json"
    CompileRequest(package=package, target="", plans=[], out_dir=str(staging),
                   result=str(result), platform=platform, blobs=str(site / folder)
                   ).write(request)
    env = {**os.environ, SEARCH_PATH_ENV: search_path_value([str(site)])}
    proc = subprocess.run(
        [sys.executable, "-m", "hatch_jaxexport.bake.executables._device_compiler",
         str(request)], env=env, cwd=tmp, capture_output=True, text=True)
    if not result.exists():
        raise ExportError([f"the device compiler for {package} died (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-2000:]}"])
    outcome = CompileResult.read(result)
    if outcome.fatal:
        raise ExportError(outcome.fatal, f"no executables compiled for {package}")
    return outcome


def _new_executables(folder: Path, staging: Path, outcome: CompileResult,
                     log: Callable[[str], None]) -> list[tuple[ExecutableRecord, bytes]]:
    """The compiled executables with their bytes, less those the wheel already carries under
    the same name (a second compile of the same wheel adds nothing)."""
    shipped = {e.file for e in parse_manifest((folder / MANIFEST_NAME).read_bytes(),
                                              where=str(folder)).executables}
    pairs = []
    for raw in outcome.records:
        record = ExecutableRecord(**raw)
        if record.file in shipped:
            log(f"note: {record.file} is in the wheel already: kept as it is")
            continue
        pairs.append((record, (staging / record.file).read_bytes()))
    return pairs


__all__ = ["DeviceCompile", "compile_wheel"]
