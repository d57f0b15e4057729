"""Version skew for real: artifacts exported by one jax, loaded by the other CI interpreter's jax.

Python 3.11 gets jax 0.10.x and Python 3.12 the newest (0.12.x): artifacts are exported in each
interpreter (the same export the build hook runs) and called from the other. Each direction
either works or falls back to tracing with a warning naming both jax versions and jax's reason;
in strict mode that is an ``ArtifactError``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from _buildkit import other_python
from conftest import FIXTURES, export_into_copy, make_venv, run

CALL = """
import json, warnings
import numpy as np, jax
from hatch_jaxexport import ArtifactError
from jxe_demo import funcs
x = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)
out = {"jax": jax.__version__}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        got = np.asarray(funcs.scale(x))
        out["equal"] = bool(np.allclose(got, np.sin(x) * 2, atol=1e-6))
        out["traced"] = funcs.TRACES["count"]
    except ArtifactError as err:
        out["artifact_error"] = str(err)
out["warnings"] = [str(w.message) for w in caught
                   if "hatch_jaxexport" in type(w.message).__module__]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory, project_wheel: Path) -> tuple[str, Path]:
    """The other interpreter, in a venv with its newest jax, and a site it exported."""
    python = other_python()
    if python is None:
        pytest.skip("no second Python (3.11 or 3.12) on this machine to install another jax into")
    tmp = tmp_path_factory.mktemp("skew")
    venv_python = make_venv(tmp / "venv", project_wheel, "jax", "flatbuffers", "numpy",
                            python=python)
    site = tmp / "site"
    shutil.copytree(FIXTURES / "jxe_demo", site / "jxe_demo")
    run([venv_python, "-m", "hatch_jaxexport", "export", "jxe_demo", "--out",
         site / "jxe_demo" / "_jaxexport", "--path", site])
    return str(venv_python), site


def _call(python: str, site: Path, cache: Path, strict: bool) -> dict:
    env = {"PYTHONPATH": str(site), "XDG_CACHE_HOME": str(cache), "JAX_PLATFORMS": "cpu",
           "HATCH_JAXEXPORT_STRICT": "1" if strict else "0"}
    proc = run([python, "-c", CALL], env=env)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["stderr"] = proc.stderr
    return out


def _versions(site: Path) -> str:
    return json.loads((site / "jxe_demo" / "_jaxexport" / "manifest.json").read_text())[
        "jax_version"]


def _works_or_falls_back_naming_both(out: dict, built: str) -> None:
    if out["warnings"]:
        message = out["warnings"][0]
        assert f"built with jax {built}" in message and f"running jax {out['jax']}" in message
        assert out["equal"] and out["traced"] == 1  # the fallback traced, and is right
    else:
        assert out["equal"] and out["traced"] == 0  # the artifact ran


@pytest.mark.slow
@pytest.mark.parametrize("strict", [False, True])
def test_artifacts_of_this_jax_under_the_other(other, demo_site, tmp_path, strict):
    python, _ = other
    out = _call(python, demo_site, tmp_path, strict)
    assert out["jax"] != _versions(demo_site)
    if strict and "artifact_error" in out:
        assert f"built with jax {_versions(demo_site)}" in out["artifact_error"]
        return
    _works_or_falls_back_naming_both(out, _versions(demo_site))
    # nothing new in the end user's process: another jax's export that this one cannot read
    # is a drop-in's notice (INFO on the logger), never a line on stderr or a warning
    assert "hatch_jaxexport" not in out["stderr"] and "no usable" not in out["stderr"]
    assert out["warnings"] == []


@pytest.mark.slow
@pytest.mark.parametrize("strict", [False, True])
def test_artifacts_of_the_other_jax_under_this_one(other, tmp_path, strict, maintainer_warnings):
    _, site = other
    out = _call(sys.executable, site, tmp_path, strict)
    assert out["jax"] != _versions(site)
    if strict and "artifact_error" in out:
        assert f"built with jax {_versions(site)}" in out["artifact_error"]
        assert f"running jax {out['jax']}" in out["artifact_error"]
        return
    _works_or_falls_back_naming_both(out, _versions(site))


def test_exporting_here_is_what_the_hook_does(tmp_path):
    """The sites above hold the same bytes a wheel's hook build puts in (one export path)."""
    a = export_into_copy(tmp_path / "a", "jxe_demo")
    b = export_into_copy(tmp_path / "b", "jxe_demo")
    files = sorted((a / "jxe_demo" / "_jaxexport").iterdir())
    assert [f.read_bytes() for f in files] == \
        [(b / "jxe_demo" / "_jaxexport" / f.name).read_bytes() for f in files]
