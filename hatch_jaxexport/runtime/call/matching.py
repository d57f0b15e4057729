"""Matching a call to one of a function's structures and static values, with clear errors."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hatch_jaxexport.errors import (
    DtypeMismatch,
    PytreeMismatch,
    ShapeMismatch,
    SignatureMismatch,
    StaticValueMismatch,
)
from hatch_jaxexport.formats.dimensions import check_constraint, dim_symbols, evaluate_dim
from hatch_jaxexport.formats.dtype_names import is_key_dtype, key_data_words, key_impl
from hatch_jaxexport.formats.settings import FULL_STRUCTURES_ENV, full_structures
from hatch_jaxexport.formats.spec import (
    X64_DTYPES,
    ClassNode,
    LeafSpec,
    RegisteredNode,
    Structure,
    numpy_dtype,
    static_key,
)
from hatch_jaxexport.formats.statics import same_static
from hatch_jaxexport.runtime.jax_dtypes import dtype_text, is_key

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

_MAX_DIM = 2**31 - 1  # jax refines symbolic shapes with int32 arithmetic
# How far a structure got before failing: higher is closer (chooses the error to show).
_TREE, _LEAF, _DIMS = 0, 1, 2


class CallPlan:
    """The structure and static values a call matched, and its dynamic values by name;
    ``sizes``: what the structure's dimension symbols took in this call. A slotted class, as
    ``choice.Choice`` says why."""

    __slots__ = ("sizes", "static", "static_key", "structure_index", "values")

    def __init__(self, structure_index: int, static: dict[str, Any], static_key: str,
                 values: dict[str, Any], sizes: dict[str, int]) -> None:
        self.structure_index, self.static, self.static_key = structure_index, static, static_key
        self.values, self.sizes = values, sizes


class _NoMatch(Exception):
    def __init__(self, score: int, message: str, error: type[Exception]) -> None:
        super().__init__(message)
        self.score, self.message, self.error = score, message, error


def _has_shape(value: Any) -> bool:
    """Whether ``value`` looks like an array; ``False`` where its properties raise."""
    try:
        return hasattr(value, "shape") and hasattr(value, "dtype")
    except Exception:
        return False


def _describe_value(value: Any) -> str:
    if _has_shape(value):
        return f"{dtype_text(value.dtype)}{list(value.shape)}"
    if value is None:
        return "None"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_describe_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        inner = ", ".join(_describe_value(v) for v in value)
        return f"{type(value).__name__}({inner})" if hasattr(type(value), "_fields") else \
            (f"[{inner}]" if isinstance(value, list) else f"({inner})")
    return f"{type(value).__name__} {value!r:.40}"


def _canonical_dtype(dtype: Any) -> str:
    import jax

    return np.dtype(jax.dtypes.canonicalize_dtype(dtype)).name


Shapes = list[tuple[LeafSpec, tuple[int, ...], str]]


def _is_jax_array(value: Any) -> bool:
    import jax

    return isinstance(value, jax.Array)  # concrete arrays and tracers


def _as_array(value: Any) -> Any:
    """What ``jnp.asarray`` would accept as one array: arrays (jax, numpy, tracers), objects
    with ``__dlpack__`` or ``__array__``; ``None`` for anything else."""
    if isinstance(value, np.ndarray | np.generic) or _is_jax_array(value):
        return value
    try:  # duck typing runs the object's own properties, which may raise anything
        return _array_like(value)
    except Exception:
        return None


def _array_like(value: Any) -> Any:
    """``_as_array`` for objects that are not plain arrays (their properties may raise)."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and not hasattr(
            value, "__array__") and not hasattr(value, "__dlpack__"):
        return value  # something array-shaped jax may know (e.g. a ShapeDtypeStruct)
    if hasattr(value, "__dlpack__"):
        import jax.dlpack

        return jax.dlpack.from_dlpack(value)
    if hasattr(value, "__array__"):
        return np.asarray(value)
    return None


#: Which Python scalars a leaf of each numpy dtype kind takes (a rank-0 leaf only).
_SCALARS_BY_KIND = {bool: "b", int: "iufc", float: "fc", complex: "c"}
#: How to turn x64 on, in a message.
_X64_FIX = ("turn it on before the call (jax.config.update('jax_enable_x64', True), or "
           "JAX_ENABLE_X64=1 in the environment)")


