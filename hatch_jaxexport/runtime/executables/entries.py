"""What an ``EagerCall`` keeps per call signature, and how it reads a call's signature.

A signature is the call's tree and, per leaf, its shape, dtype and weak type: the key of
one compiled executable. ``Entry`` is that executable with where it came from (its tier) and
the compile still on its way; ``ServedCall`` is how its first call was served, for
``call_report()`` and ``HATCH_JAXEXPORT_REPORT``.
"""

from typing import Any

from hatch_jaxexport.formats.records import Record
from hatch_jaxexport.runtime.jaxcompat import concrete_array_type

# Imported in functions: the manifest's texts, only when a call is reported.

#: Why an executable is not cached: the executable cache is off.
NO_CACHE = "the executable cache is off (HATCH_JAXEXPORT_CACHE=0, or no cache folder)"
#: Why an executable is not cached: jax's persistent compilation cache served the compile, and
#: such an executable does not serialize whole; that cache serves the next process instead.
JAX_CACHE_SERVED = ("jax's persistent compilation cache served its compile (such an "
                    "executable does not serialize whole); that cache serves the next process")


class Entry:
    """A signature's executable: its tier, the optimized key, the compile in flight
    (``pending``, a ``tiers.Pending``), and the key it is still to be written under once it
    has run (``save_key``: a fresh compile)."""

    def __init__(self, compiled: Any, tier: str, key: str | None = None,
                 pending: Any = None, save_key: str | None = None,
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
        #: The call's input tree: what an optimized entry whose trees name the package's
        #: classes is read back with (``UserCache.load``).
        self.in_tree: Any = None
        #: Why a later process will not find this executable in the executable cache
        #: (``None``: it read it from there, or it is written there).
        self.not_cached: str | None = None


# ``ServedCall`` is a ``Record`` (``formats.records``), not a NamedTuple, whose class would
# compile a ``__new__`` on a first call (``formats.manifest`` says the same of its records).


class ServedCall(Record):
    """How the first eager call of one signature was served (``ExportableFunction.call_report``).

    ``tier`` is ``shipped`` (the wheel's precompiled executable), ``cached`` (the per-user
    executable cache), ``compiled`` (the StableHLO compiled in this process), ``quick`` or
    ``cached-quick`` (tiered compilation's quick executable, the optimized one on its way),
    ``optimized`` (that one, once in) or ``traced`` (no usable artifact: the source).
    """

    __slots__ = ()

    function: str
    signature: str
    tier: str
    #: Seconds of the first call of this signature; ``None`` where not measured (``traced``).
    seconds: float | None
    #: Why no shipped executable served it; ``None`` when one did.
    not_shipped: str | None
    #: Which of the function's artifacts: ``(mode='max')`` for its static values, `` vjp``
    #: for the member of a transformation; ``""`` for the primal of a function without.
    label: str = ""
    #: Why a later process will not find its executable in the executable cache (``None``:
    #: it is there, or was read from there).
    not_cached: str | None = None

    def line(self) -> str:
        """``hatch-jaxexport: mypkg:f(mode='max') float32[4] shipped in 12.3 ms``; a ``traced``
        call's line ends with why the source ran."""
        took = "" if self.seconds is None else f" in {self.seconds * 1e3:.1f} ms"
        why = "" if not self.not_shipped else f" ({self.not_shipped})" if self.tier == "traced" \
            else f" (no shipped executable: {self.not_shipped})"
        uncached = f" (not cached for the next process: {self.not_cached})" \
            if self.not_cached else ""
        return (f"hatch-jaxexport: {self.function}{self.label} {self.signature} "
                f"{self.tier}{took}{why}{uncached}")


def served_call(job: dict[str, str], sig: Any, entry: Entry) -> ServedCall:
    """How ``entry``, the executable of signature ``sig`` of ``job``'s artifact, served its
    first call."""
    from hatch_jaxexport.formats.manifest import signature_text

    types = signature_text([[list(shape), dtype] for shape, dtype, _ in sig[1]])
    return ServedCall(job.get("function", "?"), types, entry.tier, entry.seconds,
                      entry.not_shipped, job.get("label", ""), entry.not_cached)


class CallSignatures:
    """Reads a call's signature: ``(str(treedef), ((shape, dtype, weak), ...))``, ``None``
    unless every leaf is a concrete array (the types it compares are looked up once)."""

    def __init__(self) -> None:
        import jax
        import numpy as np

        self.flatten = jax.tree_util.tree_flatten
        self._canonical = jax.dtypes.canonicalize_dtype
        self._array, self._ndarray, self._scalar = concrete_array_type(), np.ndarray, np.generic
        self._tracer = jax.core.Tracer
        self._shape_dtype = jax.ShapeDtypeStruct

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        leaves, treedef = self.flatten((args, kwargs))
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

    def any_tracer(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a transformation or ``jax.jit`` traces this call."""
        return any(isinstance(leaf, self._tracer) for leaf in self.flatten((args, kwargs))[0])


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


__all__ = ["JAX_CACHE_SERVED", "NO_CACHE", "CallSignatures", "Entry", "ServedCall",
           "artifact_types", "served_call"]
