"""The ``@exportable`` decorator: marks a function with its export specs (traces nothing).

``exportable`` validates the spec (``formats.export_spec.check_spec``) and wraps the function in an
``ExportableFunction``, recorded in a module-level registry for the build to discover. A call
tries the function's resolved fast path (``_resolved_calls``) and otherwise goes to the loader,
imported on the first call so that importing a package of exportables imports no jax.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hatch_jaxexport.errors import SpecError
from hatch_jaxexport.formats.export_spec import (
    CallLayout,
    ExportSpec,
    SpecOptions,
    check_spec,
    method_owner,
    split_name,
    unbound_method,
)
from hatch_jaxexport.runtime.call._function_facade import FunctionLike, function_facade
from hatch_jaxexport.runtime.call._resolved_calls import ResolvedCalls, fast_path
from hatch_jaxexport.runtime.jaxcompat import lowering_config

# Imported in functions: the loader and recorded calls, only on a function's first call: importing
# a baked package loads the decorator's modules only, no jax; the aux data keys
# (``artifacts.aux_keys``), only for a structure with a registered pytree node.

_serve: Callable[..., Any] | None = None  # the fail-safe line's entry point, imported lazily
_eager: Callable[[], bool] | None = None  # whether no trace is active (``jaxcompat.eager_probe``)


class ExportableFunction(metaclass=FunctionLike):
    """A function marked with ``@exportable``; calling it runs the baked artifact when present.

    ``@exportable`` returns a real function (``inspect.isfunction`` holds) whose attributes
    are this record's (``_function_facade``); ``isinstance(fn, ExportableFunction)`` holds for
    it too.

    Attributes:
        export_spec: What the decorator was told (structures, platforms, options).
        signature: The source function's signature, used to bind calls.
        package: The top-level package whose ``_jaxexport/`` folder holds the artifacts.
        __wrapped__: The source function (traced only when no artifact fits).
    """

    def __init__(self, fn: Callable[..., Any], spec: ExportSpec, signature: inspect.Signature,
                 layouts: tuple[CallLayout, ...]) -> None:
        source = user_function(fn)  # the user's, under a jax.custom_gradient wrapper too
        functools.update_wrapper(self, source)
        self.__wrapped__ = fn
        self.export_spec = spec
        self.signature = signature
        self.layouts = layouts
        self.package = (getattr(source, "__module__", None) or "__main__").split(".")[0]
        #: What the loader resolved for this function's calls; written only through its methods.
        self.calls = ResolvedCalls()
        #: ``fast_path`` over ``calls``: what a call of this object or its facade runs.
        self._call = fast_path(self.calls, self.call_resolving)
        # what the facade function reads from the shared ``__dict__`` (on this object the
        # class's properties and methods answer the same)
        self.__exportable__ = self
        vars(self).update(__signature__=signature, name=spec.name,
                          call_report=self.call_report, staged_report=self.staged_report,
                          clear_cache=self.clear_cache)

    def as_function(self) -> types.FunctionType:
        """A new real function that calls and reads like this object (what ``@exportable``
        returns)."""
        return function_facade(self, self._call, _innermost(self))

    # What decorators read from a function, so that one stacks on this object in either
    # order (``@jaxtyped(typechecker=beartype)`` reads ``__globals__`` to resolve string
    # annotations; equinox and functools read the rest). ``functools.update_wrapper`` above
    # copied ``__module__``, ``__name__``, ``__qualname__``, ``__doc__``, ``__annotations__``
    # (and ``__type_params__`` on Python 3.12+); these come from the innermost function of the
    # source's ``__wrapped__`` chain, whose parameters ``inspect.signature`` shows. Properties
    # of the class: ``__call__`` does no more work than before.

    @property
    def __globals__(self) -> dict[str, Any]:
        """The source function's module namespace (where its annotations' names live)."""
        return _innermost(self).__globals__  # type: ignore[no-any-return]

    @property
    def __code__(self) -> types.CodeType:
        return _innermost(self).__code__  # type: ignore[no-any-return]

    @property
    def __defaults__(self) -> tuple[Any, ...] | None:
        return _innermost(self).__defaults__  # type: ignore[no-any-return]

    @property
    def __kwdefaults__(self) -> dict[str, Any] | None:
        return _innermost(self).__kwdefaults__  # type: ignore[no-any-return]

    @property
    def __closure__(self) -> tuple[Any, ...] | None:
        return _innermost(self).__closure__  # type: ignore[no-any-return]

    @property
    def __signature__(self) -> inspect.Signature:
        """The source's signature (``inspect.signature`` reads it without unwrapping)."""
        return self.signature

    def clear_cache(self) -> None:
        """Forget resolved artifacts and fallbacks (they are resolved again on the next call)."""
        self.calls.clear()

    def call_report(self) -> list[Any]:
        """How this process served each first eager call of this function: one
        ``ServedCall(function, signature, tier, seconds, not_shipped)`` per signature (tier
        ``shipped``, ``cached``, ``compiled``, ``quick``, ``cached-quick``, ``optimized``), and
        a ``traced`` one, with the reason, per structure that runs the source. ``not_shipped``
        says why no shipped executable served it. ``HATCH_JAXEXPORT_REPORT=1`` prints the same
        as each first call happens."""
        from hatch_jaxexport.runtime.call.loader import call_report

        return call_report(self)

    def staged_report(self) -> list[Any]:
        """How often this process staged calls of this function into a caller's trace (its
        arguments tracers: under ``jax.jit``, ``vmap``, ``pmap``, ``grad``...), which
        ``call_report()`` does not list: one ``StagedCall(function, transformation, tier,
        count, reason)`` per transformation and outcome, tier ``served`` (the artifact staged)
        or ``traced`` (the source traced there, with the reason). ``HATCH_JAXEXPORT_REPORT=1``
        prints a line the first time each occurs."""
        from hatch_jaxexport.runtime.call.staging import staged_report

        return staged_report(self)

    @property
    def name(self) -> str:
        """The name in the manifest (``module:qualname`` unless given)."""
        return self.export_spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def call_resolving(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call the fast path did not take: matched, resolved and run by the loader, behind
        the default mode's fail-safe line (``failsafe.serve``)."""
        global _serve, _eager
        if _serve is None:
            from hatch_jaxexport.runtime.call.failsafe import serve
            from hatch_jaxexport.runtime.jaxcompat import eager_probe

            _serve, _eager = serve, eager_probe()
        if _eager is not None and _eager():
            result = _serve(self, args, kwargs)
        else:  # inside a trace: counted where a tracer makes it staged (``staging``)
            from hatch_jaxexport.runtime.call.staging import staged_call

            result = staged_call(self, _serve, args, kwargs)
        if not self.export_spec.structures:  # spec-less: a call the source completed
            from hatch_jaxexport.runtime.call import _recorder as recorder

            if recorder.RECORDING:  # the build can bake it
                recorder.note_call(self, args, kwargs)
        return result

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """Bind like the function it wraps, so that a decorated method works: ``op.apply(x)``
        calls it with ``op`` as its first argument (``self``, which its structure gives a
        pytree spec); looked up on the class, the function itself."""
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<exportable {self.name}>"


def _innermost(function: ExportableFunction) -> Any:
    """The function at the end of the source's ``__wrapped__`` chain (the source itself when
    it wraps nothing: a plain function, a ``jax.jit`` of one is unwrapped to it; the user's
    function under ``jax.custom_gradient``)."""
    return user_function(function.__wrapped__)


def _custom_gradient_inner(fn: Any) -> Any:
    """The function ``jax.custom_gradient`` wrapped, where ``fn`` is jax's wrapper of it;
    else ``None``. jax (0.4 to 0.12 at least) wraps it in a ``custom_vjp`` of a local
    ``wrapped_fun(*args, **kwargs)`` that closes over it as ``fun`` and exposes it nowhere
    else (0.12 gives the wrapper the user's name, not its ``__wrapped__``); a jax that
    exposes it by ``__wrapped__`` is unwrapped before this is asked."""
    code = getattr(fn, "__code__", None)
    # the code's own qualname: jax 0.12 copies the user's name onto the wrapper's __qualname__
    if code is None or not getattr(code, "co_qualname", "").startswith("custom_gradient."):
        return None
    cells = dict(zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False))
    try:
        inner = cells["fun"].cell_contents if "fun" in cells else None
    except ValueError:  # an empty cell
        return None
    return inner if callable(inner) else None


