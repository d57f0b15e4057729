"""The executable cache: a machine's compiled executables of baked artifacts, per signature.

JAX's persistent compilation cache saves the XLA compile, but finding an entry needs the lowered
module: deserializing the artifact's StableHLO, an MLIR context, lowering and shape refinement, all
before the executable loads (``docs/performance.md`` measures it). This cache is keyed by what the
loader knows without any of that: the artifact's SHA-256 from the manifest, the call's argument
types, and the machine (jax and jaxlib versions, backend and its version, device kind, the
process's devices: their number, this process's index and the ids of its local devices, the
CPU's model and feature flags). A warm process reads the entry and calls the executable.

An entry also names the devices its executable was compiled for (one, for an eager call), and
is loaded onto exactly those: jax's unpickler would otherwise load it onto every device of the
backend, and with several local devices (``--xla_force_host_platform_device_count=4``, a
multi-GPU or TPU host) a one-device executable would then ask each argument for one shard per
device and fail the call. An entry whose devices are not all this process's local devices
does not fit it: a miss, never an error.

Entries live in the user's cache folder (``cache.executable_cache_dir``), are written atomically
(temporary file, then ``os.replace``) so concurrent processes never see half an entry, and hold
what ``jax.experimental.serialize_executable`` produces: a pickle. They are read back with an
unpickler that only resolves jax's own classes, never an arbitrary callable. The folder is the
user's own, like JAX's compilation cache (whose entries are native code and trusted the same
way); nothing from a wheel is ever unpickled.

Anything unexpected (a damaged entry, a jax whose internals differ) is a cache miss: the loader
compiles as if the entry were not there.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.runtime.disk.entry_names import ENTRY_SUFFIX, entry_label, touch
from hatch_jaxexport.runtime.jaxcompat import compiled_from_serialized, executable_device_ids

# Imported in functions: the cache folders' warning and trimming, only after a write; the
# device targets' backend options, only for an accelerator's entry.

#: Version 2 names the devices an entry's executable was compiled for; version 1's entries,
#: which did not, are misses (loaded onto every device, they failed with several).
MAGIC = b"hatch-jaxexport executable 2\n"
SUFFIX = ENTRY_SUFFIX
#: (module, name) pairs an entry may name besides jax's and jaxlib's own classes.
_ALLOWED_GLOBALS = frozenset({("numpy", "dtype"), ("copyreg", "_reconstructor"),
                              ("builtins", "object"), ("builtins", "slice"),
                              ("builtins", "frozenset"), ("builtins", "set"),
                              ("builtins", "complex")})


def _allowed(module: str, name: str, obj: Any = None, resolved: bool = False) -> bool:
    """Whether an entry may name ``module.name``: numpy's dtype, pickle's helpers, and jax's
    own classes and unpickling functions (never a dotted name or another callable)."""
    if (module, name) in _ALLOWED_GLOBALS:
        return True
    if "." in name or not (module == "jax" or module.startswith(("jax._src.", "jaxlib."))):
        return False
    if module == "jax._src.tree_util" and name.endswith("_registry"):
        return True  # the pytree registries a PyTreeDef names
    return not resolved or isinstance(obj, type) or name.startswith("_unpickle")


def _restricted(base: type[pickle.Unpickler]) -> type[pickle.Unpickler]:
    class Restricted(base):  # type: ignore[valid-type, misc]
        def find_class(self, module: str, name: str) -> Any:
            if _allowed(module, name):
                obj = super().find_class(module, name)
                if _allowed(module, name, obj, resolved=True):
                    return obj
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in an executable "
                                         "cache entry")

    return Restricted


def _read_cpu_fingerprint() -> str:
    # ``os.uname``, not ``platform.processor()``: that runs ``uname -p`` in a subprocess, a
    # first call's milliseconds, and /proc/cpuinfo below names the model anyway
    found = [os.uname().machine]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("model name", "flags", "Features", "CPU part")):
                    found.append(line.strip())
                elif not line.strip() and len(found) > 2:
                    break  # the first processor's block is enough
    except OSError:
        pass
    return hashlib.sha256("\n".join(found).encode()).hexdigest()


@functools.cache
def cpu_fingerprint(folder: Path) -> str:
    """The CPU's model and feature flags, hashed (XLA:CPU compiles for the host's instruction
    set). Reading ``/proc/cpuinfo`` costs a first call time, so the hash is kept in ``folder``
    per boot (``/proc/sys/kernel/random/boot_id``: the CPU cannot change without a reboot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot_file:
            boot = boot_file.read().strip()
    except OSError:
        return _read_cpu_fingerprint()
    memo = folder / f"cpu-{boot}"
    try:
        text = memo.read_text(encoding="ascii").strip()
        if len(text) == 64:
            return text
    except (OSError, UnicodeDecodeError):
        pass
    found = _read_cpu_fingerprint()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        memo.write_text(found, encoding="ascii")
    except OSError:
        pass
    return found


@functools.cache
def _machine(platform: str, folder: Path) -> str:
    import jax
    import jaxlib

    devices = jax.devices()
    client = devices[0].client
    # the options the compile ran under, as jax's own cache keys them: an entry compiled under
    # other XLA_FLAGS (or LIBTPU_INIT_ARGS on a TPU) may hold other code
    flags = " ".join(os.environ.get("XLA_FLAGS", "").split())
    return "\n".join([jax.__version__, getattr(jaxlib, "__version__", "?"), platform,
                      client.platform, client.platform_version, devices[0].device_kind,
                      _device_layout(), _host_code(platform, folder), str(sys.version_info[:2]),
                      flags, _backend_options(platform)])


def _backend_options(platform: str) -> str:
    """The compiler options an accelerator's backend takes from the environment
    (``device_targets.backend_flags``: ``LIBTPU_INIT_ARGS``); XLA:CPU takes its own from
    ``XLA_FLAGS`` alone, which the key has already, so a CPU entry's key reads none."""
    if platform == "cpu":
        return ""
    from hatch_jaxexport.formats.device_targets import backend_flags

    return backend_flags(platform, os.environ)


def _host_code(platform: str, folder: Path) -> str:
    """What of the host's CPU a ``platform``'s executable depends on: XLA:CPU compiles for its
    instruction set (``cpu_fingerprint``); an accelerator's program runs on the device, and
    the device is in the key already (jax's own cache keys leave the host's CPU out too)."""
    return cpu_fingerprint(folder) if platform == "cpu" else "-"


def _device_layout() -> str:
    """The process's devices as a key reads them: their number, this process's index and its
    local devices' ids (``4 0 0,1,2,3``). Processes with other devices keep entries of their
    own, so that two kinds of process sharing one cache folder never overwrite each other's
    entries in turn (``load`` would refuse an entry for devices this process lacks anyway)."""
    import jax

    local = ",".join(str(device.id) for device in jax.local_devices())
    return f"{jax.device_count()} {jax.process_index()} {local}"


@functools.cache
def _jaxlib_version() -> str:
    import jaxlib

    return getattr(jaxlib, "__version__", "unknown")


def entry_key(folder: Path, artifact_sha256: str, signature: Sequence[Any], platform: str,
              options: str = "default", package: str = "") -> str:
    """The entry name of an artifact's executable for these argument types on this machine.

    It starts with the package, the artifact's SHA-256 and the jaxlib (``footprint``), so
    that ``jaxexport cache prune`` can tell the entries no installed package ships any more;
    the digest after them is the key proper.
    """
    text = "\n".join([artifact_sha256, repr(tuple(signature)), options,
                      _machine(platform, folder)])
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{entry_label(package, artifact_sha256, _jaxlib_version())}-{digest}"


def entry_path(folder: Path, key: str) -> Path:
    return folder / f"{key}{SUFFIX}"


def _plain_tree(treedef: Any) -> bool:
    """Whether a treedef has only tuples, lists, dicts and None (so it pickles without naming
    a class of the user's package)."""
    import jax

    leaf = jax.tree_util.tree_structure(0)
    stack = [treedef]
    while stack:
        node = stack.pop()
        if node == leaf:
            continue
        kind = node.node_data()
        if kind is None or kind[0] not in (tuple, list, dict, type(None)):
            return False
        stack.extend(node.children())
    return True


def load(folder: Path, key: str, trees: Callable[[], tuple[Any, Any]] | None = None
         ) -> Any | None:
    """The cached executable (a ``jax.stages.Compiled``), ``None`` on a miss. An entry whose
    trees name the package's classes holds none: ``trees`` gives them (the call's input tree,
    the artifact's output tree, rebuilt by jax's registered serialization), else it misses.
    The executable is loaded onto the devices it was compiled for; an entry for devices this
    process does not have misses."""
    path = entry_path(folder, key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(MAGIC):
        return None
    touch(path)  # recently used: the last to go when the cache is over its limit
    try:
        import jax
        from jax.experimental import serialize_executable as se

        outer = _restricted(pickle.Unpickler)(io.BytesIO(data[len(MAGIC):]))
        payload, in_tree, out_tree, device_ids = outer.load()
        backend = jax.devices()[0].client
        devices = _fitting_devices(backend, device_ids)
        if devices is None:  # compiled for devices this process does not have
            return None
        if in_tree is None:  # trees of the package's classes: never pickled
            if trees is None:
                return None
            in_tree, out_tree = trees()
        inner = _restricted(se._JaxPjrtUnpickler)(io.BytesIO(payload), backend, devices)
        return compiled_from_serialized(inner.load(), in_tree, out_tree)
    except Exception:  # a damaged entry, a refused class, another jax: compile instead
        return None


def _fitting_devices(backend: Any, device_ids: Any) -> list[Any] | None:
    """This process's local devices of ``backend`` with ids ``device_ids``, in that order (what
    an entry's executable is loaded onto); ``None`` unless every one is here."""
    if not isinstance(device_ids, tuple) or not device_ids:
        return None
    local = {device.id: device for device in backend.local_devices()}
    found = [local.get(device_id) for device_id in device_ids]
    return None if any(device is None for device in found) else found


_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_cache_hits = [0]
_listening: list[bool] = []


def _count_cache_hits(event: str, **kwargs: Any) -> None:
    if event == _CACHE_HIT_EVENT:
        _cache_hits[0] += 1


def compile_fresh(lowered: Any, compiler_options: dict[str, Any] | None = None
                  ) -> tuple[Any, bool]:
    """Compile ``lowered``; also say whether XLA compiled it (``False`` when JAX's persistent
    cache served it, or may have: such an executable re-serializes without its kernels, seen
    with jax 0.10.2 as ``NOT_FOUND: Function ... not found`` when the copy runs)."""
    if not _listening:
        import jax.monitoring

        jax.monitoring.register_event_listener(_count_cache_hits)
        _listening.append(True)
    before = _cache_hits[0]
    compiled = lowered.compile(compiler_options=compiler_options) if compiler_options \
        else lowered.compile()
    return compiled, _cache_hits[0] == before


def store(folder: Path, key: str, compiled: Any) -> str | None:
    """Write ``compiled`` (a ``jax.stages.Compiled`` that XLA compiled in this process, see
    ``compile_fresh``) as the entry ``key``, with the ids of the devices it was compiled for:
    ``None`` once written, else why it was not:
    jax could not serialize it (constants as arguments, a jax without the API), or the folder
    cannot be written (one ``CacheWarning`` per process: a full disk or a read-only home never
    fails a call). Trees that name the package's classes are left out (``load`` is given
    them)."""
    try:
        from jax.experimental import serialize_executable as se

        device_ids = executable_device_ids(compiled)
        if device_ids is None:
            return "jax does not say which devices the executable was compiled for"
        payload, in_tree, out_tree = se.serialize(compiled)
        if not (_plain_tree(in_tree) and _plain_tree(out_tree)):
            in_tree = out_tree = None  # the package's classes: the reader supplies the trees
        data = MAGIC + pickle.dumps((payload, in_tree, out_tree, device_ids), protocol=5)
    except Exception as err:
        return f"jax could not serialize the executable ({type(err).__name__}: {err})"[:300]
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(tmp, entry_path(folder, key))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as err:  # read-only, full, gone: the call ran; say so once per process
        from hatch_jaxexport.runtime.disk.cache_folders import cache_unwritable

        cache_unwritable(folder, err)
        return f"the executable cache folder {folder} cannot be written ({err})"
    from hatch_jaxexport.runtime.disk.footprint import after_store  # here: not on a call's path

    after_store(folder)  # the cache grew: keep it under HATCH_JAXEXPORT_CACHE_MAX_BYTES
    return None
