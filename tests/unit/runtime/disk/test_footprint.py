"""The bounded cache: entry names that say their package, least-recently-used eviction after
each write (safe with many processes), and what ``prune`` finds stale."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS

from hatch_jaxexport.formats.settings import CACHE_ENV, CACHE_MAX_BYTES_ENV
from hatch_jaxexport.runtime.disk import footprint
from hatch_jaxexport.runtime.disk.entry_names import NAME

SHA = hashlib.sha256(b"artifact").hexdigest()


def _compiled(k: float):
    import jax
    import jax.numpy as jnp

    from hatch_jaxexport.runtime.executables._executable_cache import compile_fresh

    x = np.arange(64, dtype=np.float32)
    compiled, fresh = compile_fresh(jax.jit(lambda v: v * jnp.float32(k)).lower(x))
    assert fresh
    return compiled


def test_an_entry_name_says_its_package_artifact_and_jaxlib(tmp_path):
    import jaxlib

    from hatch_jaxexport.runtime.executables._executable_cache import entry_key

    key = entry_key(tmp_path, SHA, ("t", ()), "cpu", package="jxe_demo")
    found = re.fullmatch(NAME, f"quick-{key}.xla")
    assert found and found["quick"] and found["suffix"] == ".xla"
    assert (found["package"], found["sha"], found["jaxlib"]) == ("jxe_demo", SHA[:16],
                                                                 jaxlib.__version__)
    assert entry_key(tmp_path, SHA, ("t", ()), "cpu").startswith(f"_-{SHA[:16]}-jaxlib")


def test_a_store_evicts_the_least_recently_used_and_a_hit_counts_as_use(tmp_path, monkeypatch):
    from hatch_jaxexport.runtime.executables._executable_cache import (
        entry_key,
        entry_path,
        load,
        store,
    )

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    folder = tmp_path / "executables"
    keys = [entry_key(folder, hashlib.sha256(bytes([i])).hexdigest(), ("t", ()), "cpu",
                      package="jxe_demo") for i in range(3)]
    monkeypatch.setenv(CACHE_MAX_BYTES_ENV, "0")
    for i, key in enumerate(keys[:2]):
        assert store(folder, key, _compiled(i + 2)) is None  # x * 1 would compile to less
        os.utime(entry_path(folder, key), (time.time() - 100 + i, time.time() - 100 + i))
    size = max(entry_path(folder, key).stat().st_size for key in keys[:2])
    assert load(folder, keys[0]) is not None  # a hit: keys[0] is now the most recently used
    monkeypatch.setenv(CACHE_MAX_BYTES_ENV, str(2 * size + size // 2 + 200))
    assert store(folder, keys[2], _compiled(4)) is None
    assert not entry_path(folder, keys[1]).exists()  # the least recently used went
    assert entry_path(folder, keys[0]).exists() and entry_path(folder, keys[2]).exists()
    assert footprint.total_size(footprint.scan(footprint.cache_folders())) <= 2 * size + size


def test_eight_processes_write_and_read_under_a_limit(tmp_path):
    """Every store trims while the others read: each hit is a whole entry that computes the
    right numbers, each miss an entry that is gone, and the folder ends under the limit."""
    folder, done = tmp_path / "executables", tmp_path / "done"
    done.mkdir()
    limit = 120_000  # a few entries of ``x * k`` (about 15-25 kB each): most writes evict
    env = {**os.environ, CACHE_ENV: str(tmp_path), CACHE_MAX_BYTES_ENV: str(limit),
           "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join(
               [str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, str(TESTS / "cache_limit_worker.py"),
                               str(folder), str(done), str(w), "6"], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for w in range(8)]
    outs = [proc.communicate(timeout=600) for proc in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    counts = [json.loads(out.splitlines()[-1]) for out, _ in outs]
    assert sum(c["hits"] for c in counts) > 0 and sum(c["misses"] for c in counts) > 0
    assert len(list(done.iterdir())) == 48
    items = footprint.scan(footprint.CacheFolders(folder, tmp_path))
    assert footprint.total_size(items) <= limit
    assert not [p for p in folder.iterdir() if p.name.startswith(".tmp-")]


def _write(path: Path, size: int, age_s: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    used = time.time() - age_s
    os.utime(path, (used, used))
    return path


def _name(package: str, sha: str, jaxlib: str, digest: str = "d") -> str:
    return f"{package}-{sha[:16]}-jaxlib{jaxlib}-{hashlib.sha256(digest.encode()).hexdigest()}"


def test_prune_finds_gone_packages_other_jaxlibs_and_left_behind_files(tmp_path, monkeypatch):
    import importlib.metadata

    jaxlib = importlib.metadata.version("jaxlib")
    site = tmp_path / "site"
    (site / "jxe_pruned" / "_jaxexport").mkdir(parents=True)
    (site / "jxe_pruned" / "__init__.py").write_text("")
    (site / "jxe_pruned" / "_jaxexport" / "manifest.json").write_text(
        json.dumps({"artifacts": [{"sha256": SHA}]}))
    monkeypatch.syspath_prepend(str(site))
    folders = footprint.CacheFolders(tmp_path / "cache" / "executables", tmp_path / "cache")
    ex = folders.executables
    kept = _write(ex / f"{_name('jxe_pruned', SHA, jaxlib)}.xla", 10)
    jax_entry = _write(tmp_path / "cache" / "k-cache", 10)
    fresh_tmp = _write(ex / ".tmp-now", 10)
    stale = {
        _write(ex / f"{_name('jxe_pruned', '0' * 64, jaxlib)}.xla", 10):
            "jxe_pruned no longer ships artifact 0000000000000000...",
        _write(ex / f"{_name('jxe_gone', SHA, jaxlib)}.log", 10): "package jxe_gone is not "
                                                                  "installed",
        _write(ex / f"quick-{_name('jxe_pruned', SHA, '0.0.1')}.xla", 10):
            f"jaxlib 0.0.1 (installed: {jaxlib})",
        _write(ex / f"{'a' * 64}.xla", 10): "written by an older hatch-jaxexport (no package "
                                            "recorded)",
        _write(ex / ".tmp-old", 10, age_s=2 * footprint.LEFT_BEHIND_S):
            "left behind by a process that stopped"}
    plan = footprint.prune_plan(folders, None)
    assert {r.item.paths[0]: r.reason for r in plan} == stale
    footprint.apply(plan, folders)
    assert all(p.exists() for p in (kept, jax_entry, fresh_tmp))
    assert not any(p.exists() for p in stale)
    # over a limit, the least recently used of what is left goes too
    old = _write(ex / f"{_name('jxe_pruned', SHA, jaxlib, 'old')}.xla", 10, age_s=50)
    trimmed = footprint.prune_plan(folders, 30)
    assert [r.item.paths[0] for r in trimmed] == [old]
    assert trimmed[0].reason == "least recently used, over the limit"


def test_jax_entries_are_one_item_and_only_ours_count(tmp_path):
    jax_dir = tmp_path / "jax"
    _write(jax_dir / "k1-cache", 100, age_s=100)
    _write(jax_dir / "k1-atime", 8, age_s=5)
    _write(jax_dir / ".lockfile", 0)
    items = footprint.scan(footprint.CacheFolders(tmp_path / "executables", jax_dir))
    assert [(i.kind, i.size, len(i.paths)) for i in items] == [("jax", 108, 2)]
    assert time.time() - items[0].used < 50  # used when jax last touched its atime file
    env = {"JAX_COMPILATION_CACHE_DIR": str(jax_dir)}
    assert footprint.cache_folders(env) == footprint.CacheFolders(
        jax_dir / "hatch-jaxexport-executables", None, str(jax_dir))


@pytest.mark.parametrize("limit", [None, 0])
def test_no_limit_trims_nothing(tmp_path, limit):
    folders = footprint.CacheFolders(tmp_path, None)
    _write(tmp_path / f"{'b' * 64}.xla", 1000)
    assert footprint.trim(folders, limit or None) == []
