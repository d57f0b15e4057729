"""Where a signature's executable comes from, last: lowered and compiled in this process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hatch_jaxexport.runtime.executables import _executable_cache as executables
from hatch_jaxexport.runtime.executables.entries import JAX_CACHE_SERVED, NO_CACHE, Entry
from hatch_jaxexport.runtime.jaxcompat import lapack_init_skipped


class FreshCompile:
    """Lowers an eager call of one artifact and compiles it (optimized), to be cached once it
    has run.

    Args:
        jitted: Gives the ``jax.jit`` function of the artifact (built lazily).
        eager_lowerable: Given a signature's flat argument types (``((dims...), dtype)``
            each), what its eager first call lowers where that can be simpler than
            ``jitted()`` (``EagerCall``'s argument of that name); ``None``: ``jitted()``.
        lapack: Whether the artifact calls LAPACK: without it, lowering skips the
            initialisation (``jaxcompat``).
    """

    def __init__(self, jitted: Callable[[], Any],
                 eager_lowerable: Callable[[Any], Callable[..., Any] | None] | None,
                 lapack: bool) -> None:
        self._jitted, self._eager_lowerable, self.lapack = jitted, eager_lowerable, lapack

    def lower(self, sig: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The eager call of signature ``sig`` lowered for these arguments."""
        types = tuple((shape, dtype) for shape, dtype, _ in sig[1])
        direct = self._eager_lowerable(types) if self._eager_lowerable is not None else None
        with lapack_init_skipped(not self.lapack):
            return (direct or self._jitted()).lower(*args, **kwargs)

    @staticmethod
    def entry(lowered: Any, key: str | None) -> Entry:
        """The optimized executable of ``lowered``, to be saved under ``key`` once run
        (``None``: never, there is no executable cache), with why it is not where it cannot."""
        compiled, fresh = executables.compile_fresh(lowered)
        entry = Entry(compiled, "compiled", key, save_key=key if fresh else None)
        entry.not_cached = NO_CACHE if key is None else None if fresh else JAX_CACHE_SERVED
        return entry



__all__ = ["FreshCompile"]
