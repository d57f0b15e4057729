"""Loaded functions as full JAX citizens: one primitive over a family of baked artifacts.

A *family* is everything baked for one function x structure x static values x platform: the
primal and its companions, each an ``Exported`` over flat arrays (``KINDS_BY_ORDER``),
optionally also exported from ``jax.vmap`` with a symbolic batch size. Companions and their
meaning, where ``x`` are the primal inputs, ``t``/``u`` tangents of the differentiable
(inexact) inputs and ``c`` cotangents of the differentiable outputs:

- ``primal(x) -> y``
- ``jvp(x, t) -> J t``                      (linear in t; transposes to vjp)
- ``vjp(x, c) -> J^T c``                    (linear in c; transposes to jvp)
- ``jvp_jvp(x, t, u) -> f''[t, u]``         (bilinear; transposes to vjp_jvp)
- ``vjp_jvp(x, c, u) -> (sum_k c_k f_k'') u``  (bilinear; transposes to jvp_jvp)

The primitive's JVP, transpose and batching rules map each transformation to another member of
the family. Where a member was not baked (third order, ``ad_order`` too low, a skipped export)
the rule evaluates the same member from the source with a ``FallbackWarning`` (``ArtifactError``
in strict mode). Batching without a batched artifact runs sequentially (``lax.map``).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

KINDS_BY_ORDER = {0: ("primal",), 1: ("primal", "jvp", "vjp"),
                  2: ("primal", "jvp", "vjp", "jvp_jvp", "vjp_jvp")}
#: The symbol of the batch dimension of batched artifacts.
BATCH_SYMBOL = "jxe_batch"


# --------------------------------------------------------------------------------------------
# The members of a family, defined from a flat primal function (used to export them at build
# time and to evaluate missing ones from source at run time).


def inexact_indices(dtypes: Sequence[Any]) -> tuple[int, ...]:
    """Positions of the differentiable (floating or complex) entries."""
    import jax.numpy as jnp

    return tuple(i for i, d in enumerate(dtypes) if jnp.issubdtype(d, jnp.inexact))


def member_function(kind: str, f_flat: Callable[..., tuple[Any, ...]], n_in: int,
                    din: tuple[int, ...], dout: tuple[int, ...]) -> Callable[..., tuple[Any, ...]]:
    """The flat function a family member computes, built from the flat primal ``f_flat``."""
    import jax

    nd = len(din)

    def restricted(x: Sequence[Any]) -> Callable[..., tuple[Any, ...]]:
        def g(*xd: Any) -> tuple[Any, ...]:
            full = list(x)
            for i, value in zip(din, xd, strict=True):
                full[i] = value
            out = f_flat(*full)
            return tuple(out[j] for j in dout)
        return g

    def jvp(*a: Any) -> tuple[Any, ...]:
        x, t = a[:n_in], a[n_in:n_in + nd]
        return tuple(jax.jvp(restricted(x), tuple(x[i] for i in din), tuple(t))[1])

    def vjp(*a: Any) -> tuple[Any, ...]:
        x, c = a[:n_in], a[n_in:]
        _, pull = jax.vjp(restricted(x), *(x[i] for i in din))
        return tuple(pull(tuple(c)))

    def second(first: Callable[..., tuple[Any, ...]], n_mid: int) -> Callable[..., Any]:
        def member(*a: Any) -> tuple[Any, ...]:
            x, mid, u = a[:n_in], a[n_in:n_in + n_mid], a[n_in + n_mid:]

            def inner(*xd: Any) -> tuple[Any, ...]:
                full = list(x)
                for i, value in zip(din, xd, strict=True):
                    full[i] = value
                return first(*full, *mid)
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


# --------------------------------------------------------------------------------------------
# The family and its primitive


class Family:
    """The baked members of one artifact family, plus the source to fall back on."""

    def __init__(self, name: str, members: dict[tuple[str, bool], Any], in_tree: Any,
                 out_tree: Any, in_dtypes: Sequence[Any], out_dtypes: Sequence[Any],
                 source_flat: Callable[..., tuple[Any, ...]],
                 on_missing: Callable[[str], None],
                 lapack_free: frozenset[tuple[str, bool]] = frozenset(),
                 loaders: dict[tuple[str, bool], Callable[[], Any]] | None = None) -> None:
        self.name = name
        self.members = members  # (kind, batched) -> Exported
        self.loaders = dict(loaders or {})  # members deserialized on first use
        self.broken: dict[tuple[str, bool], str] = {}  # members that failed to load, and why
        self.in_tree, self.out_tree = in_tree, out_tree
        self.n_in = len(in_dtypes)
        self.din = inexact_indices(in_dtypes)
        self.dout = inexact_indices(out_dtypes)
        self.source_flat = source_flat
        self.on_missing = on_missing
        self.lapack_free = lapack_free  # members whose modules hold no LAPACK call
        self._jitted: dict[tuple[str, bool], Callable[..., Any]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Family({self.name})"

    def has(self, kind: str, batched: bool) -> bool:
        """Whether the member is baked and usable (deserializing it on first use)."""
        key = (kind, batched)
        if key in self.members:
            return True
        with self._lock:
            loader = self.loaders.pop(key, None)
            if loader is None:
                return key in self.members
            from hatch_jaxexport.errors import ArtifactError

            try:
                self.members[key] = loader()
            except ArtifactError as err:
                self.broken[key] = str(err)  # reported by ``source`` when it is needed
                return False
            return True

    def exported_call(self, kind: str, batched: bool) -> Callable[..., list[Any]]:
        """A flat callable running the member's ``Exported``."""
        import jax

        exported = self.members[(kind, batched)]

        def call(*flat: Any) -> list[Any]:
            args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, flat)
            return jax.tree_util.tree_leaves(exported.call(*args, **kwargs))
        return call

    def source(self, kind: str, batched: bool, why: str, reason: str | None = None
               ) -> Callable[..., Any]:
        """The member evaluated from source (a transformation no artifact covers)."""
        import jax

        member = f"{'batched ' if batched else ''}{kind} artifact"
        broken = self.broken.get((kind, batched))
        self.on_missing(reason or (f"{why} needs the {member}, which is unusable: {broken}"
                                   if broken else f"{why} needs the {member}, which was not baked"))
        fn = member_function(kind, self.source_flat, self.n_in, self.din, self.dout)
        return jax.vmap(fn) if batched else fn

    def call(self, kind: str, batched: bool, args: Sequence[Any], why: str) -> list[Any]:
        """Evaluate a member: bind the primitive where baked, else trace the source."""
        if self.has(kind, batched):
            return list(exported_call_p.bind(*args, family=self, kind=kind, batched=batched))
        return list(self.source(kind, batched, why)(*args))

    def jitted_primal(self) -> Callable[..., Any]:
        """The structured primal call: ``jax.jit`` over the primitive (steady-state fast)."""
        import jax

        with self._lock:
            fn = self._jitted.get(("primal", False))
            if fn is None:
                def primal(*args: Any, **kwargs: Any) -> Any:
                    flat = jax.tree_util.tree_leaves((args, kwargs))
                    outs = self.call("primal", False, flat, "calling the function")
                    return jax.tree_util.tree_unflatten(self.out_tree, outs)
                fn = self._jitted[("primal", False)] = jax.jit(primal)
            return fn


