"""The one module that touches ``jax._src``: small accessors, and version-guarded adjustments.

Every other module goes through the functions here, so a jax release that moves an internal
breaks one file. Accessors: the concrete array type, the ``Primitive`` class, the x64 flag and
its context, the location-free tracing context, the MLIR context and ``ir`` module, the mesh of
``with mesh:``, the batch size of an eager ``vmap`` (for the recording run).

One adjustment: ``call_exported``'s lowering initialises LAPACK (importing ``scipy.linalg``, more
than a small function's whole first call) for every artifact whose platforms include ``cpu``, even
when the module holds no LAPACK call. The loader knows from the manifest which artifacts need it;
while it lowers one that does not, the initialisation is skipped. If jax's internals differ from
what this expects, nothing is changed and jax behaves as usual.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

# Imported in functions: the XLA object names, only when one is looked up (importing a baked
# package loads this module).

_SKIP_LAPACK_INIT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "hatch_jaxexport_skip_lapack_init", default=False)
_INSTALL_LOCK = threading.Lock()
_installed: bool | None = None


def concrete_array_type() -> type:
    """jax's concrete array class (never a tracer's, whatever trace is active)."""
    try:
        from jax._src.array import ArrayImpl

        return ArrayImpl
    except ImportError:  # pragma: no cover - future jax
        import jax
        import numpy as np

        with jax.ensure_compile_time_eval():
            return type(jax.device_put(np.zeros(())))


def primitive_type() -> type:
    """jax's ``Primitive`` class, for the family's primitive (``runtime/artifacts/primitive.py``).

    The public name is ``jax.extend.core.Primitive`` (the same class on jax 0.10.2 and 0.12),
    but importing ``jax.extend`` imports all its submodules, pallas included, on the first
    call of a loaded function. The internal path first, the public one if it moves.
    """
    try:
        from jax._src.core import Primitive
    except ImportError:  # pragma: no cover - future jax
        from jax.extend.core import Primitive
    return Primitive


def eager_vmap_size(leaves: Sequence[Any]) -> int | None:
    """The batch size of an eager ``jax.vmap`` whose call holds ``leaves``: each nested
    ``vmap``'s axis size multiplied (the loader folds nested batch axes into one call of a
    batched member), ``None`` where no ``vmap`` is around the call, or another transformation
    is (a ``jax.jit`` stages the call: no executable would serve it), or jax's batching
    tracers differ from what this reads."""
    try:
        from jax._src.core import Tracer
        from jax._src.interpreters.batching import BatchTracer
    except ImportError:
        return None
    sizes: dict[int, int] = {}
    for leaf in leaves:
        while isinstance(leaf, BatchTracer):
            size = getattr(getattr(leaf._trace, "axis_data", None), "size", None)
            if not isinstance(size, int):
                return None
            sizes[id(leaf._trace)] = size
            leaf = leaf.val
        if isinstance(leaf, Tracer):
            return None
    return math.prod(sizes.values()) if sizes else None


def x64_context(enabled: bool) -> contextlib.AbstractContextManager[object]:
    """Trace with 64-bit types on when ``enabled`` (a structure with x64 dtypes), else nothing."""
    if not enabled:
        return contextlib.nullcontext()
    return x64_switch(True)


def x64_switch(value: bool) -> contextlib.AbstractContextManager[object]:
    """jax's context manager that sets ``jax_enable_x64`` to ``value`` for its block."""
    import jax

    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(value)
    from jax.experimental import enable_x64  # jax < 0.8: the context manager's only home

    return enable_x64(value)  # type: ignore[no-any-return]


#: The ``jax.monitoring`` event jax records for the duration of each XLA compile.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

#: The jax config values that change what an export lowers to, recorded per function at
#: decoration and per artifact in the manifest (docs/loader.md: how each one was checked).
LOWERING_CONFIG = ("jax_enable_x64", "jax_default_matmul_precision")
#: The environment variable jax reads each one's default from.
_CONFIG_ENV = {"jax_enable_x64": "JAX_ENABLE_X64",
               "jax_default_matmul_precision": "JAX_DEFAULT_MATMUL_PRECISION"}
_TRUE = ("y", "yes", "t", "true", "on", "1")


