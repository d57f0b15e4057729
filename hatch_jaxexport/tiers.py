"""Tiered compilation: a quickly compiled executable for the first call, the optimized one later.

On a cold machine XLA's compile dominates a loaded function's first call. For an eager call
(concrete arrays, not inside the user's ``jax.jit`` or a transformation) whose signature has
no executable yet, ``TieredCall`` compiles a quick tier (low optimization options), runs the
call with it, and compiles the optimized executable in a daemon thread; later calls use the
optimized one as soon as it is ready. A marker in the cache folder records that the optimized
executable went into JAX's persistent cache, so a warm process compiles (loads) only that one.

``HATCH_JAXEXPORT_TIERED=1`` (or ``@exportable(..., tiered=True)``) turns it on; it is off by
default. The quick options are XLA:CPU's, so it applies to CPU only (on GPU it has not been
measured here). Why off by default: CPython tears daemon threads down at exit, and a thread
inside XLA's compiler then aborts the process (``terminate called after throwing an instance
of ''``, seen on Python 3.11 with jax 0.10.2). So an exit waits (``atexit``) for an in-flight
optimized compile: the first result comes sooner, but a short script that exits right after
its first call takes longer overall.
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

TIERED_ENV = "HATCH_JAXEXPORT_TIERED"
#: Compiler options of the quick tier, per platform.
QUICK_OPTIONS: dict[str, dict[str, Any]] = {"cpu": {"xla_backend_optimization_level": 0}}


class TieredCompileWarning(RuntimeWarning):
    """The background optimized compile failed; the quick tier stays in use."""


def tiering_wanted(platform: str, option: bool | None) -> bool:
    """Whether to tier: the environment, then the function's option, then the platform."""
    env = os.environ.get(TIERED_ENV, "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if platform not in QUICK_OPTIONS:
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    return bool(option)


class TieredCall:
    """Calls ``jitted``; for new eager signatures, through a quick tier first."""

    def __init__(self, jitted: Callable[..., Any], identity: str, platform: str,
                 marker_dir: Path | None) -> None:
        self.jitted = jitted
        self.identity = identity  # what makes the executable unique (artifact hash, versions)
        self.platform = platform
        self.marker_dir = marker_dir
        self.executables: dict[Any, Any] = {}  # signature -> Compiled (quick, then optimized)
        self.tiers: dict[Any, str] = {}  # signature -> "quick" | "optimized" | "cached"
        self.threads: dict[Any, threading.Thread] = {}
        self.lock = threading.Lock()
        import jax
        import numpy as np

        from .jaxcompat import concrete_array_type

        self._flatten = jax.tree_util.tree_flatten
        self._concrete = (concrete_array_type(), np.ndarray)

    def _signature(self, args: tuple[Any, ...]) -> Any:
        leaves, treedef = self._flatten(args)
        sig = []
        for leaf in leaves:
            if type(leaf) not in self._concrete:
                return None  # tracers, scalars...: the caller's compile decides
            sig.append((leaf.shape, str(leaf.dtype)))
        return treedef, tuple(sig)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            return self.jitted(*args, **kwargs)
        sig = self._signature(args)
        if sig is None:
            return self.jitted(*args)
        executable = self.executables.get(sig)
        if executable is None:
            executable = self._first(sig, args)
        return executable(*args)

    def _marker(self, sig: Any) -> Path | None:
        if self.marker_dir is None:
            return None
        digest = hashlib.sha256(f"{self.identity}\n{sig[0]}\n{sig[1]}".encode()).hexdigest()
        return self.marker_dir / digest

    def _first(self, sig: Any, args: tuple[Any, ...]) -> Any:
        with self.lock:
            executable = self.executables.get(sig)
            if executable is not None:
                return executable
            lowered = self.jitted.lower(*args)
            marker = self._marker(sig)
            if marker is not None and marker.exists():
                executable = lowered.compile()  # the persistent cache has it: a load
                self.tiers[sig] = "cached"
            else:
                executable = lowered.compile(compiler_options=QUICK_OPTIONS[self.platform])
                self.tiers[sig] = "quick"
                thread = threading.Thread(target=self._optimize, args=(sig, lowered, marker),
                                          name=f"hatch-jaxexport optimize {self.identity[:12]}",
                                          daemon=True)
                self.threads[sig] = thread
                _wait_at_exit(thread)
                thread.start()
            self.executables[sig] = executable
            return executable

    def _optimize(self, sig: Any, lowered: Any, marker: Path | None) -> None:
        try:
            optimized = lowered.compile()
        except Exception as err:  # keep the quick tier
            warnings.warn(f"optimized compile failed, the quick tier stays in use: "
                          f"{type(err).__name__}: {err}", TieredCompileWarning, stacklevel=1)
            return
        with self.lock:
            self.executables[sig] = optimized
            self.tiers[sig] = "optimized"
        if marker is not None:
            try:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.write_text("optimized executable in the persistent cache\n")
            except OSError:
                pass

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for background compiles (tests, benchmarks); ``True`` if none is running."""
        for thread in list(self.threads.values()):
            thread.join(timeout)
        return not any(t.is_alive() for t in self.threads.values())

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted.lower(*args, **kwargs)


_RUNNING: set[threading.Thread] = set()
_EXIT_HOOK = threading.Lock()
_exit_hook_installed = False


def _wait_at_exit(thread: threading.Thread) -> None:
    """Make interpreter exit wait for ``thread`` (see the module docstring for why)."""
    global _exit_hook_installed
    with _EXIT_HOOK:
        _RUNNING.add(thread)
        if not _exit_hook_installed:
            import atexit

            atexit.register(_join_running)
            _exit_hook_installed = True


def _join_running() -> None:
    for thread in list(_RUNNING):
        thread.join()


def marker_dir() -> Path | None:
    """Where tier markers live (our cache folder), ``None`` without a persistent cache."""
    from .cache import active_cache_dir, default_cache_dir

    return default_cache_dir().parent / "tiers" if active_cache_dir() else None


def identity(*parts: str) -> str:
    """What an optimized executable depends on: artifact hash, jax version, cache folder..."""
    import jax

    from .cache import active_cache_dir

    return "\n".join([*parts, jax.__version__, str(active_cache_dir())])