def _make_primitive() -> Any:
    from jax.interpreters import ad, batching, mlir

    try:  # jax.extend.core.Primitive is the public name, but importing jax.extend costs ~30 ms
        from jax._src.core import Primitive
    except ImportError:  # pragma: no cover - future jax
        from jax.extend.core import Primitive

    prim = Primitive("hatch_jaxexport_call")
    prim.multiple_results = True

    @functools.lru_cache(maxsize=1024)
    def _impl_jit(family: Family, kind: str, batched: bool) -> Callable[..., Any]:
        import jax

        return jax.jit(family.exported_call(kind, batched))

    prim.def_impl(lambda *args, family, kind, batched: _impl_jit(family, kind, batched)(*args))

    def abstract_eval(*avals: Any, family: Family, kind: str, batched: bool) -> list[Any]:
        import jax

        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
        outs = jax.eval_shape(family.exported_call(kind, batched), *structs)
        from hatch_jaxexport.runtime._placement import (
            typed_out_shardings,  # sharded artifacts under explicit meshes
        )

        typed = typed_out_shardings(family.members[(kind, batched)], len(outs))
        return [jax.core.ShapedArray(o.shape, o.dtype) if s is None else
                jax.core.ShapedArray(o.shape, o.dtype, sharding=s)
                for o, s in zip(outs, typed, strict=True)]

    prim.def_abstract_eval(abstract_eval)

    def lowering(ctx: Any, *args: Any, family: Family, kind: str, batched: bool) -> Any:
        from hatch_jaxexport.runtime._jaxcompat import lapack_init_skipped

        with lapack_init_skipped((kind, batched) in family.lapack_free):
            return mlir.lower_fun(family.exported_call(kind, batched), multiple_results=True)(
                ctx, *args)

    mlir.register_lowering(prim, lowering)

    def instantiate(tangent: Any, primal: Any) -> Any:
        return ad.instantiate_zeros(tangent) if type(tangent) is ad.Zero else tangent

    def jvp_rule(primals: Sequence[Any], tangents: Sequence[Any], *, family: Family, kind: str,
                 batched: bool) -> tuple[list[Any], list[Any]]:
        n, nd, nc = family.n_in, len(family.din), len(family.dout)
        outs = family.call(kind, batched, primals, f"jax.jvp of {kind}")
        x, dx = list(primals[:n]), [tangents[i] for i in family.din]
        x_moves = any(type(t) is not ad.Zero for t in dx)
        dxi = [instantiate(tangents[i], primals[i]) for i in family.din]
        rest, drest = list(primals[n:]), list(tangents[n:])

        def add(a: list[Any] | None, b: list[Any]) -> list[Any]:
            return b if a is None else [p + q for p, q in zip(a, b, strict=True)]

        if kind == "primal":
            tan = family.call("jvp", batched, [*x, *dxi], "forward-mode differentiation "
                              "(jax.jvp, jax.grad, jax.jacfwd...)") if x_moves else None
            out_t: list[Any] = []
            k = 0
            for j, out in enumerate(outs):
                if j in family.dout and tan is not None:
                    out_t.append(tan[k])
                    k += 1
                else:
                    out_t.append(ad.Zero(jax_core_aval(out).to_tangent_aval()))
            return outs, out_t
        total: list[Any] | None = None
        if kind in ("jvp", "vjp"):
            # linear in its second operand group; second order in x
            mid_t = [instantiate(t, p) for t, p in zip(drest, rest, strict=True)]
            if any(type(t) is not ad.Zero for t in drest):
                total = add(total, family.call(kind, batched, [*x, *mid_t], f"jax.jvp of {kind}"))
            if x_moves:
                second = "jvp_jvp" if kind == "jvp" else "vjp_jvp"
                total = add(total, family.call(second, batched, [*x, *rest, *dxi],
                                               "a second-order derivative (jax.hessian, "
                                               "jax.jacfwd of jax.jacrev...)"))
        else:
            # bilinear members: derivatives in x are third order
            mid_len = nd if kind == "jvp_jvp" else nc
            mid, u = rest[:mid_len], rest[mid_len:]
            dmid, du = drest[:mid_len], drest[mid_len:]
            if x_moves:
                source = family.source(kind, batched, "", reason=(
                    "a third-order derivative needs more than ad_order=2 bakes"))
                import jax

                tangents_in = [instantiate(t, p) for t, p in zip(tangents, primals, strict=True)]
                return list(outs), list(jax.jvp(source, tuple(primals), tuple(tangents_in))[1])
            if any(type(t) is not ad.Zero for t in dmid):
                dmid_i = [instantiate(t, p) for t, p in zip(dmid, mid, strict=True)]
                total = add(total, family.call(kind, batched, [*x, *dmid_i, *u], "jax.jvp"))
            if any(type(t) is not ad.Zero for t in du):
                du_i = [instantiate(t, p) for t, p in zip(du, u, strict=True)]
                total = add(total, family.call(kind, batched, [*x, *mid, *du_i], "jax.jvp"))
        if total is None:
            return list(outs), [ad.Zero(jax_core_aval(o).to_tangent_aval()) for o in outs]
        return list(outs), total

    ad.primitive_jvps[prim] = jvp_rule

    def transpose_rule(cts: Sequence[Any], *args: Any, family: Family, kind: str,
                       batched: bool) -> list[Any]:
        n, nd = family.n_in, len(family.din)
        x = list(args[:n])
        if kind == "primal" or any(ad.is_undefined_primal(v) for v in x):
            raise NotImplementedError(f"{family.name}: {kind} is not linear in its primal "
                                      "inputs; cannot transpose it")
        rest = list(args[n:])
        cts_i = [instantiate(c, None) for c in cts]
        undefined = [ad.is_undefined_primal(v) for v in rest]
        if kind in ("jvp", "vjp"):
            other = "vjp" if kind == "jvp" else "jvp"
            bar = family.call(other, batched, [*x, *cts_i], f"transposing {kind} (jax.grad, "
                              "jax.vjp, jax.jacrev...)")
            return [None] * n + list(bar)
        mid_len = nd if kind == "jvp_jvp" else len(family.dout)
        mid, u = rest[:mid_len], rest[mid_len:]
        if any(undefined[:mid_len]) and not any(undefined[mid_len:]):
            if kind == "jvp_jvp":   # f''[t, u] in t  ->  vjp_jvp(x, ct, u)
                bar = family.call("vjp_jvp", batched, [*x, *cts_i, *u], "transposing jvp_jvp")
            else:                   # (sum c f'') u in c  ->  jvp_jvp(x, u, ct)
                bar = family.call("jvp_jvp", batched, [*x, *u, *cts_i], "transposing vjp_jvp")
            return [None] * n + list(bar) + [None] * len(u)
        if any(undefined[mid_len:]) and not any(undefined[:mid_len]):
            if kind == "jvp_jvp":   # symmetric in (t, u)
                bar = family.call("vjp_jvp", batched, [*x, *cts_i, *mid], "transposing jvp_jvp")
            else:                   # H_c is symmetric
                bar = family.call("vjp_jvp", batched, [*x, *mid, *cts_i], "transposing vjp_jvp")
            return [None] * (n + mid_len) + list(bar)
        raise NotImplementedError(f"{family.name}: {kind} transposed in both operand groups")

    ad.primitive_transposes[prim] = transpose_rule

    def batch_rule(args: Sequence[Any], dims: Sequence[Any], *, family: Family, kind: str,
                   batched: bool) -> tuple[list[Any], list[int]]:
        import jax
        import jax.numpy as jnp

        size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
        moved = [jnp.moveaxis(a, d, 0) if d is not None else a
                 for a, d in zip(args, dims, strict=True)]
        if not batched and family.has(kind, True) and _broadcast_is_cheap(args, dims, size):
            full = [a if d is not None else jnp.broadcast_to(a, (size, *jnp.shape(a)))
                    for a, d in zip(moved, dims, strict=True)]
            outs = exported_call_p.bind(*full, family=family, kind=kind, batched=True)
            return list(outs), [0] * len(outs)
        mapped = [i for i, d in enumerate(dims) if d is not None]

        def one(xs: Sequence[Any]) -> list[Any]:
            call_args = list(moved)
            for i, value in zip(mapped, xs, strict=True):
                call_args[i] = value
            return family.call(kind, batched, call_args, "jax.vmap")

        outs = jax.lax.map(one, [moved[i] for i in mapped])
        return list(outs), [0] * len(outs)

    batching.primitive_batchers[prim] = batch_rule
    return prim


