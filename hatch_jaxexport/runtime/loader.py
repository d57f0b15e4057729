"""The runtime loader: finds a package's baked artifacts and calls them, or falls back to tracing.

Artifacts are read with ``importlib.resources`` (works from a zipped package), checked against
the manifest's SHA-256, deserialized on first use, cached, and called through ``jax.jit``.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import pathlib
import threading
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

from hatch_jaxexport.errors import ArtifactError, FallbackWarning
from hatch_jaxexport.formats._settings import STRICT_ENV, strict_mode
from hatch_jaxexport.formats.manifest import (
    ARTIFACT_DIR,
    MANIFEST_NAME,
    ArtifactRecord,
    Manifest,
    mesh_from_record,
    mesh_text,
    parse_manifest,
    sha256_hex,
)
from hatch_jaxexport.formats.spec import static_key
from hatch_jaxexport.runtime._matching import CallPlan, committed_platform, plan_call
from hatch_jaxexport.runtime.decorator import HOT_MISS_LIMIT, ExportableFunction


class PackageArtifacts(NamedTuple):
    """A package's validated manifest and where its blobs are."""

    package: str
    manifest: Manifest
    root: Any  # importlib.resources Traversable
    by_key: dict[tuple[str, str, str, str, str, str, bool], ArtifactRecord]

    def read_blob(self, record: ArtifactRecord) -> bytes:
        path = self.root / record.file
        _check_inside(path, self.root, f"artifact {record.file!r}")
        data = path.read_bytes()
        if len(data) != record.size or sha256_hex(data) != record.sha256:
            raise ArtifactError(f"artifact {record.file} does not match the manifest's SHA-256 "
                                "(damaged or modified after the build)")
        return data


def _check_inside(path: Any, base: Any, what: str) -> None:
    """Refuse a file-system path that resolves (through symlinks) outside ``base``."""
    if isinstance(path, pathlib.Path) and isinstance(base, pathlib.Path):
        real_base = pathlib.Path(os.path.realpath(base))
        if not pathlib.Path(os.path.realpath(path)).is_relative_to(real_base):
            raise ArtifactError(f"{what} resolves outside {real_base} (a symlink out of the "
                                "package); refusing to read it")


_PACKAGES: dict[str, PackageArtifacts | ArtifactError | None] = {}
_PACKAGES_LOCK = threading.Lock()


def artifact_key(function: str, structure: str, static_key: str, platform: str,
                 kind: str = "primal", batched: bool = False, mesh: str = ""
                 ) -> tuple[str, str, str, str, str, str, bool]:
    """The lookup key of an artifact; ``mesh`` is ``sharding.mesh_text`` of its variant."""
    return (function, structure, static_key, platform, mesh, kind, batched)


def load_package_artifacts(package: str) -> PackageArtifacts | None:
    """The package's artifacts (cached), ``None`` if it has none; ``ArtifactError`` if corrupt."""
    with _PACKAGES_LOCK:
        if package not in _PACKAGES:
            try:
                _PACKAGES[package] = _read_package_artifacts(package)
            except ArtifactError as err:
                _PACKAGES[package] = err  # a corrupt manifest is read once, reported each call
        found = _PACKAGES[package]
    if isinstance(found, ArtifactError):
        raise ArtifactError(str(found))
    return found


def _read_package_artifacts(package: str) -> PackageArtifacts | None:
    try:
        package_dir = importlib.resources.files(package)
        root = package_dir / ARTIFACT_DIR
        manifest_path = root / MANIFEST_NAME
        exists = manifest_path.is_file()
    except (ModuleNotFoundError, TypeError, ValueError):
        exists = False
    if not exists:
        return None
    _check_inside(root, package_dir, f"{package}/{ARTIFACT_DIR}")
    _check_inside(manifest_path, root, f"{package}/{ARTIFACT_DIR}/{MANIFEST_NAME}")
    try:
        data = manifest_path.read_bytes()
    except OSError as err:
        raise ArtifactError(f"cannot read the manifest of {package}: {err}") from None
    manifest = parse_manifest(data, where=f"{package}/{ARTIFACT_DIR}/{MANIFEST_NAME}")
    by_key = {artifact_key(r.function, r.structure, static_key(r.static), r.platform, r.kind,
                           r.batched, _mesh_key(r.mesh)): r
              for r in manifest.artifacts}
    return PackageArtifacts(package, manifest, root, by_key)


