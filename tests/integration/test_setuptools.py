"""setuptools: a ``[tool.jaxexport]`` table bakes the exports into wheels and editable installs.

Real PEP 517 builds in isolated environments (hatch-jaxexport offered as a local wheel), wheels
installed into fresh virtual environments, calls in fresh processes with tracing forbidden.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from _buildkit import (
    DEMO,
    TINY_MODULE,
    artifact_files,
    jax_requirements,
    links_env,
    members,
    python_m_build,
    wheel_tag,
    write_project,
)
from conftest import make_venv, run

pytestmark = pytest.mark.slow

JAX_VERSION = __import__("importlib.metadata").metadata.version("jax")

#: Calls the package in a fresh process: every body replaced by one that raises, strict mode.
CALLER = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import demo
import jxe_st
ran = demo.forbid_bodies("jxe_st")
from hatch_jaxexport.runtime.call.loader import loaded_from_artifact
x = np.arange(4, dtype=np.float32)
out = {"double": np.asarray(jxe_st.double(x)).tolist(),
       "cube": np.asarray(jxe_st.power(x, p=3)).tolist(),
       "square": np.asarray(jxe_st.power(x)).tolist(),
       "from_artifact": [v for f in (jxe_st.double, jxe_st.power)
                         for v in loaded_from_artifact(f).values()],
       "ran": ran, "file": jxe_st.__file__}
print(json.dumps(out))
"""


def st_project(root: Path, table: str = "", *, layout: str = "src") -> Path:
    packages = ('[tool.setuptools.packages.find]\nwhere = ["src"]\n' if layout == "src"
                else '[tool.setuptools]\npackages = ["jxe_st"]\n')
    return write_project(root, {
        "pyproject.toml": textwrap.dedent("""
            [build-system]
            requires = ["setuptools>=70", "hatch-jaxexport"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "jxe-st"
            version = "0.1.0"
            requires-python = ">=3.11"
            dependencies = ["hatch-jaxexport", "jax"]

            """) + packages + "\n[tool.jaxexport]\n" + textwrap.dedent(table),
        ("src/" if layout == "src" else "") + "jxe_st/__init__.py": TINY_MODULE,
    })