def _env_default(name: str) -> Any:
    """A config value's default as jax reads it from the environment at its import."""
    raw = os.environ.get(_CONFIG_ENV[name])
    if name == "jax_enable_x64":
        return raw is not None and raw.strip().lower() in _TRUE
    return raw or None


def lowering_config() -> dict[str, Any]:
    """The values of ``LOWERING_CONFIG`` in effect here (thread-local contexts included).

    Never imports jax: before jax is imported the values are jax's defaults, which it takes
    from the environment (``JAX_ENABLE_X64`` parsed as jax parses it)."""
    jax = sys.modules.get("jax")
    config = getattr(jax, "config", None)
    if config is None:
        return {name: _env_default(name) for name in LOWERING_CONFIG}
    return {name: getattr(config, name) for name in LOWERING_CONFIG}


def set_lowering_config(values: Mapping[str, Any]) -> None:
    """Set the process's global ``LOWERING_CONFIG`` values (the build's discovery only)."""
    import jax

    for name, value in values.items():
        if getattr(jax.config, name) != value:
            jax.config.update(name, value)


def lowering_context(values: Mapping[str, Any]) -> contextlib.AbstractContextManager[object]:
    """Trace under these ``LOWERING_CONFIG`` values, whatever the process's global ones are."""
    import jax

    stack = contextlib.ExitStack()
    if "jax_enable_x64" in values:
        stack.enter_context(x64_switch(bool(values["jax_enable_x64"])))
    if "jax_default_matmul_precision" in values:
        stack.enter_context(jax.default_matmul_precision(values["jax_default_matmul_precision"]))
    return stack


def x64_flag() -> object:
    """jax's ``jax_enable_x64`` state; its ``.value`` is the flag in the current context."""
    from jax._src import config as jax_config

    return jax_config.enable_x64


def no_locations() -> contextlib.AbstractContextManager[object]:
    """Trace without file locations: byte-identical blobs whatever the build path (FIELD-NOTES)."""
    from jax._src import config as jax_config

    return jax_config.traceback_in_locations_limit(0)


def ir_context() -> contextlib.AbstractContextManager[object]:
    """An MLIR context with jax's dialects registered, to parse StableHLO text."""
    from jax._src.interpreters import mlir as jax_mlir

    return jax_mlir.make_ir_context()


def mlir_ir() -> object:
    """jax's bundled MLIR Python bindings (``ir``), for reading a module's operations."""
    from jax._src.lib.mlir import ir

    return ir


def with_mesh_physical() -> object | None:
    """The concrete mesh entered with ``with mesh:`` (deprecated, still honoured by jax), or
    ``None`` when there is none or this jax keeps it elsewhere."""
    try:
        from jax._src import mesh as mesh_lib

        physical = mesh_lib.thread_resources.env.physical_mesh
        return None if physical.empty else physical
    except (ImportError, AttributeError):
        return None


def pytree_serialization(cls: type) -> tuple[str, Any] | None:
    """``(serialized_name, serialize_auxdata)`` that
    ``jax.export.register_pytree_node_serialization`` was given for ``cls``, or ``None`` (not
    registered, or this jax keeps them elsewhere). jax has no public reader of its registry;
    the structure keys of registered nodes need one."""
    try:
        from jax._src.export import _export

        return _export.serialization_registry.get(cls)
    except (ImportError, AttributeError):  # pragma: no cover - another jax
        return None


def is_lapack_target(target: str) -> bool:
    """Whether a custom-call target is a LAPACK kernel."""
    return "lapack" in target.lower()


def needs_lapack(custom_calls: Sequence[str]) -> bool:
    """Whether a module with these custom-call targets needs LAPACK initialised."""
    return any(is_lapack_target(target) for target in custom_calls)


def module_needs_lapack(serialized: bytes) -> bool:
    """``needs_lapack`` for a serialized module whose record lists no custom-call targets (a
    concrete-size artifact): whether any string in its bytecode names a LAPACK kernel (a
    custom-call target is stored as it is; a false "yes" only initialises LAPACK)."""
    return b"lapack" in bytes(serialized).lower()


