"""Concrete-size artifacts at call time: describing a call, and serving it from its artifact.

Code that is not shape-polymorphic (``len(x)``, ``x[2:]`` without a constraint, a Python ``if``
on a size) cannot be exported symbolically; the build then bakes the same computation for the
exact sizes it knows (recorded calls, ``concrete=``, ``executable_sizes=``), as
``ConcreteRecord``s. Two ways a call reaches one:

* a structure matched but has no symbolic artifact: ``ConcreteDispatch`` (the structure's
  target) looks the call's flat argument types up in a dict and runs that artifact;
* a call no structure accepts (every call of a spec-less ``@exportable``): ``recorded_call``
  describes it (``describe_call``: each argument's tree of shapes and dtypes, its non-array
  values), looks its canonical text up, and runs the artifact recorded for exactly that
  signature; ``call_unstructured`` is a spec-less function's whole call path.

Any other size runs the source (``_source_calls.run_source``), or is refused with an
``ArtifactError`` in strict mode. Nothing here traces the user's code to serve a known size.
The first eager call of each signature served here is reported like any other
(``call_report()``, ``HATCH_JAXEXPORT_REPORT``): tier ``compiled``, as jax compiles the
artifact in the process (concrete-size artifacts ship no executable).
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.coverage import call_text, nearest_calls
from hatch_jaxexport.formats.manifest import ConcreteRecord, signature_text
from hatch_jaxexport.formats.settings import strict_mode
from hatch_jaxexport.formats.signatures import (
    FUNCTION_HELD,
    FUNCTION_RUNS_SOURCE,
    CallSignature,
    call_key,
    rebuild,
)
from hatch_jaxexport.formats.statics import static_values_text
from hatch_jaxexport.runtime.artifacts.package_artifacts import unusable_reason
from hatch_jaxexport.runtime.artifacts.program import leaf_types
from hatch_jaxexport.runtime.call._resolved_calls import fast_key, prime_fast_path
from hatch_jaxexport.runtime.call._source_calls import run_source, source_without_static
from hatch_jaxexport.runtime.call.inlining import runs_inline
from hatch_jaxexport.runtime.call.matching import committed_platform, export_platform
from hatch_jaxexport.runtime.call.refusals import (
    no_artifact,
    no_artifact_notice,
    source_rejected,
)
from hatch_jaxexport.runtime.executables.entries import ServedCall
from hatch_jaxexport.runtime.jaxcompat import x64_flag
from hatch_jaxexport.runtime.notices import report
from hatch_jaxexport.runtime.source_errors import run_as_source

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

# Imported in functions: the artifacts and concrete-size rules, only for a call that reaches a
# concrete-size artifact.

#: Flat argument types of a call: ``((dims...), dtype name)`` per array leaf.
Types = tuple[tuple[tuple[int, ...], str], ...]


def _dtype_name(dtype: Any) -> str | None:
    """The dtype jax would compute in (``float64`` is ``float32`` without x64); ``None`` for
    an extended dtype (typed PRNG keys), which no recorded call can name."""
    return _canonical_name(dtype, bool(x64_flag().value))


@functools.lru_cache(maxsize=256)
def _canonical_name(dtype: Any, x64: bool) -> str | None:
    """``_dtype_name`` under a given x64 flag (cached: a call looks each leaf's dtype up)."""
    import jax
    import numpy as np

    if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        return None
    name = np.dtype(dtype).name
    return name if x64 else _NARROWED.get(name, name)


#: What jax computes a 64-bit dtype in without x64 (``jax.dtypes.canonicalize_dtype``).
_NARROWED = {"float64": "float32", "int64": "int32", "uint64": "uint32",
             "complex128": "complex64"}


def _node(value: Any, arrays: list[Any]) -> dict[str, Any] | None:
    """One value's signature node (its arrays appended to ``arrays`` in canonical order)."""
    if value is None or isinstance(value, bool | int | float | str):
        return {"static": value}
    try:
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            dtype, shape = _dtype_name(value.dtype), value.shape
            if dtype is None or not all(isinstance(d, int) for d in shape):
                return None  # a key, or a symbolic shape inside another export
            arrays.append(value)
            return {"array": [[int(d) for d in shape], dtype]}
    except Exception:  # a property that raises (tinygp's Block.shape): not describable
        return None
    if type(value) in (list, tuple):
        items = [_node(item, arrays) for item in value]
        return None if any(i is None for i in items) else {type(value).__name__: items}
    if type(value) is dict and all(isinstance(k, str) for k in value):
        found = {k: _node(value[k], arrays) for k in sorted(value)}
        return None if any(n is None for n in found.values()) else {"dict": found}
    return None


def described(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[CallSignature, list[Any]] | None:
    """A call's signature and its arrays in canonical order; ``None`` when it cannot be
    described (it does not bind, or holds values other than arrays, JSON scalars, lists,
    tuples and dicts with string keys). An argument left at a default that cannot be described
    (``def f(x, metric=euclidean)`` called as ``f(x)``) is left out, as a default left out of a
    spec: the export binds the default as the source does (``flat_source``)."""
    found = description(fn, args, kwargs)
    return None if isinstance(found, str) else found


def description(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any]
                ) -> tuple[CallSignature, list[Any]] | str:
    """``described``, or why the call cannot be: ``FUNCTION_HELD`` naming the first argument
    (in the signature's order) that holds a function a caller passed, else ``""``."""
    try:
        bound = fn.signature.bind(*args, **kwargs)
    except TypeError:
        return ""
    bound.apply_defaults()
    arrays: list[Any] = []
    signature = {}
    parameters = fn.signature.parameters
    for name in sorted(bound.arguments):
        value = bound.arguments[name]
        node = _node(value, arrays)
        if node is None and value is parameters[name].default:
            continue  # left at its default: bound again by the export, not described
        if node is None:
            held = next((n for n in bound.arguments if _holds_function(bound.arguments[n])
                         and bound.arguments[n] is not parameters[n].default), None)
            return FUNCTION_HELD.format(held) if held else ""
        signature[name] = node
    return signature, arrays


def _holds_function(value: Any, depth: int = 0) -> bool:
    """Whether a value is, or a list, tuple or dict of it holds, a function (a ``def``, a
    lambda, a builtin, a method, a ``functools.partial``, a NumPy ufunc, a ``jax.jit`` or other
    wrapped function); a class (``jnp.float32``) is not one."""
    if isinstance(value, list | tuple) and depth < 16:
        return any(_holds_function(v, depth + 1) for v in value)
    if isinstance(value, dict) and depth < 16:
        return any(_holds_function(v, depth + 1) for v in value.values())
    if isinstance(value, type) or not callable(value):
        return False
    return inspect.isroutine(value) or isinstance(value, functools.partial) or \
        type(value).__name__ == "ufunc" or hasattr(value, "__wrapped__")


def unrecorded_reason(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any]
                      ) -> str | None:
    """Why a recording cannot keep this call, where the tool says so (``FUNCTION_HELD``:
    an argument holds a function a caller passed); ``None`` otherwise."""
    found = description(fn, args, kwargs)
    return found if isinstance(found, str) and found else None