def _mesh_key(mesh: Any) -> str:
    if not mesh:
        return ""
    return mesh_text(mesh_from_record(mesh))


def forget_package(package: str) -> None:
    """Drop the cached manifest of a package (tests, reloads)."""
    with _PACKAGES_LOCK:
        _PACKAGES.pop(package, None)


@functools.cache
def export_platform(backend: str | None = None) -> str:
    """The jax.export name (``cpu``, ``cuda``, ``rocm``, ``tpu``) of a backend (default: jax's)."""
    import jax

    backend = backend or jax.default_backend()
    if backend == "gpu":
        version = jax.devices("gpu")[0].client.platform_version.lower()
        return "rocm" if "rocm" in version else "cuda"
    return backend


def deserialize_checked(data: bytes, refs: list[str], package: str,
                        built_with: str | None = None) -> Any:
    """Deserialize a blob after registering its pytree types; ``ArtifactError`` on refusal."""
    from jax import export

    from hatch_jaxexport.runtime import _pytrees as pytrees

    for ref in refs:
        cls = pytrees.resolve(ref, package)
        try:
            pytrees.register(cls)
        except Exception as err:  # e.g. a dataclass that is not a registered pytree
            raise ArtifactError(f"cannot register pytree type {ref!r} named by the manifest: "
                                f"{type(err).__name__}: {err}") from None
    try:
        exported = export.deserialize(bytearray(data))
    except Exception as err:  # jax raises struct.error, ValueError, IndexError...
        raise ArtifactError(f"jax could not deserialize the artifact: "
                            f"{type(err).__name__}: {err}") from None
    import jax

    try:  # a module from another jax's StableHLO fails here, not later inside a jit
        if built_with != jax.__version__:
            exported.mlir_module()
    except Exception as err:
        raise ArtifactError(f"jax could not read the artifact's StableHLO module (exported by a "
                            f"newer jax?): {type(err).__name__}: {str(err)[:300]}") from None
    low = export.minimum_supported_calling_convention_version
    high = export.maximum_supported_calling_convention_version
    if not low <= exported.calling_convention_version <= high:
        raise ArtifactError(f"artifact uses calling convention "
                            f"{exported.calling_convention_version}; this jax supports "
                            f"{low}..{high}")
    return exported


class _Target(NamedTuple):
    """What a (structure, static values, platform) resolves to: an artifact or the source."""

    call: Callable[..., Any]
    static_in_call: bool
    from_artifact: bool


def _fallback(fn: ExportableFunction) -> Callable[..., Any]:
    source = fn.__wrapped__
    if fn.export_spec.skip_jitting:
        return source
    import jax

    return jax.jit(source, static_argnames=tuple(fn.export_spec.static))


def _artifact_or_reason(fn: ExportableFunction, plan: CallPlan, platform: str, mesh: str = ""
                        ) -> tuple[Callable[..., Any] | None, str]:
    package = load_package_artifacts(fn.package)
    structure = fn.export_spec.structures[plan.structure_index]
    if package is None:
        return None, (f"package {fn.package!r} has no baked artifacts (not built with "
                      "hatch-jaxexport, or imported from a source checkout)")
    record = package.by_key.get(artifact_key(fn.name, structure.key, plan.static_key, platform,
                                             mesh=mesh))
    if record is None:
        for skipped in package.manifest.skipped:
            if (skipped.function, skipped.structure, static_key(skipped.static), skipped.platform,
                    skipped.kind, skipped.batched, _mesh_key(skipped.mesh)) == (
                        fn.name, structure.key, plan.static_key, platform, "primal", False, mesh):
                return None, f"its export failed at build time and was skipped: {skipped.reason}"
        built = sorted({r.platform for r in package.manifest.artifacts if r.function == fn.name})
        if not built:
            return None, "the build baked no artifact for this function"
        if platform not in built:
            return None, (f"artifacts were built for {', '.join(built)}, but this process runs "
                          f"on {platform}")
        return None, (f"no artifact for structure {plan.structure_index} ({structure.key}) "
                      f"with static values {plan.static_key} on {platform}"
                      + (f" for the mesh {mesh}" if mesh else ""))
    import jax

    from hatch_jaxexport.runtime._compile_cache import ensure_compilation_cache
    from hatch_jaxexport.runtime._jaxcompat import needs_lapack

    # the same jax wrote the blob: check its hash now, deserialize on the first compile (a warm
    # start never does); a blob from another jax is deserialized now, to fall back early
    lazy = not mesh and not record.pytree_types and \
        package.manifest.jax_version == jax.__version__
    try:
        blob = _read(package, record)
        exported = None if lazy else _deserialize(package, record, blob, fn.package)
    except ArtifactError as err:
        return None, str(err)
    ensure_compilation_cache()

    def make_jitted() -> Callable[..., Any]:
        loaded = exported
        if loaded is None:
            try:
                loaded = _deserialize(package, record, blob, fn.package)
            except ArtifactError as err:  # a blob that matches its hash but not jax's format
                _resolve(fn, plan, platform, mismatch=str(err))  # warns, or raises when strict
                return _source_without_static(fn, plan)
        if not fn.export_spec.uses_family:
            return jax.jit(loaded.call)
        from hatch_jaxexport.runtime._primitive import jitted_primal

        return jitted_primal(_family(fn, plan, package, record, loaded, platform, mesh))

    if mesh:  # sharded variants: always through the family, never tiered
        return make_jitted(), ""
    job = {"package": fn.package, "file": record.file, "sha256": record.sha256,
           "platform": platform, "function": fn.name}
    return _eager(fn, make_jitted, record.size, job, needs_lapack(record.custom_calls)), ""


