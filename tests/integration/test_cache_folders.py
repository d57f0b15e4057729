"""Read-only and shared homes: a cache folder that cannot be written never fails a call.

Fresh processes call a baked package with the loader's cache folder read-only (a read-only
bind mount in a mount namespace of its own when the tests run as root, whom a 0o555 mode does
not stop; the mode otherwise), under a regular
file (what a full or refusing file system looks like to ``mkdir``: it fails for root too), or
with a file where the folder should be. Each call runs and gives the right result; at most one
``CacheWarning`` per process names the folder and ``HATCH_JAXEXPORT_CACHE``; tiering is off
(its optimized executable would have nowhere to go); no jax config value changes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run

CALLS = """
import json, warnings
import numpy as np, jax
warnings.simplefilter("always")
before = {k: repr(v) for k, v in jax.config.values.items()}
from jxe_demo import funcs
from hatch_jaxexport.runtime.call.loader import tiered_calls
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    x = np.arange(6, dtype=np.float32)
    results = [funcs.scale(x.reshape(2, 3)), funcs.scale(np.ones((4, 5), np.float32)),
               funcs.poly(x, "fast"), funcs.poly(x, "exact"), funcs.scale(x.reshape(2, 3)),
               jax.jit(funcs.scale)(x.reshape(3, 2))]
    jax.block_until_ready(results)
after = {k: repr(v) for k, v in jax.config.values.items()}
print(json.dumps({
    "scale": np.asarray(results[0]).tolist(),
    "warnings": [[w.category.__name__, str(w.message)] for w in caught],
    "tiers": sorted(t for c in tiered_calls(funcs.scale) + tiered_calls(funcs.poly)
                    for t in c.tiers.values()),
    "changed": sorted(k for k in before if before[k] != after.get(k))}))
"""


def _calls(run_python, site: Path, cache: Path, **env: str) -> dict:
    proc = run_python(CALLS, env={"PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": str(cache),
                                  "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_TIERED": "1",
                                  **env})
    return json.loads(proc.stdout.splitlines()[-1])


def _expected_scale(site: Path, run_python, tmp: Path) -> list:
    """The results with a cache that works, to compare against."""
    return _calls(run_python, site, tmp / "working", HATCH_JAXEXPORT_TIERED="0")["scale"]


def _assert_one_warning(out: dict, folder: Path) -> None:
    ours = [message for name, message in out["warnings"] if name == "CacheWarning"]
    assert len(ours) == 1, out["warnings"]
    assert str(folder) in ours[0] and "HATCH_JAXEXPORT_CACHE" in ours[0]
    assert not [w for w in out["warnings"] if w[0] != "CacheWarning"], out["warnings"]


@pytest.mark.parametrize("jax_cache", ["0", "1"])
def test_a_folder_under_a_regular_file_never_fails_a_call(demo_site, tmp_path, run_python,
                                                          jax_cache, maintainer_warnings):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file, where a folder of the cache path should be")
    out = _calls(run_python, demo_site, blocker / "cache", HATCH_JAXEXPORT_JAX_CACHE=jax_cache)
    assert out["scale"] == _expected_scale(demo_site, run_python, tmp_path)
    # one warning, for the first folder that failed (jax's with the opt-in, else ours)
    _assert_one_warning(out, blocker / "cache" / ("" if jax_cache == "1" else "executables"))
    assert set(out["tiers"]) == {"compiled"}  # no quick tier: no background compile
    assert out["changed"] == []  # with the opt-in, jax's cache stays off: it could not write


def test_a_file_where_the_executables_folder_should_be(demo_site, tmp_path, run_python,
                                                       maintainer_warnings):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "executables").write_text("full disk, or someone's file")
    out = _calls(run_python, demo_site, cache)
    assert out["scale"] == _expected_scale(demo_site, run_python, tmp_path)
    _assert_one_warning(out, cache / "executables")
    assert set(out["tiers"]) == {"compiled"} and out["changed"] == []


def _read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


#: Run a command with one folder read-only: a bind mount of it onto itself, remounted read-only,
#: in a mount namespace of the command's own (what a read-only file system is, for root too).
READ_ONLY_MOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def _read_only_mount_works(folder: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", READ_ONLY_MOUNT, str(folder), "sh", "-c",
                            f"! touch {folder}/probe 2>/dev/null"], capture_output=True)
    return probe.returncode == 0


def _read_only_calls(site: Path, cache: Path) -> dict:
    """The calls of a process that sees ``cache`` read-only."""
    env = {"PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": str(cache),
           "HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_TIERED": "1"}
    if os.geteuid() == 0:
        command = ["unshare", "-m", "sh", "-c", READ_ONLY_MOUNT, str(cache), sys.executable,
                   "-c", CALLS]
    else:
        _read_only(cache)
        command = [sys.executable, "-c", CALLS]
    return json.loads(run(command, env=env).stdout.splitlines()[-1])


def test_a_read_only_warmed_folder_is_read_and_never_written(demo_site, tmp_path, run_python,
                                                             maintainer_warnings):
    cache = tmp_path / "shared"
    warm = _calls(run_python, demo_site, cache, HATCH_JAXEXPORT_TIERED="0")
    assert warm["warnings"] == []
    if os.geteuid() == 0 and not _read_only_mount_works(cache):
        pytest.skip("running as root without a mount namespace (unshare -m): neither a 0o555 "
                    "mode nor a read-only mount can stop root's writes here; the folder under "
                    "a regular file above covers the refusal")
    before = sorted(p.name for p in (cache / "executables").iterdir())
    try:
        out = _read_only_calls(demo_site, cache)
        assert out["scale"] == warm["scale"]
        _assert_one_warning(out, cache / "executables")
        # the entries a writable process left are still served; a new shape compiles
        assert out["tiers"].count("cached") == 4 and "quick" not in out["tiers"]
        assert sorted(p.name for p in (cache / "executables").iterdir()) == before
    finally:
        for path in [cache, *cache.rglob("*")]:
            path.chmod(stat.S_IMODE(path.stat().st_mode) | stat.S_IWUSR)