def initialize_lapack() -> None:
    """Initialise jax's LAPACK kernels (what lowering a LAPACK call does), for an executable
    loaded without lowering; a no-op where jax has no such function."""
    try:
        from jax._src.lax import linalg
    except ImportError:  # pragma: no cover - future jax
        return
    init = getattr(linalg, "initialize_lapack", None)
    if callable(init):
        init()


def install_lapack_guard() -> bool:
    """Wrap ``jax._src.export._export._ensure_backends_initialized``; ``False`` if not possible."""
    global _installed
    with _INSTALL_LOCK:
        if _installed is not None:
            return _installed
        _installed = False
        try:
            from jax._src.export import _export
        except ImportError:
            return False
        original = getattr(_export, "_ensure_backends_initialized", None)
        if original is None or not callable(original):
            return False
        try:
            params = list(inspect.signature(original).parameters)
        except (TypeError, ValueError):
            return False
        if params != ["platforms"]:
            return False

        def guarded(platforms: tuple[str, ...]) -> None:
            if _SKIP_LAPACK_INIT.get():
                return None
            return original(platforms)

        guarded.__wrapped__ = original  # type: ignore[attr-defined]
        _export._ensure_backends_initialized = guarded
        _installed = True
        return True


@contextlib.contextmanager
def lapack_init_skipped(skip: bool) -> Iterator[None]:
    """Within this block, lowering an exported call skips LAPACK initialisation if ``skip``."""
    token = _SKIP_LAPACK_INIT.set(skip and install_lapack_guard())
    try:
        yield
    finally:
        _SKIP_LAPACK_INIT.reset(token)


def backend_identity(platform: str = "cpu") -> tuple[str, str]:
    """The backend's platform and platform version (``("cpu", "cpu")``, a CUDA version...)."""
    import jax

    client = jax.devices(platform)[0].client
    return str(client.platform), str(client.platform_version)


def platform_devices(platform: str) -> list[Any]:
    """This process's local devices of ``platform`` (jax.export's name: ``cpu``, ``tpu``,
    ``cuda``, ``rocm``; a jax that knows a GPU only as ``gpu`` is asked that too), ``[]``
    where it has none (no such backend, or it failed to start)."""
    import jax

    for name in (platform, "gpu") if platform in ("cuda", "rocm") else (platform,):
        try:
            devices = jax.local_devices(backend=name)
        except RuntimeError:  # no such backend in this process
            continue
        if devices:
            return list(devices)
    return []


def device_identity(platform: str) -> tuple[str, str, int] | None:
    """What ``platform``'s backend says of itself: its platform version (libtpu's build, the
    CUDA stack), its first local device's kind (``TPU v5 lite``) and how many local devices
    this process has; ``None`` without such devices."""
    devices = platform_devices(platform)
    if not devices:
        return None
    return (str(devices[0].client.platform_version), str(devices[0].device_kind),
            len(devices))


def serialize_compiled(compiled: Any, leaves: int) -> bytes | None:
    """The plain bytes of a compiled single-device executable (``PjRtClient.
    serialize_executable``, no pickle, its object files in one order so that builds repeat),
    or ``None`` when they would not stand alone: constants passed as arguments, inputs pruned
    (``leaves`` flat inputs expected), host callbacks."""
    try:
        if getattr(getattr(compiled, "_params", None), "const_args", None):
            return None
        unloaded = compiled._executable._unloaded_executable
        if unloaded is None or unloaded.host_callbacks or \
                len(unloaded.input_avals) != leaves or \
                set(unloaded.kept_var_idx) != set(range(leaves)) or \
                len(unloaded.device_list) != 1:
            return None
        executable = compiled._executable.xla_executable
        client = getattr(executable, "client", None)  # none: compiled for a described device
        blob = bytes(client.serialize_executable(executable) if client is not None
                     else executable.serialize())
        if unloaded.device_list[0].platform != "cpu":  # XLA:CPU's layout only: others as is
            return blob
    except Exception:  # another jax's internals: no executable, the StableHLO still works
        return None
    from hatch_jaxexport.formats.xla_objects import canonical_order

    return canonical_order(blob)  # XLA lists object files as threads finish: one order


