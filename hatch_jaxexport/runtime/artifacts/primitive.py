"""The JAX primitive that runs one member of a family, and its rules, registered at module level.

``family_call_p`` (named ``hatch_jaxexport_call`` in jaxprs) binds with the static parameters
``family`` (a ``Family``), ``kind`` (which member) and ``batched`` (the member exported from
``jax.vmap``). Its rules follow the shape of jax's own ``call_exported`` primitive
(``jax/_src/export/_export.py``): each is a named function here, registered right below it.

- ``_family_impl`` and ``_family_lowering`` run the member's ``Exported``;
- ``_family_abstract_eval`` gives the member's output types;
- ``_family_jvp`` maps a JVP to another member (``primal`` -> ``jvp``; ``jvp``/``vjp`` ->
  themselves and the second-order members);
- ``_family_transpose`` maps a transposition to the linear partner (``jvp`` <-> ``vjp``,
  ``jvp_jvp`` <-> ``vjp_jvp``);
- ``_family_batching`` runs the batched member, or the member sequentially (``lax.map``).

Where a rule needs a member that was not baked, ``call_member`` evaluates it from the source
(``Family.source``: a ``FallbackWarning``, or ``ArtifactError`` in strict mode).

This module imports jax and creates the primitive at import: only the loader imports it, lazily,
when a function that uses the family is first called (``import hatch_jaxexport`` and a user
package that uses ``@exportable`` stay free of jax).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir

from hatch_jaxexport.runtime.artifacts.family import Family
from hatch_jaxexport.runtime.artifacts.native_vjp import settle_in_background
from hatch_jaxexport.runtime.jaxcompat import (
    evaluating_eagerly,
    lapack_init_skipped,
    primitive_type,
)

#: The primitive: one bind runs one member of one family.
family_call_p = primitive_type()("hatch_jaxexport_call")
family_call_p.multiple_results = True


# --------------------------------------------------------------------------------------------
# Calling a member


def call_member(family: Family, kind: str, batched: bool, args: Sequence[Any],
                why: str) -> list[Any]:
    """Evaluate a member: bind the primitive where baked, else trace the source.

    Every rule below goes through here, so a missing member anywhere in a chain of
    transformations falls back to the source instead of failing."""
    if family.deferred(kind, batched) or family.has(kind, batched) or \
            family.transposable(kind, batched):
        return list(family_call_p.bind(*args, family=family, kind=kind, batched=batched))
    return list(family.source(kind, batched, why)(*args))


#: Why a transposable ``jvp`` (not baked, see ``Family.transposable``) was evaluated.
FORWARD_MODE = "forward-mode differentiation (jax.jvp, jax.jacfwd, jax.linearize...)"


class PrimalCall:
    """The structured primal call of a family, taking and returning the function's pytrees.

    Called (and lowered) it is ``jax.jit`` over the primitive: one executable for eager calls.
    ``traced`` is the same without ``jax.jit``, for arguments that are tracers: under an eager
    ``jax.grad``, ``jax.jvp`` or ``jax.vmap`` each member the transformation needs then runs
    on its own (``_family_impl``), through the wheel's shipped executables and this machine's
    executable cache, where a ``jax.jit`` around it would lower and compile the whole
    transformed function in every process.
    """

    def __init__(self, family: Family) -> None:
        def primal(*args: Any, **kwargs: Any) -> Any:
            flat = jax.tree_util.tree_leaves((args, kwargs))
            outs = call_member(family, "primal", False, flat, "calling the function")
            return jax.tree_util.tree_unflatten(family.out_tree, outs)

        self.traced = primal
        self.jitted = jax.jit(primal)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted.lower(*args, **kwargs)


def jitted_primal(family: Family) -> PrimalCall:
    """The structured primal call of ``family`` (``PrimalCall``)."""
    return PrimalCall(family)


# --------------------------------------------------------------------------------------------
# Evaluation: impl, abstract eval, lowering


@functools.lru_cache(maxsize=1024)
def _jitted_member(family: Family, kind: str, batched: bool) -> Callable[..., Any]:
    """The member's eager call, one per member: eager binds (``jax.grad`` of a loaded function
    outside ``jax.jit``...) reuse its executable instead of compiling on every call, and the
    loader's (``Family.eager``) takes it from the wheel's shipped executables or this
    machine's executable cache before compiling."""
    def make_jitted() -> Callable[..., Any]:
        return jax.jit(family.exported_call(kind, batched))

    return make_jitted() if family.eager is None else family.eager((kind, batched), make_jitted)


