"""One wheel with artifacts for three jax releases (``jax-releases``), spanning more than one
compatibility window, built through an isolated build and installed into fresh environments
with each of those releases, with one between them and with one outside every window.

Where a set covers the running jax, every call is served by an artifact (the source never
traces); outside every window (jax 0.5.0, the oldest release hatch-jaxexport declares, which
also shows the runtime works on its declared floor) the call runs the source and returns its
result, with nothing on stderr and no warning. The wheel's ``Requires-Dist`` on jax is the
package's own. On Python 3.11 (jax 0.10.x is the newest there); another Python skips.
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import pytest
from _buildkit import jax_requirements, links_env, write_project
from conftest import _uv, make_venv, run

#: Other releases the build exports with, besides its own jax (0.10.x): three windows.
RELEASES = ("0.6.2", "0.8.1")

PYPROJECT = f"""
[build-system]
requires = ["hatchling>=1.21", "hatch-jaxexport"]
build-backend = "hatchling.build"

[project]
name = "jxe-releases"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["hatch-jaxexport", "jax>=0.5", "numpy"]

[tool.hatch.build.targets.wheel.hooks.jaxexport]
require-runtime-dependencies = true
platforms = ["cpu"]
jax-releases = {json.dumps(list(RELEASES))}
"""

MODULE = """
import jax.numpy as jnp

from hatch_jaxexport import exportable

TRACES = {"count": 0}


@exportable({"x": ("n", "float32")}, concrete={"n": [8]})
def wave(x):
    TRACES["count"] += 1
    return jnp.sin(x) * 2.0 + 1.0


@exportable({"x": ("8", "float32")}, vjp_order=1)
def scaled(x):
    TRACES["count"] += 1
    return x * 3.0
"""

CALL = """
import json, warnings
warnings.simplefilter("error")  # a warning in the end user's process fails the call
import numpy as np, jax
import jxe_releases as pkg
x = np.linspace(0, 1, 8, dtype=np.float32)
equal = (np.allclose(np.asarray(pkg.wave(x)), np.sin(x) * 2 + 1, atol=1e-6)
         and np.allclose(np.asarray(pkg.scaled(x)), x * 3)
         and np.allclose(np.asarray(jax.grad(lambda v: pkg.scaled(v).sum())(x)), 3.0))
print(json.dumps({"jax": jax.__version__, "equal": bool(equal), "traces": pkg.TRACES["count"],
                  "tiers": sorted({c.tier for f in (pkg.wave, pkg.scaled)
                                   for c in f.call_report()})}))
"""


@pytest.fixture(scope="module")
def releases_wheel(tmp_path_factory: pytest.TempPathFactory, project_wheel: Path) -> Path:
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the releases baked are the ones Python 3.11 installs")
    tmp = tmp_path_factory.mktemp("releases")
    root = write_project(tmp / "project", {"pyproject.toml": PYPROJECT,
                                           "jxe_releases/__init__.py": MODULE})
    uv = _uv()
    env = {**links_env(project_wheel.parent), "HATCH_JAXEXPORT_CACHE": str(tmp / "cache"),
           "PATH": os.pathsep.join([str(Path(uv).parent)] * bool(uv) + [os.environ["PATH"]])}
    built = run([sys.executable, "-m", "build", "--wheel", "-o", tmp / "dist", root], env=env,
                timeout=1800)
    for version in RELEASES:
        assert f"exporting jxe_releases with jax {version} (jax-releases)" in built.stderr
    (wheel,) = (tmp / "dist").glob("*.whl")
    return wheel


def test_the_wheel_carries_a_set_per_release_and_the_packages_own_jax_range(releases_wheel):
    with zipfile.ZipFile(releases_wheel) as archive:
        names = archive.namelist()
        main = json.loads(archive.read("jxe_releases/_jaxexport/manifest.json"))
    assert sorted(s["jax_version"] for s in main["jax_sets"]) == sorted(RELEASES)
    sized = sorted(len(r["sized"]) for r in main["artifacts"])
    assert sized[-1] >= 1  # wave's concrete-size form (n = 8)
    for jax_set in main["jax_sets"]:
        assert f"jxe_releases/_jaxexport/{jax_set['manifest']}" in names
        with zipfile.ZipFile(releases_wheel) as archive:
            theirs = json.loads(archive.read(f"jxe_releases/_jaxexport/{jax_set['manifest']}"))
        assert theirs["jax_version"] == jax_set["jax_version"]
        assert sorted(len(r["sized"]) for r in theirs["artifacts"]) == sized  # each set has all
        for record in theirs["artifacts"]:
            assert f"jxe_releases/_jaxexport/{record['file']}" in names
    assert jax_requirements(releases_wheel) == ["jax>=0.5"]  # the package's own, untouched


@pytest.mark.parametrize(("jax_version", "served"), [
    ("0.10.2", True), ("0.8.1", True), ("0.6.2", True),  # a set of its own
    ("0.7.2", True),  # between them: inside 0.6.2's window
    ("0.5.0", False),  # outside every window, and the oldest jax hatch-jaxexport declares
])
def test_each_jax_is_served_by_its_set_or_runs_the_source_silently(
        releases_wheel, project_wheel, tmp_path, jax_version, served):
    python = make_venv(tmp_path / "venv", project_wheel, releases_wheel,
                       f"jax=={jax_version}", f"jaxlib=={jax_version}")
    proc = run([python, "-c", CALL], env={"JAX_PLATFORMS": "cpu",
                                           "XDG_CACHE_HOME": str(tmp_path / "cache")})
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["jax"] == jax_version and out["equal"]
    assert proc.stderr == ""  # nothing new in the end user's process, served or not
    if served:
        assert out["traces"] == 0 and "traced" not in out["tiers"]
    else:
        assert out["traces"] >= 2 and out["tiers"] == ["traced"]


def test_inspect_and_the_release_check_give_each_sets_window(releases_wheel, project_wheel,
                                                             tmp_path):
    """Both say, per set, the jax releases it loads on and which one serves this jax; the
    release check also names the releases the wheel's own range allows that no set serves
    (here 0.5.0 to 0.6.1, before 0.6.2's window, and 0.10.1, between two windows)."""
    python = make_venv(tmp_path / "venv", project_wheel, releases_wheel, "pytest")
    env = {"JAX_PLATFORMS": "cpu"}
    shown = run([python, "-m", "hatch_jaxexport", "inspect", "jxe_releases"], env=env).stdout
    assert "jax releases: 3 artifact sets" in shown
    for version in RELEASES:
        assert f"  jax {version} (released " in shown
    assert "; serves this jax 0.10." in shown
    verified = run([python, "-m", "hatch_jaxexport", "verify", "jxe_releases"], env=env).stdout
    for version in RELEASES:  # every set's manifest and blobs match
        assert f"jax {version}'s set matches manifest-jax-{version}.json" in verified
    source = write_project(tmp_path / "source", {"jxe_releases/__init__.py": MODULE})
    check = run([python, "-m", "pytest", "-p", "no:cacheprovider", "--jaxexport-check",
                 "jxe_releases", "--jaxexport-source", source, "--jaxexport-only"],
                cwd=tmp_path, env=env).stdout
    assert "compatibility: artifacts for 3 jax releases (jax-releases)" in check
    assert "uncovered: the wheel requires jax>=0.5, and no set serves jax 0.5.0 to 0.6.1 " \
        "(6), 0.10.1: there its calls run the source" in check
