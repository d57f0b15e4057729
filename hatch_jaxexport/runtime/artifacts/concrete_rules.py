"""A concrete-size artifact as a function every transformation of a trace can run.

``Exported.call`` stages ``call_exported``, which has no batching rule, inside a
``jax.custom_vjp`` whose backward pass is one more ``call_exported``. Eager, that serves; staged
into a caller's trace it breaks whatever transforms the trace later, out of reach of any
fallback: ``jax.jacrev`` is ``vmap`` of a pullback (dm-pix's ``hsv_to_rgb`` test, with and
without ``jax.jit``), and ``jax.vmap(jax.jit(f))`` batches the staged call.

``transformable`` rebuilds the same rule from parts jax can transform: a ``jax.custom_vjp``
over the flat arrays whose halves (the primal, and the VJP jax serialized with the artifact)
are each a ``jax.custom_batching.custom_vmap`` that batches by ``lax.map``, one call of the
concrete-size artifact per example; a ``lax.map`` maps the rule itself, so nested
``vmap``s, and ``vmap`` of a ``jax.jit`` staging a ``vmap``, peel one level each.
(``custom_vmap`` outermost would lose reverse mode: jax cannot linearize it.) Forward mode
stays what ``Exported.call`` offers (none: a ``custom_vjp``), and the caller runs the source
for it (``recorded_calls.FORWARD_MODE`` says what would serve it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _mapped(fun: Callable[..., Any]) -> Callable[..., Any]:
    """``fun`` over flat arrays, batched by ``lax.map`` (unbatched inputs broadcast) of this
    same rule: under a nested ``vmap`` (or ``vmap`` of a ``jax.jit`` that staged a ``vmap``)
    each level's rule maps the rule again, so no level batches ``call_exported`` itself
    (which has no batching rule), and the artifact runs once per example of every level."""
    import jax

    @jax.custom_batching.custom_vmap
    def run(*arrays: Any) -> Any:
        return fun(*arrays)

    @run.def_vmap
    def _batched(axis_size: int, in_batched: list[bool], *arrays: Any) -> tuple[Any, Any]:
        if not any(in_batched):
            out = fun(*arrays)
            return out, jax.tree_util.tree_map(lambda _: False, out)
        full = [a if batched else jax.numpy.broadcast_to(a, (axis_size, *jax.numpy.shape(a)))
                for a, batched in zip(arrays, in_batched, strict=True)]
        out = map_run(full)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    @jax.jit
    def map_run(full: list[Any]) -> Any:
        # one function per artifact: an eager ``vmap`` applies the batched call at once, and a
        # ``lax.map`` of a fresh lambda is a new jaxpr jax's eager cache never matches (a
        # compile at every call); this one compiles once per shape
        return jax.lax.map(lambda each: run(*each), full)

    return run


def transformable(exported: Any) -> Callable[..., Any]:
    """The artifact's call over its flat input arrays (flat outputs, a tuple), which ``vmap``,
    ``grad`` and ``jacrev`` (also of a ``jax.jit`` staging it) run; ``grad`` only where jax
    serialized the artifact's VJP (``has_vjp``)."""
    import jax

    in_tree, out_tree = exported.in_tree, exported.out_tree

    def primal_flat(*leaves: Any) -> tuple[Any, ...]:
        args, kwargs = jax.tree_util.tree_unflatten(in_tree, leaves)
        return tuple(out_tree.flatten_up_to(exported.call(*args, **kwargs)))

    primal = _mapped(primal_flat)
    if not exported.has_vjp():
        return primal
    vjp_exported = exported.vjp()

    def backward_flat(*leaves: Any) -> tuple[Any, ...]:
        return tuple(jax.tree_util.tree_leaves(vjp_exported.call(*leaves)))

    backward = _mapped(backward_flat)

    @jax.custom_vjp
    def call(*leaves: Any) -> Any:
        return primal(*leaves)

    def forward(*leaves: Any) -> tuple[Any, tuple[Any, ...]]:
        return primal(*leaves), leaves

    def pullback(leaves: tuple[Any, ...], cotangents: Any) -> tuple[Any, ...]:
        return tuple(backward(*leaves, *cotangents))

    call.defvjp(forward, pullback)
    return call


__all__ = ["transformable"]