def _family_impl(*args: Any, family: Family, kind: str, batched: bool) -> Any:
    """Eager evaluation (outside any trace): run the member's jitted ``Exported`` (a
    transposable member that was not baked: the source, with its warning or error)."""
    if not family.has(kind, batched):
        return family.source(kind, batched, FORWARD_MODE)(*args)
    return _jitted_member(family, kind, batched)(*args)


family_call_p.def_impl(_family_impl)


def _family_abstract_eval(*avals: Any, family: Family, kind: str, batched: bool) -> list[Any]:
    """The member's output types, nothing run: the primal's and a ``jvp``'s from the primal's
    (``_primal_out_types``: the manifest, or the types it just ran at), another member's from
    its ``Exported`` (``eval_shape``).

    A sharded artifact traced under a mesh with ``Explicit`` axes carries its output
    shardings in the types, as jax's own ``call_exported`` would; elsewhere types carry none."""
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    if kind == "primal" or family.typed_from_primal(kind, batched):
        outs = _primal_out_types(family, batched, structs[:family.n_in])
        typed = _out_shardings(family, "primal", batched, len(outs))
        if kind != "primal":  # a jvp: the primal's differentiable outputs
            outs, typed = [outs[j] for j in family.dout], [typed[j] for j in family.dout]
    else:
        outs = jax.eval_shape(family.exported_call(kind, batched), *structs)
        typed = _out_shardings(family, kind, batched, len(outs))
    return [jax.core.ShapedArray(o.shape, o.dtype) if s is None else
            jax.core.ShapedArray(o.shape, o.dtype, sharding=s)
            for o, s in zip(outs, typed, strict=True)]


def _out_shardings(family: Family, kind: str, batched: bool, count: int) -> list[Any]:
    """A member's output shardings as types (``placement.typed_out_shardings``): ``None`` each
    but for a sharded variant, so that an unsharded family neither imports placement nor
    deserializes a member to type it."""
    if not family.sharded:
        return [None] * count
    # imported here: only a sharded variant's types carry shardings
    from hatch_jaxexport.runtime.artifacts.placement import typed_out_shardings

    return typed_out_shardings(family.exported(kind, batched), count)


family_call_p.def_abstract_eval(_family_abstract_eval)


@functools.lru_cache(maxsize=1024)
def _primal_types_seen(family: Family) -> dict[tuple[Any, ...], list[Any]]:
    """The primal's output types per input types (``_types_key``), per family: those it was
    just evaluated at (``_family_jvp`` under an eager ``jax.grad``) and those traced once
    (``_primal_out_types``, for the abstract evaluation and the reverse-mode preparation)."""
    return {}


def _types_key(values: Sequence[Any]) -> tuple[Any, ...]:
    """Shapes and dtypes of ``values`` (arrays, tracers or ``ShapeDtypeStruct``)."""
    return tuple((tuple(np.shape(v)), str(v.dtype if hasattr(v, "dtype") else np.result_type(v)))
                 for v in values)


def _primal_out_types(family: Family, batched: bool, structs: Sequence[Any]) -> list[Any]:
    """The primal's output types at these input types: known where the primal just ran
    eagerly (reverse mode types its ``jvp`` right after), else from the manifest where its
    text says them exactly (``Family.primal_out_types``), else traced (``eval_shape`` of the
    ``Exported``, which deserializes it)."""
    seen = _primal_types_seen(family)
    key = (batched, _types_key(structs))
    if key not in seen:
        known = family.primal_out_types(batched, key[1])
        seen[key] = [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for shape, dtype in known] \
            if known is not None else \
            list(jax.eval_shape(family.exported_call("primal", batched), *structs))
    return seen[key]


