"""This project's own wheel with its bytecode: ``HATCH_BUILD_HOOK_ENABLE_CUSTOM=true``.

Why: a baked library's first call imports about 45 of our modules. Where they have no bytecode
(``uv pip install`` compiles none unless asked, and many container images set
``PYTHONDONTWRITEBYTECODE=1``, so none is ever written), every process compiles them from
source: 60 ms on this project's CPU machine, more than the shipped executable's own load. A wheel
that carries the bytecode for the Python that built it removes that cost for every installer.

The hook is off by default (the plain wheel stays ``py3-none-any``, the one editable installs,
tests and ``pip install .`` use). Enabled, it compiles every module of ``hatch_jaxexport`` with
:mod:`py_compile` as checked-hash pyc files (PEP 552: valid whatever the installed file's mtime,
and refused by Python where the source beside it was edited), names the source by its path in
the wheel (no build folder in the bytes), and tags the wheel ``cpXY-none-any``: installers prefer
it to the ``py3-none-any`` one on that Python only. A release builds one per supported Python:
``scripts/release_wheels.sh``.
"""

from __future__ import annotations

import py_compile
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = "hatch_jaxexport"


def compile_package(root: Path, out: Path) -> dict[str, str]:
    """Checked-hash bytecode of every module under ``root / PACKAGE``, written under ``out``:
    ``{file written: its path in the wheel}``."""
    tag = sys.implementation.cache_tag
    written: dict[str, str] = {}
    for source in sorted((root / PACKAGE).rglob("*.py")):
        relative = source.relative_to(root)
        in_wheel = relative.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        target = out / in_wheel
        target.parent.mkdir(parents=True, exist_ok=True)
        py_compile.compile(str(source), cfile=str(target), dfile=relative.as_posix(), doraise=True,
                           optimize=0,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        written[str(target)] = in_wheel.as_posix()
    return written


class BytecodeHook(BuildHookInterface):
    """Adds the bytecode of the building Python and the wheel tag that says which Python."""

    #: The folder the bytecode is compiled into for one build (removed when it is written).
    _scratch: Path | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version != "standard":
            return  # an editable install runs the checkout's files: Python writes their bytecode
        self._scratch = Path(tempfile.mkdtemp(prefix="hatch-jaxexport-pyc-"))
        build_data["force_include"].update(compile_package(Path(self.root), self._scratch))
        build_data["tag"] = f"cp{sys.version_info.major}{sys.version_info.minor}-none-any"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
