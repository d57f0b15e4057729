"""Helpers for the build-integration tests: projects, in-process builds, wheels, fresh calls."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conftest import FIXTURES, ROOT, _uv, run

EXAMPLE = ROOT / "example_pkg"
DEMO = ROOT / "scripts" / "demo.py"
IGNORED = shutil.ignore_patterns("_jaxexport", "dist", "build", "__pycache__", "*.egg-info")


def links_env(wheel_dir: Path) -> dict[str, str]:
    """Offer a local wheel folder to isolated builds of every front end (keeping configured
    find-links, like this machine's ``PIP_FIND_LINKS``)."""
    pip = " ".join(filter(None, [str(wheel_dir), os.environ.get("PIP_FIND_LINKS", "")]))
    uv = ",".join(filter(None, [str(wheel_dir), os.environ.get("UV_FIND_LINKS", "")]))
    return {"PIP_FIND_LINKS": pip, "UV_FIND_LINKS": uv}


def python_m_build(*args: str | os.PathLike[str]) -> list[str | os.PathLike[str]]:
    """``python -m build ARGS``: the real PEP 517 isolated build, its environment installed by
    uv where uv is found (``--installer uv``: about 6 s less per environment than pip, each
    holding jax). The front-end tests (test_hatch_hook's front ends, test_build_progress,
    test_setuptools' front-end matrix) keep pip's, a user's default."""
    installer = ["--installer", "uv"] if _uv() else []
    return [sys.executable, "-m", "build", *installer, *args]


def copy_project(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest, ignore=IGNORED)
    return dest


def write_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def hatch_pyproject(name: str, hook_table: str = "", *, hook_section: str | None = None,
                    extra: str = "") -> str:
    section = hook_section or "tool.hatch.build.targets.wheel.hooks.jaxexport"
    return textwrap.dedent(f"""
        [build-system]
        requires = ["hatchling>=1.21", "hatch-jaxexport"]
        build-backend = "hatchling.build"

        [project]
        name = "{name}"
        version = "0.1.0"
        requires-python = ">=3.11"
        dependencies = ["hatch-jaxexport", "jax"]
        {extra}
        [{section}]
        """).lstrip() + textwrap.dedent(hook_table).lstrip()


#: A package module with precompiled executables to make: a function of fixed sizes, and one
#: of named sizes serialized with its VJP (the TPU-target and companion-wheel tests).
EXECUTABLES_MODULE = '''
import jax.numpy as jnp

from hatch_jaxexport import exportable


@exportable({"x": ("8", "float32")})
def double(x):
    return 2 * x + 1


@exportable({"x": ("n", "float32")}, executable_sizes={"n": [4, 16]}, vjp_order=1)
def loss(x):
    return jnp.sum(jnp.sin(x) ** 2)
'''


def setuptools_pyproject(name: str, package: str, table: str) -> str:
    """A setuptools project's ``pyproject.toml`` with ``[tool.jaxexport]`` ``table``, built with
    this environment's jax release."""
    from importlib.metadata import version

    return textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=70", "hatch-jaxexport", "jax=={version("jax")}"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name}"
        version = "0.1.0"
        requires-python = ">=3.11"
        dependencies = ["hatch-jaxexport", "jax"]

        [tool.setuptools]
        packages = ["{package}"]

        [tool.jaxexport]
        """) + textwrap.dedent(table).lstrip()


def flit_pyproject(name: str, table: str, backend: str = "hatch_jaxexport.integrations.pep517"
                   ) -> str:
    """A flit project's ``pyproject.toml`` built by ``backend`` (the wrapping backend over
    flit by default, or flit itself), ``[tool.jaxexport]`` ``table``, this environment's jax.
    Nothing else in it names the backend: both routes build the same wheel."""
    from importlib.metadata import version

    return textwrap.dedent(f"""
        [build-system]
        requires = ["flit_core>=3.9,<5", "hatch-jaxexport", "jax=={version("jax")}"]
        build-backend = "{backend}"

        [project]
        name = "{name}"
        version = "0.1.0"
        description = "a flit project baked by the wrapping backend or by bake-wheel"
        requires-python = ">=3.11"
        dependencies = ["hatch-jaxexport", "jax"]

        [tool.jaxexport]
        backend = "flit_core.buildapi"
        """) + textwrap.dedent(table).lstrip()


TINY_MODULE = """
import jax.numpy as jnp

from hatch_jaxexport import exportable


@exportable({"x": ("n", "float32")})
def double(x):
    return 2 * x + 1


@exportable({"x": ("n", "float32")}, static={"p": [2, 3]})
def power(x, p=2):
    return x ** p
"""

FAILING_MODULE = """
import jax

from hatch_jaxexport import exportable


@exportable({"x": ("n", "float32")})
def noisy(x):
    jax.debug.print("x = {}", x)
    return x + 1
