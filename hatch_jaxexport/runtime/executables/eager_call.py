"""Eager calls of a loaded artifact: one compiled executable per argument signature.

For an eager call (concrete arrays, not inside the user's ``jax.jit`` or a transformation),
``EagerCall`` keeps a ``jax.stages.Compiled`` per signature, which later calls run straight
from C++. A signature's first call takes its executable from the first of these that has it,
each a class of its own module, in this order:

1. ``ShippedExecutables`` (``shipped``): precompiled in the wheel for exactly this machine;
2. ``UserCache`` (``_user_cache``): compiled on this machine before (a warm start: no
   lowering, no compile, no quick tier);
3. ``QuickTier`` (``tiers``), with tiering: a quick executable now, the optimized one
   compiled by a background process (``_optimizer``, bounded by ``_background``) and switched
   to once it is in;
4. ``FreshCompile`` (``_fresh_compile``): an optimized compile here, written to the cache once
   the call has run.

The last three are ``_compile_path``'s, built at the first signature no shipped executable
serves.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.formats.settings import call_report_wanted
from hatch_jaxexport.runtime.executables.entries import (
    CallSignatures,
    Entry,
    ServedCall,
    artifact_types,
    served_call,
)
from hatch_jaxexport.runtime.jaxcompat import (
    compiled_by_position,
    compiled_dispatch,
    initialize_lapack,
    lapack_init_skipped,
)

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.executables._compile_path import CompilePath

# Imported in functions: the compile path (the executable cache, the quick tier, the
# compiler), only for a signature no shipped executable serves (``_compile_path``).


class EagerCall:
    """Calls ``make_jitted()``'s function; eager calls through a shipped, cached or compiled
    executable per signature.

    Args:
        make_jitted: Builds the ``jax.jit`` function of the artifact (lazily: a warm start
            never needs it).
        job: What a background compile needs to find the artifact again: ``package`` and
            ``file`` (the manifest record's file), ``sha256``, ``platform``; ``convention``
            ``"flat"`` for a family member's call (flat arrays in and out).
        lapack: Whether the artifact calls LAPACK: initialised before a cached executable runs.
        shipped: The wheel's precompiled executables of the artifact
            (``shipped.ShippedExecutables``), tried first; ``None`` for none.
        tiered, eager_lowerable, out_tree: The ``_compile_path.CompilePath``'s, for the
            signatures no shipped executable serves.
    """

    def __init__(self, make_jitted: Callable[[], Callable[..., Any]], job: dict[str, str],
                 tiered: bool | Callable[[], bool], lapack: bool, shipped: Any = None,
                 eager_lowerable: Callable[[Any], Callable[..., Any] | None] | None = None,
                 out_tree: Callable[[], Any] | None = None) -> None:
        self._make_jitted = make_jitted
        self._jitted: Callable[..., Any] | None = None
        self.job = job
        self.platform = job["platform"]
        self.shipped = shipped
        self.lapack = lapack
        self._path_options = (tiered, eager_lowerable, out_tree)
        self._built: CompilePath | None = None
        #: ``HATCH_JAXEXPORT_REPORT=1``: one line on stderr per first call of a signature.
        self.report = call_report_wanted()
        self.entries: dict[Any, Entry] = {}
        self.lock = threading.RLock()
        self.signature = CallSignatures()

    @property
    def folder(self) -> Any:
        """The executable cache's folder (``None``: no cache, or a fallback to the source)."""
        return self._compile_path().cache.folder

    def _compile_path(self) -> CompilePath:
        """The path of a signature no shipped executable serves, built at the first one."""
        if self._built is None:
            from hatch_jaxexport.runtime.executables._compile_path import CompilePath

            with self.lock:
                if self._built is None:
                    tiered, eager_lowerable, out_tree = self._path_options
                    self._built = CompilePath(self.job, self.lapack, tiered,
                                              lambda: self.jitted, eager_lowerable, out_tree)
        return self._built

    @property
    def jitted(self) -> Callable[..., Any]:
        jitted = self._jitted
        if jitted is None:
            with self.lock:
                if self._jitted is None:
                    self._jitted = self._make_jitted()
                jitted = self._jitted
        return jitted

    def member_calls(self) -> list[EagerCall]:
        """The eager calls of the transformations' members built so far (the vjp of a
        ``jax.grad``), where ``make_jitted`` keeps them (``artifact_calls.ArtifactJit``)."""
        return list(getattr(self._make_jitted, "members", ()))

    @property
    def tiers(self) -> dict[Any, str]:
        """Signature to tier: ``shipped``, ``cached``, ``compiled``, ``quick``, ``cached-quick``
        (a quick tier an earlier process compiled) or ``optimized``."""
        return {sig: entry.tier for sig, entry in self.entries.items()}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        sig = self.signature(args, kwargs)
        if sig is None:
            jitted = self.jitted
            if self.signature.any_tracer(args, kwargs):  # a transformation: each member alone
                jitted = getattr(jitted, "traced", jitted)
            with lapack_init_skipped(not self.lapack):
                return jitted(*args, **kwargs)
        entry = self.entries.get(sig)
        if entry is None or entry.seconds is None:  # new, or settled ahead (``prepare``) and
            return self._first_call(sig, args, kwargs)  # not yet run: timed and reported now
        if entry.pending is not None:
            entry = self._settle(sig, args, kwargs)
        out = entry.compiled(*args, **kwargs)
        if entry.unsaved:
            self._compile_path().cache.save(entry)
        return out

    def _first_call(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A signature's first call: settled, run, timed, reported (``HATCH_JAXEXPORT_REPORT``)
        and, if freshly compiled, written to the cache."""
        started = time.perf_counter()
        entry = self._settle(sig, args, kwargs)
        out = entry.compiled(*args, **kwargs)
        if entry.unsaved:  # before the report: a cache it cannot write is part of it
            self._compile_path().cache.save(entry)
        if entry.seconds is None:
            entry.seconds = time.perf_counter() - started
            if self.report:
                print(served_call(self.job, sig, entry).line(), file=sys.stderr, flush=True)
        return out

    def served_calls(self) -> list[ServedCall]:
        """How the first call of each signature this call has seen was served."""
        with self.lock:
            return [served_call(self.job, sig, e) for sig, e in self.entries.items()]

    def prepare(self, args: tuple[Any, ...]) -> None:
        """Settle the executable of a call to come, with these positional arguments (concrete
        arrays or ``jax.ShapeDtypeStruct``s): shipped, cached or compiled now, e.g. in a thread
        while another compile runs. A later call of the same types finds it."""
        sig = self.signature(args, {})
        if sig is not None and sig not in self.entries:
            self._settle(sig, args, {})

    def settled(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
        """The final executable for this call's signature (``None`` while a tier is pending)."""
        compiled = self._final(args, kwargs)
        return None if compiled is None else compiled_dispatch(compiled)

    def settled_by_position(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
        """Like ``settled``, but taking ``kwargs``'s values positionally after ``args``, in
        their order (``compiled_by_position``); ``None`` where it cannot."""
        compiled = self._final(args, kwargs)
        twin = None if compiled is None else compiled_by_position(compiled, tuple(kwargs))
        return None if twin is None else compiled_dispatch(twin)

    def _final(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
        """The compiled executable of this call's signature, once no tier is pending."""
        sig = self.signature(args, kwargs)
        entry = self.entries.get(sig) if sig is not None else None
        return None if entry is None or entry.pending is not None else entry.compiled

    def _settle(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Entry:
        """The signature's entry: known, its pending tier polled, or found in the order the
        module docstring gives (under the lock)."""
        with self.lock:
            entry = self.entries.get(sig)
            if entry is not None:
                if entry.pending is not None:  # only a quick tier is pending
                    entry = self.entries[sig] = self._compile_path().quick.poll(entry)
                return entry
            not_shipped = "the wheel ships no executable of this artifact"
            if self.shipped is not None:
                compiled = self.shipped.compiled_for(artifact_types(sig)[1],
                                                     self.signature.flatten((args, kwargs))[1])
                if compiled is not None:
                    if self.lapack:
                        initialize_lapack()
                    entry = self.entries[sig] = Entry(compiled, "shipped", None)
                    return entry
                not_shipped = self.shipped.why_not(artifact_types(sig)[1])
            entry = self._compile_path().entry(sig, args, kwargs,
                                               self.signature.flatten((args, kwargs))[1])
            entry.not_shipped = not_shipped
            self.entries[sig] = entry
            return entry

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for background compiles (queued ones too) and switch to their executables
        (tests, benchmarks); ``True`` if none is left pending."""
        if self._built is None:  # no signature compiled here: none is pending
            return True
        return self._built.quick.wait(self.entries, self.lock, timeout)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted.lower(*args, **kwargs)  # type: ignore[attr-defined]


__all__ = ["EagerCall"]
