"""A concrete-size module compiled straight from its StableHLO bytes, without jax's lowering.

``jax.jit(exported.call).lower(...)`` of an artifact traces the call, creates jax's first MLIR
context in Python (its dialects' import), parses the module into it, wraps it in a module of
its own and refines its shapes: about 25 ms of a small function's first call, as much as
tracing and lowering the source itself (``benchmarks/first_call_parts.py``). A concrete-size
form (``bake.concrete.forms``: one platform, no symbolic dimension, no effect) needs none of
it: its ``main`` takes exactly the call's flat arrays and returns its flat results, so the
backend's client compiles its bytes as they are, with jax's own compile options for one device
(``jaxcompat.compile_stablehlo``), and the executable is wrapped in the ``jax.stages.Compiled``
that ``jax.jit`` would have built (``jaxcompat.compiled_from_loaded``). The ops are the
artifact's, so the numbers are the ones the usual lowering gives. Where this jax's internals
differ, ``compile`` lowers the usual way instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.runtime.artifacts.family import flat_call
from hatch_jaxexport.runtime.artifacts.program import ArtifactProgram
from hatch_jaxexport.runtime.jaxcompat import (
    compile_stablehlo,
    compiled_from_loaded,
    initialize_lapack,
    lapack_init_skipped,
)


class DirectModule:
    """A concrete-size ``Exported`` to compile for an eager call: ``lower(...)`` and
    ``compile(...)`` as ``jax.jit(exported.call)``'s, minus the lowering. Made by ``of``."""

    def __init__(self, exported: Any, platform: str, lapack: bool, flat: bool = False) -> None:
        self.exported, self.platform, self.lapack, self.flat = exported, platform, lapack, flat
        self._call_args: tuple[tuple[Any, ...], dict[str, Any]] = ((), {})

    @classmethod
    def of(cls, exported: Any, lapack: bool, flat: bool = False) -> DirectModule | None:
        """The direct form of ``exported`` where its module takes the call's flat arrays as
        they are: one platform and one device, every input kept, no effect, no symbolic
        dimension (so no dimension or platform argument), no sharding; else ``None``.
        ``flat``: called with the flat arrays, returning a list of the flat results (the
        convention of a transformation family's member, ``Family.exported_call``)."""
        try:
            flat_avals = [*exported.in_avals, *exported.out_avals]
            shardings = [*exported.in_shardings_hlo, *exported.out_shardings_hlo]
            direct = len(exported.platforms) == 1 and exported.nr_devices == 1 and \
                not exported.ordered_effects and not exported.unordered_effects and \
                tuple(exported.module_kept_var_idx) == tuple(range(len(exported.in_avals))) \
                and not getattr(exported, "uses_global_constants", False) and \
                all(sharding is None for sharding in shardings) and \
                all(isinstance(d, int) for aval in flat_avals for d in aval.shape)
        except AttributeError:  # another jax's ``Exported``: the usual lowering
            return None
        return cls(exported, exported.platforms[0], lapack, flat) if direct else None

    def lower(self, *args: Any, **kwargs: Any) -> DirectModule:
        """Nothing to lower: the arguments are kept for the usual lowering, should the direct
        compile fail."""
        self._call_args = (args, kwargs)
        return self

    def compile(self, compiler_options: dict[str, Any] | None = None) -> Any:
        """The ``jax.stages.Compiled`` of the module for these arguments' types."""
        import jax

        exported = self.exported
        trees = (exported.in_tree, exported.out_tree) if not self.flat else (
            jax.tree_util.tree_structure((tuple(exported.in_avals), {})),
            jax.tree_util.tree_structure(list(exported.out_avals)))
        try:
            loaded = compile_stablehlo(exported.mlir_module_serialized, self.platform,
                                       compiler_options)
            compiled = compiled_from_loaded(
                loaded, jax.devices(self.platform)[0], exported.in_avals, exported.out_avals,
                *trees, exported.fun_name)
        except Exception:  # another jax's internals: jax lowers and compiles it
            args, kwargs = self._call_args
            with lapack_init_skipped(not self.lapack):
                lowered = jax.jit(flat_call(exported) if self.flat else exported.call
                                  ).lower(*args, **kwargs)
            return lowered.compile(compiler_options=compiler_options) if compiler_options \
                else lowered.compile()
        if self.lapack:
            initialize_lapack()
        return compiled


def eager_lowerable(program: ArtifactProgram, lapack: bool, form: str = "call",
                    flat: bool = False) -> Callable[[tuple[Any, ...]], Any | None]:
    """What an eager first call of given flat argument types lowers (``EagerCall``'s
    ``eager_lowerable``): the record's concrete-size form for exactly those types, else the
    artifact's own call where it is already of exactly those types (no symbolic dimension),
    compiled directly (``DirectModule``) where it can be, else ``jax.jit`` of it (``None``
    when the artifact is unusable: the primitive's path falls back). ``form="vjp"``: the same
    for the artifact's serialized VJP (an eager ``jax.grad``'s backward pass). ``flat``: for a
    transformation family's member, called with flat arrays, returning a list."""
    sized_form = program.sized_form(form)

    def lowerable(types: tuple[Any, ...]) -> Any | None:
        import jax  # the call path only: importing a baked package never imports jax

        if (exported := sized_form(types)) is None:
            try:
                exported = program.exported()
            except ArtifactError:
                return None
            exported = exported.vjp() if form == "vjp" else exported
        direct = DirectModule.of(exported, lapack, flat) if exact_types(exported) == types \
            else None
        return direct or jax.jit(flat_call(exported) if flat else exported.call)
    return lowerable


def exact_types(exported: Any) -> tuple[Any, ...] | None:
    """``exported``'s flat input types as a signature's (``((dims...), dtype)`` each), or
    ``None`` where a dimension is symbolic."""
    if not all(isinstance(d, int) for aval in exported.in_avals for d in aval.shape):
        return None
    return tuple((tuple(aval.shape), aval.dtype.name) for aval in exported.in_avals)


__all__ = ["DirectModule", "eager_lowerable", "exact_types"]