def _family(fn: ExportableFunction, plan: CallPlan, package: PackageArtifacts,
            record: ArtifactRecord, exported: Any, platform: str, mesh: str) -> Any:
    """The transformation family of a primal artifact (its members load on first use)."""
    from hatch_jaxexport.runtime._family import Family, source_flat, warn_or_raise
    from hatch_jaxexport.runtime._jaxcompat import needs_lapack

    structure = fn.export_spec.structures[plan.structure_index]
    members = {("primal", False): exported}
    lapack_free = {("primal", False)} if not needs_lapack(record.custom_calls) else set()
    loaders = {}
    base = (fn.name, structure.key, plan.static_key, platform, mesh)
    for (*rest, kind, batched), member in package.by_key.items():
        if tuple(rest) == base and (kind, batched) != ("primal", False):
            loaders[(kind, batched)] = functools.partial(_load, package, member, fn.package)
            if not needs_lapack(member.custom_calls):
                lapack_free.add((kind, batched))
    return Family(
        name=fn.name, members=members, in_tree=exported.in_tree, out_tree=exported.out_tree,
        in_dtypes=[a.dtype for a in exported.in_avals],
        out_dtypes=[a.dtype for a in exported.out_avals],
        source_flat=source_flat(fn, plan.structure_index, plan.static, exported.in_tree),
        on_missing=warn_or_raise(fn.name, strict_mode()), lapack_free=frozenset(lapack_free),
        loaders=loaders)


def _source_without_static(fn: ExportableFunction, plan: CallPlan) -> Callable[..., Any]:
    """The source, called like the artifact (static values bound, not passed)."""
    import jax

    from hatch_jaxexport.runtime._family import source_call

    source = source_call(fn, plan.structure_index, dict(plan.static))
    jitted = source if fn.export_spec.skip_jitting else jax.jit(source)
    return _NotAnArtifact(jitted)


class _NotAnArtifact:
    """A fallback that an ``EagerCall`` must not cache as the artifact's executable."""

    not_an_artifact = True

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self.call.lower(*args, **kwargs)  # type: ignore[attr-defined]


def _eager(fn: ExportableFunction, make_jitted: Callable[[], Callable[..., Any]], size: int,
           job: dict[str, str], lapack: bool) -> Callable[..., Any]:
    """The call of an unsharded artifact: eager calls through cached or tiered executables."""
    from hatch_jaxexport.runtime._tiers import EagerCall, tiering_wanted

    return EagerCall(make_jitted, job, tiering_wanted(job["platform"], fn.export_spec.tiered,
                                                      size), lapack)


def _unusable(package: PackageArtifacts, record: ArtifactRecord, err: ArtifactError
              ) -> ArtifactError:
    return ArtifactError(
        f"artifact {record.file} (built with jax {package.manifest.jax_version}, running "
        f"jax {_jax_version()}) is unusable: {err}")


def _read(package: PackageArtifacts, record: ArtifactRecord) -> bytes:
    """Read and check one artifact; ``ArtifactError`` says why it is unusable."""
    try:
        return package.read_blob(record)
    except ArtifactError as err:
        raise _unusable(package, record, err) from None
    except OSError as err:
        raise ArtifactError(f"cannot read artifact {record.file}: {err}") from None


