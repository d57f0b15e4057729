"""What ``@exportable`` was told about one function, checked: ``ExportSpec`` and its options.

``check_spec`` turns the decorator's arguments (a name, the structures, ``SpecOptions``) and
the function's signature into an ``ExportSpec`` and each structure's ``CallLayout``, or raises a
``SpecError`` naming the function, the option, what is allowed and what was given. Pure: what
needs jax (the lowering config, aux-data keys of pytree nodes) the decorator hands in.
"""

import inspect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from hatch_jaxexport.errors import SpecError
from hatch_jaxexport.formats.options import KNOWN_PLATFORMS
from hatch_jaxexport.formats.spec import AuxKeyer, Structure
from hatch_jaxexport.formats.statics import (
    ALLOWED_STATIC,
    StaticPin,
    encode_static_value,
    same_static,
    static_problem,
    static_text,
    unique_statics,
)
from hatch_jaxexport.formats.structure_reader import parse_structure

# Imported in functions: the checks of concrete sizes, CPU targets and meshes, only for a
# decoration that names them: importing a baked package loads the fewest modules.


# This module does not postpone its annotations (``from __future__ import annotations``):
# typing.NamedTuple would compile each field's annotation text when the class is created,
# as a package of exportables is imported (``formats.manifest`` says the same of its records).


class SpecOptions(NamedTuple):
    """The keyword options of one ``@exportable(...)``, as given: ``check_spec`` validates them
    into an ``ExportSpec`` (``exportable``'s docstring says what each means)."""

    platforms: Any = None
    vjp_order: Any = 0
    export_with_kwargs: Any = False
    skip_jitting: Any = False
    static: Any = None
    constraints: Any = ()
    ad_order: Any = 0
    vmap: Any = False
    tiered: Any = None
    concrete: Any = None
    mesh: Any = None
    in_specs: Any = None
    out_specs: Any = None
    x64: Any = None
    executables: Any = None
    executable_sizes: Any = None


#: The members a transformation family bakes per ``ad_order`` (``runtime.artifacts.family``
#: says what each computes).
KINDS_BY_ORDER = {0: ("primal",), 1: ("primal", "jvp", "vjp"),
                  2: ("primal", "jvp", "vjp", "jvp_jvp", "vjp_jvp")}
#: The reverse-mode members ``vjp_order`` adds to a family that goes through the primitive
#: (``vjp`` serves ``jax.grad``; ``vjp_jvp`` the gradient of a gradient).
REVERSE_KINDS_BY_ORDER = {0: (), 1: ("vjp",), 2: ("vjp", "vjp_jvp")}


def baked_kinds(ad_order: int, vjp_order: int) -> tuple[str, ...]:
    """The members baked for a family: ``ad_order``'s, plus the reverse-mode members that
    ``vjp_order`` asks for (orders above 2 bake the second-order ones; higher derivatives
    trace the source)."""
    kinds = list(KINDS_BY_ORDER[ad_order])
    kinds += [k for k in REVERSE_KINDS_BY_ORDER[min(vjp_order, 2)] if k not in kinds]
    return tuple(kinds)


#: The options that shape or multiply structures: a spec-less ``@exportable`` refuses them.
_NEED_A_STRUCTURE = ("static", "constraints", "concrete", "executable_sizes", "mesh", "in_specs",
                     "out_specs", "ad_order", "vmap", "vjp_order")