def executable_device_ids(compiled: Any) -> tuple[int, ...] | None:
    """The ids of the devices a ``jax.stages.Compiled`` was compiled for, in its device
    assignment's order (one for an eager call's executable): what a cached copy must be loaded
    onto. ``jax.experimental.serialize_executable`` pickles them only inside the executable's
    own state, read after its bytes are loaded, and its unpickler otherwise loads the bytes
    onto *every* device of the backend: with 4 local devices a one-device executable then wants
    4 shards per argument. ``None`` on a jax whose internals differ."""
    try:
        devices = compiled._executable._unloaded_executable.device_list
        return tuple(int(device.id) for device in devices) or None
    except Exception:  # another jax's internals: not cached, the call still ran
        return None


def compiled_from_executable(blob: bytes, inputs: Sequence[tuple[Sequence[int], str]],
                             outputs: Sequence[tuple[Sequence[int], str]], in_tree: Any,
                             out_tree: Any, name: str, platform: str = "cpu") -> Any:
    """A ``jax.stages.Compiled`` around a serialized single-device executable, built from the
    flat input and output types the manifest records (what ``serialize_executable`` of
    ``jax.experimental`` would otherwise pickle), loaded onto exactly one device: this
    process's first local device of ``platform``, the one an eager call of uncommitted
    arguments runs on (never every device of the backend, which jax's own unpickler does).
    Raises on a jax whose internals differ."""
    import numpy as np
    from jax._src import core
    from jax._src.lib import xla_client

    device = platform_devices(platform)[0]
    loaded = device.client.deserialize_executable(blob, xla_client.DeviceList((device,)))
    in_avals = [core.ShapedArray(tuple(dims), np.dtype(dtype)) for dims, dtype in inputs]
    out_avals = [core.ShapedArray(tuple(dims), np.dtype(dtype)) for dims, dtype in outputs]
    return compiled_from_loaded(loaded, device, in_avals, out_avals, in_tree, out_tree, name)


def compile_stablehlo(module: bytes, platform: str,
                      compiler_options: Mapping[str, Any] | None = None) -> Any:
    """The loaded executable of a serialized one-device StableHLO module
    (``Exported.mlir_module_serialized``), compiled by the backend's client straight from its
    bytes, with jax's own compile options for one device (and ``compiler_options``, as
    ``Lowered.compile`` takes them): no trace, no MLIR context in Python, no wrapper to lower.
    Timed, logged and recorded as jax's own compile of ``jit(call)`` (its ``log_compiles``
    line, its ``backend_compile_duration`` event): the name jax gives
    ``jax.jit(exported.call)``, whose compile this stands in for. Raises on a jax whose
    internals differ (the caller lowers the usual way)."""
    import jax
    import numpy as np
    from jax._src import compiler, dispatch
    from jax._src.lib import xla_client

    device = jax.devices(platform)[0]
    options = compiler.get_compile_options(
        num_replicas=1, num_partitions=1, device_assignment=np.array([[device]]),
        env_options_overrides=dict(compiler_options) if compiler_options else None,
        backend=device.client)
    # whoever counts, times or logs compiles (``jax.monitoring`` listeners, profilers,
    # ``jax_log_compiles``) sees this one as jax's own
    with dispatch.log_elapsed_time("Finished XLA compilation of {fun_name} in "
                                   "{elapsed_time:.9f} sec", fun_name="jit(call)",
                                   event=BACKEND_COMPILE_EVENT):
        return device.client.compile_and_load(module, xla_client.DeviceList((device,)), options)


#: The layout of ``jax.experimental.serialize_executable``'s pickle that this module reads
#: besides the first one (version 3: jax 0.12.1 added the version and the closed-over constants).
SERIALIZED_EXECUTABLE_VERSION = 3


def compiled_from_serialized(loaded: tuple[Any, ...], in_tree: Any, out_tree: Any) -> Any:
    """The ``jax.stages.Compiled`` of what ``serialize_executable``'s unpickler loaded:
    ``(executable, args_info, no_kwargs)`` up to jax 0.12.0, ``(version, executable,
    args_info, no_kwargs, const_args)`` since. ``ValueError`` for another version (the cache
    entry then misses, and the call compiles)."""
    import jax

    if len(loaded) == 3:
        (unloaded, args_info_flat, no_kwargs), const_args = loaded, ()
    else:
        version, unloaded, args_info_flat, no_kwargs, const_args = loaded
        if version != SERIALIZED_EXECUTABLE_VERSION:
            raise ValueError(f"serialized executable version {version!r}, this hatch-jaxexport "
                             f"reads {SERIALIZED_EXECUTABLE_VERSION}")
    unloaded, args_info_flat = _canonical_layouts(unloaded, args_info_flat)
    return jax.stages.Compiled(unloaded.load(), list(const_args),
                               in_tree.unflatten(args_info_flat), out_tree, no_kwargs=no_kwargs)