"""


def inprocess_build(root: Path, out: Path, *, versions: tuple[str, ...] = ("standard",),
                    target: str = "wheel", clean_only: bool = False) -> list[Path]:
    """Build with hatchling's builder classes in this process, the hook registered by hand.

    The exports still run in fresh worker processes; only the front end is skipped.
    """
    from hatchling.builders.sdist import SdistBuilder
    from hatchling.builders.wheel import WheelBuilder
    from hatchling.plugin.manager import PluginManager

    from hatch_jaxexport.integrations import hatch_plugin

    manager = PluginManager()
    manager.manager.register(hatch_plugin, name="jaxexport")
    builder_class = WheelBuilder if target == "wheel" else SdistBuilder
    builder = builder_class(str(root), plugin_manager=manager)
    return [Path(p) for p in builder.build(directory=str(out), versions=list(versions),
                                           clean_only=clean_only)]


def members(archive_path: Path) -> dict[str, bytes]:
    """The files of a wheel (zip) or sdist (tar.gz), by name."""
    if archive_path.suffix == ".whl":
        with zipfile.ZipFile(archive_path) as archive:
            return {info.filename: archive.read(info) for info in archive.infolist()}
    import tarfile

    with tarfile.open(archive_path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def artifact_files(wheel: Path, package: str) -> dict[str, bytes]:
    prefix = f"{package}/_jaxexport/"
    return {n[len(prefix):]: data for n, data in members(wheel).items() if n.startswith(prefix)}


def metadata(wheel: Path) -> str:
    return next(data.decode() for name, data in members(wheel).items()
                if name.endswith(".dist-info/METADATA"))


def jax_requirements(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` values on jax itself (not jaxlib or other jax-* names)."""
    import re

    return [line.split(": ", 1)[1] for line in metadata(wheel).splitlines()
            if re.match(r"Requires-Dist: jax(?![\w.-])", line)]


def wheel_tag(wheel: Path) -> str:
    text = next(data.decode() for name, data in members(wheel).items()
                if name.endswith(".dist-info/WHEEL"))
    return next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Tag:"))


def leaks(archive_path: Path, needles: list[str]) -> list[str]:
    """Every (member, needle) where a needle occurs in a member's (decompressed) bytes."""
    found = []
    for name, data in members(archive_path).items():
        for needle in needles:
            if needle.encode() in data or needle.encode("utf-16-le") in data:
                found.append(f"{name}: {needle!r}")
    return found


def run_example(python: Path, mode: str, workdir: Path, *, strict: bool = True
                ) -> tuple[dict[str, Any], Path]:
    """Run the demo's calls of example_pkg in a fresh process of ``python``'s venv.

    ``mode`` is ``artifact`` (bodies replaced by one that raises; strict if asked) or
    ``source`` (``jax.jit`` of the bodies). Returns the runner's report and its results file.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{mode}.npz"
    env = {"JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_CACHE": str(workdir / "cache"),
           "PYTHONPATH": ""}
    if strict:
        env["HATCH_JAXEXPORT_STRICT"] = "1"
    proc = run([python, DEMO, "--run", mode, "--out", out], env=env, cwd=workdir)
    return json.loads(proc.stdout.strip().splitlines()[-1]), out


def compare_results(mine: Path, reference: Path) -> dict[str, float]:
    """Largest absolute difference per call label, between two runner result files."""
    sys.path.insert(0, str(DEMO.parent))
    try:
        import demo
    finally:
        sys.path.remove(str(DEMO.parent))
    return demo.compare(mine, reference)


def assert_baked_run(report: dict[str, Any], diffs: dict[str, float]) -> None:
    """Every call ran an artifact, no body ran, and results match the source."""
    assert report["strict"] == "1"
    assert report["bodies_ran"] == [], report
    assert {row["ran"] for row in report["rows"]} == {"artifact (cpu)"}, report
    for label, diff in diffs.items():
        assert diff <= (1e-12 if "float64" in label else 1e-5), (label, diff)
    assert len(diffs) == len(report["rows"])


def other_python() -> str | None:
    """A Python of another minor version than this one (so, most likely, another jax).

    Looked up on PATH, then among pyenv's versions (as scripts/test.sh does).
    """
    version = "3.12" if sys.version_info[:2] == (3, 11) else "3.11"
    candidates = [shutil.which(f"python{version}")]
    if shutil.which("pyenv"):
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
        if root:
            candidates += sorted(map(str, Path(root).glob(f"versions/{version}*/bin/python"
                                                          f"{version}")))
    for candidate in filter(None, candidates):
        proc = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return candidate
    return None


def build_install_and_call(tmp: Path, package: str, libraries: Sequence[str],
                           project_wheel: Path, calls: Path, modes: Sequence[str]
                           ) -> tuple[Path, dict[str, dict[str, Any]]]:
    """A fixture package of real JAX code as a user gets it: built by the hook through an
    isolated ``python -m build``, installed with ``libraries`` (pinned to this environment's
    versions: a missing one fails) into a fresh venv, ``verify``-ed; then ``calls`` run there
    once per mode, in strict mode. The wheel, and each mode's last printed line as JSON."""
    from importlib.metadata import version

    from conftest import make_venv

    pins = [f"{name}=={version(name)}" for name in libraries]
    source = copy_project(FIXTURES / package, tmp / "src" / package)
    env = {**links_env(project_wheel.parent), "HATCH_JAXEXPORT_CACHE": str(tmp / "cache")}
    run(python_m_build("--wheel", "-o", tmp / "dist", source), env=env)
    (wheel,) = (tmp / "dist").glob(f"{package}-*.whl")
    python = make_venv(tmp / "venv", project_wheel, *pins, "flatbuffers", wheel)
    call_env = {"JAX_PLATFORMS": "cpu", "PYTHONPATH": "", "HATCH_JAXEXPORT_STRICT": "1",
                "HATCH_JAXEXPORT_CACHE": str(tmp / "cache")}
    verified = run([python, "-m", "hatch_jaxexport", "verify", package], env=call_env, cwd=tmp)
    assert f"{package}: OK" in verified.stdout, verified.stdout
    return wheel, {mode: json.loads(run([python, calls, mode], env=call_env, cwd=tmp)
                                    .stdout.strip().splitlines()[-1]) for mode in modes}