def _family_lowering(ctx: Any, *args: Any, family: Family, kind: str, batched: bool) -> Any:
    """Inline the member's ``Exported`` call into the enclosing module.

    LAPACK initialisation (importing ``scipy.linalg``) is skipped for members whose
    module holds no LAPACK call, which the manifest records (see ``jaxcompat``)."""
    if not family.has(kind, batched):  # a transposable jvp evaluated: forward mode
        member = family.source(kind, batched, FORWARD_MODE)
        return mlir.lower_fun(lambda *a: list(member(*a)), multiple_results=True)(ctx, *args)
    with lapack_init_skipped((kind, batched) in family.lapack_free):
        return mlir.lower_fun(family.exported_call(kind, batched), multiple_results=True)(
            ctx, *args)


mlir.register_lowering(family_call_p, _family_lowering)


# --------------------------------------------------------------------------------------------
# Forward mode: the JVP rule and its helpers


def _instantiate(tangent: Any, known: bool = False) -> Any:
    """A tangent as an array: members take dense operands, never symbolic zeros.

    When the values it goes with are concrete (``known``: an eager ``jax.grad`` linearizes with
    concrete primals) or nothing is traced, the zeros are numpy's: a jax ``zeros`` would be an
    operation of its own, compiled by XLA in every fresh process."""
    if type(tangent) is not ad.Zero:
        return tangent
    if known or evaluating_eagerly():
        aval = tangent.aval
        return np.zeros(aval.shape, aval.dtype)
    return ad.instantiate_zeros(tangent)


def _any_nonzero(tangents: Sequence[Any]) -> bool:
    """Whether any tangent is not a symbolic zero (only those cost a member call)."""
    return any(type(t) is not ad.Zero for t in tangents)


def _zero_tangent(value: Any) -> Any:
    """A symbolic zero tangent for ``value`` (an output no member call contributes to)."""
    return ad.Zero(jax.typeof(value).to_tangent_aval())


def _add(total: list[Any] | None, more: list[Any]) -> list[Any]:
    """Sum of two lists of tangents; ``None`` stands for all zeros."""
    return more if total is None else [p + q for p, q in zip(total, more, strict=True)]


def _x_tangents(family: Family, tangents: Sequence[Any],
                primals: Sequence[Any] = (None,)) -> list[Any] | None:
    """The tangents of the differentiable primal inputs as arrays; ``None`` when all are zero
    (the primal inputs do not move, so no higher-order member is needed). With concrete
    ``primals`` their zeros are numpy's (``_instantiate``)."""
    dx = [tangents[i] for i in family.din]
    if not _any_nonzero(dx):
        return None
    known = not any(isinstance(p, jax.core.Tracer) for p in primals)
    return [_instantiate(t, known) for t in dx]


def _jvp_of_primal(family: Family, batched: bool, primals: Sequence[Any],
                   tangents: Sequence[Any], outs: Sequence[Any]) -> list[Any]:
    """Output tangents of the primal: the ``jvp`` member, for the differentiable outputs."""
    dxi = _x_tangents(family, tangents, primals)
    tan = None if dxi is None else call_member(
        family, "jvp", batched, [*primals[:family.n_in], *dxi],
        "differentiation (forward mode, jax.jvp or jax.jacfwd, or reverse mode, jax.grad or "
        "jax.vjp, which jax linearizes through it)")
    out_t: list[Any] = []
    k = 0
    for j, out in enumerate(outs):
        if j in family.dout and tan is not None:
            out_t.append(tan[k])
            k += 1
        else:
            out_t.append(_zero_tangent(out))
    return out_t