def _canonical_layouts(unloaded: Any, args_info_flat: list[Any]) -> tuple[Any, list[Any]]:
    """The unpickled executable's avals with jax's own ``AutoLayout``.

    jax 0.12.1 unpickles each aval's automatic layout as a new ``AutoLayoutSingleton``, which
    compares unequal to the singleton every other aval holds: the outputs' types then differ
    from their traced ones, and ``jax.grad`` of a cached call refuses its own cotangent
    ("expected float32[] but got float32[]"). jax's ``deserialize_and_load`` has the same
    fault; a jax without layouts on avals is left as it is."""
    import dataclasses

    from jax._src import layout

    auto, auto_type = getattr(layout, "AutoLayout", None), getattr(layout, "AutoLayoutSingleton",
                                                                   None)
    if auto is None or auto_type is None:
        return unloaded, args_info_flat

    def stray(aval: Any) -> bool:
        found = getattr(aval, "layout", None)
        return isinstance(found, auto_type) and found is not auto

    avals = [*unloaded.input_avals, *unloaded.output_avals, *(i._aval for i in args_info_flat)]
    if not any(stray(aval) for aval in avals):  # jax before 0.12.1, or fixed since
        return unloaded, args_info_flat
    unloaded = dataclasses.replace(
        unloaded, input_avals=[a.update(layout=auto) if stray(a) else a
                               for a in unloaded.input_avals],
        output_avals=[a.update(layout=auto) if stray(a) else a for a in unloaded.output_avals])
    return unloaded, [type(info)(info._aval.update(layout=auto), info.donated)
                      if stray(info._aval) else info for info in args_info_flat]


def single_device_sharding(device: Any) -> Any:
    """The sharding of one device: ``jax.sharding.make_single_device_sharding`` where jax has
    it (0.12.1 deprecated constructing ``jax.sharding.SingleDeviceSharding``, a warning in the
    user's process), the class itself before."""
    import jax

    make = getattr(jax.sharding, "make_single_device_sharding", None)
    return make(device) if make is not None else jax.sharding.SingleDeviceSharding(device)


def compiled_from_loaded(loaded: Any, device: Any, in_avals: Sequence[Any],
                         out_avals: Sequence[Any], in_tree: Any, out_tree: Any,
                         name: str) -> Any:
    """A ``jax.stages.Compiled`` around a loaded single-device executable whose inputs and
    outputs are the flat ``in_avals`` and ``out_avals`` (none pruned, no effects, no host
    callbacks), as jax's ``jit`` would have built it. Raises on a jax whose internals differ."""
    import dataclasses

    from jax._src import stages
    from jax._src.interpreters import pxla
    from jax._src.lib import xla_client

    in_avals, out_avals = list(in_avals), list(out_avals)
    single = single_device_sharding(device)
    fields = dict(
        xla_executable=loaded, device_list=xla_client.DeviceList((device,)),
        backend=device.client, input_avals=in_avals, input_shardings=[single] * len(in_avals),
        output_avals=out_avals, output_shardings=[single] * len(out_avals), committed=False,
        name=name, unordered_effects=[], ordered_effects=[], keepalive=[], host_callbacks=[],
        kept_var_idx=set(range(len(in_avals))), mut=None,
        xla_in_layouts=[None] * len(in_avals), dispatch_in_layouts=[None] * len(in_avals),
        xla_out_layouts=[None] * len(out_avals), all_args_info=None, pgle_profiler=None)
    names = [field.name for field in dataclasses.fields(pxla.UnloadedMeshExecutable)]
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise RuntimeError(f"this jax's executables have fields {unknown} this version of "
                           "hatch-jaxexport does not know")
    unloaded = pxla.UnloadedMeshExecutable(**{n: fields[n] for n in names})
    args_info = in_tree.unflatten([stages.ArgInfo(aval, False) for aval in in_avals])
    return stages.Compiled(unloaded.load(), [], args_info, out_tree, no_kwargs=False)


