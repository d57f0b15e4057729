"""A family of baked artifacts: what each member computes, and the container a loader fills.

A *family* is everything baked for one function x structure x static values x platform: the
primal and its companions, each an ``Exported`` over flat arrays (``export_spec.KINDS_BY_ORDER``),
optionally also exported from ``jax.vmap`` with a symbolic batch size. Companions and their
meaning, where ``x`` are the primal inputs, ``t``/``u`` tangents of the differentiable
(inexact) inputs and ``c`` cotangents of the differentiable outputs:

- ``primal(x) -> y``
- ``jvp(x, t) -> J t``                      (linear in t; transposes to vjp)
- ``vjp(x, c) -> J^T c``                    (linear in c; transposes to jvp)
- ``jvp_jvp(x, t, u) -> f''[t, u]``         (bilinear; transposes to vjp_jvp)
- ``vjp_jvp(x, c, u) -> (sum_k c_k f_k'') u``  (bilinear; transposes to jvp_jvp)

The build exports each member from the definitions here (``member_function``); at run time a
``Family`` holds the members that were baked, reads them on first use and deserializes them
only where an ``Exported`` is needed, and evaluates a member that was not baked (third order,
``ad_order`` too low, a skipped export) from the source, with a ``FallbackWarning``
(``ArtifactError`` in strict mode). The JAX primitive that maps each transformation to another
member lives in ``runtime/artifacts/primitive.py``; this module imports no jax at import time,
because the build orchestrator and its workers import it before jax is checked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hatch_jaxexport.formats.dimensions import BATCH_SYMBOL, typed_outputs

# Imported in functions: the errors and notices of a missing member, only when one is missing.

def option_advice(kind: str, vjp_baked: bool) -> str:
    """What to set in ``@exportable`` so that the build bakes ``kind`` (a ``jvp`` needed
    while no ``vjp`` was baked may be reverse mode, which ``vjp_order`` serves too)."""
    if kind == "jvp" and vjp_baked:
        return "set ad_order=1 in @exportable(...)"
    if kind in ("jvp", "vjp"):
        return "set ad_order=1 (or vjp_order=1 for reverse mode only) in @exportable(...)"
    if kind == "jvp_jvp":
        return "set ad_order=2 in @exportable(...)"
    return "set ad_order=2 (or vjp_order=2 for reverse mode only) in @exportable(...)"


# --------------------------------------------------------------------------------------------
# The members of a family, defined from a flat primal function (used to export them at build
# time and to evaluate missing ones from source at run time).


def inexact_indices(dtypes: Sequence[Any]) -> tuple[int, ...]:
    """Positions of the differentiable (floating or complex) entries."""
    import jax.numpy as jnp

    return tuple(i for i, d in enumerate(dtypes) if jnp.issubdtype(d, jnp.inexact))


def on_inexact(f_flat: Callable[..., Sequence[Any]], x: Sequence[Any], din: Sequence[int],
               dout: Sequence[int] | None = None) -> Callable[..., tuple[Any, ...]]:
    """``f_flat`` as a function of its differentiable inputs ``din`` alone, the others fixed at
    their values in ``x``, returning the outputs ``dout`` (all of them when ``None``): what
    ``jax.jvp``/``jax.vjp`` differentiate, since integer inputs and outputs have no tangents."""
    def restricted(*xd: Any) -> tuple[Any, ...]:
        full = list(x)
        for i, value in zip(din, xd, strict=True):
            full[i] = value
        out = f_flat(*full)
        return tuple(out) if dout is None else tuple(out[j] for j in dout)
    return restricted


def member_function(kind: str, f_flat: Callable[..., tuple[Any, ...]], n_in: int,
                    din: tuple[int, ...], dout: tuple[int, ...]) -> Callable[..., tuple[Any, ...]]:
    """The flat function a family member computes, built from the flat primal ``f_flat``."""
    import jax

    nd = len(din)

    def jvp(*a: Any) -> tuple[Any, ...]:
        x, t = a[:n_in], a[n_in:n_in + nd]
        primals = tuple(x[i] for i in din)
        return tuple(jax.jvp(on_inexact(f_flat, x, din, dout), primals, tuple(t))[1])

    def vjp(*a: Any) -> tuple[Any, ...]:
        x, c = a[:n_in], a[n_in:]
        _, pull = jax.vjp(on_inexact(f_flat, x, din, dout), *(x[i] for i in din))
        return tuple(pull(tuple(c)))

    def second(first: Callable[..., tuple[Any, ...]], n_mid: int) -> Callable[..., Any]:
        def member(*a: Any) -> tuple[Any, ...]:
            x, mid, u = a[:n_in], a[n_in:n_in + n_mid], a[n_in + n_mid:]
            inner = on_inexact(lambda *full: first(*full, *mid), x, din)
            return tuple(jax.jvp(inner, tuple(x[i] for i in din), tuple(u))[1])
        return member

    if kind == "primal":
        return lambda *x: tuple(f_flat(*x))
    if kind == "jvp":
        return jvp
    if kind == "vjp":
        return vjp
    if kind == "jvp_jvp":
        return second(jvp, nd)
    if kind == "vjp_jvp":
        return second(vjp, len(dout))
    raise ValueError(f"unknown family member {kind!r}")


def source_call(fn: Any, structure_index: int, static: dict[str, Any]) -> Callable[..., Any]:
    """The source of an ``ExportableFunction``, called like its artifact: the static values
    bound, the other arguments in the structure's layout."""
    layout = fn.layouts[structure_index]
    positional = [n for n in layout.positional if n not in static]

    def source(*args: Any, **kwargs: Any) -> Any:
        values = {**dict(zip(positional, args, strict=True)), **kwargs, **static}
        call_args, call_kwargs = layout.split(values)
        return fn.__wrapped__(*call_args, **call_kwargs)
    return source