def _x64_refusal(leaf: LeafSpec, path: str, given: str, cast: bool) -> _NoMatch:
    """A 64-bit leaf called with x64 off: what was given, how to turn x64 on (and to cast)."""
    then = f" and pass {leaf.dtype} (.astype('{leaf.dtype}'))" if cast else ""
    return _NoMatch(_LEAF, f"argument {path!r} expects {leaf.describe()}, a 64-bit dtype, got "
                           f"{given}, but jax_enable_x64 is off; {_X64_FIX}{then}", DtypeMismatch)


def _check_scalar(leaf: LeafSpec, value: bool | int | float | complex, path: str,
                  x64_off: bool) -> Any:
    """A Python scalar for a leaf: a rank-0 leaf of a dtype its kind converts to."""
    given = f"a Python {type(value).__name__}"
    if leaf.shape:
        raise _NoMatch(_LEAF, f"argument {path!r} expects {leaf.describe()}, got {given}",
                       ShapeMismatch)
    if is_key_dtype(leaf.dtype):
        raise _NoMatch(_LEAF, f"argument {path!r} expects a typed PRNG key {leaf.describe()}, "
                              f"got {given}; pass {_make_key(leaf.dtype, 'seed')}",
                       DtypeMismatch)
    kind = numpy_dtype(leaf.dtype).kind
    if kind == "V" and "float" in leaf.dtype:  # ml_dtypes' bfloat16, float8_*
        kind = "f"
    if x64_off:
        raise _x64_refusal(leaf, path, given, cast=False)
    if kind not in _SCALARS_BY_KIND[type(value)]:
        takes = [t.__name__ for t, kinds in _SCALARS_BY_KIND.items() if kind in kinds]
        options = f"a Python {' or '.join(takes)}, or " if takes else ""
        raise _NoMatch(_LEAF, f"argument {path!r} expects {leaf.describe()}, got {given}; "
                              f"pass {options}an array of dtype {leaf.dtype}", DtypeMismatch)
    return np.asarray(value, dtype=numpy_dtype(leaf.dtype))


def _make_key(name: str, seed: str) -> str:
    """How to make a key of a key dtype, in a message (the impl named unless jax's default)."""
    impl = key_impl(name)
    return f"jax.random.key({seed})" if impl == "threefry2x32" else \
        f"jax.random.key({seed}, impl={impl!r})"


def _key_refusal(leaf: LeafSpec, array: Any, path: str, given: str) -> _NoMatch | None:
    """Why a value's dtype does not fit a leaf where either is a typed PRNG key (``None`` when
    it fits): a key of another impl, a legacy ``uint32`` key, or a key where data is expected."""
    shown = f"{given}{list(array.shape)}"
    head = f"argument {path!r} expects {leaf.describe()}, got {shown}"
    if is_key_dtype(leaf.dtype) and given == leaf.dtype:
        return None
    if is_key_dtype(leaf.dtype):
        impl = key_impl(leaf.dtype)
        wrap = "k" if impl == "threefry2x32" else f"k, impl={impl!r}"
        if is_key(array.dtype):
            fix = (f"a typed key of impl {key_impl(given)}, not {impl}; make it with "
                   f"{_make_key(leaf.dtype, 'seed')}") if is_key_dtype(given) else \
                f"a typed key jax.export cannot serialize; make it with " \
                f"{_make_key(leaf.dtype, 'seed')}"
        elif given == "uint32" and tuple(array.shape)[-1:] == (key_data_words(leaf.dtype),):
            fix = (f"a legacy uint32 key, not a typed key; wrap it first: "
                   f"jax.random.wrap_key_data({wrap})")
        else:
            fix = f"pass a typed PRNG key: {_make_key(leaf.dtype, 'seed')}"
        return _NoMatch(_LEAF, f"{head}: {fix}", DtypeMismatch)
    fix = "pass its data, jax.random.key_data(k)" if leaf.dtype == "uint32" else \
        f"pass an array of dtype {leaf.dtype}"
    return _NoMatch(_LEAF, f"{head}, a typed PRNG key; {fix}", DtypeMismatch)