#: The classes of jax's custom-derivative wrappers, by name (``jax.custom_vjp``, ``custom_jvp``).
_JAX_WRAPPERS = ("custom_vjp", "custom_jvp")


def is_jax_wrapper(fn: Any) -> bool:
    """Whether ``fn`` is (or wraps) one of jax's custom-derivative wrappers (``custom_vjp``,
    ``custom_jvp``, what ``custom_gradient`` returns), whose own signature and names are
    jax's, not the user's."""
    return any((type(f).__name__ in _JAX_WRAPPERS and type(f).__module__.startswith("jax."))
               or getattr(f, "__qualname__", "").startswith("custom_gradient.")
               for f in (fn, inspect.unwrap(fn)))


def user_function(fn: Any) -> Any:
    """The user's function ``fn`` stands for: the end of its ``__wrapped__`` chain, through
    the wrappers of ``jax.custom_vjp``/``custom_jvp`` (``functools.update_wrapper``) and the
    closure of ``jax.custom_gradient``'s; ``fn``'s innermost wrapper where none leads on."""
    found = inspect.unwrap(fn)
    for _ in range(8):  # a custom_gradient over another custom_gradient: bounded anyway
        inner = _custom_gradient_inner(found)
        if inner is None:
            return found
        found = inspect.unwrap(inner)
    return found


