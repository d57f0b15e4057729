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

A symbolic artifact at a size the wheel has no form of is refined here first, where the wheel
has its module as text printed by the running jaxlib (``bake.concrete.forms``, the ``text``
form): a ``main`` of the call's static types converts its arguments to the artifact's and
calls the artifact's own ``main``, and jaxlib's C++ shape refinement (``jaxcompat.
refine_stablehlo``) makes every shape static, as jax's ``call_exported`` lowering does, but
without its MLIR context in Python and its wrapper (``refined``). Anything it cannot do, the
usual lowering does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.runtime.artifacts.program import ArtifactProgram
from hatch_jaxexport.runtime.jaxcompat import (
    compile_stablehlo,
    compiled_from_loaded,
    initialize_lapack,
    lapack_init_skipped,
    refine_stablehlo,
    tensor_type,
    with_module,
)

# Imported in functions: the family's flat call (a member's convention, or jax's usual
# lowering when the direct compile fails) and the notices' logger (a refinement that
# failed), only where a call needs them: each module is a file to find and read on a first
# call (about 1 ms on the TPU machine this project measures on).

#: How a module's text declares its entry point (``module_text``): one, renamed by ``refined``.
MAIN = "func.func public @main("
#: The name ``refined`` gives the artifact's own ``main``, called by the one it adds.
_RENAMED_MAIN = "_hatch_jaxexport_main"