class ExportSpec(NamedTuple):
    """Everything ``@exportable`` was told about one function, validated.

    (A ``NamedTuple``, not a frozen dataclass: a dataclass compiles its generated methods at
    import, and importing a package of exportables imports this module.)
    """

    name: str
    structures: tuple[Structure, ...]
    platforms: tuple[str, ...] | None
    vjp_order: int
    export_with_kwargs: bool
    skip_jitting: bool
    #: Static argument name -> its values, over all structures.
    static: Mapping[str, tuple[Any, ...]]
    ad_order: int = 0
    vmap: bool = False
    tiered: bool | None = None
    #: Dimension symbol -> the sizes the function's concrete-size artifacts are baked at:
    #: served where its symbolic export fails, its concrete-size forms, and the portable
    #: variants (``portable``).
    concrete: Mapping[str, tuple[int, ...]] | None = None
    #: Precompiled executables: ``None`` follows the build's ``executables`` option, ``False``
    #: none, ``True`` the builder's targets, or these targets (``formats.cpu_targets``).
    executables: bool | tuple[str, ...] | None = None
    #: Dimension symbol -> the sizes executables are compiled for (default: ``concrete``).
    executable_sizes: Mapping[str, tuple[int, ...]] | None = None
    #: Mesh variants (``formats.mesh.MeshVariants``; ``None`` in it is the single-device variant),
    #: or ``None`` for a function that is never sharded.
    mesh: tuple[Any, ...] | None = None
    #: Per structure: argument name -> tree of ``formats.mesh.PSpec`` (with ``mesh`` only).
    in_specs: tuple[dict[str, Any], ...] | None = None
    #: The outputs' specs (``formats.mesh.PSpec`` leaves, matched to the output at export).
    out_specs: Any = None
    #: The jax config that changes lowering (``jaxcompat.LOWERING_CONFIG``) as it was when
    #: the function was decorated (``jax_enable_x64`` as ``x64=`` set it): the build exports
    #: under it, whatever other modules of the package did to jax's global config since.
    jax_config: Mapping[str, Any] | None = None
    #: ``(False, True)`` for ``x64="both"`` (one artifact per value), else ``()``.
    x64_variants: tuple[bool, ...] = ()
    #: Per structure: static argument name -> the values that structure is exported with
    #: (``static(...)`` in a structure pins them); ``None``: every structure takes ``static``.
    structure_static: tuple[Mapping[str, tuple[Any, ...]], ...] | None = None

    @property
    def uses_family(self) -> bool:
        """Whether calls go through the transformation primitive (see ``transforms``).

        Everything does except functions that only ask for jax's native ``vjp_order``.
        """
        return not (self.vjp_order > 0 and self.ad_order == 0 and not self.vmap)

    def statics_of(self, index: int) -> Mapping[str, tuple[Any, ...]]:
        """The static values structure ``index`` is exported with (name -> values)."""
        return self.static if self.structure_static is None else self.structure_static[index]

    def static_combinations(self, index: int | None = None) -> list[dict[str, Any]]:
        """Every combination of static values of structure ``index`` (one artifact each), or
        of any structure (``None``), without repeats; ``[{}]`` without statics."""
        indices = range(len(self.structures)) if index is None else (index,)
        seen: dict[str, dict[str, Any]] = {}
        for i in indices:
            values = self.statics_of(i)
            names = sorted(values)
            for combination in itertools.product(*(values[n] for n in names)):
                combo = dict(zip(names, combination, strict=True))
                seen.setdefault(repr({n: encode_static_value(v) for n, v in combo.items()}),
                                combo)
        return list(seen.values())

    def static_refusal(self, index: int, static: Mapping[str, Any]) -> str | None:
        """Why structure ``index`` does not take a call's static values (``None`` when it
        does): a structure that pins its values takes only those.

        The loader's matching calls this for each structure it tries (``plan_call``), after
        checking that each value is among ``static``'s."""
        if self.structure_static is None:
            return None
        own = self.structure_static[index]
        for name, value in static.items():
            allowed = own.get(name, ())
            if not any(same_static(value, baked) for baked in allowed):
                shown = ", ".join(static_text(encode_static_value(v)) for v in allowed)
                return (f"static argument {name!r} is {value!r}, but this structure is "
                        f"exported with {shown} only")
        return None


