"""Eager calls of a loaded artifact: one compiled executable per argument signature, tiered.

For an eager call (concrete arrays, not inside the user's ``jax.jit`` or a transformation),
``EagerCall`` keeps a ``jax.stages.Compiled`` per signature, which later calls run straight
from C++. The executable comes from, in order:

1. the executable cache (``executables``), when this machine compiled it before: no lowering,
   no compile (warm start; no quick tier is built);
2. with tiering, a quick tier (low optimization options) for the first call, while a separate
   background process compiles the optimized executable into the executable cache; a later
   call switches to it as soon as it is there;
3. otherwise an optimized compile, written to the executable cache once the call is dispatched.

The background compile is a process, not a thread: CPython tears daemon threads down at exit,
and a thread inside XLA's compiler then aborts the process (``terminate called after throwing``,
seen on Python 3.11 with jax 0.10.2), so a thread would have to block exit. The process runs in
its own session at a lower priority and outlives a parent that exits: its executable is the
next process's warm start. ``_background`` bounds them: a few at once per machine (slots), the
others queued in this process in order of first use, each ended after a time limit. A lock
file next to the entry keeps two processes from compiling the same signature; a failed
background compile leaves the quick tier in use with a ``TieredCompileWarning``. The quick
tier is never written to the cache.

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
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from hatch_jaxexport.errors import TieredCompileWarning
from hatch_jaxexport.formats._settings import (
    BACKGROUND_TIMEOUT_ENV,
    TIERED_ENV,
    background_timeout,
    call_report_wanted,
    tiered_choice,
)
from hatch_jaxexport.formats.manifest import signature_text
from hatch_jaxexport.runtime._jaxcompat import initialize_lapack, lapack_init_skipped
from hatch_jaxexport.runtime._user_frame import warn_at_user_frame
from hatch_jaxexport.runtime.executables import _executable_cache as executables
from hatch_jaxexport.runtime.executables._background import (
    BackgroundJob,
    end_after,
    expired,
    key_lock_held,
    lock_stale_s,
    scratch_folder,
    slot_count,
    submit,
)

#: Compiler options of the quick tier, per platform.
QUICK_OPTIONS: dict[str, dict[str, Any]] = {"cpu": {"xla_backend_optimization_level": 0}}
#: Default tiering threshold: the serialized StableHLO size of an artifact (bytes).
TIER_MIN_MODULE_BYTES = 16_384
_POLL_EVERY_S = 0.2


def tiering_wanted(platform: str, option: bool | None, module_bytes: int) -> bool:
    """Whether to tier: the environment, then the function's option, then the default.

    Never without background compiles (``HATCH_JAXEXPORT_BACKGROUND_COMPILES=0``): a quick tier
    that nothing replaces would be cached and serve every later process, slower for good.
    """
    forced = tiered_choice()
    if forced is False or platform not in QUICK_OPTIONS or slot_count() == 0:
        return False
    if forced:
        return True
    if option is not None:
        return bool(option)
    return module_bytes >= TIER_MIN_MODULE_BYTES


class _Pending:
    """An optimized compile to come: ``job`` queued or running here, or ``elsewhere`` (another
    process's, watched through its lock file and entry)."""

    def __init__(self, key: str, job: BackgroundJob) -> None:
        self.key = key
        self.job = job
        self.next_check = 0.0


class _Entry:
    """A signature's executable: its tier, the optimized key, the compile in flight, and the
    key it is still to be written under once it has run (``save_key``: a fresh compile)."""

    def __init__(self, compiled: Any, tier: str, key: str | None = None,
                 pending: _Pending | None = None, save_key: str | None = None,
                 quick_key: str | None = None) -> None:
        self.compiled = compiled
        self.tier = tier
        self.key = key
        self.pending = pending
        self.save_key = save_key
        self.unsaved = save_key is not None
        #: Where the quick tier is cached: removed once the optimized executable is in.
        self.quick_key = quick_key
        #: Why no shipped executable served this signature (``None``: one did).
        self.not_shipped: str | None = None
        #: Seconds of the signature's first call (its executable found or compiled, and run).
        self.seconds: float | None = None


class ServedCall(NamedTuple):
    """How the first eager call of one signature was served (``ExportableFunction.call_report``).

    ``tier`` is ``shipped`` (the wheel's precompiled executable), ``cached`` (the per-user
    executable cache), ``compiled`` (the StableHLO compiled in this process), ``quick`` or
    ``cached-quick`` (tiered compilation's quick executable, the optimized one on its way),
    ``optimized`` (that one, once in) or ``traced`` (no usable artifact: the source).
    """

    function: str
    signature: str
    tier: str
    #: Seconds of the first call of this signature; ``None`` where not measured (``traced``).
    seconds: float | None
    #: Why no shipped executable served it; ``None`` when one did.
    not_shipped: str | None

    def line(self) -> str:
        """``hatch-jaxexport: mypkg:f float32[4] shipped in 12.3 ms``."""
        took = "" if self.seconds is None else f" in {self.seconds * 1e3:.1f} ms"
        why = f" (no shipped executable: {self.not_shipped})" if self.not_shipped else ""
        return f"hatch-jaxexport: {self.function} {self.signature} {self.tier}{took}{why}"


class EagerCall:
    """Calls ``make_jitted()``'s function; eager calls through a cached or tiered executable.

    Args:
        make_jitted: Builds the ``jax.jit`` function of the artifact (lazily: a warm start
            never needs it).
        job: What a background compile needs to find the artifact again: ``package`` and
            ``file`` (the manifest record's file), ``sha256``, ``platform``; ``convention``
            ``"flat"`` for a family member's call (flat arrays in and out).
        tiered: Whether first calls use a quick tier.
        lapack: Whether the artifact calls LAPACK: initialised before a cached executable runs;
            without it, lowering skips the initialisation (``jaxcompat``).
        shipped: The wheel's precompiled executables of the artifact
            (``_shipped.ShippedExecutables``), tried before the cache; ``None`` for none.
        eager_lowerable: Given a signature's flat argument types (``((dims...), dtype)``
            each), builds what its eager first call lowers, where that can be simpler than
            ``make_jitted()``'s function: ``jax.jit`` of the artifact's own call (the same
            executable without the transformation primitive in between), or of its
            static-shape form for exactly those types. ``None`` (or its returning ``None``):
            lower ``make_jitted()``'s.
    """

    def __init__(self, make_jitted: Callable[[], Callable[..., Any]], job: dict[str, str],
                 tiered: bool, lapack: bool, shipped: Any = None,
                 eager_lowerable: Callable[[Any], Callable[..., Any] | None] | None = None
                 ) -> None:
        from hatch_jaxexport.runtime.disk._compile_cache import (
            executable_cache_dir,
            executable_cache_writable,
        )

        self._make_jitted = make_jitted
        self._jitted: Callable[..., Any] | None = None
        self._eager_lowerable = eager_lowerable
        self.job = job
        self.platform = job["platform"]
        self.folder = executable_cache_dir()
        #: Whether new entries can be written (a read-only cache is still read): without it
        #: nothing is stored and no tier is built (the optimized one would have nowhere to go).
        self.writable = executable_cache_writable()
        self.tiered = tiered and self.folder is not None and self.writable
        self.lapack = lapack
        self.shipped = shipped
        #: ``HATCH_JAXEXPORT_REPORT=1``: one line on stderr per first call of a signature.
        self.report = call_report_wanted()
        self.entries: dict[Any, _Entry] = {}
        self.lock = threading.RLock()
        import jax
        import numpy as np

        from hatch_jaxexport.runtime._jaxcompat import concrete_array_type

        self._flatten = jax.tree_util.tree_flatten
        self._canonical = jax.dtypes.canonicalize_dtype
        self._array, self._ndarray, self._scalar = concrete_array_type(), np.ndarray, np.generic
        self._tracer = jax.core.Tracer
        self._shape_dtype = jax.ShapeDtypeStruct

    @property
    def jitted(self) -> Callable[..., Any]:
        jitted = self._jitted
        if jitted is None:
            with self.lock:
                if self._jitted is None:
                    made = self._make_jitted()
                    if getattr(made, "not_an_artifact", False):  # the source, as a fallback
                        self.folder, self.tiered = None, False
                    self._jitted = made
                jitted = self._jitted
        return jitted

    @property
    def tiers(self) -> dict[Any, str]:
        """Signature to tier: ``shipped``, ``cached``, ``compiled``, ``quick``, ``cached-quick``
        (a quick tier an earlier process compiled) or ``optimized``."""
        return {sig: entry.tier for sig, entry in self.entries.items()}

    def signature(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call's (treedef, leaf types), ``None`` unless every leaf is a concrete array."""
        leaves, treedef = self._flatten((args, kwargs))
        sig = []
        for leaf in leaves:
            kind = type(leaf)
            if kind is self._array:
                if leaf.committed:
                    return None  # the caller placed it: jax.jit decides
                sig.append((leaf.shape, leaf.dtype.name, leaf.aval.weak_type))
            elif kind is self._ndarray or isinstance(leaf, self._scalar):  # numpy scalars are
                # strongly typed 0-d arrays to jax: np.float32(2.0) is np.asarray(2.0, float32)
                sig.append((leaf.shape, self._canonical(leaf.dtype).name, False))
            elif isinstance(leaf, self._ndarray):  # jax's own numpy arrays (TypedNdArray,
                # what an eager transformation hands a primitive), typed by their aval
                weak = bool(getattr(getattr(leaf, "aval", None), "weak_type", False))
                sig.append((leaf.shape, self._canonical(leaf.dtype).name, weak))
            elif kind is self._shape_dtype:  # the types of a call to come (``prepare``)
                sig.append((leaf.shape, leaf.dtype.name, bool(leaf.weak_type)))
            else:
                return None  # tracers, Python scalars...: the caller's compile decides
        return str(treedef), tuple(sig)

    @staticmethod
    def artifact_types(sig: Any) -> Any:
        """A call's signature as the artifact's executable takes it: weak types dropped.

        An artifact's inputs are strongly typed, and a weak-typed array holds the same buffer
        as a strong one of its dtype, so a weak jax array, a 0-d array and a numpy scalar of
        one dtype all run one executable (shipped, cached or compiled). The entries of this
        process stay keyed by the full signature: where the source runs instead of an artifact
        (a fallback), weak types change jax's type promotion.
        """
        treedef, leaves = sig
        return treedef, tuple((shape, dtype, False) for shape, dtype, _ in leaves)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        sig = self.signature(args, kwargs)
        if sig is None:
            jitted = self.jitted
            if self._any_tracer(args, kwargs):  # a transformation: each member on its own
                jitted = getattr(jitted, "traced", jitted)
            with lapack_init_skipped(not self.lapack):
                return jitted(*args, **kwargs)
        entry = self.entries.get(sig)
        if entry is None:
            return self._first_call(sig, args, kwargs)
        if entry.pending is not None:
            entry = self._settle(sig, args, kwargs)
        out = entry.compiled(*args, **kwargs)
        if entry.unsaved:
            self._save(entry)
        return out

    def _save(self, entry: _Entry) -> None:
        """Cache a freshly compiled executable for the next process, once it has run.

        Serializing it takes 2-3 ms for a small function and 100-170 ms for a large one
        (``deep`` of ``benchmarks/cold_start.py``), so it runs in a thread while the call
        returns. The thread is not a daemon: the interpreter waits for it at exit, and the
        entry is written whole (``executables.store`` writes a temporary file, then renames).
        """
        entry.unsaved = False
        if not self.writable:
            return
        assert self.folder is not None and entry.save_key is not None
        threading.Thread(target=executables.store, name="hatch-jaxexport-store",
                         args=(self.folder, entry.save_key, entry.compiled)).start()

    def _first_call(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A signature's first call: settled, run, timed, reported (``HATCH_JAXEXPORT_REPORT``)
        and, if freshly compiled, written to the cache."""
        started = time.perf_counter()
        entry = self._settle(sig, args, kwargs)
        out = entry.compiled(*args, **kwargs)
        if entry.seconds is None:
            entry.seconds = time.perf_counter() - started
            if self.report:
                print(self.served(sig, entry).line(), file=sys.stderr, flush=True)
        if entry.unsaved:
            self._save(entry)
        return out

    def served(self, sig: Any, entry: _Entry) -> ServedCall:
        """How ``entry``, the executable of signature ``sig``, served its first call."""
        types = signature_text([[list(shape), dtype] for shape, dtype, _ in sig[1]])
        return ServedCall(self.job.get("function", "?"), types, entry.tier, entry.seconds,
                          entry.not_shipped)

    def served_calls(self) -> list[ServedCall]:
        """How the first call of each signature this call has seen was served."""
        with self.lock:
            return [self.served(sig, entry) for sig, entry in self.entries.items()]

    def prepare(self, args: tuple[Any, ...]) -> None:
        """Settle the executable of a call to come, with these positional arguments (concrete
        arrays or ``jax.ShapeDtypeStruct``s): shipped, cached or compiled now, e.g. in a thread
        while another compile runs. A later call of the same types finds it."""
        sig = self.signature(args, {})
        if sig is not None and sig not in self.entries:
            self._settle(sig, args, {})

    def _any_tracer(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a transformation or ``jax.jit`` traces this call."""
        return any(isinstance(leaf, self._tracer) for leaf in self._flatten((args, kwargs))[0])

    def settled(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
        """The final executable for this call's signature (``None`` while a tier is pending)."""
        sig = self.signature(args, kwargs)
        entry = self.entries.get(sig) if sig is not None else None
        if entry is None or entry.pending is not None:
            return None
        # the C++ dispatcher jax makes on a Compiled's first call: Compiled.__call__ minus one
        # Python frame (about 0.5 us), with the same argument checks
        call = getattr(entry.compiled, "_call", None)
        return call if callable(call) else entry.compiled

    def _settle(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Entry:
        with self.lock:
            entry = self.entries.get(sig)
            if entry is not None:
                if entry.pending is not None:
                    entry = self._poll(sig, entry)
                return entry
            not_shipped = "the wheel ships no executable of this artifact"
            if self.shipped is not None:
                compiled = self.shipped.compiled_for(self.artifact_types(sig)[1],
                                                     self._flatten((args, kwargs))[1])
                if compiled is not None:
                    if self.lapack:
                        initialize_lapack()
                    entry = self.entries[sig] = _Entry(compiled, "shipped", None)
                    return entry
                not_shipped = self.shipped.why_not(self.artifact_types(sig)[1])
            entry = self._unshipped(sig, args, kwargs)
            entry.not_shipped = not_shipped
            self.entries[sig] = entry
            return entry

    def _unshipped(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Entry:
        """A signature no shipped executable serves: from the cache, or compiled (under
        ``_settle``'s lock)."""
        key = None
        if self.folder is not None:
            # a member's flat call and the function's structured call of one artifact are
            # different executables: the convention is part of the key
            key = executables.entry_key(self.folder, self.job["sha256"],
                                        self.artifact_types(sig), self.platform,
                                        self.job.get("convention", "default"),
                                        package=self.job.get("package", ""))
            if self.lapack:
                initialize_lapack()
            compiled = executables.load(self.folder, key)
            if compiled is not None:
                if self.tiered:  # a quick tier an earlier process cached is stale now
                    executables.entry_path(self.folder, self._quick_key(sig)).unlink(
                        missing_ok=True)
                return _Entry(compiled, "cached", key)
        return self._compile(sig, key, args, kwargs)

    def _quick_key(self, sig: Any) -> str:
        """The cache entry of this signature's quick tier."""
        assert self.folder is not None
        return "quick-" + executables.entry_key(self.folder, self.job["sha256"],
                                                self.artifact_types(sig), self.platform, "quick",
                                                package=self.job.get("package", ""))

    def _compile(self, sig: Any, key: str | None, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> _Entry:
        """A signature with no shipped or cached executable: compile, or with tiering run the
        quick tier (cached too, so a process started right after this one compiles nothing)
        while the optimized one compiles in the background."""
        if self.tiered and key is not None and self.folder is not None:
            quick_key = self._quick_key(sig)
            quick = executables.load(self.folder, quick_key)
            if quick is not None:
                return _Entry(quick, "cached-quick", key, self._start_optimizer(key, sig),
                              quick_key=quick_key)
            lowered = self._lower(sig, args, kwargs)
            quick, fresh = executables.compile_fresh(lowered, QUICK_OPTIONS[self.platform])
            return _Entry(quick, "quick", key, self._start_optimizer(key, sig),
                          save_key=quick_key if fresh else None, quick_key=quick_key)
        lowered = self._lower(sig, args, kwargs)
        if self.folder is None:
            key = None  # a fallback to the source: not the artifact's executable
        compiled, fresh = executables.compile_fresh(lowered)
        return _Entry(compiled, "compiled", key, save_key=key if fresh else None)

    def _lower(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The eager call of signature ``sig`` lowered for these arguments."""
        types = tuple((shape, dtype) for shape, dtype, _ in sig[1])
        direct = self._eager_lowerable(types) if self._eager_lowerable is not None else None
        with lapack_init_skipped(not self.lapack):
            return (direct or self.jitted).lower(*args, **kwargs)  # type: ignore[attr-defined]

    def _start_optimizer(self, key: str, sig: Any) -> _Pending | None:
        """Hand the optimized compile of ``sig`` to ``_background``: started now, queued for a
        free slot, or left to the process that already compiles it."""
        assert self.folder is not None
        lock = self.folder / f"{key}.lock"
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as err:
            warn_at_user_frame(f"cannot start the optimized compile, the quick tier stays in "
                               f"use: {err}", TieredCompileWarning)
            return None
        job = {**self.job, "key": key, "folder": str(self.folder), "lock": str(lock),
               "leaves": [[list(shape), dtype, weak]
                          for shape, dtype, weak in self.artifact_types(sig)[1]],
               "x64": _x64(), "sys_path": [p for p in sys.path if p],
               "timeout": background_timeout()}
        # the artifact's platform only (cpu: no accelerator probing), never tiering again
        env = {**os.environ, TIERED_ENV: "0", "JAX_PLATFORMS": self.platform}
        argv = [sys.executable, "-m", "hatch_jaxexport.runtime.executables._tiers", json.dumps(job)]
        work = BackgroundJob(argv, env, self.folder, lock, self.folder / f"{key}.log",
                             executables.entry_path(self.folder, key))
        if key_lock_held(lock):  # another process compiles it: nothing to queue
            work.state = "elsewhere"
            return _Pending(key, work)
        return _Pending(key, submit(work))

    def _poll(self, sig: Any, entry: _Entry) -> _Entry:
        """Switch ``sig`` to its optimized executable if it is in; warn and stay quick if its
        compile failed; else leave it pending (under ``_settle``'s lock)."""
        pending = entry.pending
        assert pending is not None and self.folder is not None
        code = self._outcome(pending)
        if code is None:
            return entry
        compiled = executables.load(self.folder, pending.key) if code == 0 else None
        if compiled is not None:
            if pending.job.proc is not None:
                pending.job.log.unlink(missing_ok=True)
            if entry.quick_key is not None:  # the optimized one is in: the quick one is stale
                executables.entry_path(self.folder, entry.quick_key).unlink(missing_ok=True)
            optimized = _Entry(compiled, "optimized", pending.key)
            optimized.not_shipped, optimized.seconds = entry.not_shipped, entry.seconds
            entry = self.entries[sig] = optimized
            return entry
        if code == _GAVE_UP:  # the other process's compile ended without an entry: stay quick
            entry.pending = None
            return entry
        what, why = _failure(pending.job)
        warn_at_user_frame(f"{self.job.get('function', 'artifact')}: {what}, the quick tier "
                           f"stays in use: {why}", TieredCompileWarning)
        entry.pending = None
        return entry

    def _outcome(self, pending: _Pending) -> int | None:
        """``None`` while the compile is queued or runs; else ``0`` if its entry should be in,
        its exit status, ``_NOT_STARTED`` or ``_GAVE_UP`` (another process's, without entry)."""
        assert self.folder is not None
        job = pending.job
        if job.state == "queued":
            return None
        if job.state == "failed":
            return _NOT_STARTED
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
        return _GAVE_UP

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for background compiles (queued ones too) and switch to their executables
        (tests, benchmarks); ``True`` if none is left pending."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for sig, entry in list(self.entries.items()):
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
                with self.lock:
                    entry = self._poll(sig, entry)
        return True

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted.lower(*args, **kwargs)  # type: ignore[attr-defined]


#: ``_outcome`` of a compile that could not start, and of another process's that ended
#: without writing its entry.
_NOT_STARTED, _GAVE_UP = -1000, -1001


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


def optimize(job: dict[str, Any]) -> int:
    """The background process: compile one artifact for one signature into the cache, within
    its time limit (``end_after``). The entry is written in a scratch folder of its own and
    renamed into place, so that ending the process early leaves no partial file of ours."""
    try:
        os.nice(5)
    except (AttributeError, OSError):
        pass
    folder = Path(job["folder"])
    scratch = scratch_folder(folder)
    end_after(float(job.get("timeout", background_timeout())), Path(job["lock"]), scratch)
    sys.path[:0] = [p for p in job["sys_path"] if p not in sys.path]
    try:
        import jax

        jax.config.update("jax_enable_compilation_cache", False)  # compile, never load
        if job["x64"]:
            jax.config.update("jax_enable_x64", True)
        from hatch_jaxexport.runtime.artifacts._artifacts import load_package_artifacts, load_record

        package = load_package_artifacts(job["package"])
        if package is None:
            raise RuntimeError(f"package {job['package']!r} has no baked artifacts")
        record = next(r for r in package.records(job["function"]).manifest.artifacts
                      if r.file == job["file"])
        exported = load_record(package, record)
        leaves = [jax.ShapeDtypeStruct(tuple(shape), dtype, weak_type=weak)
                  for shape, dtype, weak in job["leaves"]]
        args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, leaves)
        compiled, fresh = executables.compile_fresh(jax.jit(exported.call).lower(*args, **kwargs))
        if not fresh or not executables.store(scratch, job["key"], compiled):
            print("the executable could not be written to the cache", file=sys.stderr)
            return 3
        os.replace(executables.entry_path(scratch, job["key"]),
                   executables.entry_path(folder, job["key"]))
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            os.unlink(job["lock"])
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(optimize(json.loads(sys.argv[1])))