class DirectModule:
    """A concrete-size ``Exported`` to compile for an eager call: ``lower(...)`` and
    ``compile(...)`` as ``jax.jit(exported.call)``'s, minus the lowering. Made by ``of``."""

    def __init__(self, exported: Any, platform: str, lapack: bool, flat: bool = False,
                 usual: Any = None) -> None:
        self.exported, self.platform, self.lapack, self.flat = exported, platform, lapack, flat
        #: What jax lowers should the direct compile fail: ``exported``, or the symbolic
        #: artifact of a module refined here (``refined``: not a portable artifact).
        self.usual = exported if usual is None else usual
        self._call_args: tuple[tuple[Any, ...], dict[str, Any]] = ((), {})

    @classmethod
    def of(cls, exported: Any, lapack: bool, flat: bool = False, usual: Any = None
           ) -> DirectModule | None:
        """The direct form of ``exported`` where its module takes the call's flat arrays as
        they are (``runs_as_is``) and has no symbolic dimension (so no dimension argument);
        else ``None``. ``flat``: called with the flat arrays, returning a list of the flat
        results (the convention of a transformation family's member,
        ``Family.exported_call``)."""
        try:
            direct = runs_as_is(exported) and \
                not getattr(exported, "uses_global_constants", False) and \
                all(isinstance(d, int) for a in (*exported.in_avals, *exported.out_avals)
                    for d in a.shape)
        except AttributeError:  # another jax's ``Exported``: the usual lowering
            return None
        return cls(exported, exported.platforms[0], lapack, flat, usual) if direct else None

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
            from hatch_jaxexport.runtime.artifacts.family import flat_call

            args, kwargs = self._call_args
            usual = self.usual
            with lapack_init_skipped(not self.lapack):
                lowered = jax.jit(flat_call(usual) if self.flat else usual.call
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

        usual = None
        if (exported := sized_form(types)) is None:
            try:
                exported = program.exported()
            except ArtifactError:
                return None
            exported = exported.vjp() if form == "vjp" else exported
            if exact_types(exported) is None and \
                    (text := program.module_text(form)) is not None:
                exported, usual = refined(exported, text, types) or exported, exported
        direct = DirectModule.of(exported, lapack, flat, usual) \
            if exact_types(exported) == types else None
        if direct is not None:
            return direct
        from hatch_jaxexport.runtime.artifacts.family import flat_call

        return jax.jit(flat_call(exported) if flat else exported.call)
    return lowerable


def refined(exported: Any, text: str, types: tuple[Any, ...]) -> Any | None:
    """``exported`` (symbolic) for exactly these flat argument types, its module ``text`` (as
    this jaxlib prints it) refined at them without jax's lowering: an ``Exported`` of static
    shapes that ``DirectModule`` compiles; ``None`` where that fails (the usual lowering then
    serves the call, and raises what jax raises)."""
    import jax

    from hatch_jaxexport.runtime.artifacts.family import flat_call

    if text.count(MAIN) != 1 or _RENAMED_MAIN in text:  # not a module this can wrap
        return None
    try:
        inputs = [(tensor_type(dims, dtype), tensor_type(aval.shape, aval.dtype.name))
                  for (dims, dtype), aval in zip(types, exported.in_avals, strict=True)]
        outs = jax.eval_shape(flat_call(exported), *(jax.ShapeDtypeStruct(dims, dtype)
                                                      for dims, dtype in types))
        outputs = [(tensor_type(out.shape, out.dtype.name),
                    tensor_type(aval.shape, aval.dtype.name))
                   for out, aval in zip(outs, exported.out_avals, strict=True)]
        module = refine_stablehlo(_with_static_main(text, inputs, outputs))
    except Exception as err:  # any failure: the usual lowering serves the call
        from hatch_jaxexport.runtime.notices import LOGGER

        LOGGER.debug("hatch-jaxexport: %s refined by jax's lowering: %s: %s",
                     exported.fun_name, type(err).__name__, str(err)[:300])
        return None
    return with_module(exported, [dims for dims, _ in types], [out.shape for out in outs],
                       module)


def _with_static_main(text: str, inputs: list[tuple[str, str]],
                      outputs: list[tuple[str, str]]) -> str:
    """Module ``text`` with its ``main`` renamed and private, called by a new ``main`` of the
    static types: ``inputs`` and ``outputs`` are (static type, the artifact's type) pairs,
    converted between as jax's ``call_exported`` lowering converts them."""
    body = text.replace(MAIN, f"func.func private @{_RENAMED_MAIN}(", 1)
    params = ", ".join(f"%arg{i}: {static}" for i, (static, _) in enumerate(inputs))
    lines = [f"  func.func public @main({params}) -> ({', '.join(s for s, _ in outputs)}) {{"]
    lines += [f"    %in{i} = stablehlo.convert %arg{i} : ({static}) -> {own}"
              for i, (static, own) in enumerate(inputs)]
    call = (f"call @{_RENAMED_MAIN}({', '.join(f'%in{i}' for i in range(len(inputs)))}) : "
            f"({', '.join(own for _, own in inputs)}) -> "
            f"({', '.join(own for _, own in outputs)})")
    results = [f"%out#{i}" for i in range(len(outputs))] if len(outputs) > 1 else \
        ["%out"][:len(outputs)]
    lines.append(f"    %out:{len(outputs)} = {call}" if len(outputs) > 1 else
                 f"    %out = {call}" if outputs else f"    {call}")
    lines += [f"    %res{i} = stablehlo.convert {result} : ({own}) -> {static}"
              for i, (result, (static, own)) in enumerate(zip(results, outputs, strict=True))]
    returned = ", ".join(f"%res{i}" for i in range(len(outputs)))
    lines.append(f"    return {returned} : {', '.join(s for s, _ in outputs)}" if outputs
                 else "    return")
    end = body.rindex("}")
    return body[:end] + "\n".join(lines) + "\n  }\n}\n"


def runs_as_is(exported: Any) -> bool:
    """Whether ``exported``'s module takes a call's flat arrays as they are and returns its
    flat results: one platform and one device (no platform argument), every input kept, no
    effect (no token), no sharding. ``AttributeError`` on another jax's ``Exported``."""
    shardings = [*exported.in_shardings_hlo, *exported.out_shardings_hlo]
    return len(exported.platforms) == 1 and exported.nr_devices == 1 and \
        not exported.ordered_effects and not exported.unordered_effects and \
        tuple(exported.module_kept_var_idx) == tuple(range(len(exported.in_avals))) and \
        all(sharding is None for sharding in shardings)


def exact_types(exported: Any) -> tuple[Any, ...] | None:
    """``exported``'s flat input types as a signature's (``((dims...), dtype)`` each), or
    ``None`` where a dimension is symbolic."""
    if not all(isinstance(d, int) for aval in exported.in_avals for d in aval.shape):
        return None
    return tuple((tuple(aval.shape), aval.dtype.name) for aval in exported.in_avals)


__all__ = ["MAIN", "DirectModule", "eager_lowerable", "exact_types", "refined", "runs_as_is"]