def describe_call(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> CallSignature | None:
    """What ``HATCH_JAXEXPORT_RECORD`` writes of a call (``None``: not describable)."""
    found = described(fn, args, kwargs)
    return None if found is None else found[0]


def flat_source(fn: FunctionRecord, signature: CallSignature) -> Callable[..., Any]:
    """``fn``'s source taking a call's arrays flat, in canonical order, its other values
    bound: what the build exports for a recorded call and what a miss traces. A default the
    signature left out (``described``) is bound as the source binds it."""
    def flat(*arrays: Any) -> Any:
        given = iter(arrays)
        values = rebuild(signature, lambda dims, dtype: next(given))
        for name, parameter in fn.signature.parameters.items():  # a default left out: bound
            if name not in values and parameter.default is not parameter.empty:
                values[name] = parameter.default
        bound = inspect.BoundArguments(fn.signature, values)  # type: ignore[arg-type]
        return fn.__wrapped__(*bound.args, **bound.kwargs)

    return flat


def _leaf_types(leaves: Sequence[Any]) -> Types | None:
    """The flat types of a call's leaves (``None`` if one is not an array)."""
    import numpy as np

    types = []
    for leaf in leaves:
        shape = getattr(leaf, "shape", None)
        if shape is None:
            leaf = np.asarray(leaf)
            shape = leaf.shape
        dtype = _dtype_name(leaf.dtype)
        if dtype is None:
            return None
        types.append((tuple(shape), dtype))
    return tuple(types)


def _x64_differs(record: ConcreteRecord) -> bool:
    import jax

    wanted = record.jax_config.get("jax_enable_x64")
    return wanted is not None and bool(wanted) != bool(jax.config.jax_enable_x64)


class _ConcreteCall:
    """A concrete-size artifact's call: for concrete arrays, the artifact compiled straight
    from its bytes (``DirectModule``: nothing lowered) where its module allows, else
    ``jax.jit`` of ``Exported.call``; under a trace (``jax.jit``, ``vmap``, ``grad``,
    ``jacrev``) the artifact rebuilt from parts jax can transform
    (``artifacts.concrete_rules``), so that what the caller does with the trace later cannot
    fail out of reach. Forward mode (a ``custom_vjp`` has none) is refused with
    ``NotImplementedError`` at the call: its caller runs the source."""

    __slots__ = ("_dispatch", "_exported", "_jax", "_lock", "_shipped", "_staged", "_tracer",
                 "plain", "record", "served_as")

    def __init__(self, exported: Any, record: ConcreteRecord, shipped: Any = None) -> None:
        import jax

        self.record = record
        #: The wheel's (or a companion wheel's) precompiled executables of this artifact
        #: (``executables.shipped.ShippedExecutables``), or ``None``: tried before a compile.
        self._shipped = shipped
        #: How the first eager call was served, and why not from a shipped executable, for
        #: ``call_report()``.
        self.served_as: tuple[str, str | None] = ("compiled", NOT_SHIPPED)
        #: What runs an eager call: ``_first_eager`` until it has compiled, then the
        #: executable's own dispatch (or ``jax.jit``'s function), which the fast path keeps.
        self.plain: Callable[..., Any] = self._first_eager
        self._exported, self._staged = exported, None
        self._tracer, self._jax = jax.core.Tracer, jax
        self._lock = threading.Lock()
        #: The executable's own dispatch, once compiled from its bytes (``settled``).
        self._dispatch: Callable[..., Any] | None = None

    def settled(self) -> Callable[..., Any]:
        """What the fast path may keep for later calls of the same types: the executable's
        dispatch once compiled, which refuses other types and tracers itself (the fast path
        then resolves the call again); this call otherwise."""
        return self._dispatch if self._dispatch is not None else self

    def _first_eager(self, *args: Any, **kwargs: Any) -> Any:
        """The first eager call: the module compiled from its bytes where it takes the call's
        flat arrays as they are (``DirectModule``; LAPACK initialised only for a module that
        calls it), else ``jax.jit`` of the artifact's call; either then serves every eager
        call."""
        from hatch_jaxexport.runtime.executables.direct_module import DirectModule
        from hatch_jaxexport.runtime.jaxcompat import compiled_dispatch, module_needs_lapack

        with self._lock:
            if self.plain == self._first_eager and self._load_shipped(args, kwargs):
                return self.plain(*args, **kwargs)
            if self.plain == self._first_eager:
                exported = self._exported
                direct = DirectModule.of(exported,
                                         module_needs_lapack(exported.mlir_module_serialized))
                try:
                    compiled = direct.lower(*args, **kwargs).compile() if direct else None
                except Exception:  # the usual lowering says what is wrong, if anything
                    compiled = None
                self._dispatch = compiled_dispatch(compiled) if compiled is not None else None
                self.plain = self._dispatch or self._jax.jit(exported.call)
        return self.plain(*args, **kwargs)

    def _load_shipped(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Serve eager calls from the shipped executable of exactly these arrays' types, where
        one matches this process (``ShippedExecutables.compiled_for``: a damaged one is a
        report, or strict mode's ``ArtifactError``); whether it does."""
        if self._shipped is None:
            return False
        from hatch_jaxexport.runtime.jaxcompat import (
            compiled_dispatch,
            initialize_lapack,
            module_needs_lapack,
        )

        leaves = self._jax.tree_util.tree_leaves((args, kwargs))
        if not all(hasattr(leaf, "shape") and hasattr(leaf, "dtype") for leaf in leaves):
            return False  # Python scalars: their types are jax's to decide, compile them
        types = [(tuple(leaf.shape), leaf.dtype.name, False) for leaf in leaves]
        compiled = self._shipped.compiled_for(
            types, self._jax.tree_util.tree_structure((args, kwargs)))
        if compiled is None:
            self.served_as = ("compiled", self._shipped.why_not(types))
            return False
        if module_needs_lapack(self._exported.mlir_module_serialized):
            initialize_lapack()
        self._dispatch = self.plain = compiled_dispatch(compiled)
        self.served_as = ("shipped", None)
        return True

    def traced(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a trace holds any argument (arrays checked as they are, containers flat)."""
        for value in (*args, *kwargs.values()):
            for leaf in (value,) if hasattr(value, "dtype") else \
                    self._jax.tree_util.tree_leaves(value):
                if isinstance(leaf, self._tracer):
                    return True
        return False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.traced(args, kwargs):
            return self.plain(*args, **kwargs)
        tree_util = self._jax.tree_util
        leaves, tree = tree_util.tree_flatten((args, kwargs))
        if tree != self._exported.in_tree:  # jax's own call says what differs
            return self.plain(*args, **kwargs)
        if self._staged is None:
            from hatch_jaxexport.runtime.artifacts.concrete_rules import transformable

            self._staged = transformable(self._exported)
        try:
            out = self._staged(*leaves)
        except TypeError as err:
            if "forward-mode" not in str(err):
                raise
            raise NotImplementedError(FORWARD_MODE.format(err)) from err
        return tree_util.tree_unflatten(self._exported.out_tree, out)


#: Why forward mode of a concrete-size artifact runs the source, and what would serve it.
FORWARD_MODE = ("forward-mode differentiation (jax.jvp, jax.jacfwd, jax.linearize, "
                "jax.hessian...) has no rule in a concrete-size artifact, which carries jax's "
                "serialized VJP only (jax: {}); to serve it, give the function a structure that "
                "exports with symbolic sizes (shape-polymorphic code) and ad_order=1 in "
                "@exportable(...); until then the source serves such calls")


def _jitted(package: Any, record: ConcreteRecord) -> _ConcreteCall:
    """A concrete artifact's call (``_ConcreteCall``), its blob checked; ``ArtifactError`` if
    not. Made once per resolved call, right before its first run: what the source's body
    warned while it was traced for this artifact is issued again now
    (``artifacts.replayed_warnings.replay``; one the user's filters make an error raises, marked
    as the source's, and nothing is kept: the next call resolves again, as jax traces again)."""
    from hatch_jaxexport.runtime.artifacts.package_artifacts import load_concrete
    from hatch_jaxexport.runtime.artifacts.replayed_warnings import replay
    from hatch_jaxexport.runtime.executables.artifact_calls import shipped_executables

    entry = {"file": record.file, "size": record.size, "sha256": record.sha256}
    exported = load_concrete(package, entry)
    shipped = shipped_executables(package, record.function, record, lambda: exported.out_tree)
    call = _ConcreteCall(exported, record, shipped)
    replay(package.package, record.warnings)
    return call


#: Why a concrete-size artifact's call is compiled in the process (``ServedCall.not_shipped``).
NOT_SHIPPED = "a concrete-size artifact ships no executable"


def served_first(fn: FunctionRecord, call: _ConcreteCall, run: Callable[[], Any],
                 traced: bool) -> Any:
    """``run()``, the call of ``call``'s artifact; an eager call's first run of each artifact
    is timed and reported (``call_report()``, ``HATCH_JAXEXPORT_REPORT``): ``shipped`` where
    the wheel's executable served it, else ``compiled``, with why none did."""
    record = call.record
    key = ("served", record.file, record.call, tuple(map(str, record.inputs)))
    if traced or key in fn.calls.reported:
        return run()
    started = time.perf_counter()
    out = run()
    if fn.calls.first_report(key):
        # a recorded call names its arguments (static values too: two calls with the same
        # arrays and other values are two artifacts); a structure its static values
        label = f"({call_text(record.call)})" if record.call else \
            f"({static_values_text(record.static)})" if record.static else ""
        tier, why = call.served_as
        report(fn.calls.reports, ServedCall(fn.name, signature_text(record.inputs), tier,
                                            time.perf_counter() - started, why, label))
    return out


class ConcreteDispatch:
    """A structure's target when only concrete-size artifacts of it were baked: the call's
    flat argument types pick one (a dict lookup); other types run the traced source with the
    structure's static values bound (``source_without_static``, cached per types), or are
    refused in strict mode (``refusals.no_artifact``)."""

    from_concrete = True

    def __init__(self, fn: FunctionRecord, package: Any, records: Sequence[ConcreteRecord],
                 structure_index: int, static: dict[str, Any]) -> None:
        self._fn, self._package = fn, package
        self._structure_index, self._static = structure_index, static
        self._records = {leaf_types(r.inputs): r for r in records}
        self._calls: dict[Types | None, Callable[..., Any]] = {}
        #: The traced source for calls under a transformation the artifacts cannot run.
        self._transformed: Callable[..., Any] | None = None
        self._lock = threading.Lock()

    def sizes_text(self) -> str:
        """The sizes it serves: ``float32[8]; float32[16]``."""
        return "; ".join(sorted(signature_text(r.inputs) for r in self._records.values()))

    def settled(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
        """The artifact's call for exactly these types (``None``: not resolved, or traced),
        which the loader hands to the fast path: a later call of the same types skips this
        dispatch, and one of other types is refused by jax's shape check and resolved here."""
        import jax

        types = _leaf_types(jax.tree_util.tree_leaves((args, kwargs)))
        record = self._records.get(types) if types is not None else None
        call = self._calls.get(types) if record is not None else None
        return call.settled() if isinstance(call, _ConcreteCall) else call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        types = _leaf_types(jax.tree_util.tree_leaves((args, kwargs)))
        call = self._calls.get(types)
        if call is None:
            call = self._resolve(types)
        try:
            if not isinstance(call, _ConcreteCall):  # the source (run_source tells)
                return call(*args, **kwargs)
            return served_first(self._fn, call, lambda: call(*args, **kwargs),
                                call.traced(args, kwargs))
        except NotImplementedError as err:  # forward mode: the artifact has none (_ConcreteCall)
            if self._transformed is None:
                self._transformed = self._source(
                    f"its concrete-size artifact cannot run under this transformation: {err}")
            return self._transformed(*args, **kwargs)

    def _source(self, reason: str) -> Callable[..., Any]:
        """The source for calls no concrete-size artifact serves (strict mode refuses)."""
        return source_without_static(self._fn, self._structure_index, self._static,
                                     no_artifact(self._fn, reason))

    def _resolve(self, types: Types | None) -> Callable[..., Any]:
        record = self._records.get(types) if types is not None else None
        reason = ""
        if record is not None and _x64_differs(record):
            reason, record = "it was baked under another jax_enable_x64", None
        if record is not None:
            try:
                call = _jitted(self._package, record)
            except ArtifactError as err:  # another jax's export, or a damaged install
                reason = unusable_reason(self._package, err)
            else:
                with self._lock:
                    self._calls[types] = call
                return call
        shown = "?" if types is None else signature_text([[list(d), t] for d, t in types])
        call = self._source(reason or f"the build baked it only at concrete sizes "
                             f"({self.sizes_text()}), not for {shown}")
        with self._lock:  # reached only when not refused (strict mode raises)
            self._calls[types] = call
        return call


class _RecordedCalls:
    """A function's recorded-call artifacts on one platform by call key, and what each
    resolved to. A call key names no platform: a build for ``cpu`` and ``tpu`` bakes one
    record of each call per platform, and only this process's platform's may run here."""

    from_artifact = True

    def __init__(self, fn: FunctionRecord, platform: str) -> None:
        from hatch_jaxexport.runtime.artifacts.package_artifacts import load_package_artifacts

        self.package = load_package_artifacts(fn.package)
        manifest = None if self.package is None else self.package.records(fn.name).manifest
        self.records = {r.call: r for r in (manifest.concrete if manifest else ())
                        if r.call and r.platform == platform}
        #: The build's reason per recorded call whose export failed.
        self.failed = {f.call: f.reason for f in (manifest.failed_calls if manifest else ())}
        self.served: dict[str, _ConcreteCall] = {}


_NO_ARTIFACT = ("no artifact was baked for this call's signature (record it with "
                "HATCH_JAXEXPORT_RECORD=1 and rebuild)")
_NOT_DESCRIBED = ("its arguments are not arrays, JSON scalars, lists, tuples or dicts of them "
                  "(an object of a class): such a call cannot be recorded or baked, "
                  "and runs the source by design")


def recorded_call(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> tuple[Callable[[], Any] | None, str]:
    """The baked artifact of exactly this call's signature (a recorded call: ``note_call``),
    as a thunk that runs it (its first eager run reported), or ``None`` and why there is none.
    What a call that no structure accepts tries before it runs the source; it never traces."""
    call, arrays, reason = _artifact_call(fn, args, kwargs)
    if call is None:
        return None, reason

    def run() -> Any:
        return served_first(fn, call, lambda: call(*arrays), call.traced(args, kwargs))
    return run, ""


def _artifact_call(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> tuple[_ConcreteCall | None, list[Any], str]:
    """The jitted artifact of this call's signature and the call's arrays in canonical order,
    or ``None`` and why."""
    platform = export_platform(committed_platform({"args": args, "kwargs": kwargs}))
    table = fn.calls.target(("recorded calls", platform), lambda: _RecordedCalls(fn, platform))
    found = description(fn, args, kwargs)
    if isinstance(found, str) and found:  # a function passed: no recording can keep it
        return None, [], found + FUNCTION_RUNS_SOURCE
    if not table.records and not table.failed:  # nothing recorded: nothing to look up
        return None, [], _NO_ARTIFACT
    if isinstance(found, str):  # an object of a class...: no recording can describe it
        return None, [], _NOT_DESCRIBED
    signature, arrays = found
    key = call_key(signature)
    call = table.served.get(key)
    record = table.records.get(key)
    reason = _NO_ARTIFACT if key not in table.failed else (
        f"this call was recorded, but its export failed at build time: {table.failed[key]}; "
        f"fix the cause and rebuild (`python -m hatch_jaxexport export {fn.package} --out DIR` "
        "shows it whole)")
    if call is None and record is not None and _x64_differs(record):
        reason = "its artifact was baked under another jax_enable_x64"
    elif call is None and record is not None:
        try:
            call = table.served[key] = _jitted(table.package, record)
        except ArtifactError as err:  # another jax's export, or a damaged install
            reason = unusable_reason(table.package, err)
    return call, arrays, "" if call is not None else reason


def call_unstructured(fn: FunctionRecord, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
    """Run a call of a spec-less ``@exportable``: the artifact recorded for exactly this
    call's signature, else the source (``run_source``: its result or its own error first,
    told after; ``ArtifactError`` in strict mode). Inside an export it runs the source inline
    (``inlining.runs_inline``)."""
    if runs_inline(args, kwargs):
        return run_as_source(fn.__wrapped__, *args, **kwargs)
    call, arrays, reason = _artifact_call(fn, args, kwargs)
    if call is not None:
        try:
            result = served_first(fn, call, lambda: call(*arrays),
                                  call.traced(args, kwargs))
        except NotImplementedError as err:  # forward mode: the artifact has none (_ConcreteCall)
            reason = f"its artifact cannot run under this transformation: {err}"
        else:
            _remember_fast(fn, call.plain, arrays, args, kwargs)  # arrays only: no tracer
            return result
    if strict_mode():  # the refusal names the call (and raises the source's own rejection)
        reason = _strict_reason(fn, args, kwargs, reason)
    reason = no_artifact(fn, reason)
    return run_source(fn, (args, kwargs), reason, no_artifact_notice(fn, reason))


def _strict_reason(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any],
                   reason: str) -> str:
    """``reason`` with what strict mode's refusal of a spec-less call shows: the call's
    signature and, where no artifact was baked for it, the nearest recorded calls. A call the
    source rejects itself (it does not bind, or its body raises while traced abstractly, as the
    build would trace it) is refused with the source's own exception first
    (``refusals.source_rejected``): no recording keeps such a call. Strict mode only: a default
    call's reason stays one per function in the report."""
    try:
        fn.signature.bind(*args, **kwargs)
    except TypeError as err:
        raise source_rejected(fn, err) from err
    found = described(fn, args, kwargs)
    if found is None:  # a function, an object...: FUNCTION_HELD or _NOT_DESCRIBED says so
        return reason
    signature, arrays = found
    rejected = _source_rejects(fn, signature, arrays)
    if rejected is not None:
        raise source_rejected(fn, rejected) from rejected
    key = call_key(signature)
    platform = export_platform(committed_platform({"args": args, "kwargs": kwargs}))
    table = fn.calls.target(("recorded calls", platform), lambda: _RecordedCalls(fn, platform))
    shown = f"{reason}; this call: ({call_text(key)})"
    if reason != _NO_ARTIFACT:
        return shown
    nearest = nearest_calls(key, sorted(table.records))
    return f"{shown}; " + (f"the nearest recorded: {'; '.join(nearest)}" if nearest else
                           f"no call of it was recorded and baked for {platform}")


def _source_rejects(fn: FunctionRecord, signature: CallSignature, arrays: list[Any]
                    ) -> Exception | None:
    """The source's own exception where its body rejects this call, traced abstractly
    (``jax.eval_shape``: nothing compiled or run); ``None`` where it traces, or where what
    stops it is jax's tracing (a Python ``if`` on an array's value) or ours, not its verdict."""
    import jax

    try:
        jax.eval_shape(flat_source(fn, signature), *arrays)
    except Exception as err:  # the source's body: its own check, or an op it cannot combine
        if type(err).__module__.split(".")[0] in ("jax", "jaxlib", "hatch_jaxexport"):
            return None
        return err
    return None


def _remember_fast(fn: FunctionRecord, call: Callable[..., Any], arrays: Sequence[Any],
                   args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Hand a served call of positional plain arrays and scalars to the function's keyed fast
    path (``fast_path``, tried before anything here): the same types and values
    then skip binding and describing the call (which costs more than the call itself)."""
    prime_fast_path()
    key = fast_key(args, kwargs)
    if key is None:
        return
    picks = []
    for array in arrays:  # each array by identity among the arguments (not a default)
        found = [i for i, arg in enumerate(args) if arg is array]
        if len(found) != 1:
            return
        picks.append(found[0])
    fn.calls.remember_fast(key, call, tuple(picks))


__all__ = ["NOT_SHIPPED", "ConcreteDispatch", "Types",
           "call_unstructured", "describe_call", "described", "description", "flat_source",
           "recorded_call", "served_first", "unrecorded_reason"]
