"""Where the executable of a signature no shipped executable serves comes from.

``EagerCall`` tries the wheel's shipped executables first; for a signature they do not serve,
it builds one ``CompilePath``, which tries, in order, the per-user executable cache
(``_user_cache``), the quick tier with its background compile (``tiers``) and a compile here
(``_fresh_compile``). It is a module of its own so that a first call a shipped executable
serves imports none of them (seven modules with the background compiles and the cache's
files, about 1.3 ms: ``benchmarks/first_call_parts.py``'s "our modules"); and a signature
the cache serves imports neither the tiers, their policy nor the compiler (seven modules: on a
host whose file system calls are slow, such as the TPU machine this project measures on, 0.9 ms
each).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.runtime.executables._user_cache import UserCache
from hatch_jaxexport.runtime.executables.entries import Entry

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.executables._fresh_compile import FreshCompile
    from hatch_jaxexport.runtime.executables.tiers import QuickTier

# Imported in functions: the quick tier and the compiler, at the first signature the cache
# does not serve (the tiering policy too, through ``tiered``: ``artifact_calls._tiering``).


class CompilePath:
    """The executable cache, the quick tier and the compiler of one ``EagerCall``.

    Args:
        job: The eager call's job (``EagerCall``).
        lapack: Whether the artifact calls LAPACK.
        tiered: Whether first calls use a quick tier, or a function that decides it
            (``tier_policy.tiering_wanted``); no tier without a cache folder it can write.
        jitted: Gives the eager call's ``jax.jit`` function (built on first need).
        eager_lowerable: What a first call lowers instead of that function, where it can
            (``FreshCompile``).
        out_tree: The artifact's output tree (``UserCache``).
    """

    def __init__(self, job: dict[str, str], lapack: bool, tiered: bool | Callable[[], bool],
                 jitted: Callable[[], Callable[..., Any]],
                 eager_lowerable: Callable[[Any], Callable[..., Any] | None] | None,
                 out_tree: Callable[[], Any] | None) -> None:
        self.cache = UserCache(job, lapack, out_tree)
        self._tiered = tiered
        self.job, self.lapack, self.jitted = job, lapack, jitted
        self.eager_lowerable = eager_lowerable
        self._quick: QuickTier | None = None
        self._compiler: FreshCompile | None = None

    @property
    def tiered(self) -> bool:
        """Whether a signature the cache lacks gets a quick tier, decided at the first such
        signature (``tier_policy``, imported then: a signature the cache serves never asks)."""
        if callable(self._tiered):
            self._tiered = self._tiered()
        return bool(self._tiered) and self.cache.folder is not None and self.cache.writable

    @property
    def quick(self) -> QuickTier:
        """The quick tier of this call's signatures, made at the first that needs one."""
        if self._quick is None:
            from hatch_jaxexport.runtime.executables.tiers import QuickTier

            self._quick = QuickTier(self.cache, self.job)
        return self._quick

    @property
    def compiler(self) -> FreshCompile:
        """The compiler of this call's signatures, made at the first the cache lacks."""
        if self._compiler is None:
            from hatch_jaxexport.runtime.executables._fresh_compile import FreshCompile

            self._compiler = FreshCompile(self.jitted, self.eager_lowerable, self.lapack)
        return self._compiler

    def entry(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any], in_tree: Any
              ) -> Entry:
        """The signature's entry: cached on this machine, a quick tier, or compiled here."""
        key, entry = self.cache.cached(sig, in_tree)
        if entry is None and key is not None and self.tiered:
            compiler = self.compiler
            return self.quick.entry(sig, key, lambda: compiler.lower(sig, args, kwargs),
                                    in_tree)
        if entry is None:
            lowered = self.compiler.lower(sig, args, kwargs)  # may find the source instead
            entry = self.compiler.entry(lowered, key if self.cache.folder is not None
                                        else None)
        return entry


__all__ = ["CompilePath"]