def _check_leaf(leaf: LeafSpec, value: Any, path: str, shapes: Shapes) -> Any:
    import jax

    x64_off = leaf.dtype in X64_DTYPES and not jax.config.jax_enable_x64
    if isinstance(value, bool | int | float | complex) and not hasattr(value, "dtype"):
        return _check_scalar(leaf, value, path, x64_off)
    array = _as_array(value)
    if array is None:
        raise _NoMatch(_LEAF, f"argument {path!r} expects an array {leaf.describe()}, got "
                              f"{_describe_value(value)}", PytreeMismatch)
    given = dtype_text(array.dtype)
    if is_key_dtype(leaf.dtype) or is_key(array.dtype):
        refusal = _key_refusal(leaf, array, path, given)
        if refusal is not None:
            raise refusal
        return _checked_rank(leaf, array, path, shapes)
    if x64_off:
        raise _x64_refusal(leaf, path, given, cast=given != leaf.dtype)
    try:
        dtype = _canonical_dtype(array.dtype)
    except (TypeError, ValueError):
        dtype = given
    if dtype != leaf.dtype:
        hint = f" (jax sees {given} as {dtype} with x64 off)" if given != dtype else ""
        raise _NoMatch(_LEAF, f"argument {path!r} expects dtype {leaf.dtype} "
                              f"({leaf.describe()}), got {given}{hint}; cast it first "
                              f"(.astype('{leaf.dtype}'))", DtypeMismatch)
    return _checked_rank(leaf, array, path, shapes)


def _checked_rank(leaf: LeafSpec, array: Any, path: str, shapes: Shapes) -> Any:
    """The array, once its rank fits the leaf's; its shape noted for binding the symbols."""
    shape = tuple(array.shape)
    if len(shape) != len(leaf.shape):
        raise _NoMatch(_LEAF, f"argument {path!r} expects rank {len(leaf.shape)} "
                              f"({leaf.describe()}), got shape {shape}", ShapeMismatch)
    shapes.append((leaf, tuple(int(d) for d in shape), path))
    return array


@functools.cache
def export_platform(backend: str | None = None) -> str:
    """The jax.export name (``cpu``, ``cuda``, ``rocm``, ``tpu``) of a backend (default: jax's)."""
    import jax

    backend = backend or jax.default_backend()
    if backend == "gpu":
        version = jax.devices("gpu")[0].client.platform_version.lower()
        return "rocm" if "rocm" in version else "cuda"
    return backend


def committed_platform(values: Mapping[str, Any]) -> str | None:
    """The platform of the first argument committed to a device (``jax.device_put``), if any."""
    import jax

    for leaf in jax.tree_util.tree_leaves(values):
        if isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer):
            try:
                if leaf.committed:
                    return next(iter(leaf.devices())).platform
            except Exception:  # an array without concrete placement
                continue
    return None


def _key_difference(spec: Mapping[Any, Any], value: Any) -> str:
    """`` (missing 'b'; unexpected 'c')``: what a dict lacks and has too many of."""
    if not isinstance(value, Mapping):
        return ""
    missing = [k for k in spec if k not in value]
    extra = [k for k in value if k not in spec]
    parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + \
        ([f"unexpected {', '.join(map(repr, extra))}"] if extra else [])
    return f" ({'; '.join(parts)})" if parts else ""


def _walk(spec: Any, value: Any, path: str, shapes: list[Any]) -> Any:
    """Check ``value`` against ``spec``; return the value with scalars turned into arrays."""
    if isinstance(spec, LeafSpec):
        return _check_leaf(spec, value, path, shapes)
    if spec is None:
        if value is not None:
            raise _NoMatch(_TREE, f"argument {path!r} expects None, got "
                                  f"{_describe_value(value)}", PytreeMismatch)
        return None
    if isinstance(spec, Mapping):
        if not isinstance(value, Mapping) or set(value) != set(spec):
            got = f"a dict with keys {sorted(map(str, value))}" if isinstance(value, Mapping) \
                else _describe_value(value)
            raise _NoMatch(_TREE, f"argument {path!r} expects a dict with keys "
                                  f"{sorted(spec)}, got {got}{_key_difference(spec, value)}",
                           PytreeMismatch)
        out = {k: _walk(spec[k], value[k], f"{path}[{k!r}]", shapes) for k in spec}
        return type(spec)(out)  # the exported container type (dict or OrderedDict)
    if isinstance(spec, ClassNode):
        if type(value) is not spec.type:
            raise _NoMatch(_TREE, f"argument {path!r} expects a {spec.type.__name__}, got "
                                  f"{_describe_value(value)}", PytreeMismatch)
        for name, baked in spec.static:
            if getattr(value, name, None) != baked:
                raise _NoMatch(_TREE, f"argument {path!r} expects a {spec.type.__name__} with "
                                      f"static field {name}={baked!r}, got "
                                      f"{name}={getattr(value, name, None)!r}", PytreeMismatch)
        different = spec.mismatch(value) if isinstance(spec, RegisteredNode) else None
        if different:
            raise _NoMatch(_TREE, f"argument {path!r} expects {different}; pass one with the "
                                  f"same aux data, or bake a structure for it", PytreeMismatch)
        return spec.build([_walk(s, v, f"{path}.{f}", shapes) for f, s, v in
                           zip(spec.fields, spec.items, spec.children(value), strict=True)])
    kind = list if isinstance(spec, list) else tuple
    if type(value) is not kind or len(value) != len(spec):
        raise _NoMatch(_TREE, f"argument {path!r} expects a {kind.__name__} of {len(spec)}, got "
                              f"{_describe_value(value)}", PytreeMismatch)
    items = [_walk(s, v, f"{path}[{i}]", shapes) for i, (s, v) in enumerate(zip(spec, value,
                                                                                   strict=True))]
    return items if kind is list else tuple(items)


