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


class CallTypes:
    """What a call of an artifact is typed by without its ``Exported``: its trees, its flat
    input and output dtypes and, given flat input types (shape, dtype name), its flat output
    types where they can be told (``out_types``; ``None`` for the ``Exported`` to say them).
    The loader makes them from the manifest's record where it says them exactly
    (``executables.artifact_calls.record_types``). A slotted class: made on a first call."""

    __slots__ = ("in_dtypes", "in_tree", "out_dtypes", "out_tree", "out_types")

    def __init__(self, in_tree: Any, out_tree: Any, in_dtypes: Sequence[Any],
                 out_dtypes: Sequence[Any],
                 out_types: Callable[[Sequence[tuple[tuple[int, ...], str]]],
                                     list[tuple[tuple[int, ...], str]] | None] | None = None
                 ) -> None:
        self.in_tree, self.out_tree = in_tree, out_tree
        self.in_dtypes, self.out_dtypes = list(in_dtypes), list(out_dtypes)
        self.out_types = out_types

    @classmethod
    def of(cls, exported: Any) -> CallTypes:
        """The types an ``Exported`` says."""
        return cls(exported.in_tree, exported.out_tree, [a.dtype for a in exported.in_avals],
                   [a.dtype for a in exported.out_avals])


def cotangent_types(types: CallTypes, plain: Callable[[], Callable[..., Any]],
                    leaves: Sequence[Any], key: tuple[Any, ...]) -> list[Any]:
    """The output cotangents' types of a call at these flat inputs (``key``: their types):
    from the call's types where they tell them (the manifest), else ``eval_shape`` of the
    call's ``jax.jit`` (``plain()``), which deserializes the artifact."""
    import jax

    known = types.out_types(key) if types.out_types is not None else None
    if known is not None:
        return [jax.ShapeDtypeStruct(shape, jax.numpy.dtype(dtype)) for shape, dtype in known]
    args, kwargs = types.in_tree.unflatten(leaves)
    out = jax.eval_shape(plain(), *args, **kwargs)
    return [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in jax.tree_util.tree_leaves(out)]


class NativeVjpCall:
    """``jax.jit(exported.call)``, with ``traced``: the form ``EagerCall`` runs under a
    transformation (a ``jax.custom_vjp`` over the flat arguments).

    Args:
        exported: Gives the artifact, serialized with ``vjp_order >= 1`` (deserialized on
            first need: an eager gradient that shipped or cached executables serve never
            needs it).
        types: The call's trees and types (``CallTypes``).
        run_primal: The artifact's eager call (its ``EagerCall``), given concrete arguments.
        make_vjp: Makes the VJP's eager call on flat concrete arrays (primal inputs, then
            output cotangents), which returns the input cotangents; called once, when the
            first eager backward pass is prepared or run.
        source_flat: The function's source over the flat inputs (flat outputs), traced
            where jax's calls cannot serve a transformation; ``None``: jax's error stands.
        on_missing: Told what the function lacks (``IN_OUR_WORDS``) before the source is
            traced: warns, or raises ``ArtifactError`` in strict mode.
    """

    def __init__(self, exported: Callable[[], Any], types: CallTypes,
                 run_primal: Callable[..., Any], make_vjp: Callable[[], Callable[..., Any]], *,
                 source_flat: Callable[..., tuple[Any, ...]] | None = None,
                 on_missing: Callable[[str], None] | None = None) -> None:
        import jax

        self._exported = exported
        self.types = types
        self._source_flat = source_flat
        self._on_missing = on_missing
        self._plain: Callable[..., Any] | None = None
        self._run_primal = run_primal
        self._make_vjp = make_vjp
        self._vjp: Callable[..., Any] | None = None
        self._prepared: set[Any] = set()
        self._tracer = jax.core.Tracer
        # integer inputs or outputs have float0 cotangents: jax's own backward pass fixes them
        self._eager_backward = all(jax.numpy.issubdtype(dtype, jax.numpy.inexact)
                                   for dtype in (*types.in_dtypes, *types.out_dtypes))
        flat = jax.custom_vjp(_with_signature(self._forward_flat))  # see _with_signature
        flat.defvjp(*map(_with_signature, (self._forward_with_residuals, self._backward)))
        self._flat = flat

    @property
    def exported(self) -> Any:
        """The artifact's ``Exported`` (``UnreadableArtifact`` where jax cannot read it)."""
        return self._exported()

    @property
    def plain(self) -> Callable[..., Any]:
        """``jax.jit(exported.call)``, built on first need."""
        if self._plain is None:
            import jax

            self._plain = jax.jit(self.exported.call)
        return self._plain

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self.plain.lower(*args, **kwargs)  # type: ignore[attr-defined]

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
        if in_tree != self.types.in_tree:  # jax's own call gives the precise difference
            return self.exported.call(*args, **kwargs)
        try:
            out = self._flat(*leaves)
        except (NotImplementedError, TypeError, ValueError) as err:
            out = self._lacking(err)(*leaves)
        return self.types.out_tree.unflatten(out)

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

        args, kwargs = self.types.in_tree.unflatten(leaves)
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

        vjp = self._eager_vjp()
        key = tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves)  # concrete arrays
        if key in self._prepared:
            return
        self._prepared.add(key)

        def settle() -> None:
            cotangents = cotangent_types(self.types, lambda: self.plain, leaves, key)
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

        count = len(self.types.in_dtypes)
        call = jax.custom_vjp(lambda *flat: tuple(jax.tree_util.tree_leaves(vjp.call(*flat))))

        def backward(flat: tuple[Any, ...], cotangents: Sequence[Any]) -> tuple[Any, ...]:
            source = self._lacking(ValueError("No VJP is available"))

            def source_vjp(*values: Any) -> tuple[Any, ...]:
                return jax.vjp(source, *values[:count])[1](tuple(values[count:]))
            return jax.vjp(source_vjp, *flat)[1](tuple(cotangents))

        call.defvjp(lambda *flat: (call(*flat), flat), backward)
        return call


def _with_signature(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` as a plain function whose ``__signature__`` is computed once (what
    ``inspect.signature`` returns first), named as ``method`` for jax's messages: jax's
    ``custom_vjp`` reads its callables' signatures on every call (its debug info), a bound
    method's the slowest, and an eager ``jax.grad`` pays that on every step."""
    import inspect

    def call(*args: Any) -> Any:
        return method(*args)

    call.__name__ = call.__qualname__ = method.__name__
    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return call


__all__ = ["CallTypes", "NativeVjpCall", "cotangent_types", "settle_in_background"]
