"""A committed ``jaxexport-signatures.json`` reaches the wheel with either backend, as written.

The recording file lies beside the package's ``__init__.py`` in the source tree, committed, and
nothing else is configured (no package data, no ``MANIFEST.in``). setuptools imports the package
from ``build/lib`` for the export, where the file is only copied when declared package data:
the build reads it from the source tree instead, and an sdist carries it, so
``python -m build`` (sdist, then the wheel from the unpacked sdist) bakes the recorded calls
too. Each test builds with a real isolated ``python -m build``, installs the wheel into a fresh
venv and calls the recorded signatures there in a fresh process, strict (a call no artifact
covers raises) and with warnings as errors, the source never running.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _buildkit import (
    artifact_files,
    hatch_pyproject,
    links_env,
    members,
    python_m_build,
    setuptools_pyproject,
    write_project,
)
from conftest import FIXTURES, make_venv, run

from hatch_jaxexport.formats.signatures import SIGNATURES_NAME, signatures_text

pytestmark = pytest.mark.slow

JAX_VERSION = __import__("importlib.metadata").metadata.version("jax")

#: ``jxe_concrete``'s recorded calls, as ``HATCH_JAXEXPORT_RECORD=1`` writes them: sizes of a
#: structure whose symbolic export fails, and whole calls of the spec-less ``free``.
SIGNATURES = signatures_text(
    {"jxe_concrete:lengthy": {0: [{"n": 3}, {"n": 4}]}},
    {"jxe_concrete:free": [
        {"mode": {"static": "add"}, "scale": {"static": 2.0},
         "x": {"array": [[6], "float32"]}},
        {"mode": {"static": "mul"}, "scale": {"static": 3.0},
         "x": {"array": [[4, 2], "float32"]}}]})

#: The recorded calls in a fresh process: strict, warnings as errors, counting source runs.
CALLS = """
import json, warnings
warnings.simplefilter("error")
import numpy as np
import jxe_concrete as m
out = {"lengthy": [float(m.lengthy(np.ones(n, np.float32))) for n in (3, 4)],
       "free": [np.asarray(m.free(np.arange(6.0, dtype=np.float32))).tolist(),
                np.asarray(m.free(np.ones((4, 2), np.float32), 3.0, mode="mul")).tolist()],
       "traces": m.TRACES["count"], "file": m.__file__}
print(json.dumps(out))
"""

EXPECTED = {"lengthy": [3.0, 6.0],
            "free": [[4.0, 4.0, 4.0, 4.0], [[0.0, 0.0], [0.0, 0.0]]], "traces": 0}


def committed_project(root: Path, pyproject: str) -> Path:
    """``jxe_concrete`` with its recorded calls committed beside ``__init__.py``."""
    write_project(root, {"pyproject.toml": pyproject})
    shutil.copytree(FIXTURES / "jxe_concrete", root / "jxe_concrete",
                    ignore=shutil.ignore_patterns("__pycache__", "_jaxexport", SIGNATURES_NAME))
    (root / "jxe_concrete" / SIGNATURES_NAME).write_text(SIGNATURES)
    return root


def concrete_entries(wheel: Path) -> list[tuple[str, str]]:
    """The wheel's concrete-size artifacts: (function, sizes), sorted."""
    manifest = json.loads(artifact_files(wheel, "jxe_concrete")["manifest.json"])
    return sorted((c["function"], json.dumps(c["sizes"])) for c in manifest["concrete"])


def build_and_call(project: Path, tmp: Path, project_wheel: Path) -> tuple[Path, Path, dict]:
    """``python -m build`` (sdist and wheel) with the real isolated front end; the wheel
    installed into a fresh venv; the recorded calls in a fresh process there."""
    env = {**links_env(project_wheel.parent), "HATCH_JAXEXPORT_CACHE": str(tmp / "cache")}
    built = run(python_m_build("-o", tmp / "dist", project), env=env)
    lines = (built.stdout + built.stderr).splitlines()
    assert not [line for line in lines if "warning" in line and "record" in line], lines
    (wheel,) = (tmp / "dist").glob("jxe_concrete-*.whl")
    (sdist,) = (tmp / "dist").glob("jxe_concrete-*.tar.gz")
    python = make_venv(tmp / "venv", project_wheel, f"jax=={JAX_VERSION}", "flatbuffers", wheel)
    proc = run([python, "-c", CALLS], cwd=tmp, env={
        "HATCH_JAXEXPORT_STRICT": "1", "JAX_PLATFORMS": "cpu", "PYTHONPATH": "",
        "HATCH_JAXEXPORT_CACHE": str(tmp / "cache")})
    return wheel, sdist, json.loads(proc.stdout.strip().splitlines()[-1])


WANTED = [("jxe_concrete:free", "{}"), ("jxe_concrete:free", "{}"),
          ("jxe_concrete:lengthy", '{"n": 3}'), ("jxe_concrete:lengthy", '{"n": 4}')]


def test_setuptools_build_reads_the_committed_signatures_from_the_source_tree(
        tmp_path, project_wheel):
    project = committed_project(tmp_path / "proj",
                                setuptools_pyproject("jxe-concrete", "jxe_concrete", ""))
    wheel, sdist, out = build_and_call(project, tmp_path, project_wheel)
    assert [n for n in members(sdist) if n.endswith(f"jxe_concrete/{SIGNATURES_NAME}")]
    assert [c for c in concrete_entries(wheel) if c[0] != "jxe_concrete:branchy"] == WANTED
    assert "site-packages" in out.pop("file")
    assert out == EXPECTED


def test_hatchling_build_reads_the_committed_signatures(tmp_path, project_wheel):
    project = committed_project(tmp_path / "proj", hatch_pyproject(
        "jxe-concrete", "require-runtime-dependencies = true\n"))
    wheel, sdist, out = build_and_call(project, tmp_path, project_wheel)
    assert [n for n in members(sdist) if n.endswith(f"jxe_concrete/{SIGNATURES_NAME}")]
    assert [c for c in concrete_entries(wheel) if c[0] != "jxe_concrete:branchy"] == WANTED
    assert "site-packages" in out.pop("file")
    assert out == EXPECTED
