"""jax's serialized VJP (``vjp_order``) of a loaded artifact, each eager half run like a call.

``Exported.call`` wraps an artifact in a ``jax.custom_vjp`` whose backward pass calls
``Exported.vjp()``. Under an eager ``jax.grad`` both halves then compile in every process, and
neither a wheel's precompiled executables nor the executable cache can serve them. This is the
same rule, with the halves handed to eager calls: the forward pass runs the artifact's own
``EagerCall`` (shipped, cached or compiled executables) and the backward pass an ``EagerCall``
of the VJP. Halves that see tracers (under ``jax.jit``, ``vmap``, a second derivative) take
jax's own calls, exactly as ``Exported.call`` makes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class NativeVjpCall:
    """``jax.jit(exported.call)``, with ``traced``: the form ``EagerCall`` runs under a
    transformation (a ``jax.custom_vjp`` over the flat arguments).

    Args:
        exported: The artifact, serialized with ``vjp_order >= 1``.
        run_primal: The artifact's eager call (its ``EagerCall``), given concrete arguments.
        make_vjp: Makes the VJP's eager call on flat concrete arrays (primal inputs, then
            output cotangents), which returns the input cotangents; called once, when the
            first eager backward pass is prepared or run.
    """

    def __init__(self, exported: Any, run_primal: Callable[..., Any],
                 make_vjp: Callable[[], Callable[..., Any]]) -> None:
        import jax

        self.exported = exported
        self.plain = jax.jit(exported.call)
        self.lower = self.plain.lower
        self._run_primal = run_primal
        self._make_vjp = make_vjp
        self._vjp: Callable[..., Any] | None = None
        self._prepared: set[Any] = set()
        self._tracer = jax.core.Tracer
        avals = [*exported.in_avals, *exported.out_avals]
        # integer inputs or outputs have float0 cotangents: jax's own backward pass fixes them
        self._eager_backward = all(jax.numpy.issubdtype(a.dtype, jax.numpy.inexact)
                                   for a in avals)
        flat = jax.custom_vjp(self._forward_flat)
        flat.defvjp(self._forward_with_residuals, self._backward)
        self._flat = flat

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.plain(*args, **kwargs)

    @property
    def backward_call(self) -> Callable[..., Any] | None:
        """The VJP's eager call (its ``EagerCall``: tiers, shipped executables used), ``None``
        before the first eager backward pass."""
        return self._vjp

    def _eager_vjp(self) -> Callable[..., Any]:
        if self._vjp is None:
            self._vjp = self._make_vjp()
        return self._vjp

    def traced(self, *args: Any, **kwargs: Any) -> Any:
        """The call under a transformation: jax differentiates the custom VJP's halves."""
        import jax

        leaves, in_tree = jax.tree_util.tree_flatten((args, kwargs))
        if in_tree != self.exported.in_tree:  # jax's own call gives the precise difference
            return self.exported.call(*args, **kwargs)
        return self.exported.out_tree.unflatten(self._flat(*leaves))

    def _concrete(self, values: Sequence[Any]) -> bool:
        return not any(isinstance(value, self._tracer) for value in values)

    def _forward_flat(self, *leaves: Any) -> list[Any]:
        import jax

        args, kwargs = self.exported.in_tree.unflatten(leaves)
        run = self._run_primal if self._concrete(leaves) else self.plain
        return jax.tree_util.tree_leaves(run(*args, **kwargs))

    def _forward_with_residuals(self, *leaves: Any) -> tuple[list[Any], tuple[Any, ...]]:
        if self._eager_backward and self._concrete(leaves):
            self._prepare_backward(leaves)
        return self._forward_flat(*leaves), leaves  # the primal inputs are the residuals

    def _prepare_backward(self, leaves: tuple[Any, ...]) -> None:
        """Under differentiation the backward pass comes next: settle its executable in a
        thread while the forward pass runs, so that on a cold machine the two compiles
        overlap (XLA compiles without the GIL). Once per argument signature; a failure here
        is left to the backward pass, which settles the executable again and says why."""
        import threading

        import jax

        from hatch_jaxexport.runtime._jaxcompat import x64_context

        vjp = self._eager_vjp()
        key = tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves)  # concrete arrays
        if key in self._prepared:
            return
        self._prepared.add(key)
        x64 = bool(jax.config.jax_enable_x64)  # a thread does not see a jax.enable_x64 block

        def settle() -> None:
            try:
                with x64_context(x64):
                    args, kwargs = self.exported.in_tree.unflatten(leaves)
                    out = jax.eval_shape(self.plain, *args, **kwargs)
                    cotangents = [jax.ShapeDtypeStruct(o.shape, o.dtype)
                                  for o in jax.tree_util.tree_leaves(out)]
                    vjp.prepare((*leaves, *cotangents))  # type: ignore[attr-defined]
            except Exception:  # the backward pass settles it again and reports why
                pass

        # not a daemon: a thread inside XLA's compiler at interpreter exit aborts the process
        threading.Thread(target=settle, name="hatch-jaxexport-vjp").start()

    def _backward(self, residuals: tuple[Any, ...], cotangents: Sequence[Any]
                  ) -> tuple[Any, ...]:
        import jax

        if self._eager_backward and self._concrete([*residuals, *cotangents]):
            found = self._eager_vjp()(*residuals, *cotangents)
        else:  # jax's own backward pass (Exported.call's)
            vjp = self.exported.vjp()
            fixed = [ct if aval.dtype != jax.dtypes.float0 else
                     jax.numpy.zeros(aval.shape, jax.dtypes.float0)
                     for ct, aval in zip(cotangents, vjp.in_avals[len(residuals):],
                                         strict=True)]
            found = vjp.call(*residuals, *fixed)
        return tuple(jax.tree_util.tree_leaves(found))


__all__ = ["NativeVjpCall"]
