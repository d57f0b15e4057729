"""jax's serialized VJP (``vjp_order``) of a loaded artifact, each eager half run like a call.

``Exported.call`` wraps an artifact in a ``jax.custom_vjp`` whose backward pass calls
``Exported.vjp()``. Under an eager ``jax.grad`` both halves then compile in every process, and
neither a wheel's precompiled executables nor the executable cache can serve them. This is the
same rule, with the halves handed to eager calls: the forward pass runs the artifact's own
``EagerCall`` (shipped, cached or compiled executables) and the backward pass an ``EagerCall``
of the VJP. Halves that see tracers (under ``jax.jit``, ``vmap``, a second derivative) take
jax's own calls, exactly as ``Exported.call`` makes them.

What those calls cannot do (``vmap``: ``call_exported`` has no batching rule; forward mode on
a ``custom_vjp``; a second derivative from a VJP serialized without its own) jax reports in
its words, naming neither the function nor the option that would serve it. ``IN_OUR_WORDS``
turns each into the function's name, the transformation and the option; then the source is
traced (a ``FallbackWarning``), or ``ArtifactError`` in strict mode (``on_missing``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hatch_jaxexport.runtime.jaxcompat import x64_context

#: jax's error (its type and a fragment of its message) -> what the function lacks, in the
#: words of the other unserved cells of the option matrix (docs/transformations.md).
IN_OUR_WORDS: dict[tuple[type[Exception], str], str] = {
    (NotImplementedError, "Batching rule for 'call_exported'"):
        "jax.vmap (also inside jax.jacrev, vmap of grad or grad of vmap) needs the batched "
        "artifacts, which were not baked (vjp_order alone keeps jax's native VJP); set "
        "vmap=True in @exportable(...)",
    (TypeError, "can't apply forward-mode autodiff (jvp) to a custom_vjp"):
        "forward-mode differentiation (jax.jvp, jax.jacfwd, jax.linearize, jax.hessian...) "
        "needs the jvp artifact, which was not baked (vjp_order alone keeps jax's native "
        "VJP); set ad_order=1 in @exportable(...)",
    (ValueError, "No VJP is available"):
        "a second-order derivative (jax.grad of jax.grad...) needs the VJP of the VJP, which "
        "was not baked; set vjp_order=2 (or ad_order=2) in @exportable(...)",
}


def in_our_words(err: Exception) -> str | None:
    """What ``err`` (raised by jax inside a native VJP's call) means for the function, or
    ``None`` for an error of another kind."""
    return next((why for (kind, fragment), why in IN_OUR_WORDS.items()
                 if isinstance(err, kind) and fragment in str(err)), None)


def settle_in_background(settle: Callable[[], None]) -> None:
    """Run ``settle`` (which settles a backward pass's executable) in a thread while the
    forward pass runs, so that on a cold machine the two compiles overlap (XLA compiles
    without the GIL), under the caller's ``jax_enable_x64`` (a thread does not see a
    ``jax.enable_x64`` block). A failure is left to the backward pass, which settles the
    executable again and says why."""
    import threading

    import jax

    x64 = bool(jax.config.jax_enable_x64)

    def run() -> None:
        try:
            with x64_context(x64):
                settle()
        except Exception:  # the backward pass settles it again and reports why
            pass

    # not a daemon: a thread inside XLA's compiler at interpreter exit aborts the process
    threading.Thread(target=run, name="hatch-jaxexport-vjp").start()


class NativeVjpCall:
    """``jax.jit(exported.call)``, with ``traced``: the form ``EagerCall`` runs under a
    transformation (a ``jax.custom_vjp`` over the flat arguments).

    Args:
        exported: The artifact, serialized with ``vjp_order >= 1``.
        run_primal: The artifact's eager call (its ``EagerCall``), given concrete arguments.
        make_vjp: Makes the VJP's eager call on flat concrete arrays (primal inputs, then
            output cotangents), which returns the input cotangents; called once, when the
            first eager backward pass is prepared or run.
        source_flat: The function's source over the flat inputs (flat outputs), traced
            where jax's calls cannot serve a transformation; ``None``: jax's error stands.
        on_missing: Told what the function lacks (``IN_OUR_WORDS``) before the source is
            traced: warns, or raises ``ArtifactError`` in strict mode.
    """

    def __init__(self, exported: Any, run_primal: Callable[..., Any],
                 make_vjp: Callable[[], Callable[..., Any]], *,
                 source_flat: Callable[..., tuple[Any, ...]] | None = None,
                 on_missing: Callable[[str], None] | None = None) -> None:
        import jax

        self.exported = exported
        self._source_flat = source_flat
        self._on_missing = on_missing
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
        try:
            out = self._flat(*leaves)
        except (NotImplementedError, TypeError, ValueError) as err:
            out = self._lacking(err)(*leaves)
        return self.exported.out_tree.unflatten(out)

    def _lacking(self, err: Exception) -> Callable[..., tuple[Any, ...]]:
        """The source (flat), to trace where jax's call raised ``err`` for a transformation
        that no baked member serves, once ``on_missing`` said so (it raises in strict mode);
        ``err`` raised again for any other error."""
        why = in_our_words(err)
        if why is None or self._source_flat is None or self._on_missing is None:
            raise err
        self._on_missing(why)
        return self._source_flat

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
        import jax

        vjp = self._eager_vjp()
        key = tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves)  # concrete arrays
        if key in self._prepared:
            return
        self._prepared.add(key)

        def settle() -> None:
            args, kwargs = self.exported.in_tree.unflatten(leaves)
            out = jax.eval_shape(self.plain, *args, **kwargs)
            cotangents = [jax.ShapeDtypeStruct(o.shape, o.dtype)
                          for o in jax.tree_util.tree_leaves(out)]
            vjp.prepare((*leaves, *cotangents))  # type: ignore[attr-defined]
        settle_in_background(settle)

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
            call = vjp.call if vjp.has_vjp() or self._source_flat is None else \
                self._last_vjp(vjp)
            try:
                found = call(*residuals, *fixed)
            except (NotImplementedError, TypeError, ValueError) as err:
                # the source's VJP at the primal inputs (the residuals)
                _, pullback = jax.vjp(self._lacking(err), *residuals)
                found = pullback(tuple(cotangents))
        return tuple(jax.tree_util.tree_leaves(found))

    def _last_vjp(self, vjp: Any) -> Callable[..., tuple[Any, ...]]:
        """``vjp.call`` of a VJP serialized without its own (``vjp_order=1``). Differentiated
        (a second derivative), jax would raise ``No VJP is available`` outside this call;
        here ``on_missing`` says what to set (raising in strict mode) and the source's VJP
        is differentiated instead."""
        import jax

        count = len(self.exported.in_avals)
        call = jax.custom_vjp(lambda *flat: tuple(jax.tree_util.tree_leaves(vjp.call(*flat))))

        def backward(flat: tuple[Any, ...], cotangents: Sequence[Any]) -> tuple[Any, ...]:
            source = self._lacking(ValueError("No VJP is available"))

            def source_vjp(*values: Any) -> tuple[Any, ...]:
                return jax.vjp(source, *values[:count])[1](tuple(values[count:]))
            return jax.vjp(source_vjp, *flat)[1](tuple(cotangents))

        call.defvjp(lambda *flat: (call(*flat), flat), backward)
        return call


__all__ = ["NativeVjpCall", "settle_in_background"]