def _broadcast_is_cheap(args: Sequence[Any], dims: Sequence[Any], size: int) -> bool:
    """Whether broadcasting the unbatched operands to the batch (the batched artifacts take
    every operand batched) costs no more than the batched operands themselves; otherwise the
    sequential path is faster (e.g. shared parameters with a batch of inputs)."""
    import math

    batched = sum(math.prod(a.shape) for a, d in zip(args, dims, strict=True) if d is not None)
    unbatched = sum(math.prod(a.shape) for a, d in zip(args, dims, strict=True) if d is None)
    return unbatched * size <= batched


def jax_core_aval(value: Any) -> Any:
    import jax

    return jax.typeof(value)


class _LazyPrimitive:
    _prim: Any = None
    _lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._prim is None:
                type(self)._prim = _make_primitive()
            return self._prim

    def bind(self, *args: Any, **params: Any) -> Any:
        return self.get().bind(*args, **params)


#: The primitive (created on first use, so importing this module stays cheap).
exported_call_p = _LazyPrimitive()


def warn_or_raise(name: str, strict: bool) -> Callable[[str], None]:
    """The ``on_missing`` callback of a family: a one-time warning, or ``ArtifactError``."""
    from hatch_jaxexport.errors import ArtifactError, FallbackWarning

    seen: set[str] = set()

    def on_missing(why: str) -> None:
        if strict:
            raise ArtifactError(f"{name}: {why} (HATCH_JAXEXPORT_STRICT is set)")
        if why not in seen:
            seen.add(why)
            warnings.warn(f"{name}: tracing the source: {why}", FallbackWarning, stacklevel=3)
    return on_missing
