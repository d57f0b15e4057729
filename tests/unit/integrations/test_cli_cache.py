"""``jaxexport cache info | prune | clear`` through the real command line, in a subprocess."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import time
from pathlib import Path

from conftest import run

JAXLIB = importlib.metadata.version("jaxlib")
SHA = hashlib.sha256(b"shipped").hexdigest()
GONE = hashlib.sha256(b"no longer shipped").hexdigest()


def _name(package: str, sha: str, jaxlib: str = JAXLIB, digest: str = "d") -> str:
    return f"{package}-{sha[:16]}-jaxlib{jaxlib}-{hashlib.sha256(digest.encode()).hexdigest()}"


def _write(path: Path, size: int, age_s: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def _cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None, check: bool = True):
    merged = {"HATCH_JAXEXPORT_CACHE": str(tmp_path / "cache"),
              "PYTHONPATH": str(tmp_path / "site"), **(env or {})}
    return run([sys.executable, "-m", "hatch_jaxexport", "cache", *args], env=merged,
               check=check)


def _installed(tmp_path: Path) -> Path:
    """A package in a site folder the command imports from, shipping artifact ``SHA``."""
    package = tmp_path / "site" / "jxe_cached"
    (package / "_jaxexport").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('prune must not import me')\n")
    (package / "_jaxexport" / "manifest.json").write_text(
        json.dumps({"schema_version": 1, "artifacts": [{"sha256": SHA}]}))
    return package


def test_info_prune_and_clear(tmp_path):
    package = _installed(tmp_path)
    ex = tmp_path / "cache" / "executables"
    kept = _write(ex / f"{_name('jxe_cached', SHA)}.xla", 3000)
    stale = [_write(ex / f"{_name('jxe_cached', GONE)}.xla", 2000),
             _write(ex / f"{_name('jxe_uninstalled', SHA)}.xla", 1000),
             _write(ex / f"quick-{_name('jxe_cached', SHA, '0.0.1')}.xla", 500)]
    jax_entry = _write(tmp_path / "cache" / "key-cache", 700)
    stray = _write(tmp_path / "cache" / "notes.txt", 5)  # not jax's, not ours: never touched

    info = _cli(tmp_path, "info").stdout
    assert f"executables: {ex}" in info
    assert f"jax cache:   {tmp_path / 'cache'} (chosen by hatch-jaxexport: counted)" in info
    assert "total: 7.0 KiB in 5 item(s); limit 1.0 GiB, set by " \
           "HATCH_JAXEXPORT_CACHE_MAX_BYTES" in info
    assert info.splitlines()[3:] == [
        "by package:",
        "  jxe_cached         5.4 KiB  3 item(s)",
        "  jxe_uninstalled     1000 B  1 item(s)",
        "  (JAX's cache)        700 B  1 item(s)",
        "by jaxlib:",
        f"  {JAXLIB:<13}    5.9 KiB  3 item(s)",
        "  (JAX's cache)      700 B  1 item(s)",
        "  0.0.1              500 B  1 item(s)"]

    dry = _cli(tmp_path, "prune", "--dry-run").stdout.splitlines()
    assert sorted(dry[:-1]) == sorted([
        f"would remove {stale[0]} (jxe_cached no longer ships artifact {GONE[:16]}...)",
        f"would remove {stale[1]} (package jxe_uninstalled is not installed)",
        f"would remove {stale[2]} (jaxlib 0.0.1 (installed: {JAXLIB}))"])
    assert dry[-1] == "would free 3.4 KiB in 3 item(s)"
    assert all(p.exists() for p in stale)

    out = _cli(tmp_path, "prune").stdout
    assert out == "removed 3 item(s), 3.4 KiB; the cache holds 3.6 KiB (limit 1.0 GiB)\n"
    assert kept.exists() and jax_entry.exists() and not any(p.exists() for p in stale)

    shutil.rmtree(package)  # uninstalled: its last entry is stale now
    assert _cli(tmp_path, "prune", "--dry-run").stdout.splitlines()[0] == \
        f"would remove {kept} (package jxe_cached is not installed)"
    _cli(tmp_path, "prune")
    assert not kept.exists() and jax_entry.exists()

    _write(ex / f"{_name('jxe_cached', SHA)}.xla", 10)
    dry = _cli(tmp_path, "clear", "--dry-run").stdout
    assert dry.endswith("would free 710 B in 3 item(s)\n") and jax_entry.exists()  # + the lock
    assert _cli(tmp_path, "clear").stdout.startswith("removed 3 item(s), 710 B;")
    assert [p.name for p in ex.iterdir()] in ([], [".trim-lock"])  # clear takes its turn
    assert not jax_entry.exists() and stray.exists()


def test_prune_trims_to_the_limit_least_recently_used_first(tmp_path):
    _installed(tmp_path)
    ex = tmp_path / "cache" / "executables"
    entries = [_write(ex / f"{_name('jxe_cached', SHA, digest=str(i))}.xla", 1000, age_s=age)
               for i, age in enumerate([30, 10, 20])]
    out = _cli(tmp_path, "prune", "--dry-run", env={"HATCH_JAXEXPORT_CACHE_MAX_BYTES": "1.5K"})
    assert out.stdout.splitlines()[:2] == [
        f"would remove {entries[0]} (least recently used, over the limit)",
        f"would remove {entries[2]} (least recently used, over the limit)"]


def test_a_jax_cache_the_user_configured_is_not_ours(tmp_path):
    user = tmp_path / "my-jax-cache"
    theirs = _write(user / "abc-cache", 100)
    ours = _write(user / "hatch-jaxexport-executables" / f"{_name('jxe_x', SHA)}.xla", 10)
    env = {"JAX_COMPILATION_CACHE_DIR": str(user)}
    info = _cli(tmp_path, "info", env=env).stdout
    assert f"jax cache:   {user} (JAX_COMPILATION_CACHE_DIR: yours, not counted" in info
    _cli(tmp_path, "clear", env=env)
    assert theirs.exists() and not ours.exists()


def test_a_limit_that_is_no_size_is_an_error(tmp_path):
    proc = _cli(tmp_path, "info", env={"HATCH_JAXEXPORT_CACHE_MAX_BYTES": "lots"}, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("jaxexport: error: HATCH_JAXEXPORT_CACHE_MAX_BYTES=lots: "
                                  "'lots' is not a size")
