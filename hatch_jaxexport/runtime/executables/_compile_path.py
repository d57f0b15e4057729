"""Where the executable of a signature no shipped executable serves comes from.

``EagerCall`` tries the wheel's shipped executables first; for a signature they do not serve,
it builds one ``CompilePath``, which tries, in order, the per-user executable cache
(``_user_cache``), the quick tier with its background compile (``tiers``) and a compile here
(``_fresh_compile``). It is a module of its own so that a first call a shipped executable
serves imports none of them (seven modules with the background compiles and the cache's
files, about 1.3 ms: ``benchmarks/first_call_parts.py``'s "our modules").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hatch_jaxexport.runtime.executables._fresh_compile import FreshCompile
from hatch_jaxexport.runtime.executables._user_cache import UserCache
from hatch_jaxexport.runtime.executables.entries import Entry
from hatch_jaxexport.runtime.executables.tiers import QuickTier


class CompilePath:
    """The executable cache, the quick tier and the compiler of one ``EagerCall``.

    Args:
        job: The eager call's job (``EagerCall``).
        lapack: Whether the artifact calls LAPACK.
        tiered: Whether first calls use a quick tier, or a function that decides it
            (``tiers.tiering_wanted``); no tier without a cache folder it can write.
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
        wanted = tiered() if callable(tiered) else tiered
        self.tiered = wanted and self.cache.folder is not None and self.cache.writable
        self.quick = QuickTier(self.cache, job)
        self.compiler = FreshCompile(jitted, eager_lowerable, lapack)

    def entry(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any], in_tree: Any
              ) -> Entry:
        """The signature's entry: cached on this machine, a quick tier, or compiled here."""
        key, entry = self.cache.cached(sig, self.tiered, in_tree)
        if entry is None and self.tiered and key is not None:
            compiler = self.compiler
            return self.quick.entry(sig, key, lambda: compiler.lower(sig, args, kwargs),
                                    in_tree)
        if entry is None:
            lowered = self.compiler.lower(sig, args, kwargs)  # may find the source instead
            entry = self.compiler.entry(lowered, key if self.cache.folder is not None
                                        else None)
        return entry


__all__ = ["CompilePath"]