def _jvp_of_linear(family: Family, kind: str, batched: bool, primals: Sequence[Any],
                   tangents: Sequence[Any]) -> list[Any] | None:
    """Output tangents of ``jvp``/``vjp``: linear in their second operand group (the member
    itself), second order in ``x`` (``jvp_jvp``/``vjp_jvp``). ``None`` when all are zero."""
    n = family.n_in
    x, rest, drest = list(primals[:n]), list(primals[n:]), list(tangents[n:])
    total: list[Any] | None = None
    if _any_nonzero(drest):
        mid_t = [_instantiate(t) for t in drest]
        total = _add(total, call_member(family, kind, batched, [*x, *mid_t],
                                        f"jax.jvp of {kind}"))
    dxi = _x_tangents(family, tangents)
    if dxi is not None:
        second = "jvp_jvp" if kind == "jvp" else "vjp_jvp"
        total = _add(total, call_member(family, second, batched, [*x, *rest, *dxi],
                                        "a second-order derivative (jax.hessian, "
                                        "jax.jacfwd of jax.jacrev...)"))
    return total


def _jvp_of_bilinear(family: Family, kind: str, batched: bool, primals: Sequence[Any],
                     tangents: Sequence[Any]) -> list[Any] | None:
    """Output tangents of ``jvp_jvp``/``vjp_jvp``: bilinear in their two operand groups (the
    member itself, once per group); derivatives in ``x`` are third order, which no bake
    covers, so they come from the source. ``None`` when all are zero."""
    n = family.n_in
    x, rest, drest = list(primals[:n]), list(primals[n:]), list(tangents[n:])
    mid_len = len(family.din) if kind == "jvp_jvp" else len(family.dout)
    mid, u = rest[:mid_len], rest[mid_len:]
    dmid, du = drest[:mid_len], drest[mid_len:]
    if _any_nonzero([tangents[i] for i in family.din]):
        source = family.source(kind, batched, "", reason=(
            "a third-order derivative needs more than ad_order=2 bakes"))
        tangents_in = [_instantiate(t) for t in tangents]
        return list(jax.jvp(source, tuple(primals), tuple(tangents_in))[1])
    total: list[Any] | None = None
    if _any_nonzero(dmid):
        dmid_i = [_instantiate(t) for t in dmid]
        total = _add(total, call_member(family, kind, batched, [*x, *dmid_i, *u], "jax.jvp"))
    if _any_nonzero(du):
        du_i = [_instantiate(t) for t in du]
        total = _add(total, call_member(family, kind, batched, [*x, *mid, *du_i], "jax.jvp"))
    return total


@functools.lru_cache(maxsize=1024)
def _prepared_types(family: Family) -> set[tuple[Any, ...]]:
    """The argument types whose ``vjp`` executable ``_prepare_reverse`` settled, per family."""
    return set()


def _prepare_reverse(family: Family, primals: Sequence[Any], tangents: Sequence[Any]) -> None:
    """Under reverse mode (``jax.grad`` linearizes through the primal: concrete primals,
    traced tangents) the ``vjp`` member's eager call comes next, in the backward pass: settle
    its executable in a thread while the primal's compiles, so that on a cold machine the two
    compiles overlap (XLA compiles without the GIL), as a native VJP's backward pass does.
    Once per argument types (``native_vjp.settle_in_background``)."""
    tracer = jax.core.Tracer
    if family.eager is None or not family.has("vjp", False) or \
            any(isinstance(p, tracer) for p in primals) or \
            not any(isinstance(t, tracer) for t in tangents):
        return
    types = _types_key(primals)
    if types in _prepared_types(family):
        return
    _prepared_types(family).add(types)

    def settle() -> None:
        outs = _primal_out_types(family, False, primals[:family.n_in])
        cotangents = [jax.ShapeDtypeStruct(outs[j].shape, outs[j].dtype) for j in family.dout]
        _jitted_member(family, "vjp", False).prepare(  # type: ignore[attr-defined]
            (*primals[:family.n_in], *cotangents))
    settle_in_background(settle)