class CallLayout(NamedTuple):
    """How the values of one structure (plus statics) are passed: by position or keyword."""

    positional: tuple[str, ...]
    keyword: tuple[str, ...]

    def split(self, values: Mapping[str, Any], skip: Iterable[str] = ()
              ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        skipped = set(skip)
        return (tuple(values[n] for n in self.positional if n not in skipped),
                {n: values[n] for n in self.keyword if n not in skipped})


def call_layout(signature: inspect.Signature, names: set[str], with_kwargs: bool) -> CallLayout:
    positional: list[str] = []
    keyword: list[str] = []
    gap = with_kwargs
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name not in names:
            gap = True
            continue
        if param.kind == param.KEYWORD_ONLY or (gap and param.kind != param.POSITIONAL_ONLY):
            keyword.append(param.name)
        elif param.kind == param.POSITIONAL_ONLY and gap:
            raise ValueError(f"positional-only argument {param.name!r} cannot be passed after "
                             "an argument left out of the spec, or with export_with_kwargs")
        else:
            positional.append(param.name)
    return CallLayout(tuple(positional), tuple(keyword))


def _check_platforms(fn_name: str, platforms: Any) -> tuple[str, ...] | None:
    if platforms is None:
        return None
    items = (platforms,) if isinstance(platforms, str) else tuple(platforms)
    bad = [p for p in items if p not in KNOWN_PLATFORMS]
    if not items or bad:
        raise SpecError(f"@exportable spec of {fn_name}: platforms must be a non-empty list of "
                        f"{', '.join(KNOWN_PLATFORMS)}; got {platforms!r}")
    return tuple(dict.fromkeys(items))


def _static_values(fn_name: str, name: str, values: Any, where: str) -> tuple[Any, ...]:
    """One static argument's values (a list, or a single value), each checked, no repeats."""
    items = [values] if isinstance(values, str) or not isinstance(values, Iterable) \
        else list(values)
    if not items:
        raise SpecError(f"{where}: static argument {name!r} lists no values")
    for value in items:
        problem = static_problem(value)
        if problem:
            raise SpecError(f"{where}: static value {value!r} of {name!r} is {problem}; a "
                            f"static value is {ALLOWED_STATIC} (it is recorded in the manifest "
                            "as text, and a call must pass an equal value)")
    return unique_statics(items)


def _check_static(fn_name: str, static: Mapping[str, Any] | None,
                  params: Mapping[str, inspect.Parameter]) -> dict[str, tuple[Any, ...]]:
    if static is None:
        return {}
    if not isinstance(static, Mapping):
        raise SpecError(f"@exportable spec of {fn_name}: static must map argument names to "
                        f"lists of values, got {static!r}")
    out: dict[str, tuple[Any, ...]] = {}
    for name, values in static.items():
        if name not in params:
            raise SpecError(f"@exportable spec of {fn_name}: static argument {name!r} is not "
                            f"an argument of the function (it takes {', '.join(params)})")
        out[name] = _static_values(fn_name, name, values, f"@exportable spec of {fn_name}")
    return out


def _split_pins(fn_name: str, specs: tuple[Any, ...], params: Mapping[str, inspect.Parameter]
                ) -> tuple[tuple[Any, ...], list[dict[str, tuple[Any, ...]]]]:
    """The structures without their ``static(...)`` entries, and each structure's pinned
    values (argument name -> values)."""
    raws: list[Any] = []
    pins: list[dict[str, tuple[Any, ...]]] = []
    for index, raw in enumerate(specs):
        pinned: dict[str, tuple[Any, ...]] = {}
        if isinstance(raw, Mapping) and any(isinstance(v, StaticPin) for v in raw.values()):
            where = f"@exportable spec of {fn_name}, structure {index}"
            for name, value in raw.items():
                if not isinstance(value, StaticPin):
                    continue
                if name not in params:
                    raise SpecError(f"{where}: static argument {name!r} is not an argument of "
                                    f"the function (it takes {', '.join(params)})")
                pinned[name] = _static_values(fn_name, name, value.values, where)
            raw = {k: v for k, v in raw.items() if not isinstance(v, StaticPin)}
        raws.append(raw)
        pins.append(pinned)
    return tuple(raws), pins


def _structure_statics(fn_name: str, static_values: dict[str, tuple[Any, ...]],
                       pins: list[dict[str, tuple[Any, ...]]]
                       ) -> tuple[dict[str, tuple[Any, ...]], tuple[dict[str, Any], ...] | None]:
    """Every static argument's values (all structures'), and each structure's own (``None``
    when no structure pins any): a pin replaces ``static=``'s values for its structure."""
    if not any(pins):
        return static_values, None
    names = list(dict.fromkeys([*static_values, *(n for p in pins for n in p)]))
    own: list[dict[str, Any]] = []
    for index, pinned in enumerate(pins):
        values = {**static_values, **pinned}
        missing = [n for n in names if n not in values]
        if missing:
            pinned_in = next(i for i, p in enumerate(pins) if missing[0] in p)
            raise SpecError(f"@exportable spec of {fn_name}, structure {index}: static argument "
                            f"{missing[0]!r} has no values here (structure {pinned_in} pins it): "
                            f"pin it here too, e.g. {missing[0]!r}: static(...), or list its "
                            "values for every structure in static=")
        own.append({n: values[n] for n in names})
    union = {n: unique_statics(v for values in own for v in values[n]) for n in names}
    return union, tuple(own)


def _check_sharding(fn_name: str, structures: tuple[Structure, ...],
                    params: Mapping[str, inspect.Parameter], static: Mapping[str, Any],
                    mesh: Any, in_specs: Any, out_specs: Any) -> dict[str, Any]:
    """The ``mesh``/``in_specs``/``out_specs`` fields of an ExportSpec, checked (formats.mesh)."""
    if mesh is None:
        if in_specs is not None or out_specs is not None:
            raise SpecError(f"@exportable spec of {fn_name}: in_specs and out_specs need a "
                            "mesh, e.g. mesh={'data': 2}")
        return {}
    from hatch_jaxexport.formats.mesh import (
        check_in_spec_names,
        normalize_out_specs,
        parse_meshes,
        resolve_in_specs,
    )

    variants = parse_meshes(fn_name, mesh)
    if in_specs is not None:
        check_in_spec_names(fn_name, in_specs, list(params), list(static))
    resolved = tuple(resolve_in_specs(fn_name, index, structure, in_specs, variants)
                     for index, structure in enumerate(structures))
    return {"mesh": variants, "in_specs": resolved,
            "out_specs": normalize_out_specs(fn_name, out_specs, variants)}


def _check_x64(fn_name: str, x64: Any, lowering_config: Mapping[str, Any]
               ) -> tuple[dict[str, Any], tuple[bool, ...]]:
    """The recorded lowering config (``lowering_config``, the values in effect, with ``x64=``
    applied) and the x64 variants of ``x64=`` (``SpecError`` if bad)."""
    if x64 not in (None, True, False, "both") or (x64 is not None and not isinstance(
            x64, (bool, str))):
        raise SpecError(f"@exportable spec of {fn_name}: x64 must be None (jax_enable_x64 as it "
                        "is when the function is decorated), True, False or 'both' (one "
                        f"artifact per value, picked at call), got {x64!r}")
    config = dict(lowering_config)
    if isinstance(x64, bool):
        config["jax_enable_x64"] = x64
    return config, ((False, True) if x64 == "both" else ())


def _given(value: Any) -> str:
    """A refused value as a message shows it: its repr and its type."""
    kind = type(value)
    type_text = kind.__name__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__name__}"
    return f"{value!r} ({type_text})"


