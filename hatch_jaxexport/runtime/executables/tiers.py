"""Where a signature's executable comes from, third: the quick tier, replaced in the background.

With tiering, a signature that is neither shipped nor cached runs a quick tier (low
optimization options) for its first call, while a separate background process
(``_optimizer``) compiles the optimized executable into the executable cache; a later call
switches to it as soon as it is there. The quick tier is cached too (a process started right
after this one compiles nothing), under its own key, and removed once the optimized one is in.

The background compile is a process, not a thread: CPython tears daemon threads down at exit,
and a thread inside XLA's compiler then aborts the process (``terminate called after throwing``,
seen on Python 3.11 with jax 0.10.2), so a thread would have to block exit. ``_background``
bounds the processes: a few at once per machine (slots), the others queued in this process in
order of first use, each ended after a time limit. A lock file next to the entry keeps two
processes from compiling the same signature; a failed background compile leaves the quick tier
in use with a ``TieredCompileWarning``.

Whether a call tiers at all is ``tier_policy``'s (``tiering_wanted``):
``HATCH_JAXEXPORT_TIERED=0`` turns tiering off (``1`` turns it on for every artifact), as does
``@exportable(..., tiered=False)``. The default: on for CPU artifacts whose StableHLO module is
at least ``TIER_MIN_MODULE_BYTES`` (small modules compile about as fast either way); off on other
platforms, where it has not been measured here. Tiering needs the executable cache
(``HATCH_JAXEXPORT_CACHE`` not ``0``), a folder it can write, and background compiles
(``HATCH_JAXEXPORT_BACKGROUND_COMPILES`` not ``0``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hatch_jaxexport.errors import TieredCompileWarning
from hatch_jaxexport.formats.settings import (
    BACKGROUND_TIMEOUT_ENV,
    TIERED_ENV,
    background_timeout,
)
from hatch_jaxexport.runtime.executables import _executable_cache as executables
from hatch_jaxexport.runtime.executables._background import (
    BackgroundJob,
    expired,
    key_lock_held,
    lock_stale_s,
    submit,
)
from hatch_jaxexport.runtime.executables._user_cache import UserCache
from hatch_jaxexport.runtime.executables.entries import JAX_CACHE_SERVED, Entry, artifact_types
from hatch_jaxexport.runtime.executables.tier_policy import QUICK_OPTIONS
from hatch_jaxexport.runtime.notices import NEEDS_FIX, notify

#: How often a pending optimized compile is looked for (seconds).
_POLL_EVERY_S = 0.2
#: The background process's module (``python -m``).
OPTIMIZER_MODULE = "hatch_jaxexport.runtime.executables._optimizer"
#: ``QuickTier.outcome`` of a compile that could not start, and of another process's that
#: ended without writing its entry.
NOT_STARTED, GAVE_UP = -1000, -1001


class Pending:
    """An optimized compile to come: ``job`` queued or running here, or ``elsewhere`` (another
    process's, watched through its lock file and entry)."""

    def __init__(self, key: str, job: BackgroundJob) -> None:
        self.key = key
        self.job = job
        self.next_check = 0.0


class QuickTier:
    """The quick tier of one artifact's signatures and the optimized compiles replacing it."""

    def __init__(self, cache: UserCache, job: dict[str, str]) -> None:
        self.cache, self.job = cache, job

    def entry(self, sig: Any, key: str, lower: Callable[[], Any], in_tree: Any = None
              ) -> Entry:
        """A first call's quick executable (cached, or compiled from ``lower()``), with its
        optimized compile started; ``in_tree``: the call's input tree."""
        quick_key = self.cache.quick_key(sig)
        quick = self.cache.load(quick_key, in_tree)
        if quick is not None:
            entry = Entry(quick, "cached-quick", key, self.start_optimizer(key, sig),
                          quick_key=quick_key)
        else:
            quick, fresh = executables.compile_fresh(lower(),
                                                     QUICK_OPTIONS[self.job["platform"]])
            entry = Entry(quick, "quick", key, self.start_optimizer(key, sig),
                          save_key=quick_key if fresh else None, quick_key=quick_key)
            entry.not_cached = None if fresh else JAX_CACHE_SERVED
        entry.in_tree = in_tree
        return entry

    def start_optimizer(self, key: str, sig: Any) -> Pending | None:
        """Hand the optimized compile of ``sig`` to ``_background``: started now, queued for a
        free slot, or left to the process that already compiles it."""
        folder = self.cache.folder
        assert folder is not None
        lock = folder / f"{key}.lock"
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as err:
            notify(f"cannot start the optimized compile, the quick tier stays in use: {err}",
                   TieredCompileWarning, NEEDS_FIX)
            return None
        job = {**self.job, "key": key, "folder": str(folder), "lock": str(lock),
               "leaves": [[list(shape), dtype, weak]
                          for shape, dtype, weak in artifact_types(sig)[1]],
               "x64": _x64(), "sys_path": [p for p in sys.path if p],
               "timeout": background_timeout()}
        # the artifact's platform only (cpu: no accelerator probing), never tiering again
        env = {**os.environ, TIERED_ENV: "0", "JAX_PLATFORMS": self.job["platform"]}
        argv = [sys.executable, "-m", OPTIMIZER_MODULE, json.dumps(job)]
        work = BackgroundJob(argv, env, folder, lock, folder / f"{key}.log",
                             executables.entry_path(folder, key))
        if key_lock_held(lock):  # another process compiles it: nothing to queue
            work.state = "elsewhere"
            return Pending(key, work)
        return Pending(key, submit(work))

    def poll(self, entry: Entry) -> Entry:
        """The optimized entry if its executable is in; ``entry`` itself, warned and no longer
        pending, if its compile failed; else ``entry`` still pending."""
        pending = entry.pending
        assert pending is not None
        code = self.outcome(pending)
        if code is None:
            return entry
        compiled = self.cache.load(pending.key, entry.in_tree) if code == 0 else None
        if compiled is not None:
            if pending.job.proc is not None:
                pending.job.log.unlink(missing_ok=True)
            if entry.quick_key is not None:  # the optimized one is in: the quick one is stale
                self.cache.drop(entry.quick_key)
            optimized = Entry(compiled, "optimized", pending.key)
            optimized.not_shipped, optimized.seconds = entry.not_shipped, entry.seconds
            return optimized
        entry.pending = None
        if code != GAVE_UP:  # another process's compile that ended without entry: stay quick
            what, why = _failure(pending.job)
            notify(f"{self.job.get('function', 'artifact')}: {what}, the quick tier stays in "
                   f"use: {why}", TieredCompileWarning, NEEDS_FIX)
        return entry

    def wait(self, entries: dict[Any, Entry], lock: Any, timeout: float | None) -> bool:
        """Wait for the pending compiles of ``entries`` (signature to entry, updated under
        ``lock`` as each is polled); ``True`` if none is left pending."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for sig, entry in list(entries.items()):
            while entry.pending is not None:
                if deadline is not None and time.monotonic() > deadline:
                    return False
                proc = entry.pending.job.proc
                if proc is not None:
                    try:
                        proc.wait(0.05)
                    except subprocess.TimeoutExpired:
                        continue
                else:
                    time.sleep(0.05)
                with lock:
                    entry = entries[sig] = self.poll(entry)
        return True

    def outcome(self, pending: Pending) -> int | None:
        """``None`` while the compile is queued or runs; else ``0`` if its entry should be in,
        its exit status, ``NOT_STARTED`` or ``GAVE_UP`` (another process's, without entry)."""
        job = pending.job
        if job.state == "queued":
            return None
        if job.state == "failed":
            return NOT_STARTED
        if job.proc is not None:
            code = job.proc.poll()
            if code not in (None, 0):  # ours died, maybe without removing its lock
                job.lock.unlink(missing_ok=True)
            return code
        now = time.monotonic()  # another process's: look at its files now and then
        if now < pending.next_check:
            return None
        pending.next_check = now + _POLL_EVERY_S
        if job.entry.exists():
            return 0
        if job.lock.exists() and now - job.since < lock_stale_s():
            return None
        return GAVE_UP


def _x64() -> bool:
    import jax

    return bool(jax.config.jax_enable_x64)


def _failure(job: BackgroundJob) -> tuple[str, str]:
    """What became of a background compile of ours that gave no executable, and why (the last
    line of its log), for its warning."""
    if job.proc is None:
        return "cannot start the optimized compile", job.error
    code = job.proc.poll()
    if expired(code):
        return (f"the optimized compile ran past its time limit of {background_timeout():g} s "
                f"and was ended (exit {code})", _tail(job.log) or BACKGROUND_TIMEOUT_ENV)
    return f"the optimized compile failed (exit {code})", _tail(job.log)


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


__all__ = ["GAVE_UP", "NOT_STARTED", "OPTIMIZER_MODULE", "Pending", "QuickTier"]
