"""The loader's caches: its executable cache, and JAX's persistent compilation cache on request.

A library must not change its host's jax config: ``jax_compilation_cache_dir`` and the
persistent cache's thresholds are process-wide, so setting them would send every ``jax.jit`` of
the host program's own code to a folder it never chose. By default the loader changes no
``jax.config`` value. Its own executable cache (``_executable_cache``: keyed by the artifact's
SHA-256, the call's argument types and the machine) serves eager calls from a per-user folder.

JAX's cache stays the user's choice. When they configured one (``jax_compilation_cache_dir`` /
``JAX_COMPILATION_CACHE_DIR``), calls use it as any jit does, and our executables live beside it.
``HATCH_JAXEXPORT_JAX_CACHE=1`` asks the loader to turn it on in its own folder (then, and only
then, it sets the three config values). ``HATCH_JAXEXPORT_CACHE=0`` turns the loader's caches
off; ``HATCH_JAXEXPORT_CACHE=DIR`` picks their folder.

A folder that cannot be written (read-only, a full disk, a file in its place) never fails a
call: reads still work where they can, nothing is written, and one ``CacheWarning`` per process
names the folder and the setting that moves it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

from hatch_jaxexport.errors import CacheWarning
from hatch_jaxexport.formats.settings import CACHE_ENV, cache_choice, jax_cache_wanted

# Imported in functions: the notices, only when a folder cannot be written.

_lock = threading.Lock()
_warn_lock = threading.Lock()  # the warning may come from a store thread
_done = False
_active: str | None = None
_executables: Path | None = None
_writable = False
_warned = False


def default_cache_dir() -> Path:
    """JAX's cache folder when the loader turns it on (the platformdirs convention for
    ``user_cache_dir``); its parent holds the executable cache."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / "hatch-jaxexport" / "Cache" / "jax"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "hatch-jaxexport" / "jax"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "hatch-jaxexport" / "jax"


def _write_error(folder: Path) -> OSError | None:
    """Why ``folder`` cannot take a new file (``None`` if it can): created if missing, then a
    probe file written and removed. ``os.access`` would not do: it says yes to root in a
    read-only folder that root can in fact write, and no answer about a full disk."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        return err
    return None


def cache_unwritable(folder: Path, err: OSError) -> None:
    """Warn (once per process) that the cache ``folder`` cannot be written, and how to move it.

    Every cache write is guarded; this is the one place that tells the user, so a read-only
    home or a full disk costs one line, not one per call."""
    global _warned
    with _warn_lock:
        if _warned:
            return
        _warned = True
    from hatch_jaxexport.runtime.notices import NEEDS_FIX, notify

    notify(
        f"hatch-jaxexport cannot write its cache folder {folder} ({err.strerror or err}): calls "
        f"still run, compiling what the cache would have served. Set {CACHE_ENV} to a writable "
        f"folder, or {CACHE_ENV}=0 to turn the caches off.", CacheWarning, NEEDS_FIX)


def ensure_compilation_cache() -> str | None:
    """Set the loader's caches up (once); return the folder of JAX's persistent cache when it
    is in use (the user's, or the loader's with ``HATCH_JAXEXPORT_JAX_CACHE=1``), else ``None``.

    Changes no ``jax.config`` value unless ``HATCH_JAXEXPORT_JAX_CACHE=1`` asks for JAX's cache
    and the user has none."""
    global _done, _active, _executables, _writable
    with _lock:
        if _done:
            return _active
        _done = True
        choice = cache_choice()
        if choice is False:
            return None
        import jax

        own = jax.config.jax_compilation_cache_dir
        if own:
            _active = str(own)
            if "://" not in _active:  # a remote cache (gs://...): no executables beside it
                _executables = Path(_active) / "hatch-jaxexport-executables"
        else:
            folder = default_cache_dir() if choice is True else Path(choice)
            _executables = folder.parent / "executables" if choice is True \
                else folder / "executables"
            if jax_cache_wanted():
                _active = _turn_jax_cache_on(jax, folder)
        if _executables is not None:
            err = _write_error(_executables)
            _writable = err is None
            if err is not None:
                cache_unwritable(_executables, err)
        return _active


def _turn_jax_cache_on(jax: object, folder: Path) -> str | None:
    """With the user's opt-in only: JAX's cache in ``folder``, every executable stored however
    quick its compile (the thresholds, set to 0); ``None`` (and the one warning) if the folder
    cannot be written, as jax would otherwise warn on every compile."""
    err = _write_error(folder)
    if err is not None:
        cache_unwritable(folder, err)
        return None
    config = jax.config  # type: ignore[attr-defined]
    config.update("jax_compilation_cache_dir", str(folder))
    config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except AttributeError:  # older jax
        pass
    return str(folder)


def executable_cache_dir() -> Path | None:
    """Where the loader keeps compiled executables, ``None`` when off.

    ``<cache>/hatch-jaxexport/executables`` by default, ``DIR/executables`` with
    ``HATCH_JAXEXPORT_CACHE=DIR``, and ``DIR/hatch-jaxexport-executables`` when the user set
    JAX's cache to a local ``DIR`` (a remote one, ``gs://...``, turns it off). Valid after
    ``ensure_compilation_cache``; a folder that cannot be written is still read."""
    return _executables


def executable_cache_writable() -> bool:
    """Whether the executable cache takes new entries (the probe at setup succeeded): without
    it nothing is stored and tiering is off (its optimized executable has nowhere to go)."""
    return _writable and _executables is not None


def active_cache_dir() -> str | None:
    """The folder the loader's caches use: JAX's when it is in use, else the executable cache's;
    ``None`` before first use or when off."""
    if _active is not None:
        return _active
    return str(_executables) if _executables is not None else None


__all__ = ["active_cache_dir", "cache_unwritable", "default_cache_dir",
           "ensure_compilation_cache", "executable_cache_dir", "executable_cache_writable"]
