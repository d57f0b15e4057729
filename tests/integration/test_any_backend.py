"""Any build backend's wheel, baked: the wrapping PEP 517 backend over flit, and ``jaxexport
bake-wheel`` of a wheel flit built on its own.

Real parts only: flit_core from the package index inside ``python -m build``'s isolated
environment (hatch-jaxexport from this checkout's wheel, ``links_env``), the baked wheel
installed by pip (and uv where found) and called in a fresh process in strict mode.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from _buildkit import (
    TINY_MODULE,
    artifact_files,
    flit_pyproject,
    links_env,
    metadata,
    python_m_build,
    write_project,
)
from conftest import _uv, run

JAX_VERSION = version("jax")
EPOCH = "1700000000"

CALL = """
import json, sys
import numpy as np
import jxe_flit
from hatch_jaxexport.runtime.call.loader import loaded_from_artifact
got = np.asarray(jxe_flit.power(np.arange(3, dtype=np.float32), p=3)).tolist()
print(json.dumps({"got": got, "served": list(loaded_from_artifact(jxe_flit.power).values()),
                  "where": jxe_flit.__file__}))
"""


def flit_project(root: Path, backend: str) -> Path:
    return write_project(root, {
        "pyproject.toml": flit_pyproject("jxe_flit", "jax-requirement = true\n", backend),
        "jxe_flit/__init__.py": '"""A tiny package."""\n' + TINY_MODULE})


def record_matches(wheel: Path) -> None:
    """Every member is in RECORD with its SHA-256 and size, RECORD itself last."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = {line.split(",")[0]: line.split(",", 1)[1]
                for line in archive.read(record_name).decode().splitlines()}
        assert names[-1] == record_name and set(rows) == set(names)
        for name in names:
            if name != record_name:
                data = archive.read(name)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                assert rows[name] == f"sha256={digest.decode()},{len(data)}", name


def strict_call(target: Path, tmp: Path) -> dict:
    proc = run([sys.executable, "-c", CALL],
               env={"PYTHONPATH": str(target), "HATCH_JAXEXPORT_STRICT": "1",
                    "HATCH_JAXEXPORT_CACHE": "0", "JAX_PLATFORMS": "cpu"}, cwd=tmp)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def baked(project_wheel: Path, tmp_path_factory) -> dict[str, Path]:
    """One flit project built twice: by the wrapping backend, and by flit alone then baked by
    ``jaxexport bake-wheel``; ``SOURCE_DATE_EPOCH`` set, as a reproducible build sets it."""
    tmp = tmp_path_factory.mktemp("any-backend")
    env = {**links_env(project_wheel.parent), "SOURCE_DATE_EPOCH": EPOCH,
           "HATCH_JAXEXPORT_CACHE": str(tmp / "cache")}
    wrapped = flit_project(tmp / "wrapped", "hatch_jaxexport.integrations.pep517")
    run(python_m_build("--wheel", "-o", tmp / "dist-wrapped", wrapped), env=env)
    plain = flit_project(tmp / "plain", "flit_core.buildapi")
    run(python_m_build("--wheel", "-o", tmp / "dist-plain", plain), env=env)
    (flit_wheel,) = (tmp / "dist-plain").glob("*.whl")
    proc = run([sys.executable, "-m", "hatch_jaxexport", "bake-wheel", flit_wheel,
                "--out", tmp / "dist-command", "--project", plain], env=env, cwd=tmp)
    assert "wrote " in proc.stdout
    (by_backend,) = (tmp / "dist-wrapped").glob("*.whl")
    (by_command,) = (tmp / "dist-command").glob("*.whl")
    return {"backend": by_backend, "command": by_command, "flit": flit_wheel, "tmp": tmp}


@pytest.mark.slow
def test_the_wrapping_backend_bakes_flits_wheel(baked):
    wheel = baked["backend"]
    assert wheel.name == "jxe_flit-0.1.0-py3-none-any.whl"
    files = artifact_files(wheel, "jxe_flit")
    manifest = json.loads(files.pop("manifest.json"))
    assert {a["file"] for a in manifest["artifacts"]} <= set(files)
    assert {a["function"] for a in manifest["artifacts"]} == {"jxe_flit:double", "jxe_flit:power"}
    record_matches(wheel)
    requires = [line for line in metadata(wheel).splitlines() if line.startswith("Requires-Dist")]
    assert requires == ["Requires-Dist: hatch-jaxexport", f"Requires-Dist: jax>={JAX_VERSION}"]
    assert not artifact_files(baked["flit"], "jxe_flit")