#: Every ExportableFunction created, by module, for discovery at build time.
REGISTRY: dict[str, list[ExportableFunction]] = {}


#: Decoration errors of jax's wrappers (``is_jax_wrapper``), by module: the build reports them
#: (``decoration_errors_in``), a strict call raises them, a default call runs the source.
DECORATION_ERRORS: dict[str, list[SpecError]] = {}


def _wrap(fn: Callable[..., Any], name: str | None, specs: tuple[Any, ...],
          options: SpecOptions) -> ExportableFunction:
    """Validate ``@exportable``'s arguments for ``fn`` and wrap it (``SpecError`` if bad)."""
    source = user_function(fn)
    if is_jax_wrapper(source):  # still jax's wrapper, not the user's function: nothing to read
        raise SpecError(_unreadable_wrapper(fn))
    spec, signature, layouts = check_spec(source, name, specs, options,
                                          lowering_config=lowering_config(), keyer=_aux_key)
    return ExportableFunction(fn, spec, signature, layouts)


def _aux_key(cls: type, aux: Any) -> str:
    """``aux_keys.aux_key``, imported when a structure first keys a registered node's aux
    data: a package whose structures hold only dicts, lists, tuples and arrays never loads it."""
    from hatch_jaxexport.runtime.artifacts.aux_keys import aux_key

    return aux_key(cls, aux)


def _unreadable_wrapper(fn: Any) -> str:
    """Why a jax custom-derivative wrapper cannot be decorated, naming the user's function
    as far as the decorating line shows it, and what to do."""
    frame = _decorating_frame()
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
    return (f"@exportable at {where}: cannot read the parameters of the function this "
            f"jax {type(fn).__name__} wraps ({getattr(fn, '__qualname__', repr(fn))} is jax's "
            f"wrapper, and this jax does not expose the function inside it); put @exportable "
            f"on a plain function that calls it (def f(x): return wrapped(x)), or write the "
            f"rule with jax.custom_vjp")


def _decorating_frame() -> Any:
    """The frame of the line that applied ``@exportable`` (the first outside this module)."""
    import sys

    frame: Any = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame


class _UndecoratedCall:
    """What ``@exportable`` returns where it could not decorate one of jax's wrappers: the
    source, called as it is in default mode; in strict mode the decoration's error."""

    def __init__(self, fn: Any, error: SpecError) -> None:
        self.fn, self.error = fn, error

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from hatch_jaxexport.formats.settings import strict_mode

        if strict_mode():
            raise self.error
        return self.fn(*args, **kwargs)