def _deserialize(package: PackageArtifacts, record: ArtifactRecord, data: bytes,
                 package_name: str) -> Any:
    """Deserialize one checked artifact; ``ArtifactError`` says why it is unusable."""
    try:
        return deserialize_checked(data, record.pytree_types, package_name,
                                   package.manifest.jax_version)
    except ArtifactError as err:
        raise _unusable(package, record, err) from None


def _load(package: PackageArtifacts, record: ArtifactRecord, package_name: str) -> Any:
    """Read, check and deserialize one artifact; ``ArtifactError`` says why it is unusable."""
    return _deserialize(package, record, _read(package, record), package_name)


def _jax_version() -> str:
    import jax

    return jax.__version__


def _resolve(fn: ExportableFunction, plan: CallPlan, platform: str, mesh: str = "",
             mismatch: str = "") -> _Target:
    call, reason = (None, mismatch) if mismatch else \
        _artifact_or_reason(fn, plan, platform, mesh)
    if call is not None:
        return _Target(call, static_in_call=False, from_artifact=True)
    message = f"{fn.name}: no usable baked artifact, tracing the source instead: {reason}"
    if strict_mode():
        raise ArtifactError(f"{fn.name}: no usable baked artifact ({STRICT_ENV} is set): {reason}")
    warnings.warn(message, FallbackWarning, stacklevel=4)
    fallback = fn.runtime_cache.get("fallback")
    if fallback is None:
        fallback = fn.runtime_cache["fallback"] = _fallback(fn)
    return _Target(fallback, static_in_call=True, from_artifact=False)


_FAST_CACHE_LIMIT = 512


def _fast_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A cheap key for calls of positional plain arrays (no kwargs, pytrees, tracers, or
    arrays committed to a device); ``None`` otherwise.

    Two calls with equal keys pass the same checks and resolve to the same target, so the full
    checks run once per key; ``ExportableFunction.__call__`` computes the same key inline.
    """
    from hatch_jaxexport.runtime import decorator

    if not decorator._fast_types:
        import numpy as np
        from jax._src import config as jax_config

        from hatch_jaxexport.runtime._jaxcompat import concrete_array_type

        decorator._fast_types[:] = [concrete_array_type(), np.ndarray, jax_config.enable_x64]
    jax_array, np_array, x64 = decorator._fast_types
    if kwargs:
        return None
    key: list[Any] = []
    for arg in args:
        kind = type(arg)
        if kind is jax_array:
            if arg.committed:
                return None
            key.append((arg.shape, arg.dtype))
        elif kind is np_array:
            key.append((arg.shape, arg.dtype))
        elif kind in decorator._SCALARS:
            key.append((kind, arg))
        else:
            return None
    return tuple(key), x64.value


def _picks(call_args: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[int, ...] | None:
    """Positions of ``call_args`` within ``args`` (by identity, in order), or ``None``."""
    picks = []
    position = 0
    for value in call_args:
        while position < len(args) and args[position] is not value:
            position += 1
        if position == len(args):
            return None
        picks.append(position)
        position += 1
    return tuple(picks)


def _same_leaves(call_args: tuple[Any, ...], args: tuple[Any, ...]) -> bool:
    """Whether ``call_args`` are the leading ``args`` as trees: the same structure and the
    very same leaves (the input checks may rebuild containers, never arrays they accept)."""
    from jax import tree_util

    head = args[:len(call_args)]
    leaves, tree = tree_util.tree_flatten(call_args)
    head_leaves, head_tree = tree_util.tree_flatten(head)
    return tree == head_tree and len(leaves) == len(head_leaves) and \
        all(a is b for a, b in zip(leaves, head_leaves, strict=True))


def call_exportable(fn: ExportableFunction, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a call of an ``@exportable`` function (what ``ExportableFunction.__call__`` does)."""
    fast = _fast_key(args, kwargs)
    plan = plan_call(fn, args, kwargs)
    key: tuple[Any, ...] = (plan.structure_index, plan.static_key,
                            export_platform(committed_platform(plan.values)))
    if fn.export_spec.mesh is not None:  # sharded variants: the call's mesh picks one
        return _call_sharded(fn, plan, key, args, fast)
    target = fn.runtime_cache.get(key)
    if target is None:
        with fn.lock:
            target = fn.runtime_cache.get(key)
            if target is None:
                target = fn.runtime_cache[key] = _resolve(fn, plan, key[2])
    layout = fn.layouts[plan.structure_index]
    if target.static_in_call:
        call_args, call_kwargs = layout.split({**plan.values, **plan.static})
    else:
        call_args, call_kwargs = layout.split(plan.values, skip=plan.static)
    result = target.call(*call_args, **call_kwargs)
    # only calls without keywords: a static value given by keyword (or left to its default)
    # is not among the positional arguments the hot path compares
    positional = not kwargs and not call_kwargs
    picks = _picks(call_args, args) if positional else None
    if picks is None and positional and _same_leaves(call_args, args):
        picks = tuple(range(len(call_args)))  # pytrees rebuilt by the checks, same arrays
    if picks is not None:
        # the arguments the target takes are some of the call's, by position: remember that
        settled = getattr(target.call, "settled", None)
        call = settled(call_args, call_kwargs) if settled is not None else target.call
        if call is not None:  # None: a quick tier is in use, the optimized one pending
            if fast is not None:  # plain arrays: the keyed cache (pytrees: the hot one only)
                if len(fn.fast_cache) >= _FAST_CACHE_LIMIT:
                    fn.fast_cache.clear()
                everything = picks == tuple(range(len(args)))
                fn.fast_cache[fast] = (call, None if everything else picks)
            split = len(picks)
            if settled is not None and fn.hot_misses < HOT_MISS_LIMIT and \
                    picks == tuple(range(split)) and \
                    all(type(value) is str for value in args[split:]):
                fn.hot = (call, split, args[split:])  # static values, if any: trailing strings
    return result