def _check_flags(fn_name: str, flags: Mapping[str, Any]) -> None:
    """Every boolean option must be ``True`` or ``False`` (``tiered`` also ``None``): a flag is
    recorded in the manifest, and ``vmap="yes"`` or ``vmap=0.5`` would read as true.
    ``1``/``0`` and numpy bools are refused too: ``bool(...)`` is one call away."""
    for option, value in flags.items():
        if isinstance(value, bool) or (value is None and option == "tiered"):
            continue
        allowed = "True, False or None (follow HATCH_JAXEXPORT_TIERED)" \
            if option == "tiered" else "True or False"
        hint = f"; write {bool(value)!r}" if (isinstance(value, int) and value in (0, 1)) \
            or isinstance(value, np.bool_) else ""
        raise SpecError(f"@exportable spec of {fn_name}: {option} must be {allowed}, got "
                        f"{_given(value)}{hint}")


def _check_order(fn_name: str, option: str, value: Any, allowed: str, largest: int | None,
                 ) -> None:
    """An order is a plain ``int`` (not a bool, a float or a numpy integer) in range."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0 and (
            largest is None or value <= largest):
        return
    hint = ""
    if isinstance(value, bool):
        hint = f"; a bool is not an order: write {int(value)}"
    elif isinstance(value, float) and value.is_integer() and value >= 0:
        hint = f"; write {int(value)}"
    elif not isinstance(value, int) and hasattr(value, "__index__"):
        hint = f"; write int(...), {int(value)}"
    raise SpecError(f"@exportable spec of {fn_name}: {option} must be {allowed}, got "
                    f"{_given(value)}{hint}")


def _check_orders(fn_name: str, vjp_order: Any, ad_order: Any, constraints: Any) -> None:
    _check_order(fn_name, "vjp_order", vjp_order, "an int >= 0", None)
    _check_order(fn_name, "ad_order", ad_order, "0, 1 or 2", 2)
    if isinstance(constraints, str):
        raise SpecError(f"@exportable spec of {fn_name}: constraints must be a list of "
                        f"strings, got {constraints!r}")


def method_owner(fn: Any) -> str | None:
    """The class a function is defined in, by its ``__qualname__`` (``Op.apply`` in a module
    gives ``Op``), or ``None`` for a module-level or nested function."""
    path = getattr(fn, "__qualname__", "").split(".")[:-1]
    return path[-1] if path and path[-1] != "<locals>" else None


def unbound_method(pname: str, owner: str, method: str) -> str:
    """The refusal of a method whose object has no spec: what to write instead."""
    if pname == "cls":
        return (f"argument 'cls' has no spec: a classmethod of {owner} cannot be exported (a "
                "class is not an array); decorate a @staticmethod instead (write @staticmethod "
                "above @exportable) and pass it what it needs from the class as arguments")
    return (f"argument 'self' has no spec: an exported method takes its {owner} object as an "
            "argument, which must be a pytree of arrays with a spec. For an object that holds "
            "configuration, decorate a @staticmethod (write @staticmethod above @exportable) "
            "that takes the arrays, and call it from the method; for a pytree object (an "
            "equinox Module, a registered dataclass) decorate the method once the class "
            f"exists: {owner}.{method} = exportable({{'self': {owner}(...), ...}})"
            f"({owner}.{method})")


def _structure_layout(fn_name: str, index: int, structure: Structure,
                      signature: inspect.Signature, params: Mapping[str, inspect.Parameter],
                      static_values: Mapping[str, Any], export_with_kwargs: bool,
                      owner: tuple[str, str] | None = None) -> CallLayout:
    """Check that a structure's arguments fit the signature; how its values are passed
    (``owner``: a method's class and name, for the message when ``self`` has no spec)."""
    where = f"@exportable spec of {fn_name}, structure {index}"
    for arg in structure.args:
        if arg not in params:
            raise SpecError(f"{where}: unknown argument name {arg!r} "
                            f"({fn_name} takes {', '.join(params) or 'no arguments'})")
        if arg in static_values:
            raise SpecError(f"{where}: argument {arg!r} is static; it takes values "
                            "from static=, not a (shape, dtype) spec")
    for position, (pname, param) in enumerate(params.items()):
        if pname not in structure.args and pname not in static_values \
                and param.default is param.empty:
            if position == 0 and owner is not None and pname in ("self", "cls"):
                raise SpecError(f"{where}: {unbound_method(pname, *owner)}")
            raise SpecError(f"{where}: argument {pname!r} has no spec, no default and "
                            "is not static; add it to the structure or to static=")
    try:
        return call_layout(signature, set(structure.args) | set(static_values), export_with_kwargs)
    except ValueError as err:
        raise SpecError(f"{where}: {err}") from None


def split_name(specs: tuple[Any, ...], name: str | None) -> tuple[str | None,
                                                                   tuple[Any, ...]]:
    """The name and the structures of ``@exportable("name", structure, ...)`` (the econpizza
    form) or ``@exportable(structure, ..., name=...)``; refuses a bare ``@exportable``."""
    if specs and isinstance(specs[0], str):
        if name is not None:
            raise SpecError("@exportable: the name is given twice (first argument and name=)")
        name, specs = specs[0], specs[1:]
    return name, specs


def _check_executables(fn_name: str, executables: Any) -> bool | tuple[str, ...] | None:
    """``executables=``: ``None``, a bool, or a list of known targets (``SpecError`` if not):
    CPU targets by their ``TARGETS`` name, TPU hosts (``"v5e"``, ``"v5e:2x2"``) by their key
    (``tpu:v5e:2x2``, ``formats.tpu_targets``)."""
    if executables is None or isinstance(executables, bool):
        return executables
    from hatch_jaxexport.formats.cpu_targets import TARGET_ALIASES, TARGETS
    from hatch_jaxexport.formats.tpu_targets import executable_target

    known = ", ".join(map(repr, [*TARGETS, *TARGET_ALIASES])) + " or TPU hosts such as 'v5e'"
    if isinstance(executables, str) or not isinstance(executables, Sequence) or \
            not executables or any(executable_target(t) is None for t in executables):
        raise SpecError(f"@exportable spec of {fn_name}: executables must be None, True, False "
                        f"or a non-empty list of {known}, got {_given(executables)}")
    return tuple(dict.fromkeys(str(executable_target(t)) for t in executables))


def check_spec(fn: Any, name: str | None, specs: tuple[Any, ...], options: SpecOptions, *,
               lowering_config: Mapping[str, Any], keyer: AuxKeyer,
               ) -> tuple[ExportSpec, inspect.Signature, tuple[CallLayout, ...]]:
    """Validate ``@exportable``'s arguments for ``fn``: its ``ExportSpec``, its signature and
    each structure's ``CallLayout`` (``SpecError`` naming what is wrong).

    ``lowering_config`` is the jax config that changes lowering, as it is now;
    ``keyer`` keys a registered pytree node's aux data (both need jax, which this layer does
    not import)."""
    default_name = f"{getattr(fn, '__module__', '__main__')}:" \
                   f"{getattr(fn, '__qualname__', repr(fn))}"
    if name is not None and (not isinstance(name, str) or not name):
        raise SpecError(f"@exportable spec of {default_name}: name must be a non-empty string "
                        f"(the function's name in the manifest), got {_given(name)}")
    fn_name = name or default_name
    o = options
    if not specs:
        _check_specless(fn_name, {n: getattr(o, n) for n in _NEED_A_STRUCTURE})
    _check_orders(fn_name, o.vjp_order, o.ad_order, o.constraints)
    _check_flags(fn_name, {"export_with_kwargs": o.export_with_kwargs,
                           "skip_jitting": o.skip_jitting, "vmap": o.vmap, "tiered": o.tiered})
    jax_config, x64_variants = _check_x64(fn_name, o.x64, lowering_config)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as err:
        raise SpecError(f"@exportable: cannot read the signature of {fn_name}: {err}") from None
    params = {n: p for n, p in signature.parameters.items()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    specs, pins = _split_pins(fn_name, specs, params)
    static_values, structure_static = _structure_statics(
        fn_name, _check_static(fn_name, o.static, params), pins)
    structures = tuple(parse_structure(fn_name, raw, i, o.constraints, keyer)
                       for i, raw in enumerate(specs))
    cls = method_owner(fn)
    owner = (cls, fn.__name__) if cls is not None else None
    layouts = tuple(_structure_layout(fn_name, index, structure, signature, params,
                                      static_values, o.export_with_kwargs, owner)
                    for index, structure in enumerate(structures))
    sharded = _check_sharding(fn_name, structures, params, static_values, o.mesh, o.in_specs,
                              o.out_specs)
    concrete_sizes = exe_sizes = None
    if o.concrete is not None or o.executable_sizes is not None:
        from hatch_jaxexport.formats.concrete_sizes import check_concrete

        concrete_sizes = check_concrete(fn_name, o.concrete, structures)
        exe_sizes = check_concrete(fn_name, o.executable_sizes, structures,
                                   option="executable_sizes")
    spec = ExportSpec(
        name=fn_name, structures=structures,
        platforms=_check_platforms(fn_name, o.platforms), vjp_order=o.vjp_order,
        export_with_kwargs=o.export_with_kwargs, skip_jitting=o.skip_jitting,
        static=static_values, ad_order=o.ad_order, vmap=o.vmap, concrete=concrete_sizes,
        tiered=o.tiered, jax_config=jax_config, x64_variants=x64_variants,
        executables=_check_executables(fn_name, o.executables),
        executable_sizes=exe_sizes, structure_static=structure_static, **sharded,
    )
    return spec, signature, layouts


def _check_specless(fn_name: str, options: Mapping[str, Any]) -> None:
    """A spec-less ``@exportable`` bakes exactly its recorded calls: the options that shape or
    multiply structures have nothing to apply to, and saying so beats ignoring them."""
    given = [name for name, value in options.items() if value]
    if given:
        raise SpecError(f"@exportable spec of {fn_name}: {', '.join(given)} need(s) a "
                        "structure, and none is given (a spec-less @exportable bakes exactly "
                        "the calls HATCH_JAXEXPORT_RECORD recorded); give a structure, e.g. "
                        "@exportable({'x': ('n', 'float32')}, ...), or drop the option")


__all__ = ["KINDS_BY_ORDER", "REVERSE_KINDS_BY_ORDER", "CallLayout", "ExportSpec", "SpecOptions",
           "baked_kinds", "call_layout", "check_spec",
           "method_owner", "split_name", "unbound_method"]
