"""Python environments with another jax: where a build exports or compiles with a jax release
other than its own.

Build layer. ``jax-releases`` (artifacts for several jax releases in one wheel) and
``executable-jaxlibs`` (executables for several jaxlibs) run the same workers as the build's
own jax, with another interpreter: a virtual environment in the user's cache folder that holds
that jax, jaxlib and what the package needs besides, made on first use (with ``uv`` where the
builder has it, else ``venv`` and pip) and reused while its pins are the same. The workers
import this very hatch-jaxexport (a folder holding a link to it), never the builder's
site-packages, which would bring the builder's jax.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.runtime.disk.cache_folders import default_cache_dir

#: What this hatch-jaxexport needs in a worker's environment besides jax and jaxlib (absl-py:
#: jax 0.5.0's ``jax.export`` imports it without requiring it).
WORKER_REQUIREMENTS = ("flatbuffers", "archspec", "absl-py")


def _pins(version: str, requirements: Sequence[str]) -> list[str]:
    return [f"jax=={version}", f"jaxlib=={version}", *WORKER_REQUIREMENTS, *sorted(requirements)]


def environment_python(version: str, requirements: Sequence[str], log: Callable[[str], None]
                       ) -> Path:
    """The interpreter of a virtual environment with jax and jaxlib ``version`` and
    ``requirements`` (the package's other runtime dependencies), made on first use; an
    ``ExportError`` says what could not be installed."""
    tag = f"py{sys.version_info[0]}.{sys.version_info[1]}-jax{version}"
    venv = default_cache_dir().parent / "build-envs" / tag
    python = venv / "bin" / "python"
    pins = _pins(version, requirements)
    marker = venv / "hatch-jaxexport-pins.txt"  # written once everything is installed
    if marker.is_file() and marker.read_text() == "\n".join(pins):
        return python
    log(f"making a build environment with jax {version} in {venv}")
    shutil.rmtree(venv, ignore_errors=True)
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    commands = [[uv, "venv", "-q", "-p", sys.executable, str(venv)],
                [uv, "pip", "install", "-q", "-p", str(python), *pins]] \
        if Path(uv).exists() else \
        [[sys.executable, "-m", "venv", str(venv)],
         [str(python), "-m", "pip", "install", "-q", *pins]]
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            shutil.rmtree(venv, ignore_errors=True)
            raise ExportError([f"cannot make an environment with jax {version} "
                               f"({' '.join(command[:3])}... {' '.join(pins)}): "
                               f"{done.stderr.strip()[-1500:]}"])
    marker.write_text("\n".join(pins))
    return python


@contextmanager
def jax_python(version: str, env: Mapping[str, str], log: Callable[[str], None],
               requirements: Sequence[str] = ()) -> Iterator[tuple[str, dict[str, str]]]:
    """A Python with jax ``version`` (``environment_python``) and the environment to run the
    workers in: this hatch-jaxexport and the package's folders importable, none of the
    builder's jax. The link folder is removed on leaving."""
    python = environment_python(version, requirements, log)
    ours = python.parent.parent / f"src-{os.getpid()}"
    shutil.rmtree(ours, ignore_errors=True)
    ours.mkdir()
    try:
        (ours / "hatch_jaxexport").symlink_to(Path(__file__).resolve().parents[1])
        here = Path(__file__).resolve().parents[2]
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                 if p and Path(p).resolve() != here]
        yield str(python), {**env, "PYTHONPATH": os.pathsep.join([str(ours), *paths])}
    finally:
        shutil.rmtree(ours, ignore_errors=True)


__all__ = ["WORKER_REQUIREMENTS", "environment_python", "jax_python"]
