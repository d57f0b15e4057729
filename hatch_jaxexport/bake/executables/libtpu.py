"""libtpu for a build's TPU targets: the release the build's jax pins, on any Linux x86-64 builder.

Build layer. A TPU target compiles with the XLA:TPU compiler that libtpu holds, which describes
TPU hosts that are not attached (``formats.tpu_targets``). The executable must be what a TPU
user's process would load: their jax pins libtpu exactly (``jax[tpu]==0.10.2`` requires
``libtpu==0.0.42.*``), and the executable records libtpu's build as its platform version. So
the build takes the pin from the metadata of the jax that compiles (the builder's, or each of
``executable-jaxlibs``), and where that Python cannot import libtpu already, installs that
release, without dependencies, into a folder of the user's cache (``build-envs/``, beside the
other jax releases' environments), made once per pin and reused: about 700 MB, which an
ordinary build, and a user's machine, never download. The compiling process gets the folder
on its search path; nothing of it reaches the wheel.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.runtime.disk.cache_folders import default_cache_dir

#: What the compiling Python says of itself: its jax, the libtpu its jax pins (the ``tpu``
#: extra's requirement), whether it imports libtpu already, and its OS and machine.
_PROBE = """
import importlib.metadata as md, importlib.util, json, platform, re
pins = [r.split(";")[0].strip() for r in (md.requires("jax") or [])
        if r.startswith("libtpu") and re.search(r"extra\\s*==\\s*.tpu.", r)]
print(json.dumps({"jax": md.version("jax"), "pin": pins[0] if pins else "",
                  "has": importlib.util.find_spec("libtpu") is not None,
                  "system": platform.system(), "machine": platform.machine()}))
"""


def libtpu_folder(python: str, env: Mapping[str, str], targets: str,
                  log: Callable[[str], None]) -> str | None:
    """The folder to put on the search path of ``python``'s TPU compiles, ``None`` where it
    imports libtpu already; ``ExportError``, naming ``targets`` and the fix, where libtpu
    cannot be had (not Linux x86-64, a jax that pins none, an install that fails)."""
    probe = subprocess.run([python, "-c", _PROBE], env=dict(env), capture_output=True,
                           text=True)
    if probe.returncode:
        raise ExportError([f"TPU targets ({targets}): cannot ask {python} for its jax: "
                           f"{probe.stderr.strip()[-600:]}"])
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    if found["has"]:
        return None
    if (found["system"], found["machine"]) != ("Linux", "x86_64"):
        raise ExportError([f"TPU targets ({targets}) compile with libtpu, which installs on "
                           f"Linux x86-64 only; this builder is {found['system']} "
                           f"{found['machine']}: build the wheel on a Linux x86-64 runner (a "
                           "hosted CI runner will do: no TPU is needed), or drop tpu-targets"])
    if not found["pin"]:
        raise ExportError([f"TPU targets ({targets}): jax {found['jax']} names no libtpu for "
                           "its tpu extra, so no TPU compiler matches it: build with a jax "
                           "whose tpu extra pins libtpu, or drop tpu-targets"])
    return str(_installed(found["pin"], found["jax"], targets, log))


def _installed(pin: str, jax_version: str, targets: str, log: Callable[[str], None]) -> Path:
    """The cache folder holding ``pin`` (``libtpu==0.0.42.*``), installed on first use."""
    tag = re.sub(r"[^A-Za-z0-9.]+", "-", pin.replace("*", "x")).strip("-")
    folder = default_cache_dir().parent / "build-envs" / tag
    marker = folder / "hatch-jaxexport-pin.txt"  # written once the install is complete
    if marker.is_file() and marker.read_text() == pin:
        return folder
    log(f"installing {pin} (jax {jax_version}'s TPU compiler, about 700 MB, once) into "
        f"{folder}")
    problems = []
    for command in _installers(folder, pin):  # the first that works: isolated build
        shutil.rmtree(folder, ignore_errors=True)  # environments may lack pip, or uv
        done = subprocess.run(command, capture_output=True, text=True)
        if not done.returncode:
            break
        problems.append(f"{' '.join(command[:3])}...: {done.stderr.strip()[-600:]}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
        raise ExportError([f"TPU targets ({targets}): cannot install {pin}, the libtpu that jax "
                           f"{jax_version} pins ({'; '.join(problems) or 'no uv or pip'}); "
                           f"install jax[tpu]=={jax_version} in the build environment, or drop "
                           "tpu-targets"])
    marker.write_text(pin)
    return folder


def _installers(folder: Path, pin: str) -> list[list[str]]:
    """Commands that install ``pin`` into ``folder`` without its dependencies: uv (on the
    path, or beside this Python or the one its environment was made from), then pip of those
    Pythons; those that do not exist are left out."""
    pythons = list(dict.fromkeys([sys.executable, getattr(sys, "_base_executable", "")]))
    uvs = [shutil.which("uv") or "", *(str(Path(p).with_name("uv")) for p in pythons if p)]
    found = [uv for uv in dict.fromkeys(uvs) if uv and Path(uv).exists()]
    args = ["--no-deps", "--target", str(folder), pin]
    return [*([uv, "pip", "install", "-q", "-p", sys.executable, *args] for uv in found),
            *([p, "-m", "pip", "install", "-q", *args] for p in pythons if p)]


__all__ = ["libtpu_folder"]