def _solve(dim: str, size: int, env: dict[str, int]) -> None:
    """Bind the one unbound symbol of a linear dimension like ``2*n + 1``, when possible."""
    unbound = dim_symbols(dim) - env.keys()
    if len(unbound) != 1:
        return
    (symbol,) = unbound
    try:
        at0 = evaluate_dim(dim, {**env, symbol: 0})
        at1 = evaluate_dim(dim, {**env, symbol: 1})
        at2 = evaluate_dim(dim, {**env, symbol: 2})
    except (KeyError, ZeroDivisionError):
        return
    slope = at1 - at0
    if slope and at2 - at1 == slope and (size - at0) % slope == 0:
        env[symbol] = (size - at0) // slope


def _bind_dims(structure: Structure, shapes: Shapes) -> dict[str, int]:
    env: dict[str, int] = {}
    where: dict[str, str] = {}
    for _leaf, shape, path in shapes if structure.constraints else ():
        for axis, size in enumerate(shape):
            if size > _MAX_DIM:  # constraints are checked by jax in int32 even abstractly
                raise _NoMatch(_DIMS, f"argument {path!r} has shape {shape}: axis {axis} is "
                                      f"{size}, beyond {_MAX_DIM}, the largest dimension jax's "
                                      "shape refinement handles", ShapeMismatch)
    for leaf, shape, path in shapes:  # plain symbols first
        for axis, (dim, size) in enumerate(zip(leaf.shape, shape, strict=True)):
            if dim.isidentifier():
                if dim in env and env[dim] != size:
                    raise _NoMatch(_DIMS, f"argument {path!r} has shape {shape}: axis {axis} "
                                          f"is {dim} = {size}, but {dim} = {env[dim]} from "
                                          f"{where[dim]}", ShapeMismatch)
                env.setdefault(dim, size)
                where.setdefault(dim, f"argument {path!r} axis {axis}")
    for _ in range(2):
        for leaf, shape, _path in shapes:
            for dim, size in zip(leaf.shape, shape, strict=True):
                _solve(dim, size, env)
    for leaf, shape, path in shapes:
        for axis, (dim, size) in enumerate(zip(leaf.shape, shape, strict=True)):
            try:
                expected = evaluate_dim(dim, env)
            except (KeyError, ZeroDivisionError):
                raise _NoMatch(_DIMS, f"argument {path!r} has shape {shape}: cannot solve axis "
                                      f"{axis} = {dim} for its symbols", ShapeMismatch) from None
            if expected != size:
                rule = str(expected) if dim == str(expected) else \
                    f"{dim} = {expected} ({_env_text(env)})"
                raise _NoMatch(_DIMS, f"argument {path!r} has shape {shape}: axis {axis} must "
                                      f"be {rule}", ShapeMismatch)
    for symbol, size in env.items():
        if size < 1:
            raise _NoMatch(_DIMS, f"{where.get(symbol, 'a dimension')} gives {symbol} = {size}; "
                                  "symbolic dimensions are >= 1 (no zero-size axes)", ShapeMismatch)
    for constraint in structure.constraints:
        if not check_constraint(constraint, env):
            raise _NoMatch(_DIMS, f"shapes give {_env_text(env)}, which violates the "
                                  f"constraint {constraint!r}", ShapeMismatch)
    return env


def _env_text(env: Mapping[str, int]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in sorted(env.items()))


def _signature_text(fn: FunctionRecord) -> str:
    """The signature without annotations or defaults' values: ``(x, mode='fast', *, y)``."""
    parts = []
    star = False
    for param in fn.signature.parameters.values():
        if param.kind == param.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if param.kind == param.VAR_POSITIONAL:
            star = True
        parts.append(str(param.replace(annotation=param.empty)))
    return f"({', '.join(parts)})"