def _family_jvp(primals: Sequence[Any], tangents: Sequence[Any], *, family: Family, kind: str,
                batched: bool) -> tuple[list[Any], list[Any]]:
    """The JVP of a member is another member (or a sum of members) of the same family, so
    forward mode runs baked artifacts at every order the build covered."""
    if (kind, batched) == ("primal", False):
        _prepare_reverse(family, primals, tangents)
    outs = call_member(family, kind, batched, primals, f"jax.jvp of {kind}")
    if kind == "primal":
        if not any(isinstance(o, jax.core.Tracer) for o in outs):  # ran eagerly: its types
            _primal_types_seen(family).setdefault(
                (batched, _types_key(primals[:family.n_in])),
                [jax.ShapeDtypeStruct(np.shape(o), o.dtype) for o in outs])
        return outs, _jvp_of_primal(family, batched, primals, tangents, outs)
    if kind in ("jvp", "vjp"):
        total = _jvp_of_linear(family, kind, batched, primals, tangents)
    else:
        total = _jvp_of_bilinear(family, kind, batched, primals, tangents)
    if total is None:
        return list(outs), [_zero_tangent(o) for o in outs]
    return list(outs), total


ad.primitive_jvps[family_call_p] = _family_jvp


# --------------------------------------------------------------------------------------------
# Reverse mode: the transpose rule


def _family_transpose(cts: Sequence[Any], *args: Any, family: Family, kind: str,
                      batched: bool) -> list[Any]:
    """Transpose a linear member into its partner: ``jvp`` <-> ``vjp`` (``jax.grad`` of the
    primal), and ``jvp_jvp`` <-> ``vjp_jvp`` in either operand group (second order). No member
    is linear in ``x``, so transposing in ``x`` raises."""
    n, nd = family.n_in, len(family.din)
    x = list(args[:n])
    if kind == "primal" or any(ad.is_undefined_primal(v) for v in x):
        raise NotImplementedError(f"{family.name}: {kind} is not linear in its primal "
                                  "inputs; cannot transpose it")
    rest = list(args[n:])
    cts_i = [_instantiate(c) for c in cts]
    undefined = [ad.is_undefined_primal(v) for v in rest]
    if kind in ("jvp", "vjp"):
        other = "vjp" if kind == "jvp" else "jvp"
        bar = call_member(family, other, batched, [*x, *cts_i], f"transposing {kind} (jax.grad, "
                          "jax.vjp, jax.jacrev...)")
        return [None] * n + list(bar)
    mid_len = nd if kind == "jvp_jvp" else len(family.dout)
    mid, u = rest[:mid_len], rest[mid_len:]
    if any(undefined[:mid_len]) and not any(undefined[mid_len:]):
        if kind == "jvp_jvp":   # f''[t, u] in t  ->  vjp_jvp(x, ct, u)
            bar = call_member(family, "vjp_jvp", batched, [*x, *cts_i, *u], "transposing jvp_jvp")
        else:                   # (sum c f'') u in c  ->  jvp_jvp(x, u, ct)
            bar = call_member(family, "jvp_jvp", batched, [*x, *u, *cts_i], "transposing vjp_jvp")
        return [None] * n + list(bar) + [None] * len(u)
    if any(undefined[mid_len:]) and not any(undefined[:mid_len]):
        if kind == "jvp_jvp":   # symmetric in (t, u)
            bar = call_member(family, "vjp_jvp", batched, [*x, *cts_i, *mid],
                              "transposing jvp_jvp")
        else:                   # H_c is symmetric
            bar = call_member(family, "vjp_jvp", batched, [*x, *mid, *cts_i],
                              "transposing vjp_jvp")
        return [None] * (n + mid_len) + list(bar)
    raise NotImplementedError(f"{family.name}: {kind} transposed in both operand groups")


ad.primitive_transposes[family_call_p] = _family_transpose


# --------------------------------------------------------------------------------------------
# Batching: the batched member, or the member sequentially


def _broadcast_is_cheap(args: Sequence[Any], dims: Sequence[Any], size: int) -> bool:
    """Whether broadcasting the unbatched operands to the batch (the batched artifacts take
    every operand batched) costs no more than the batched operands themselves; otherwise the
    sequential path is faster (e.g. shared parameters with a batch of inputs)."""
    batched = sum(math.prod(a.shape) for a, d in zip(args, dims, strict=True) if d is not None)
    unbatched = sum(math.prod(a.shape) for a, d in zip(args, dims, strict=True) if d is None)
    return unbatched * size <= batched


