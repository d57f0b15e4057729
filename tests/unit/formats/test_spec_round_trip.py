"""A spec's registered pytree node must survive jax's flatten/unflatten round trip: jax
rebuilds every argument of an exported function with the type's ``tree_unflatten``, so a class
that puts children back in other places (jax-cosmo 0.1.0's ``WeakLensing``: children
``(bins, m, ia_bias)``, ``__init__(bins, ia_bias, m)``) made an artifact that computed with
swapped values and that real calls never matched. The spec now refuses it, naming the class
and the children."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from hatch_jaxexport import exportable
from hatch_jaxexport.errors import SpecError


def make_probe(swaps: bool) -> type:
    """A probe class like jax-cosmo's: three children, ``tree_unflatten`` by ``__init__``."""

    class Probe:
        def __init__(self, bins, ia_bias=None, m=None):
            self.bins, self.ia_bias, self.m = bins, ia_bias, m

        def tree_flatten(self):
            return (self.bins, self.m, self.ia_bias), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            bins, m, ia_bias = children
            return cls(bins, m, ia_bias) if swaps else cls(bins, ia_bias, m)

    return jax.tree_util.register_pytree_node_class(Probe)


def total(probe):
    return jnp.sum(probe.bins) * probe.ia_bias + probe.m


def test_a_node_whose_unflatten_swaps_children_is_refused_naming_them():
    probe = make_probe(swaps=True)
    with pytest.raises(SpecError) as caught:
        exportable({"probe": probe(("n", "float32"), ("", "float32"), ("k", "float32"))})(total)
    message = str(caught.value)
    assert "total" in message and "Probe does not survive" in message
    assert "m, ia_bias come back in each other's places" in message
    assert "tree_unflatten" in message


def test_a_node_that_round_trips_is_accepted_with_the_source_result():
    probe = make_probe(swaps=False)
    baked = exportable({"probe": probe(("n", "float32"), ("", "float32"), ("", "float32"))},
                       )(total)
    args = probe(jnp.arange(3.0), jnp.float32(2.0), jnp.float32(1.0))
    assert float(baked(args)) == float(total(args)) == 7.0


def test_a_node_whose_init_cannot_take_spec_leaves_is_not_judged_at_decoration():
    """An ``__init__`` that converts its arguments raises on a spec's ``(shape, dtype)``
    leaves: that tells nothing about the round trip, so the spec is read as before."""

    @jax.tree_util.register_pytree_node_class
    class Converting:
        def __init__(self, x):
            self.x = jnp.asarray(x, jnp.float32)

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    spec = Converting.__new__(Converting)
    spec.x = ("n", "float32")
    exportable({"c": spec})(lambda c: c.x)