def source_flat(fn: Any, structure_index: int, static: dict[str, Any], in_tree: Any
                ) -> Callable[..., tuple[Any, ...]]:
    """The source of an ``ExportableFunction`` as a flat function over the primal's inputs."""
    import jax

    source = source_call(fn, structure_index, static)

    def f_flat(*flat: Any) -> tuple[Any, ...]:
        args, kwargs = jax.tree_util.tree_unflatten(in_tree, flat)
        return tuple(jax.tree_util.tree_leaves(source(*args, **kwargs)))
    return f_flat


def member_avals(kind: str, in_avals: Sequence[Any], out_avals: Sequence[Any],
                 din: tuple[int, ...], dout: tuple[int, ...]) -> list[Any]:
    """The flat input avals of a member, from the primal's input and output avals."""
    x = list(in_avals)
    t = [in_avals[i] for i in din]
    c = [out_avals[j] for j in dout]
    return {"primal": x, "jvp": x + t, "vjp": x + c, "jvp_jvp": x + t + t,
            "vjp_jvp": x + c + t}[kind]


def batched_aval(text: str) -> str:
    """A type as the manifest writes it for a member exported from ``jax.vmap``: the batch
    dimension first (``float32[n]`` -> ``float32[jxe_batch,n]``)."""
    dtype, _, rest = text.partition("[")
    return f"{dtype}[{BATCH_SYMBOL}{'' if rest == ']' else ','}{rest}"


def members_agree(in_avals: Sequence[str], out_avals: Sequence[str],
                  members: Mapping[tuple[str, bool], tuple[Sequence[str], Sequence[str]]],
                  din: tuple[int, ...], dout: tuple[int, ...]) -> bool:
    """Whether each member's manifest types (``members``: inputs and outputs by member) are
    those its definition gives from the primal's (``member_avals``).

    The manifest says a family's types several times over, so a record whose text was
    damaged disagrees with the others: the loader then types the family from its
    ``Exported`` instead of trusting the text."""
    for (kind, batched), (member_in, member_out) in members.items():
        x = [batched_aval(t) for t in in_avals] if batched else list(in_avals)
        y = [batched_aval(t) for t in out_avals] if batched else list(out_avals)
        differentiable_in, differentiable_out = [x[i] for i in din], [y[j] for j in dout]
        outs = {"primal": y, "jvp": differentiable_out, "jvp_jvp": differentiable_out,
                "vjp": differentiable_in, "vjp_jvp": differentiable_in}.get(kind)
        if outs is None or list(member_out) != outs or \
                list(member_in) != member_avals(kind, x, y, din, dout):
            return False
    return True


