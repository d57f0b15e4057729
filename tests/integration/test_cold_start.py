"""Cold-start means: the loader's caches (jax's only on request), warmup, and skipping needless
LAPACK init."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import export_into_copy, run

PROBE = """
import json, os, sys
import numpy as np, jax
import jxe_demo.funcs as f
from hatch_jaxexport.runtime.disk.cache_folders import active_cache_dir
out = np.asarray(f.scale(np.ones((2, 3), np.float32)))
jax.jit(f.scale)(np.ones((2, 3), np.float32))  # a compile of jax's own (the caller's jit)
print(json.dumps({"cache": active_cache_dir(), "scipy": "scipy.linalg" in sys.modules,
                  "jax_dir": jax.config.jax_compilation_cache_dir, "ok": bool(out[0, 0] > 1.6)}))
"""


def _probe(run_python, site: Path, **env: str) -> dict:
    return json.loads(run_python(PROBE, env={"PYTHONPATH": str(site), **env}).stdout)


def test_executable_cache_is_on_by_default_in_a_per_user_folder(demo_site, tmp_path,
                                                                 run_python):
    out = _probe(run_python, demo_site, XDG_CACHE_HOME=str(tmp_path))
    executables = tmp_path / "hatch-jaxexport" / "executables"
    assert out["ok"] and out["cache"] == str(executables) and out["jax_dir"] is None
    assert any(executables.glob("*.xla"))  # the compile went in
    assert not (tmp_path / "hatch-jaxexport" / "jax").exists()  # jax's cache: the user's call


def test_jax_cache_only_with_the_opt_in(demo_site, tmp_path, run_python):
    out = _probe(run_python, demo_site, XDG_CACHE_HOME=str(tmp_path),
                 HATCH_JAXEXPORT_JAX_CACHE="1")
    folder = tmp_path / "hatch-jaxexport" / "jax"
    assert out["ok"] and out["cache"] == out["jax_dir"] == str(folder)
    assert any(folder.iterdir())  # the caller's jax.jit compile went in


def test_cache_opt_out_and_users_own_cache_win(demo_site, tmp_path, run_python):
    off = _probe(run_python, demo_site, XDG_CACHE_HOME=str(tmp_path), HATCH_JAXEXPORT_CACHE="0")
    assert off["cache"] is None and off["jax_dir"] is None
    own = tmp_path / "own"
    mine = _probe(run_python, demo_site, XDG_CACHE_HOME=str(tmp_path),
                  JAX_COMPILATION_CACHE_DIR=str(own))
    assert mine["cache"] == str(own) and not (tmp_path / "hatch-jaxexport").exists()
    assert any((own / "hatch-jaxexport-executables").glob("*.xla"))  # the executable, beside


def test_lapack_free_artifacts_do_not_import_scipy(demo_site, tmp_path, run_python):
    out = _probe(run_python, demo_site, XDG_CACHE_HOME=str(tmp_path))
    assert out["scipy"] is False


@pytest.fixture(scope="module")
def solve_site(tmp_path_factory):
    return export_into_copy(tmp_path_factory.mktemp("solve-site"), "jxe_solve")


def test_artifacts_with_lapack_calls_still_initialise_it(solve_site, tmp_path, run_python):
    proc = run_python(
        "import sys, numpy as np, jxe_solve\n"
        "a = np.array([[3, 1], [1, 2]], np.float32); b = np.array([9, 8], np.float32)\n"
        "print(np.asarray(jxe_solve.solve(a, b)).round(4).tolist(), 'scipy.linalg' in sys.modules)",
        env={"PYTHONPATH": str(solve_site), "XDG_CACHE_HOME": str(tmp_path),
             "HATCH_JAXEXPORT_STRICT": "1"})
    assert proc.stdout.split("]")[0] + "]" == "[2.0, 3.0]"
    manifest = json.loads((solve_site / "jxe_solve" / "_jaxexport" / "manifest.json").read_text())
    assert any("lapack" in t for t in manifest["artifacts"][0]["custom_calls"])


def test_warmup_fills_the_cache_so_the_next_process_compiles_nothing(demo_site, tmp_path):
    env = {"PYTHONPATH": str(demo_site), "XDG_CACHE_HOME": str(tmp_path)}
    warm = run([sys.executable, "-m", "hatch_jaxexport", "warmup", "jxe_demo", "--dims",
                "a=2", "--dims", "b=3"], env=env)
    assert "warmed" in warm.stdout and "jxe_demo.funcs:scale [0] {'a': 2, 'b': 3}" in warm.stderr
    assert "skipped: jxe_demo.funcs:poly structure 0" in warm.stderr  # no value for n
    executables = tmp_path / "hatch-jaxexport" / "executables"
    assert list(executables.glob("*.xla"))  # warmed into the executable cache
    assert f"into {executables}" in warm.stdout
    assert not (tmp_path / "hatch-jaxexport" / "jax").exists()  # no process would read it
    before_executables = sorted(p.name for p in executables.iterdir())
    proc = run([sys.executable, "-c", "import numpy as np, jxe_demo.funcs as f\n"
                "from hatch_jaxexport.runtime.call.loader import tiered_calls\n"
                "f.scale(np.ones((2, 3), np.float32))\n"
                "print([t for c in tiered_calls(f.scale) for t in c.tiers.values()])"], env=env)
    assert proc.stdout.strip() == "['cached']"  # loaded, not compiled
    # a cache hit writes nothing
    assert sorted(p.name for p in executables.iterdir()) == before_executables


def test_warmup_rejects_malformed_dims(demo_site):
    proc = run([sys.executable, "-m", "hatch_jaxexport", "warmup", "jxe_demo", "--dims", "n"],
               env={"PYTHONPATH": str(demo_site)}, check=False)
    assert proc.returncode == 1
    assert "--dims takes SYMBOL=SIZE[,SIZE...], got 'n'" in proc.stderr