def _call_sharded(fn: ExportableFunction, plan: CallPlan, key: tuple[Any, ...],
                  args: tuple[Any, ...], fast: Any) -> Any:
    """A call of a function with mesh variants: the variant of the call's mesh, NumPy inputs
    placed onto that mesh with the artifact's in_specs. Only calls without any mesh take the
    fast path, guarded: the same arrays may run under a mesh set later."""
    from hatch_jaxexport.runtime import _sharding as sharding

    spec = fn.export_spec
    assert spec.mesh is not None and spec.in_specs is not None
    found = sharding.call_mesh(plan.values)
    variant, mismatch = sharding.select_variant(spec.mesh, found)
    mesh = sharding.mesh_text(variant)
    key = (*key, mesh if not mismatch else ("no match", sharding.mesh_text(found.shape)))
    target = fn.runtime_cache.get(key)
    if target is None:
        with fn.lock:
            target = fn.runtime_cache.get(key)
            if target is None:
                target = fn.runtime_cache[key] = _resolve(fn, plan, key[2], mesh, mismatch)
    values = plan.values
    if variant is not None and target.from_artifact and found.mesh is not None:
        values = sharding.place(spec.structures[plan.structure_index],
                                spec.in_specs[plan.structure_index], values, found.mesh)
    layout = fn.layouts[plan.structure_index]
    if target.static_in_call:
        call_args, call_kwargs = layout.split({**values, **plan.static})
    else:
        call_args, call_kwargs = layout.split(values, skip=plan.static)
    if fast is not None and found.shape is None and not mismatch and not call_kwargs \
            and _picks(call_args, args) == tuple(range(len(args))):
        call = target.call

        def unless_a_mesh_is_set(*same_args: Any) -> Any:
            if sharding.current_mesh().shape is None:
                return call(*same_args)
            return call_exportable(fn, same_args, {})  # a mesh was set since: resolve again

        if len(fn.fast_cache) >= _FAST_CACHE_LIMIT:
            fn.fast_cache.clear()
        fn.fast_cache[fast] = (unless_a_mesh_is_set, None)
    return target.call(*call_args, **call_kwargs)


def loaded_from_artifact(fn: ExportableFunction) -> dict[Any, bool]:
    """For introspection and tests: which resolved call keys use an artifact (True) or trace."""
    return {k: v.from_artifact for k, v in fn.runtime_cache.items() if isinstance(v, _Target)}


def tiered_calls(fn: ExportableFunction) -> list[Any]:
    """The ``EagerCall`` objects of a function's resolved targets (tests, benchmarks)."""
    from hatch_jaxexport.runtime._tiers import EagerCall

    return [target.call for target in fn.runtime_cache.values()
            if isinstance(getattr(target, "call", None), EagerCall)]