# --------------------------------------------------------------------------------------------
# The family


def flat_call(exported: Any) -> Callable[..., list[Any]]:
    """``exported``'s call on its flat inputs, returning its flat outputs as a list: the
    convention of a family's members (the primitive binds flat values, with many results)."""
    import jax

    def call(*flat: Any) -> list[Any]:
        args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, flat)
        return jax.tree_util.tree_leaves(exported.call(*args, **kwargs))
    return call


class Family:
    """The baked members of one artifact family, plus the source to fall back on.

    The primitive's rules (``runtime/artifacts/primitive.py``) ask it whether a member is usable
    (``has``), for a flat callable of a member's ``Exported`` (``exported_call``) and for the
    member evaluated from source (``source``). A member is *read* on first use (its blob,
    checked against the manifest's hash: most calls never differentiate or batch) and
    *deserialized* only where something needs its ``Exported``: an eager call served by a
    shipped or cached executable never does, and the primal's output types come from the
    manifest's text where it says them exactly (``primal_out_types``).

    A ``jvp`` that was not baked while its partner ``vjp`` was (``vjp_order`` without
    ``ad_order``) is *transposable* (``transposable``): the primitive binds it all the same,
    since reverse mode only ever transposes it into the baked ``vjp``; only evaluating it
    (forward mode) needs the source. ``wanted`` are the members the options asked for: a
    missing one of them was skipped at build time, any other one needs an option set.
    """

    def __init__(self, name: str, programs: dict[tuple[str, bool], Any], in_tree: Any,
                 out_tree: Any, in_dtypes: Sequence[Any], out_dtypes: Sequence[Any],
                 source_flat: Callable[..., tuple[Any, ...]],
                 on_missing: Callable[[str], None],
                 lapack_free: frozenset[tuple[str, bool]] = frozenset(),
                 loaders: dict[tuple[str, bool], Callable[[], Any]] | None = None,
                 wanted: frozenset[str] = frozenset(),
                 eager: Callable[[tuple[str, bool], Callable[[], Any]], Any] | None = None,
                 sharded: bool = False,
                 primal_avals: dict[bool, tuple[Sequence[str], Sequence[str]]] | None = None,
                 ) -> None:
        self.name = name
        #: (kind, batched) -> the member's program: its checked blob, with an ``exported()``
        #: that deserializes it once (``artifacts.program.ArtifactProgram``).
        self.programs = programs
        self.loaders = dict(loaders or {})  # members read on first use: their programs
        self.broken: dict[tuple[str, bool], str] = {}  # members that failed to load, and why
        self.in_tree, self.out_tree = in_tree, out_tree
        self.n_in = len(in_dtypes)
        self.din = inexact_indices(in_dtypes)
        self.dout = inexact_indices(out_dtypes)
        self.source_flat = source_flat
        self.on_missing = on_missing
        self.lapack_free = lapack_free  # members whose modules hold no LAPACK call
        self.wanted = wanted
        #: Makes the eager call of a baked member from ``(kind, batched)`` and a builder of its
        #: ``jax.jit``: the loader's, through shipped and cached executables; ``None``: the
        #: ``jax.jit`` itself.
        self.eager = eager
        #: A sharded variant's: its outputs' shardings can be types (``placement``).
        self.sharded = sharded
        #: batched -> the primal's manifest types (``in_avals``, ``out_avals``).
        self.primal_avals = dict(primal_avals or {})
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Family({self.name})"

    def has(self, kind: str, batched: bool) -> bool:
        """Whether the member is baked and usable (reading and checking its blob on first
        use)."""
        key = (kind, batched)
        if key in self.programs:
            return True
        with self._lock:
            loader = self.loaders.pop(key, None)
            if loader is None:
                return key in self.programs
            from hatch_jaxexport.errors import ArtifactError

            try:
                self.programs[key] = loader()
            except ArtifactError as err:
                self.broken[key] = str(err)  # reported by ``source`` when it is needed
                return False
            return True

    def exported(self, kind: str, batched: bool) -> Any | None:
        """The member's ``Exported``, deserialized once; ``None`` where jax cannot read a blob
        that passed its hash (the member is unusable from then on: ``has`` is false and
        ``source`` says why). The primal's own ``UnreadableArtifact`` is raised: the artifact
        as a whole is unusable, and the loader gives way to the source for good."""
        program = self.programs.get((kind, batched))
        if program is None:
            return None
        from hatch_jaxexport.errors import ArtifactError

        try:
            return program.exported()
        except ArtifactError as err:
            with self._lock:
                self.broken[(kind, batched)] = str(err)
                self.programs.pop((kind, batched), None)
            if (kind, batched) == ("primal", False):
                raise
            return None

    def deferred(self, kind: str, batched: bool) -> bool:
        """Whether ``kind`` is a baked ``jvp`` not read yet, which the primitive binds as it
        is: reverse mode (an eager ``jax.grad``) only types it, from the primal, and
        transposes it into the ``vjp``; it is read where it is evaluated (forward mode,
        ``has``), and a damaged one is found and reported there."""
        return kind == "jvp" and (kind, batched) in self.loaders and self.has("primal", batched)

    def typed_from_primal(self, kind: str, batched: bool) -> bool:
        """Whether a bound member's types are the primal's differentiable outputs: a ``jvp``
        not read (``deferred``, or ``transposable``: not baked, or damaged)."""
        return kind == "jvp" and (kind, batched) not in self.programs

    def transposable(self, kind: str, batched: bool) -> bool:
        """Whether ``kind`` is a ``jvp`` that was not baked but can be bound for reverse mode,
        its transpose (the ``vjp``) and the primal that types it being baked."""
        return kind == "jvp" and not self.has(kind, batched) and \
            self.has("vjp", batched) and self.has("primal", batched)

    def primal_out_types(self, batched: bool, in_types: Sequence[tuple[tuple[int, ...], str]]
                         ) -> list[tuple[tuple[int, ...], str]] | None:
        """The primal's output types (shape, dtype name) at ``in_types``, from the manifest's
        text (``formats.dimensions.typed_outputs``); ``None`` where it does not say exactly."""
        avals = self.primal_avals.get(batched)
        if avals is None:
            return None
        return typed_outputs(avals[0], avals[1], in_types)

    def exported_call(self, kind: str, batched: bool) -> Callable[..., list[Any]]:
        """A flat callable running the member's ``Exported``; the member evaluated from
        source where jax cannot read its blob (``exported``), as ``source`` tells."""
        exported = self.exported(kind, batched)
        if exported is None:
            return self.source(kind, batched, "this call")
        return flat_call(exported)

    def source(self, kind: str, batched: bool, why: str, reason: str | None = None
               ) -> Callable[..., Any]:
        """The member evaluated from source (a transformation no artifact covers)."""
        import jax

        member = f"{'batched ' if batched else ''}{kind} artifact"
        broken = self.broken.get((kind, batched))
        advice = "" if kind in self.wanted or kind == "primal" else \
            f"; {option_advice(kind, self.has('vjp', batched))}"
        self.on_missing(reason or (f"{why} needs the {member}, which is unusable: {broken}"
                                   if broken else
                                   f"{why} needs the {member}, which was not baked{advice}"))
        fn = member_function(kind, self.source_flat, self.n_in, self.din, self.dout)
        return jax.vmap(fn) if batched else fn


def warn_or_raise(name: str, strict: bool) -> Callable[[str], None]:
    """The ``on_missing`` callback of a family: a one-time notice (``runtime.notices``), or
    ``ArtifactError``."""
    from hatch_jaxexport.errors import ArtifactError, FallbackWarning

    seen: set[str] = set()

    def on_missing(why: str) -> None:
        if strict:
            raise ArtifactError(f"{name}: {why} (HATCH_JAXEXPORT_STRICT is set)")
        if why not in seen:
            seen.add(why)
            from hatch_jaxexport.runtime.notices import notify  # only once a member is missing

            notify(f"{name}: tracing the source: {why}", FallbackWarning)
    return on_missing


__all__ = ["BATCH_SYMBOL", "Family", "batched_aval", "flat_call", "inexact_indices",
           "member_avals", "member_function", "members_agree", "on_inexact", "option_advice",
           "source_call", "source_flat", "warn_or_raise"]