def _same(a: Any, b: Any) -> bool:
    """Whether a call's value is a baked static value or default: the same type and equal,
    tuples and frozen dataclasses item by item (``formats.statics.same_static``)."""
    return same_static(a, b)


def plan_call(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallPlan:
    """Match a call to a structure and static values, or raise the ``CallMismatch`` subclass of
    the kind of mismatch (``errors``: each also the ``TypeError``/``ValueError`` it was)."""
    spec = fn.export_spec
    try:
        bound = fn.signature.bind(*args, **kwargs)
    except TypeError as err:
        text = str(err)
        params = fn.signature.parameters
        unknown = [k for k in kwargs if k not in params] \
            if not any(p.kind == p.VAR_KEYWORD for p in params.values()) else []
        if unknown and "unexpected keyword" not in text:  # bind names a missing one first
            text = f"got an unexpected keyword argument {', '.join(map(repr, unknown))} ({text})"
        keyword_only = [p.name for p in fn.signature.parameters.values()
                        if p.kind == p.KEYWORD_ONLY]
        if "'" not in text and keyword_only:
            text += f" ({', '.join(map(repr, keyword_only))} must be passed by keyword)"
        refusal = SignatureMismatch(f"{spec.name}: {text}; it takes {_signature_text(fn)}")
        refusal.source_refuses = True
        raise refusal from None
    bound.apply_defaults()
    arguments = bound.arguments
    for param in fn.signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) and arguments.get(param.name):
            raise SignatureMismatch(f"{spec.name}: extra arguments "
                                    f"{arguments[param.name]!r:.80} are not part of any exported "
                                    "structure")
    static: dict[str, Any] = {}
    for name, allowed in spec.static.items():
        value = arguments[name]
        if not any(_same(value, a) for a in allowed):
            raise StaticValueMismatch(f"{spec.name}: static argument {name!r} got {value!r}; "
                                      f"the baked values are {', '.join(map(repr, allowed))}")
        static[name] = value
    failures: list[tuple[int, _NoMatch]] = []
    for index, structure in enumerate(spec.structures):
        try:
            for pname, param in fn.signature.parameters.items():
                if pname in structure.args or pname in static or param.kind in (
                        param.VAR_POSITIONAL, param.VAR_KEYWORD):
                    continue
                if not _same(arguments[pname], param.default):
                    raise _NoMatch(_TREE, f"argument {pname!r} is not part of this structure "
                                          f"(its default {param.default!r} is baked in)",
                                   SignatureMismatch)
            shapes: list[Any] = []
            values = {name: _walk(tree, arguments[name], name, shapes)
                      for name, tree in structure.args.items()}
            sizes = _bind_dims(structure, shapes)
            refusal = spec.static_refusal(index, static)
            if refusal:  # a value pinned to another structure
                raise _NoMatch(_DIMS + 1, refusal, StaticValueMismatch)
        except _NoMatch as err:
            failures.append((index, err))
            continue
        return CallPlan(index, static, static_key(static), values, sizes)
    best = max(err.score for _, err in failures)
    closest = [(i, err) for i, err in failures if err.score == best]
    # every structure's own reason, the closest first: a call refused by structure 0 for one
    # reason and by structure 1 for another must say both (the error's class is the closest's)
    ordered = closest + [(i, err) for i, err in failures if err.score != best]
    reasons = "; ".join(f"structure {i}: {err.message}" for i, err in ordered)
    raise closest[0][1].error(f"{spec.name}: no exported structure accepts this call: {reasons}. "
                              f"Accepted: {accepted_text(spec.structures)}")


def shown_structure(key: str) -> str:
    """A structure's text as messages show it: abbreviated when long, unless
    ``HATCH_JAXEXPORT_FULL_STRUCTURES`` is on."""
    if full_structures():
        return key
    from hatch_jaxexport.formats.structure_text import abbreviate_structure  # messages only

    return abbreviate_structure(key)


def accepted_text(structures: Sequence[Structure]) -> str:
    """The ``Accepted: ...`` tail of a refused call: ``[i] structure`` each, long ones
    abbreviated (saying so, and how to see them whole)."""
    shown = [shown_structure(s.key) for s in structures]
    text = "; ".join(f"[{i}] {key}" for i, key in enumerate(shown))
    if any(key != s.key for key, s in zip(shown, structures, strict=True)):
        text += f" (abbreviated: {FULL_STRUCTURES_ENV}=1 shows them whole)"
    return text


__all__ = ["CallPlan", "Shapes", "accepted_text", "committed_platform", "export_platform",
           "plan_call", "shown_structure"]
