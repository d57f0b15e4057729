"""Plans of traced calls, kept by the call's types: what an eager ``jax.grad`` step reuses.

An eager ``jax.grad(f)(params, x)`` calls the decorated function with new tracers on every
step. No fast path serves a tracer (``fast_key`` is ``None`` for one, a compiled executable
refuses it), so each step walked the whole match (``matching.plan_call``: binding the
signature, checking every leaf, solving the dimension symbols), about a tenth of a step of a
small model. What a plan holds depends only on what this key holds: the tree structure of the
call (containers, their aux data, which arguments were given), each tracer's abstract value
(shape, dtype, weak type), each scalar's type and value, and jax's x64 flag. So a plan found
for one step is rebuilt for the next from the new leaves (``PlanTemplate.plan``), without
matching again.

A template is kept only where that rebuild is exact: every array of the plan's values is one
of the call's tracers or arrays, taken by position (one passed twice in the call that made it
keeps no template: a later call may pass two different ones there), or a constant the match
made from a scalar of the key (``0.5`` for a float32 leaf) or took from a default. The match
returns the call's arrays and tracers as they are, so any other array in a plan comes from
those. A call with any other leaf (an array committed to a device: its placement picks a
platform; an object) has no key and is matched in full, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hatch_jaxexport.runtime.call.matching import CallPlan
from hatch_jaxexport.runtime.jaxcompat import concrete_array_type, x64_flag

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

#: The leaves a key takes by type and value (besides tracers, taken by abstract value).
_SCALARS = (str, int, float, bool, complex)
#: How many templates one function keeps (emptied when full: a caller tracing many shapes).
PLAN_LIMIT = 256


class PlanTemplate:
    """A plan without its tracers: the matched structure, static values and sizes, and how its
    values are made from a call's leaves (``routes``: a leaf's position, else a constant)."""

    __slots__ = ("routes", "sizes", "static", "static_key", "structure_index", "values_tree")

    def __init__(self, plan: CallPlan, values_tree: Any, routes: tuple[Any, ...]) -> None:
        self.structure_index, self.static = plan.structure_index, plan.static
        self.static_key, self.sizes = plan.static_key, plan.sizes
        self.values_tree, self.routes = values_tree, routes

    def plan(self, leaves: list[Any]) -> CallPlan:
        """The plan of a call with this key and these leaves."""
        values = self.values_tree.unflatten(
            [leaves[route] if type(route) is int else route[0] for route in self.routes])
        return CallPlan(self.structure_index, self.static, self.static_key, values,
                        dict(self.sizes))


def plan_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any]] | None:
    """``(key, leaves)`` of a call whose leaves are tracers, arrays on no particular device
    (NumPy's, jax's uncommitted ones: what a ``jax.grad`` step holds fixed) and scalars, with a
    tracer among them; ``None`` for any other call (it is matched in full)."""
    from jax import tree_util
    from jax.core import Tracer

    jax_array = concrete_array_type()
    leaves, tree = tree_util.tree_flatten((args, kwargs))
    key: list[Any] = [tree, x64_flag().value]
    traced = False
    for leaf in leaves:
        kind = type(leaf)
        if (kind is jax_array and not leaf.committed) or kind is np.ndarray:
            key.append((kind, leaf.shape, leaf.dtype))
        elif kind in _SCALARS:
            key.append((kind, leaf))
        elif isinstance(leaf, Tracer):
            key.append(leaf.aval)
            traced = True
        else:  # a committed array (its device picks the platform), an object
            return None
    return (tuple(key), leaves) if traced else None


def template_of(plan: CallPlan, leaves: list[Any]) -> PlanTemplate | None:
    """The template of ``plan``, matched for a call of ``leaves``; ``None`` where rebuilding
    it from another call's leaves would not be exact (see the module's docstring)."""
    from jax import tree_util
    from jax.core import Tracer

    positions: dict[int, int] = {}
    for position, leaf in enumerate(leaves):
        if type(leaf) not in _SCALARS:  # a tracer or an array: taken by position
            if id(leaf) in positions:
                return None
            positions[id(leaf)] = position
    values_leaves, values_tree = tree_util.tree_flatten(plan.values)
    routes: list[Any] = []
    for leaf in values_leaves:
        position = positions.get(id(leaf))
        if position is not None:
            routes.append(position)
        elif isinstance(leaf, Tracer):
            return None  # a tracer the match made: it belongs to this trace
        else:  # made from a scalar of the key (``np.asarray(0.5, float32)``) or a default:
            routes.append((leaf,))  # the same for every call of this key
    return PlanTemplate(plan, values_tree, tuple(routes))


def traced_plan(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any],
                match: Any) -> CallPlan:
    """The plan of a call: rebuilt from the template of an earlier call with the same key,
    else ``match(fn, args, kwargs)`` (``plan_call``: what it raises passes), kept as a
    template when exact."""
    try:
        found = plan_key(args, kwargs)
    except Exception:  # a tracer or a node this jax types otherwise: matched in full
        found = None
    if found is None:
        return match(fn, args, kwargs)
    key, leaves = found
    try:
        template = fn.calls.plan_template(key)
    except TypeError:  # an aux data that cannot be hashed: matched in full
        return match(fn, args, kwargs)
    if template is not None:
        return template.plan(leaves)
    plan = match(fn, args, kwargs)
    template = template_of(plan, leaves)
    if template is not None:
        fn.calls.remember_plan(key, template, PLAN_LIMIT)
    return plan


__all__ = ["PLAN_LIMIT", "PlanTemplate", "plan_key", "template_of", "traced_plan"]