def _family_batching(args: Sequence[Any], dims: Sequence[Any], *, family: Family, kind: str,
                     batched: bool) -> tuple[list[Any], list[int]]:
    """``jax.vmap`` of a member: the batch axis moved to the front, then the member exported
    from ``jax.vmap`` (symbolic batch size) where baked and cheap: for an unbatched member,
    called once; for the batched member itself (a ``vmap`` of a ``vmap``), called once on the
    two batch axes folded into one. Else ``lax.map`` of the member (one member call per batch
    element)."""
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    # an axis already in front stays as given: an eager moveaxis is a compile of its own
    # (and of a NumPy operand's conversion), where a shipped executable compiles nothing
    moved = [jnp.moveaxis(a, d, 0) if d not in (None, 0) else a
             for a, d in zip(args, dims, strict=True)]
    cheap = _broadcast_is_cheap(args, dims, size)
    if not batched and (family.has(kind, True) or family.transposable(kind, True)) and cheap:
        outs = family_call_p.bind(*_every_operand_batched(moved, dims, size), family=family,
                                  kind=kind, batched=True)
        return list(outs), [0] * len(outs)
    if batched and cheap:
        outs = _folded_batches(moved, dims, size, family, kind)
        return outs, [0] * len(outs)
    mapped = tuple(i for i, d in enumerate(dims) if d is not None)
    outs = _mapped_member(family, kind, batched, mapped)(*moved)
    return list(outs), [0] * len(outs)


def _every_operand_batched(moved: Sequence[Any], dims: Sequence[Any], size: int) -> list[Any]:
    """The operands with the batch axis in front (``moved``), those ``vmap`` left unbatched
    broadcast to it: a batched member takes every operand batched."""
    return [a if d is not None else jnp.broadcast_to(a, (size, *jnp.shape(a)))
            for a, d in zip(moved, dims, strict=True)]


def _folded_batches(moved: Sequence[Any], dims: Sequence[Any], size: int, family: Family,
                    kind: str) -> list[Any]:
    """The batched member under one more ``vmap``: every operand of a batched member carries
    the inner batch on its leading axis, so the outer batch (moved to the front, broadcast
    where an operand has none) and the inner one fold into one axis of ``size * inner``, the
    batched member runs once on it, and its outputs unfold. A kernel's ``vmap`` of ``vmap``
    of a distance baked with ``vmap=True`` is one vectorized call, as its source's is, where
    ``lax.map`` ran the outer batch one example at a time."""
    full = _every_operand_batched(moved, dims, size)
    inner = jnp.shape(full[0])[1]
    flat = [jnp.reshape(a, (size * inner, *jnp.shape(a)[2:])) for a in full]
    outs = family_call_p.bind(*flat, family=family, kind=kind, batched=True)
    return [jnp.reshape(o, (size, inner, *jnp.shape(o)[1:])) for o in outs]


@functools.lru_cache(maxsize=256)
def _mapped_member(family: Family, kind: str, batched: bool, mapped: tuple[int, ...]
                   ) -> Callable[..., Any]:
    """``lax.map`` of a member over the arguments at ``mapped``, one ``jax.jit`` function per
    member and batched positions.

    An eager ``jax.vmap`` (a kernel's ``vmap`` of ``vmap``, called outside any ``jax.jit``)
    applies the batched call at once, and a ``lax.map`` of a fresh function is a new jaxpr
    that jax's eager cache never matches: every call compiled it again (tinygp's kernels, 10x
    their source's time a call). The same function each time is compiled once per shape."""

    def run(*moved: Any) -> Any:
        def one(xs: Sequence[Any]) -> list[Any]:
            call_args = list(moved)
            for i, value in zip(mapped, xs, strict=True):
                call_args[i] = value
            return call_member(family, kind, batched, call_args, "jax.vmap")

        return jax.lax.map(one, [moved[i] for i in mapped])

    return jax.jit(run)


batching.primitive_batchers[family_call_p] = _family_batching


__all__ = ["FORWARD_MODE", "PrimalCall", "call_member", "family_call_p", "jitted_primal"]