def compiled_dispatch(compiled: Any) -> Any:
    """A ``jax.stages.Compiled``'s C++ dispatcher: what ``Compiled.__call__`` makes on its
    first call and calls after (``_call``), made now if not yet, so the fast path calls it
    without ``__call__``'s Python frame and with the same argument checks.
    ``compiled`` itself where jax offers none."""
    call = getattr(compiled, "_call", None)
    if callable(call):
        return call
    try:
        made = compiled._executable.create_cpp_call(compiled._params)
    except Exception:  # pragma: no cover - future jax
        made = None
    return made if callable(made) else compiled


def compiled_by_position(compiled: Any, keywords: Sequence[str]) -> Any | None:
    """A twin of ``compiled`` (the same loaded executable, nothing compiled) that takes the
    arguments it took by keyword positionally, after its positional ones, in ``keywords``
    order: jax's C++ dispatch then binds no keywords (``benchmarks/hot_calls.py`` measures it).
    ``None`` where that would change the flat order of its inputs (jax flattens keywords in
    sorted order, so ``keywords`` must be sorted), where it has "high" (mutable) inputs, whose
    types name the tree, or where this jax differs."""
    try:
        from jax._src import stages

        positional, by_keyword = compiled.args_info
        params = compiled._params
        if tuple(keywords) != tuple(sorted(by_keyword)) or params.is_high:
            return None
        return stages.Compiled(compiled._executable, params.const_args,
                               ((*positional, *(by_keyword[k] for k in keywords)), {}),
                               compiled.out_tree, compiled._no_kwargs)
    except Exception:  # pragma: no cover - future jax
        return None