@pytest.fixture(scope="module")
def env(project_wheel: Path, tmp_path_factory) -> dict[str, str]:
    return {**links_env(project_wheel.parent),
            "HATCH_JAXEXPORT_CACHE": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(scope="module")
def runtime(project_wheel: Path) -> list[str]:
    return [str(project_wheel), f"jax=={JAX_VERSION}", "flatbuffers"]


def call(python: Path, cwd: Path) -> dict:
    proc = run([python, "-c", CALLER, DEMO.parent], cwd=cwd,
               env={"HATCH_JAXEXPORT_STRICT": "1", "JAX_PLATFORMS": "cpu", "PYTHONPATH": ""})
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["double"] == [1.0, 3.0, 5.0, 7.0]
    assert result["square"] == [0.0, 1.0, 4.0, 9.0]
    assert result["cube"] == [0.0, 1.0, 8.0, 27.0]
    assert result["from_artifact"] == [True, True, True]
    assert result["ran"] == []
    return result


def test_python_m_build_bakes_the_wheel_not_the_sdist(tmp_path, env, runtime):
    root = st_project(tmp_path / "proj", 'platforms = ["cpu", "cuda"]\njobs = 2\n')
    proc = run(python_m_build("-o", tmp_path / "dist", root), env=env)
    assert "jaxexport: jxe_st: 2 function(s), 6 artifact(s)" in proc.stdout + proc.stderr
    (sdist,) = (tmp_path / "dist").glob("jxe_st-*.tar.gz")
    assert not [n for n in members(sdist) if "_jaxexport" in n]
    (wheel,) = (tmp_path / "dist").glob("jxe_st-*.whl")
    assert wheel_tag(wheel) == "py3-none-any"
    files = artifact_files(wheel, "jxe_st")
    manifest = json.loads(files.pop("manifest.json"))
    # every file listed, none unlisted; the cpu and cuda artifacts' text forms are one file
    # where jax printed the same module for both (one copy, each record hashing it)
    artifacts = [a["file"] for a in manifest["artifacts"]]
    assert len(set(artifacts)) == len(artifacts)
    assert sorted(files) == sorted({*artifacts, *(e["file"] for a in manifest["artifacts"]
                                                  for e in a["sized"])})
    assert {a["platform"] for a in manifest["artifacts"]} == {"cpu", "cuda"}
    assert jax_requirements(wheel) == ["jax"]  # the project's own, as written (the default)
    python = make_venv(tmp_path / "venv", *runtime, wheel)
    assert "site-packages" in call(python, tmp_path)["file"]


@pytest.mark.parametrize("mode, layout", [("lenient", "src"), ("lenient", "flat"),
                                          ("strict", "src")])
def test_editable_install(mode, layout, tmp_path, env, runtime):
    """Installed twice (issue 44): the first install's ``__editable__.jxe_st-0.1.0.pth`` names
    ``src`` (lenient, src layout), and pip's isolated build of the second strips the folders
    that file adds from its processes' ``sys.path``; the export workers put theirs back."""
    # strict mode opts into the exporting jax as the floor (``jax-requirement = true``)
    root = st_project(tmp_path / "proj", "jax-requirement = true\n" if mode == "strict" else "",
                      layout=layout)
    python = make_venv(tmp_path / "venv", *runtime)
    settings = ["--config-settings", "editable_mode=strict"] if mode == "strict" else []
    for _ in range(2):
        run([python, "-m", "pip", "install", "--find-links", Path(runtime[0]).parent,
             *settings, "-e", root], env=env)
    package = root / ("src/jxe_st" if layout == "src" else "jxe_st")
    assert (package / "_jaxexport" / "manifest.json").is_file()
    assert (package / "_jaxexport" / ".gitignore").is_file()
    result = call(python, tmp_path)
    if mode == "strict":
        assert "__editable__" in result["file"]  # imported through setuptools' link tree
    else:
        assert result["file"] == str(package / "__init__.py")
    requires = run([python, "-c", "from importlib.metadata import requires; "
                    "print(requires('jxe-st'))"], cwd=tmp_path).stdout
    if mode == "strict":
        assert f"jax>={JAX_VERSION}" in requires
    else:  # the project's own, as written (the default)
        assert "'jax'" in requires and f"jax>={JAX_VERSION}" not in requires


@pytest.mark.parametrize("front_end", ["pip wheel", "python -m build"])
def test_config_errors_fail_the_build_with_their_toml_path(front_end, tmp_path, env):
    """Every problem with its TOML path, and no traceback of setuptools' backend (before: 33
    more lines of frames from pyproject_hooks, setuptools, distutils and this plugin)."""
    root = st_project(tmp_path / "proj", 'jobs = "x"\non-error = "never"\nplatform = "cpu"\n')
    command = ([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp_path / "dist", root]
               if front_end == "pip wheel" else
               [sys.executable, "-m", "build", "--wheel", "-o", tmp_path / "dist", root])
    proc = run(command, env=env, check=False)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "error: invalid hatch-jaxexport configuration (3 errors):" in output
    assert "tool.jaxexport.jobs must be an int >= 1 or \"auto\", got 'x'" in output
    assert "tool.jaxexport.on-error must be 'fail' or 'skip', got 'never'" in output
    assert ("tool.jaxexport.platform is not an option of hatch-jaxexport (did you mean "
            "`platforms`?)") in output
    assert "Traceback (most recent call last)" not in output
    assert "hatch_jaxexport/" not in output


def test_export_failure_names_the_cause(tmp_path, env):
    root = st_project(tmp_path / "proj")
    init = root / "src" / "jxe_st" / "__init__.py"
    init.write_text("import not_installed_anywhere\n" + init.read_text())
    proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp_path / "dist", root],
               env=env, check=False)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert ("cannot import package 'jxe_st': ModuleNotFoundError: No module named "
            "'not_installed_anywhere'") in output
    assert "list the package's run-time dependencies in [build-system] requires" in output
    # listed once by the command, with the user's line; no backend traceback repeats it
    assert output.count("No module named 'not_installed_anywhere'") == 1, output
    assert "(at jxe_st/__init__.py:1)" in output
    assert "Traceback (most recent call last)" not in output