def _deferred(fn: Any, error: SpecError) -> Any:
    """``fn`` as a function that runs it, the decoration ``error`` kept for the build and for
    strict calls: a decoration error of jax's wrappers never breaks importing the package."""
    module = getattr(user_function(fn), "__module__", None) or "__main__"
    if module.startswith("jax."):  # jax's wrapper: the decorating module is the caller's
        frame = _decorating_frame()
        module = frame.f_globals.get("__name__", "__main__") if frame else "__main__"
    DECORATION_ERRORS.setdefault(module, []).append(error)
    call = _UndecoratedCall(fn, error)

    @functools.wraps(fn)
    def undecorated(*args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    return undecorated


def exportable(*specs: Any, platforms: Sequence[str] | str | None = None, vjp_order: int = 0,
               export_with_kwargs: bool = False, skip_jitting: bool = False,
               static: Mapping[str, Sequence[Any]] | None = None,
               constraints: Sequence[str] = (), name: str | None = None,
               ad_order: int = 0, vmap: bool = False, tiered: bool | None = None,
               concrete: Mapping[str, Sequence[int]] | None = None,
               mesh: Mapping[str, int] | Sequence[Mapping[str, int] | None] | None = None,
               in_specs: Mapping[str, Any] | None = None, out_specs: Any = None,
               x64: bool | str | None = None,
               executables: bool | Sequence[str] | None = None,
               executable_sizes: Mapping[str, Sequence[int]] | None = None,
               ) -> Callable[[Callable[..., Any]], ExportableFunction]:
    """Mark a function for export at build time; traces nothing.

    Forms: ``@exportable({"x": ("a, b", "float32")})`` (the name defaults to
    ``module:qualname``) and ``@exportable("name", structure, alternative, ...)`` (the
    econpizza ``cacheable_function_with_export`` form). Spec-less, ``@exportable`` or
    ``@exportable()``: its artifacts are exactly the calls ``HATCH_JAXEXPORT_RECORD`` recorded
    (one concrete-size artifact each); other calls trace the source.

    Args:
        *specs: An optional name, then one or more structures: dicts mapping argument names to
            ``(shape, dtype)``, ``(shape, dtype, [constraints])``, ``jax.ShapeDtypeStruct`` or
            dict/list/tuple/namedtuple/dataclass trees of them. Each structure is one symbolic
            scope; the loader picks the one a call matches.
        platforms: Platforms to export for (``cpu``, ``cuda``, ``rocm``, ``tpu``); default:
            the build's ``platforms`` option, else ``("cpu",)``.
        vjp_order: Reverse-mode order serialized with jax's own mechanism (as jax.export).
        export_with_kwargs: Export (and call the artifact) with keyword arguments.
        skip_jitting: The function is already a ``jax.jit`` (with its static arguments).
        static: Argument name to the values to bake, one artifact per combination (str,
            int, float, bool, None, Enums, frozen dataclasses and tuples of these); a structure
            may pin its own, ``"axis": static(-1)``: exported and matched with those only.
        constraints: Symbolic constraints (``"a >= 2"``) added to every structure.
        name: The function's name in the manifest (same as a leading string).
        ad_order: ``1`` or ``2`` bakes companion artifacts for forward and reverse mode to that
            order (``jax.jvp``, ``jax.jacfwd``, ``jax.hessian``... on the loaded function).
        vmap: Also bake batched artifacts, so ``jax.vmap`` runs as one call.
        tiered: Tiered compilation of eager first calls (quick tier, optimized in the
            background): ``None`` follows ``HATCH_JAXEXPORT_TIERED`` and the platform default.
        concrete: Dimension symbol to sizes (``{"n": [64, 1024]}``): also bake concrete-size
            StableHLO (non-JAX runtimes such as IREE; where symbolic export fails, served).
        mesh: Also bake sharded variants: a dict of axis sizes (``{"data": 2, "model": 2}``)
            bakes the single-device variant and that mesh; a list names the variants exactly
            (``None`` for the single-device one). The loader picks by the call's mesh.
        in_specs: Argument name to its partition spec on the mesh (a ``PartitionSpec``, a
            tuple like ``("data", None)``, or a pytree prefix of them); unnamed arguments are
            replicated.
        out_specs: The outputs' partition specs (one for all, or a pytree prefix of the
            output); ``None`` leaves the outputs' placement to jax.
        x64: The ``jax_enable_x64`` value to export under: ``None`` (the value in effect when
            the function is decorated, so a dependency that turns x64 on when another module
            imports it changes nothing here), ``True``, ``False``, or ``"both"``: one artifact
            per value, the loader picks the one matching the process. A call in a process with
            another value traces the source (``FallbackWarning``). Structures with 64-bit
            dtypes are always exported with x64 on.
        executables: Its precompiled executables: ``None`` (the build's option), ``False``,
            ``True`` (the builder's targets) or a list such as ``["x86_64-avx2"]``.
        executable_sizes: Dimension symbol to the sizes to compile executables for (like
            ``concrete``, its default); a function without symbols needs none.

    Returns:
        A decorator returning a function ([ExportableFunction][hatch_jaxexport.ExportableFunction]).

    Raises:
        SpecError: A malformed spec, naming the function, the argument and the problem.
    """
    name, specs = split_name(specs, name)
    options = SpecOptions(platforms, vjp_order, export_with_kwargs, skip_jitting, static,
                          constraints, ad_order, vmap, tiered, concrete, mesh, in_specs,
                          out_specs, x64, executables, executable_sizes)  # in field order
    if len(specs) == 1 and _is_function(specs[0]):  # bare @exportable: spec-less
        return _decorate(specs[0], name, (), options)  # type: ignore[no-any-return]

    def decorate(fn: Callable[..., Any]) -> Any:
        return _decorate(fn, name, specs, options)

    return decorate


def _is_function(value: Any) -> bool:
    """Whether ``@exportable``'s only argument is the decorated function (bare form), not a
    structure (a dict, a ``ShapeDtypeStruct``...) or a name."""
    return (callable(value) or isinstance(value, staticmethod | classmethod)) and \
        not isinstance(value, Mapping | str) and not hasattr(value, "shape")


def _decorate(fn: Any, name: str | None, specs: tuple[Any, ...], options: SpecOptions) -> Any:
    """Wrap ``fn`` and register it for the build; a ``staticmethod`` stays one around the
    wrapper (it never binds), a ``classmethod`` is refused (its ``cls`` is no array)."""
    if isinstance(fn, staticmethod):  # @exportable above @staticmethod
        return staticmethod(_decorate(fn.__func__, name, specs, options))
    if isinstance(fn, classmethod):
        method = fn.__func__
        raise SpecError(f"@exportable on {method.__qualname__}: " + unbound_method(
            "cls", method_owner(method) or "its class", method.__name__))
    try:
        record = _wrap(fn, name, specs, options)
    except SpecError as err:
        if not is_jax_wrapper(fn):
            raise
        return _deferred(fn, err)
    REGISTRY.setdefault(getattr(record, "__module__", None) or "__main__", []).append(record)
    return record.as_function()


def decoration_errors_in(package: str) -> list[SpecError]:
    """The decoration errors ``@exportable`` kept in ``package`` and its submodules
    (``DECORATION_ERRORS``), for the build to report."""
    return [err for module, errors in DECORATION_ERRORS.items()
            if module == package or module.startswith(package + ".") for err in errors]


def registered_in(package: str) -> list[ExportableFunction]:
    """The exportables defined in ``package`` and its submodules, in definition order."""
    found = []
    for module, items in REGISTRY.items():
        if module == package or module.startswith(package + "."):
            found += items
    return found


__all__ = ["DECORATION_ERRORS", "REGISTRY", "ExportableFunction", "decoration_errors_in",
           "exportable", "is_jax_wrapper", "registered_in", "user_function"]