@pytest.mark.slow
def test_the_command_bakes_the_same_bytes_as_the_backend(baked):
    """Two exports in two processes, by two routes, from one source: one wheel, byte for byte
    (the flit wheels under them are identical with SOURCE_DATE_EPOCH set)."""
    assert baked["command"].read_bytes() == baked["backend"].read_bytes()


@pytest.mark.slow
def test_the_baked_wheel_installs_and_serves_a_strict_call(baked):
    tmp = baked["tmp"]
    installers = [["pip", [sys.executable, "-m", "pip", "install", "-q"]]]
    if _uv():
        installers.append(["uv", [_uv(), "pip", "install", "-q", "--python",
                                  sys.executable]])
    for name, command in installers:
        target = tmp / f"site-{name}"
        run([*command, "--no-deps", "--target", target, baked["backend"]])
        assert (target / "jxe_flit" / "_jaxexport" / "manifest.json").is_file()
        result = strict_call(target, tmp)
        assert result["got"] == [0.0, 1.0, 8.0]
        assert result["served"] and all(result["served"]), result
        assert result["where"].startswith(str(target))
    env = {"PYTHONPATH": str(target), "JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_CACHE": "0"}
    verified = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_flit"], env=env)
    assert "jxe_flit: OK" in verified.stdout, verified.stdout
    listed = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_flit"], env=env)
    assert "jxe_flit:power" in listed.stdout and "jxe_flit:double" in listed.stdout
    # the release check treats it as any baked wheel: every artifact against a fresh export
    checked = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   "--jaxexport-check", "jxe_flit", "--jaxexport-source", tmp / "wrapped",
                   "--jaxexport-only"], env=env, check=False, cwd=tmp)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-1000:]
    assert " passed" in checked.stdout and " failed" not in checked.stdout, checked.stdout


POETRY_PYPROJECT = f"""
[build-system]
requires = ["poetry-core>=2", "hatch-jaxexport", "jax=={JAX_VERSION}"]
build-backend = "hatch_jaxexport.integrations.pep517"

[project]
name = "jxe_flit"
version = "0.1.0"
description = "the same package, built by poetry-core"
requires-python = ">=3.11"
dependencies = ["hatch-jaxexport", "jax"]

[tool.jaxexport]
backend = "poetry.core.masonry.api"
"""


@pytest.mark.slow
def test_poetry_cores_wheel_is_baked_too(project_wheel, tmp_path):
    """The same package built by poetry-core through the wrapping backend carries the same
    artifacts."""
    root = flit_project(tmp_path / "poetry", "unused")
    (root / "pyproject.toml").write_text(POETRY_PYPROJECT)
    env = {**links_env(project_wheel.parent), "HATCH_JAXEXPORT_CACHE": str(tmp_path / "cache")}
    run(python_m_build("--wheel", "-o", tmp_path / "dist", root), env=env)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    record_matches(wheel)
    manifest = json.loads(artifact_files(wheel, "jxe_flit")["manifest.json"])
    assert {a["function"] for a in manifest["artifacts"]} == {"jxe_flit:double", "jxe_flit:power"}


@pytest.mark.slow
def test_an_editable_install_through_the_wrapper_serves_from_the_source_tree(
        project_wheel, tmp_path):
    """``pip install -e .`` of the flit project: flit's editable wheel (a ``.pth``), the
    artifacts exported into the source tree, where the strict call finds them (``whole``: a
    venv with jax of its own)."""
    from conftest import make_venv

    root = flit_project(tmp_path / "editable", "hatch_jaxexport.integrations.pep517")
    python = make_venv(tmp_path / "venv")
    env = {**links_env(project_wheel.parent), "HATCH_JAXEXPORT_CACHE": str(tmp_path / "cache")}
    run([python, "-m", "pip", "install", "-q", "-e", root], env=env, cwd=tmp_path)
    folder = root / "jxe_flit" / "_jaxexport"
    assert (folder / "manifest.json").is_file() and (folder / ".gitignore").is_file()
    proc = run([python, "-c", CALL], env={"HATCH_JAXEXPORT_STRICT": "1", "PYTHONPATH": "",
                                          "HATCH_JAXEXPORT_CACHE": "0", "JAX_PLATFORMS": "cpu"},
               cwd=tmp_path)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["got"] == [0.0, 1.0, 8.0] and all(result["served"]), result
    assert result["where"] == str(root / "jxe_flit" / "__init__.py")