def concrete_shape(shape: Sequence[Any], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """A shape of ``jax.export`` symbolic dimensions evaluated with concrete symbol values."""
    return tuple(dim if isinstance(dim, int) else int(dim._evaluate(dict(sizes)))
                 for dim in shape)


def evaluating_eagerly() -> bool:
    """Whether operations run now, outside any trace (an eager ``jax.grad``'s rules run so:
    their zeros can be numpy arrays instead of jax operations, each compiled on first use).
    ``False`` when unsure."""
    try:
        from jax._src import core

        return isinstance(core.trace_ctx.trace, core.EvalTrace)
    except (ImportError, AttributeError):  # pragma: no cover - future jax
        return False


def eager_probe() -> Callable[[], bool]:
    """``evaluating_eagerly`` with jax's trace context looked up once: what the full call
    path asks on every call (``runtime.call.staging``), so it costs one attribute read and one
    ``isinstance``. Where jax's internals differ, a probe that answers ``False`` (unsure: the
    caller then reads the arguments)."""
    try:
        from jax._src import core

        context, eval_trace = core.trace_ctx, core.EvalTrace
        isinstance(context.trace, eval_trace)
    except (ImportError, AttributeError):  # pragma: no cover - future jax
        return lambda: False

    def eager() -> bool:
        return isinstance(context.trace, eval_trace)
    return eager


def static_shape_export(exported: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                        platform: str) -> Any | None:
    """``exported``'s call for these concrete argument types, as an ``Exported`` whose module
    has no symbolic dimension left: shapes refined and shape checks folded now, at build, so a
    loader compiles it without ``call_exported``'s refinement (a second MLIR context and the
    shape-refinement passes, a share of a small function's first call). Nothing is traced but
    the artifact's own call. ``None`` where jax's internals differ from what this expects."""
    import dataclasses

    import jax
    from jax import export

    wrapped = export.export(jax.jit(exported.call), platforms=[platform])(*args, **kwargs)
    try:
        from jax._src.export import _export
        from jax._src.interpreters import mlir

        with mlir.make_ir_context():
            module = mlir.ir.Module.parse(wrapped.mlir_module())
            refined = mlir.refine_polymorphic_shapes(module)
            with refined.context:
                attributes = refined.operation.attributes
                if "jax.uses_shape_polymorphism" in attributes:
                    del attributes["jax.uses_shape_polymorphism"]
                serialized = _export._module_to_bytecode(refined)
        return dataclasses.replace(wrapped, mlir_module_serialized=serialized,
                                   uses_global_constants=False)
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - another jax
        return None



#: NumPy dtype names and the MLIR element types of StableHLO's tensors; a dtype not listed
#: (float8, int4, PRNG keys) has no text form (``module_text``): the usual lowering serves it.
MLIR_ELEMENT_TYPES = {
    "bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "complex64": "complex<f32>", "complex128": "complex<f64>"}


def tensor_type(dims: Sequence[Any], dtype_name: str) -> str:
    """The MLIR spelling of a tensor type, ``tensor<8x?xf32>`` (``?``: a dimension that is not
    an int, a symbolic one); ``KeyError`` for a dtype ``MLIR_ELEMENT_TYPES`` lacks."""
    shape = "".join(f"{d}x" if isinstance(d, int) else "?x" for d in dims)
    return f"tensor<{shape}{MLIR_ELEMENT_TYPES[dtype_name]}>"


def module_text(exported: Any) -> str:
    """The StableHLO module of ``exported`` as MLIR text, without locations (no build path in
    it), as this jaxlib prints it: what a loader running the same jaxlib refines at a call's
    sizes without jax's lowering (``refine_stablehlo``)."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import xla_client

    # ``xla_client._xla``: jaxlib's extension under every name it had (``_jax``, before that
    # ``xla_extension``)
    with jax_mlir.make_ir_context(), jax_mlir.ir.Location.unknown():
        module = xla_client._xla.mlir.deserialize_portable_artifact(
            exported.mlir_module_serialized)
        if isinstance(module, str | bytes):  # an older jaxlib gives the module's text
            module = jax_mlir.ir.Module.parse(module)
        return str(module.operation.get_asm(enable_debug_info=False))


def refine_stablehlo(text: str) -> bytes:
    """The bytecode of StableHLO module ``text``, whose ``main`` takes static shapes, with
    every dynamic shape refined and the shape assertions checked, as jax's own refinement
    does it (``mlir.refine_polymorphic_shapes``) but in C++ alone: no MLIR context in Python.
    Raises where it fails, or where this jax's internals differ."""
    from jax._src import config
    from jax._src.lib import xla_client

    shardy = bool(config.use_shardy_partitioner.value)  # as jax's own refinement passes it
    return bytes(xla_client._xla.mlir.refine_polymorphic_shapes(
        text.encode(), enable_shape_assertions=True, validate_static_shapes=True,
        enable_shardy=shardy))


def with_module(exported: Any, in_shapes: Sequence[Sequence[int]],
                out_shapes: Sequence[Sequence[int]], module: bytes) -> Any:
    """``exported`` with these concrete input and output shapes and ``module`` (refined at
    them, ``refine_stablehlo``) as its StableHLO: what ``DirectModule`` compiles."""
    import dataclasses

    return dataclasses.replace(
        exported, mlir_module_serialized=module, uses_global_constants=False,
        in_avals=tuple(a.update(shape=tuple(s))
                       for a, s in zip(exported.in_avals, in_shapes, strict=True)),
        out_avals=tuple(a.update(shape=tuple(s))
                        for a, s in zip(exported.out_avals, out_shapes, strict=True)))


__all__ = ["BACKEND_COMPILE_EVENT", "LOWERING_CONFIG", "backend_identity", "compile_stablehlo",
           "SERIALIZED_EXECUTABLE_VERSION", "compiled_by_position", "compiled_dispatch",
           "compiled_from_executable", "compiled_from_serialized",
           "compiled_from_loaded", "concrete_array_type", "concrete_shape", "device_identity",
           "eager_probe", "eager_vmap_size", "evaluating_eagerly", "executable_device_ids",
           "initialize_lapack", "install_lapack_guard", "ir_context", "is_lapack_target",
           "lapack_init_skipped", "lowering_config", "lowering_context", "mlir_ir",
           "MLIR_ELEMENT_TYPES", "module_text", "refine_stablehlo", "tensor_type", "with_module",
           "module_needs_lapack", "needs_lapack", "no_locations", "platform_devices",
           "primitive_type",
           "pytree_serialization", "serialize_compiled", "single_device_sharding",
           "set_lowering_config", "static_shape_export", "with_mesh_physical", "x64_context",
           "x64_flag"]
