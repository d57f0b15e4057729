"""Where a signature's executable comes from, second: the per-user executable cache.

One artifact's view of the cache folder (``disk/cache_folders``): the entry key of a call
signature, reading an entry back (no lowering, no compile: a warm start), and writing a
fresh compile once it has run. The entries themselves are ``_executable_cache``'s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hatch_jaxexport.runtime.executables import _executable_cache as executables
from hatch_jaxexport.runtime.executables.entries import Entry, artifact_types
from hatch_jaxexport.runtime.jaxcompat import initialize_lapack

# Imported in functions: the cache folders, only when a call's executable cache is first used.


class UserCache:
    """The per-user cache of one artifact's executables.

    Args:
        job: The artifact's ``sha256``, ``platform``, ``package`` and call ``convention``
            (a member's flat call and the function's structured call of one artifact are
            different executables: the convention is part of the key).
        lapack: Whether the artifact calls LAPACK (initialised before an entry runs).
        out_tree: The artifact's output tree (read only for an entry whose trees name the
            package's classes: those are rebuilt from the artifact, never unpickled).
    """

    def __init__(self, job: dict[str, str], lapack: bool,
                 out_tree: Callable[[], Any] | None = None) -> None:
        from hatch_jaxexport.runtime.disk.cache_folders import (
            ensure_compilation_cache,
            executable_cache_dir,
            executable_cache_writable,
        )

        ensure_compilation_cache()  # set up at the first signature no shipped executable serves
        self.job, self.lapack, self.out_tree = job, lapack, out_tree
        self.folder = executable_cache_dir()
        #: Whether new entries can be written (a read-only cache is still read): without it
        #: nothing is stored and no tier is built (the optimized one would have nowhere to go).
        self.writable = executable_cache_writable()

    def key(self, sig: Any, convention: str | None = None) -> str:
        """The entry key of signature ``sig`` (``convention`` ``"quick"`` for its quick tier)."""
        assert self.folder is not None
        return executables.entry_key(self.folder, self.job["sha256"], artifact_types(sig),
                                     self.job["platform"],
                                     convention or self.job.get("convention", "default"),
                                     package=self.job.get("package", ""))

    def quick_key(self, sig: Any) -> str:
        """The cache entry of this signature's quick tier."""
        return "quick-" + self.key(sig, "quick")

    def load(self, key: str, in_tree: Any = None) -> Any | None:
        """The executable cached under ``key``, ``None`` if there is none (or no folder);
        ``in_tree``: the call's input tree, for an entry that holds none."""
        if self.folder is None:
            return None
        if self.lapack:
            initialize_lapack()
        out_tree = self.out_tree
        trees = None if in_tree is None or out_tree is None else lambda: (in_tree, out_tree())
        return executables.load(self.folder, key, trees)

    def drop(self, key: str) -> None:
        """Remove an entry that is stale now (a quick tier once the optimized one is in)."""
        if self.folder is not None:
            executables.entry_path(self.folder, key).unlink(missing_ok=True)

    def cached(self, sig: Any, in_tree: Any = None) -> tuple[str | None, Entry | None]:
        """The signature's key and its cached entry (``None`` if not cached); a cached quick
        tier is stale once the optimized executable is there, so it goes (whether this
        process would tier or not: asking would import the policy on every warm start).
        ``in_tree``: the call's."""
        if self.folder is None:
            return None, None
        key = self.key(sig)
        compiled = self.load(key, in_tree)
        if compiled is None:
            return key, None
        if self.writable:
            self.drop(self.quick_key(sig))
        return key, Entry(compiled, "cached", key)

    def save(self, entry: Entry) -> None:
        """Cache a freshly compiled executable for the next process, once it has run.

        Serializing a large one takes longer than its call (``deep`` of
        ``benchmarks/cold_start.py``), so it runs in a thread while the call
        returns. The thread is not a daemon: the interpreter waits for it at exit, and the
        entry is written whole (``executables.store`` writes a temporary file, then renames).
        """
        entry.unsaved = False
        if not self.writable:
            entry.not_cached = f"the executable cache folder {self.folder} cannot be written"
            return
        assert self.folder is not None and entry.save_key is not None
        folder, key = self.folder, entry.save_key

        def store() -> None:
            entry.not_cached = executables.store(folder, key, entry.compiled)

        threading.Thread(target=store, name="hatch-jaxexport-store").start()


__all__ = ["UserCache"]
