"""A concrete-size artifact under every transformation of a trace (``concrete_rules``), on real
exports made here as the build makes them (``jax.export`` of the flat source, serialized with
its VJP): nested ``jax.vmap``, ``jax.vmap`` of a ``jax.jit`` staging a ``vmap``, and their
reverse-mode compositions, each against the same transformation of the source.

End to end (a recorded call of a built wheel, strict, its source's body counted) in
``tests/integration/test_concrete_sizes.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from hatch_jaxexport.runtime.artifacts.concrete_rules import transformable


def source(a, b, x):
    """Not shape-polymorphic in spirit: a difference along ``x``'s only axis."""
    y = x[1:] - x[:-1]
    return a * jnp.sin(y).sum() + b


def _artifact(with_vjp: bool = True):
    """``source`` exported at ``x: float32[4]`` (and two scalars) and read back, as a recorded
    call's artifact is."""
    avals = (jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((), jnp.float32),
             jax.ShapeDtypeStruct((4,), jnp.float32))
    exported = export.export(jax.jit(source), platforms=["cpu"])(*avals)
    data = exported.serialize(vjp_order=1) if with_vjp else exported.serialize()
    return transformable(export.deserialize(data))


def _served(call):
    """The artifact's call taking and giving what ``source`` does (its flat outputs: one)."""
    return lambda a, b, x: call(a, b, x)[0]


A, B = np.float32(1.5), np.float32(-0.25)
X = np.random.default_rng(0).normal(size=(4, 3, 2)).astype(np.float32)

NESTED = {
    "vmap of vmap": lambda f: jax.vmap(jax.vmap(f, in_axes=(None, None, 1)),
                                       in_axes=(None, None, 1)),
    "vmap of jit of vmap": lambda f: jax.vmap(jax.jit(jax.vmap(f, in_axes=(None, None, 1))),
                                              in_axes=(None, None, 1)),
    "jit of vmap of vmap": lambda f: jax.jit(jax.vmap(jax.vmap(f, in_axes=(None, None, 1)),
                                                      in_axes=(None, None, 1))),
    "three levels": lambda f: jax.vmap(jax.vmap(jax.vmap(f, in_axes=(None, None, 0)),
                                                in_axes=(None, None, 1)),
                                       in_axes=(None, 0, 1)),
}


@pytest.mark.parametrize("name", NESTED)
def test_nested_batching_runs_the_artifact(name):
    """Each level of ``vmap`` maps the artifact's batched rule again (``lax.map`` over the
    rule itself): no ``Batching rule for 'call_exported' not implemented``."""
    transform = NESTED[name]
    b = np.arange(3, dtype=np.float32) if name == "three levels" else B
    x = np.random.default_rng(1).normal(size=(2, 3, 5, 4)).astype(np.float32) \
        if name == "three levels" else X
    got = transform(_served(_artifact()))(A, b, x)
    want = transform(source)(A, b, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reverse_mode_through_nested_batching():
    """``grad`` of a nested ``vmap``, ``vmap`` of ``grad`` and ``jacrev`` (a ``vmap`` of the
    pullback) under ``jit`` of ``vmap``: the serialized VJP, batched the same way."""
    served, batched = _served(_artifact()), NESTED["vmap of vmap"]

    def loss(f):
        return lambda a, x: batched(f)(a, B, x).sum()

    cases = ((lambda f: jax.grad(loss(f), argnums=(0, 1)), (A, X)),
             (lambda f: jax.vmap(jax.vmap(jax.grad(f, argnums=(0, 2)), in_axes=(None, None, 1)),
                                 in_axes=(None, None, 1)), (A, B, X)),
             (lambda f: jax.vmap(jax.jit(jax.vmap(jax.jacrev(f, argnums=2),
                                                  in_axes=(None, None, 1))),
                                 in_axes=(None, None, 1)), (A, B, X)))
    for transform, args in cases:
        got, want = transform(served)(*args), transform(source)(*args)
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want),
                        strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_without_a_vjp_nested_batching_still_runs():
    """An artifact jax could not serialize a VJP for batches all the same."""
    transform = NESTED["vmap of jit of vmap"]
    np.testing.assert_allclose(transform(_served(_artifact(with_vjp=False)))(A, B, X),
                               transform(source)(A, B, X), rtol=1e-5, atol=1e-6)


def test_an_eager_vmap_compiles_the_mapped_artifact_once():
    """An eager ``jax.vmap`` (no ``jax.jit`` around it) applies the batched rule at once: its
    ``lax.map`` is the same jitted function each call, so a second call of the same shapes
    compiles nothing (a fresh ``lax.map`` was a new program every call)."""
    served = _served(_artifact())
    batched = NESTED["vmap of vmap"](served)
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: compiles.append(event)
        if event.endswith("backend_compile_duration") else None)
    first = batched(A, B, X)
    before = len(compiles)
    again = batched(A, B, X)
    assert len(compiles) == before, compiles[before:]
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(again, NESTED["vmap of vmap"](source)(A, B, X), rtol=1e-6)
