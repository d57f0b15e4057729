"""JAX's persistent compilation cache, turned on by the loader in a per-user cache folder.

Baked artifacts remove tracing and lowering; the XLA compile of the first call remains. With the
persistent cache, a machine compiles each artifact once, and later processes load the compiled
executable. The loader enables it on first use of an artifact unless the user configured their
own cache (``jax_compilation_cache_dir`` / ``JAX_COMPILATION_CACHE_DIR``) or opted out with
``HATCH_JAXEXPORT_CACHE=0``; ``HATCH_JAXEXPORT_CACHE=/some/dir`` picks the folder (``1`` means the
default folder).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from hatch_jaxexport.formats._settings import cache_choice

_lock = threading.Lock()
_done = False
_active: str | None = None
_executables: Path | None = None


def default_cache_dir() -> Path:
    """The per-user cache folder (the platformdirs convention for ``user_cache_dir``)."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / "hatch-jaxexport" / "Cache" / "jax"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "hatch-jaxexport" / "jax"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "hatch-jaxexport" / "jax"


def ensure_compilation_cache() -> str | None:
    """Turn JAX's persistent compilation cache on (once); return its folder, or ``None`` if off."""
    global _done, _active, _executables
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
            if "://" not in _active:
                _executables = Path(_active) / "hatch-jaxexport-executables"
            return _active
        on = choice is True
        folder = default_cache_dir() if choice is True else Path(choice)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        try:
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        except AttributeError:  # older jax
            pass
        _active = str(folder)
        _executables = folder.parent / "executables" if on else folder / "executables"
        return _active


def executable_cache_dir() -> Path | None:
    """Where the loader keeps compiled executables (``executables``), ``None`` when off.

    Beside JAX's cache: ``<cache>/hatch-jaxexport/executables`` by default,
    ``DIR/executables`` with ``HATCH_JAXEXPORT_CACHE=DIR``, and
    ``DIR/hatch-jaxexport-executables`` when the user set JAX's cache to a local ``DIR``
    (a remote one, ``gs://...``, turns it off). Valid after ``ensure_compilation_cache``.
    """
    return _executables


def active_cache_dir() -> str | None:
    """The folder the loader turned on (or found), ``None`` before first use or when off."""
    return _active
