"""The call path: runs a call of an ``@exportable`` function on its baked artifact, or the source.

A call is matched to a structure and static values (``matching``), resolved once per
(structure, static values, platform[, mesh variant]) to a target, either a verified artifact
(``package_artifacts``) run through ``jax.jit`` or the transformation family, or the source
(``_source_calls.run_source``; an ``ArtifactError`` in strict mode), and the settled executable
is handed to the function's ``ResolvedCalls`` so that later calls of the same kind skip all of
this.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from hatch_jaxexport.errors import ArtifactError, CallMismatch
from hatch_jaxexport.formats.manifest import ArtifactRecord, member_name, variant_text
from hatch_jaxexport.formats.manifest_reader import mesh_text
from hatch_jaxexport.formats.settings import STRICT_ENV, strict_mode
from hatch_jaxexport.formats.spec import static_key
from hatch_jaxexport.runtime.artifacts.package_artifacts import (
    PackageArtifacts,
    artifact_key,
    deserialize_record,
    forget_package,
    load_package_artifacts,
    load_record,
    load_sized,
    read_record,
    record_key,
    stale_reason,
)
from hatch_jaxexport.runtime.call import _recorder as recorder
from hatch_jaxexport.runtime.call._resolved_calls import (
    SCALARS,
    Constant,
    ambiguous,
    fast_key,
    hot_call,
    prime_fast_path,
    route_of,
)
from hatch_jaxexport.runtime.call._source_calls import run_source, source_calls
from hatch_jaxexport.runtime.call.inlining import runs_inline
from hatch_jaxexport.runtime.call.matching import (
    CallPlan,
    committed_platform,
    export_platform,
    plan_call,
    shown_structure,
)
from hatch_jaxexport.runtime.jaxcompat import (
    LOWERING_CONFIG,
    compiled_dispatch,
    lowering_config,
)
from hatch_jaxexport.runtime.notices import NeedsFix

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord


class _Target(NamedTuple):
    """What a (structure, static values, platform) resolves to: an artifact or the source."""

    call: Callable[..., Any]
    static_in_call: bool
    from_artifact: bool
    #: Why the source runs instead of an artifact (``from_artifact`` false).
    reason: str = ""


def _missing_reason(fn: FunctionRecord, package: PackageArtifacts, plan: CallPlan,
                    platform: str, mesh: str, variant: str) -> str:
    """Why the manifest holds no artifact for this call, in the words a user can act on."""
    structure = fn.export_spec.structures[plan.structure_index]
    wanted = artifact_key(fn.name, structure.key, plan.static_key, platform, mesh, variant)
    records = package.records(fn.name).manifest
    for skipped in records.skipped:
        if record_key(skipped) == wanted:
            statics = f", static values {plan.static_key}" if plan.static else ""
            return (f"its export for structure {plan.structure_index} "
                    f"({shown_structure(structure.key)}){statics} on {platform} failed at "
                    f"build time and was skipped: {skipped.reason}; fix the cause and rebuild "
                    f"the wheel (`python -m hatch_jaxexport export {fn.package} --out DIR` "
                    "shows each failure with its hints)")
    built = sorted({r.platform for r in records.artifacts})
    if not built:
        return "the build baked no artifact for this function"
    if platform not in built:
        return (f"artifacts were built for {', '.join(built)}, but this process runs "
                f"on {platform}; {_platform_fix(fn, platform)}")
    return (f"no artifact for structure {plan.structure_index} ({shown_structure(structure.key)}) "
            f"with static values {plan.static_key} on {platform}"
            + (f" for the mesh {mesh}" if mesh else "") + (f" {variant}" if variant else ""))


def _platform_fix(fn: FunctionRecord, platform: str) -> str:
    """Where to add a missing platform: the function's own ``platforms=`` when it names some
    (the build's option does not apply to it), else the build's ``platforms`` option."""
    named = fn.export_spec.platforms
    if named:
        return (f"to run it here, add {platform!r} to @exportable(..., platforms="
                f"{list(named)!r}) of {fn.name} and rebuild the wheel")
    return (f"to run it here, add {platform!r} to the build's `platforms` (in "
            "[tool.hatch.build.targets.wheel.hooks.jaxexport], [tool.jaxexport] with setuptools, "
            f"or --platform of jaxexport export), or to @exportable(..., platforms=[...]) of "
            f"{fn.name} alone, and rebuild the wheel")


def _config_mismatch(recorded: dict[str, Any], current: dict[str, Any]) -> str:
    """Why an artifact exported under ``recorded`` jax config must not serve a process with
    ``current`` (``""`` when they agree on everything recorded; old manifests record nothing)."""
    differ = [name for name in LOWERING_CONFIG
              if name in recorded and name in current and recorded[name] != current[name]]
    if not differ:
        return ""
    said = "; ".join(f"{name}={recorded[name]!r} at export, {current[name]!r} in this process"
                     for name in differ)
    advice = ("set it before the call as at build time, or bake one artifact per value with "
              "@exportable(..., x64=\"both\")" if "jax_enable_x64" in differ else
              "set it as at build time (the artifact's results would differ from the source's)")
    return f"the artifact was exported under another jax config: {said}; {advice}"


def _artifact_or_reason(fn: FunctionRecord, plan: CallPlan, platform: str, mesh: str = "",
                        config: dict[str, Any] | None = None
                        ) -> tuple[Callable[..., Any] | None, str]:
    package = load_package_artifacts(fn.package)
    if package is None:
        return None, stale_reason(fn.package) or (
            f"package {fn.package!r} has no baked artifacts (not built with hatch-jaxexport, "
            "or imported from a source checkout)")
    config = lowering_config() if config is None else config
    structure = fn.export_spec.structures[plan.structure_index]
    variant = variant_text({"jax_enable_x64": config["jax_enable_x64"]}
                           if fn.export_spec.x64_variants else None)
    by_key = package.records(fn.name).by_key
    record = by_key.get(artifact_key(fn.name, structure.key, plan.static_key, platform, mesh,
                                     variant))
    if record is None:
        concrete = None if mesh else _concrete_target(fn, package, plan, platform, variant)
        if concrete is not None:
            return concrete, ""
        return None, _missing_reason(fn, package, plan, platform, mesh, variant)
    mismatch = _config_mismatch(record.jax_config, config)
    if mismatch:
        return None, mismatch
    import jax

    from hatch_jaxexport.runtime.disk.cache_folders import ensure_compilation_cache
    from hatch_jaxexport.runtime.jaxcompat import needs_lapack

    # the same jax wrote the blob: check its hash now, deserialize on the first compile (a warm
    # start never does); a blob from another jax is deserialized now, to fall back early
    lazy = not mesh and not record.pytree_types and \
        package.index.jax_version == jax.__version__
    try:
        blob = read_record(package, record)
        exported = None if lazy else deserialize_record(package, record, blob)
    except ArtifactError as err:  # a damaged install: someone must fix it
        return None, NeedsFix(err)
    ensure_compilation_cache()

    @functools.cache
    def loaded_exported() -> Any:
        """The artifact's ``Exported`` (deserialized once); ``ArtifactError`` if unusable."""
        return exported if exported is not None else deserialize_record(package, record, blob)

    def make_jitted() -> Callable[..., Any]:
        try:
            loaded = loaded_exported()
        except ArtifactError as err:  # a blob that matches its hash but not jax's format
            return _source_without_static(fn, plan, no_artifact(fn, NeedsFix(err)))
        if not fn.export_spec.uses_family:
            if record.vjp_order and not mesh:
                return _native_vjp(fn, plan, package, record, loaded, platform, call)
            return jax.jit(loaded.call)
        from hatch_jaxexport.runtime.artifacts.primitive import jitted_primal

        return jitted_primal(_family(fn, plan, package, record, loaded, platform, mesh,
                                     variant))

    if mesh:  # sharded variants: always through the family, never tiered
        return make_jitted(), ""
    job = _job(fn, record, platform)

    def out_tree() -> Any:
        from hatch_jaxexport.runtime.artifacts.pytrees import plain_tree

        if exported is None and (tree := plain_tree(record.out_tree)) is not None:
            return tree  # no need to read the StableHLO
        return loaded_exported().out_tree

    call = _eager(fn, make_jitted, record.size, job, needs_lapack(record.custom_calls),
                  _shipped(fn, package, record, out_tree),
                  _eager_lowerable(package, record, loaded_exported))
    return call, ""


def _concrete_target(fn: FunctionRecord, package: PackageArtifacts, plan: CallPlan,
                     platform: str, variant: str) -> Callable[..., Any] | None:
    """Where a structure has no symbolic artifact (its code is not shape-polymorphic) but the
    build baked it at concrete sizes: a dispatch on the call's flat types to those artifacts;
    other sizes trace the source (``FallbackWarning``; refused in strict mode)."""
    from hatch_jaxexport.runtime.call.recorded_calls import ConcreteDispatch

    records = [c for c in package.records(fn.name).manifest.concrete
               if c.structure_index == plan.structure_index and c.platform == platform
               and static_key(c.static) == plan.static_key
               and variant_text(c.variant) == variant]
    if not records:
        return None

    def on_miss(reason: str) -> Callable[..., Any]:
        return _source_without_static(fn, plan, no_artifact(fn, reason))

    return ConcreteDispatch(fn, package, records, on_miss)


def _eager_lowerable(package: PackageArtifacts, record: ArtifactRecord,
                     loaded_exported: Callable[[], Any]
                     ) -> Callable[[tuple[Any, ...]], Callable[..., Any] | None]:
    """What an eager first call of given flat argument types lowers (``EagerCall``'s
    ``eager_lowerable``): ``jax.jit`` of the static-shape form of ``record`` for exactly those
    types where the wheel has one (the build refined its shapes), else of the artifact's call
    (``None`` when that is unusable: the primitive's path falls back, with its warning)."""
    import jax

    sized = {_leaf_types(entry["inputs"]): entry for entry in record.sized}

    def eager_lowerable(types: tuple[Any, ...]) -> Callable[..., Any] | None:
        if (entry := sized.get(types)) is not None:
            try:
                return jax.jit(load_sized(package, entry).call)
            except ArtifactError:
                pass  # the symbolic artifact serves the same call
        try:
            return jax.jit(loaded_exported().call)
        except ArtifactError:
            return None
    return eager_lowerable


def _leaf_types(leaves: Any) -> tuple[Any, ...]:
    """``((8, 4), "float32"), ...``: manifest ``[[dims...], dtype]`` leaves as a lookup key."""
    return tuple((tuple(dims), dtype) for dims, dtype in leaves)


def _job(fn: FunctionRecord, record: ArtifactRecord, platform: str, convention: str = ""
         ) -> dict[str, str]:
    """What an ``EagerCall`` needs to find the artifact again and key its cache entries; the
    convention (``flat`` for a family member, ``native-vjp`` for jax's serialized VJP) keeps
    different calls of one artifact apart."""
    job = {"package": fn.package, "file": record.file, "sha256": record.sha256,
           "platform": platform, "function": fn.name, "label": _served_label(record)}
    if convention:
        job["convention"] = convention
    return job


def _served_label(record: ArtifactRecord) -> str:
    """What tells the report lines of one function's artifacts apart: ``(mode='max')`` for
    its static values, `` vjp`` for the member of a transformation that ran."""
    from hatch_jaxexport.formats.statics import static_values_text

    statics = f"({static_values_text(record.static)})" if record.static else ""
    member = member_name(record.kind, record.batched)
    return statics + ("" if member == "primal" else f" {member}")


def _shipped(fn: FunctionRecord, package: PackageArtifacts, record: ArtifactRecord,
             out_tree: Callable[[], Any], native_vjp: int = 0) -> Any:
    """The wheel's precompiled executables of ``record`` (of its serialized VJP with
    ``native_vjp=1``; ``None`` when it ships none); ``out_tree`` gives the tree the call
    returns (read only when one is used)."""
    records = [e for e in package.records(fn.name).manifest.executables
               if e.artifact == record.id and e.artifact_sha256 == record.sha256
               and e.native_vjp == native_vjp]
    if not records:
        return None
    from hatch_jaxexport.runtime.executables.shipped import ShippedExecutables

    return ShippedExecutables(records, package.read_blob, out_tree, fn.name)


def _native_vjp(fn: FunctionRecord, plan: CallPlan, package: PackageArtifacts,
                record: ArtifactRecord, exported: Any, platform: str,
                primal: Callable[..., Any]) -> Any:
    """The jitted call of an artifact serialized with jax's VJP, whose eager gradients run
    the primal's eager call and an eager call of the VJP (``native_vjp``); what it cannot
    serve (``vmap``, forward mode, a second derivative) says so in our words, then traces
    the source or, in strict mode, raises."""
    from hatch_jaxexport.runtime.artifacts.family import source_flat, warn_or_raise
    from hatch_jaxexport.runtime.artifacts.native_vjp import NativeVjpCall
    from hatch_jaxexport.runtime.executables.eager_call import EagerCall
    from hatch_jaxexport.runtime.jaxcompat import needs_lapack

    def vjp_call() -> Any:
        import jax

        job = _job(fn, record, platform, "native-vjp")
        job["label"] += " vjp"  # jax's serialized VJP of the primal artifact
        leaves = len(exported.in_avals)
        shipped = _shipped(fn, package, record, lambda: _flat_tree(leaves), native_vjp=1)
        call = EagerCall(lambda: jax.jit(exported.vjp().call), job, False,
                         needs_lapack(record.custom_calls), shipped)
        fn.calls.remember_member(call)
        return call

    return NativeVjpCall(exported, primal, vjp_call, source_flat=source_flat(
        fn, plan.structure_index, plan.static, exported.in_tree),
        on_missing=warn_or_raise(fn.name, strict_mode()))


def _family(fn: FunctionRecord, plan: CallPlan, package: PackageArtifacts,
            record: ArtifactRecord, exported: Any, platform: str, mesh: str, variant: str
            ) -> Any:
    """The transformation family of a primal artifact (its members load on first use)."""
    from hatch_jaxexport.runtime.artifacts.family import Family, source_flat, warn_or_raise
    from hatch_jaxexport.runtime.jaxcompat import needs_lapack

    structure = fn.export_spec.structures[plan.structure_index]
    members = {("primal", False): exported}
    lapack_free = {("primal", False)} if not needs_lapack(record.custom_calls) else set()
    loaders = {}
    base = (fn.name, structure.key, plan.static_key, platform, mesh, variant)
    for (*rest, kind, batched), member in package.records(fn.name).by_key.items():
        if tuple(rest) == base and (kind, batched) != ("primal", False):
            loaders[(kind, batched)] = functools.partial(load_record, package, member)
            if not needs_lapack(member.custom_calls):
                lapack_free.add((kind, batched))
    return Family(
        name=fn.name, members=members, in_tree=exported.in_tree, out_tree=exported.out_tree,
        in_dtypes=[a.dtype for a in exported.in_avals],
        out_dtypes=[a.dtype for a in exported.out_avals],
        source_flat=source_flat(fn, plan.structure_index, plan.static, exported.in_tree),
        on_missing=warn_or_raise(fn.name, strict_mode()), lapack_free=frozenset(lapack_free),
        loaders=loaders, wanted=frozenset(_wanted_kinds(fn, mesh)),
        eager=None if mesh else _member_calls(fn, package, base, platform))


def _member_calls(fn: FunctionRecord, package: PackageArtifacts, base: tuple[str, ...],
                  platform: str) -> Callable[[tuple[str, bool], Callable[[], Any]], Any]:
    """A family's maker of eager member calls: each member through shipped executables and the
    executable cache, like the primal's eager calls (``Family.eager``)."""
    from hatch_jaxexport.runtime.executables.eager_call import EagerCall
    from hatch_jaxexport.runtime.jaxcompat import needs_lapack

    def eager(member: tuple[str, bool], make_jitted: Callable[[], Any]) -> Any:
        record = package.records(fn.name).by_key[(*base, *member)]  # type: ignore[index]
        job = _job(fn, record, platform, "flat")
        shipped = _shipped(fn, package, record, lambda: _flat_tree(len(record.out_avals)))
        call = EagerCall(make_jitted, job, False, needs_lapack(record.custom_calls), shipped)
        fn.calls.remember_member(call)  # call_report lists what HATCH_JAXEXPORT_REPORT prints
        return call
    return eager


def _flat_tree(leaves: int) -> Any:
    """The tree of a member's flat outputs (``Family.exported_call`` returns a list)."""
    import jax

    return jax.tree_util.tree_structure([0] * leaves)


def _wanted_kinds(fn: FunctionRecord, mesh: str) -> tuple[str, ...]:
    """The members the function's options ask the build for (as ``build.tasks_for`` bakes)."""
    from hatch_jaxexport.runtime.artifacts.family import baked_kinds

    spec = fn.export_spec
    order = max(spec.ad_order, 1 if mesh and spec.vjp_order else 0)
    return baked_kinds(order, spec.vjp_order)


def _source_without_static(fn: FunctionRecord, plan: CallPlan, reason: str
                           ) -> _NotAnArtifact:
    """The source, called like the artifact (static values bound, not passed), through
    ``run_source`` with ``reason`` (``no_artifact``'s: strict mode has refused already)."""
    import jax

    from hatch_jaxexport.runtime.artifacts.family import source_call

    source = source_call(fn, plan.structure_index, dict(plan.static))
    jitted = source if fn.export_spec.skip_jitting else jax.jit(source)
    notice = no_artifact_notice(fn, reason)

    def run(*args: Any, **kwargs: Any) -> Any:
        return run_source(fn, (args, kwargs), reason, notice, jitted)
    return _NotAnArtifact(run, jitted)


class _NotAnArtifact:
    """A fallback that an ``EagerCall`` must not cache as the artifact's executable: calls run
    the source through ``run_source``; an eager call's lowering is the source's."""

    not_an_artifact = True

    def __init__(self, call: Callable[..., Any], jitted: Callable[..., Any]) -> None:
        self.call, self.jitted = call, jitted

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted.lower(*args, **kwargs)  # type: ignore[attr-defined]


def _eager(fn: FunctionRecord, make_jitted: Callable[[], Callable[..., Any]], size: int,
           job: dict[str, str], lapack: bool, shipped: Any = None,
           eager_lowerable: Callable[[Any], Callable[..., Any] | None] | None = None
           ) -> Callable[..., Any]:
    """The call of an unsharded artifact: eager calls through shipped, cached or tiered
    executables."""
    from hatch_jaxexport.runtime.executables.eager_call import EagerCall
    from hatch_jaxexport.runtime.executables.tiers import tiering_wanted

    return EagerCall(make_jitted, job, tiering_wanted(job["platform"], fn.export_spec.tiered,
                                                      size), lapack, shipped, eager_lowerable)


def _resolve(fn: FunctionRecord, plan: CallPlan, platform: str, mesh: str = "",
             mismatch: str = "", config: dict[str, Any] | None = None) -> _Target:
    """What serves a (structure, static values, platform[, mesh]): its artifact's call, or
    the source with the reason (``no_artifact``: strict mode refuses here)."""
    call, reason = (None, mismatch) if mismatch else \
        _artifact_or_reason(fn, plan, platform, mesh, config)
    if call is not None:
        return _Target(call, static_in_call=False, from_artifact=True)
    return _Target(source_calls(fn), static_in_call=True, from_artifact=False,
                   reason=no_artifact(fn, reason))


def no_artifact(fn: FunctionRecord, reason: str) -> str:
    """``reason`` for a call that has no usable artifact: ``ArtifactError`` in strict mode."""
    if strict_mode():
        raise ArtifactError(f"{fn.name}: no usable baked artifact ({STRICT_ENV} is set): {reason}")
    return reason


def no_artifact_notice(fn: FunctionRecord, reason: str) -> str:
    """What the logger says of a structure's call that has no usable artifact (``""`` for
    stale sources: told once for the whole package, ``load_package_artifacts``)."""
    if reason == stale_reason(fn.package):
        return ""
    return f"{fn.name}: no usable baked artifact, tracing the source instead: {reason}"


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


def _split(fn: FunctionRecord, target: _Target, plan: CallPlan, values: dict[str, Any]
           ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The target's positional and keyword arguments (statics passed only to the fallback)."""
    layout = fn.layouts[plan.structure_index]
    if target.static_in_call:
        return layout.split({**values, **plan.static})
    return layout.split(values, skip=plan.static)


def call_exportable(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a call of an ``@exportable`` function (what ``FunctionRecord.__call__`` does)."""
    prime_fast_path()
    if runs_inline(args, kwargs):  # inside an export: the outer artifact holds the source
        return fn.__wrapped__(*args, **kwargs)
    fast = fast_key(args, kwargs)
    try:
        plan = plan_call(fn, args, kwargs)
    except CallMismatch as refusal:
        return _call_uncovered(fn, (args, kwargs), refusal, fast)
    key: tuple[Any, ...] = (plan.structure_index, plan.static_key,
                            export_platform(committed_platform(plan.values)))
    # the jax config ends the key: a process that changes it resolves again
    config = lowering_config()
    if fn.export_spec.mesh is not None:  # sharded variants: the call's mesh picks one
        result = _call_sharded(fn, plan, key, args, None if kwargs else fast, config)
    else:
        target = fn.calls.target((*key, _ConfigKey(config.values())),
                                 lambda: _resolve(fn, plan, key[2], config=config))
        taken = _split(fn, target, plan, plan.values)
        if target.from_artifact:
            result = target.call(*taken[0], **taken[1])
            _settle(fn, target, taken, (args, kwargs), fast)
        else:
            result = run_source(fn, taken, target.reason, no_artifact_notice(fn, target.reason))
            _traced_to_fast_path(fn, taken, (args, kwargs), fast)
    if recorder.RECORDING:  # what the source completed: a call it refuses is not baked
        recorder.note(fn.package, fn.name, plan.structure_index, plan.sizes)
    return result


#: What a strict refusal adds: the ways to serve the call (a drop-in call is never refused
#: by default: strict mode is the project's opt-in).
STRICT_FIX = (f" [{STRICT_ENV} is set: no baked artifact covers this call; to serve it, "
              "add a structure that accepts it, or record it (HATCH_JAXEXPORT_RECORD=1 while "
              f"the tests run) and rebuild; unset {STRICT_ENV} to trace the source instead]")


def _call_uncovered(fn: FunctionRecord, given: tuple[tuple[Any, ...], dict[str, Any]],
                    refusal: CallMismatch, fast: Any) -> Any:
    """A call no baked structure accepts: the artifact recorded for exactly this call, else
    the source's result (``run_source``: the source's own error first, told after). A call
    of plain arrays and scalars hands its trace to the fast path (``fast``), so later calls
    like it cost what ``jax.jit`` of the source costs."""
    args, kwargs = given
    from hatch_jaxexport.runtime.call.recorded_calls import recorded_call

    run, _ = recorded_call(fn, args, kwargs)  # baked at exactly this call's recorded sizes
    if run is not None:
        try:
            return run()
        except NotImplementedError:  # forward mode: a concrete-size artifact has none
            pass  # the source, traced under the caller's jvp, serves it
    if strict_mode():
        refusal.args = (f"{refusal}{STRICT_FIX}", *refusal.args[1:])
        raise refusal
    reason = str(refusal)
    result = run_source(fn, given, reason, f"{reason}; tracing the source instead (a drop-in "
                        f"call: set {STRICT_ENV}=1 to refuse it)")
    if recorder.RECORDING:  # completed by the source: the build can bake it
        recorder.note_call(fn, args, kwargs)
    _traced_to_fast_path(fn, given, given, fast)
    return result


def _traced_to_fast_path(fn: FunctionRecord, taken: tuple[tuple[Any, ...], dict[str, Any]],
                         given: tuple[tuple[Any, ...], dict[str, Any]], fast: Any) -> None:
    """Hand the source's trace of a call (``taken``: the arguments the source ran with, made
    from the caller's ``given``) to the fast path: the keyed cache and the hot executable."""
    traced = source_calls(fn).traced_call(*taken) if fast is not None else None
    if traced is None:
        return
    args, kwargs = given
    values = (*args, *kwargs.values())
    route = route_of(tuple(traced[1]), values, len(kwargs))
    if route is not None:
        plain = route == tuple(range(len(values))) and not kwargs
        fn.calls.remember_fast(fast, traced[0], None if plain else route)
    hot = _hot_form(tuple(traced[1]), values, False, len(kwargs))
    if hot is not None and not hot[1]:  # jax's executable of this trace: it refuses
        # other types and tracers in C++, as a shipped one does (the jit would retrace)
        compiled = traced[0].lower(*traced[1]).compile()  # jax's caches: no compile
        fn.calls.remember_hot(hot_call(compiled_dispatch(compiled), args, kwargs, hot[0]))


def _settle(fn: FunctionRecord, target: _Target,
            taken: tuple[tuple[Any, ...], dict[str, Any]],
            given: tuple[tuple[Any, ...], dict[str, Any]], fast: Any) -> None:
    """Hand a call's settled executable to the function's fast path: the keyed cache for
    calls of plain arrays and scalars (``fast``, by position or keyword), the hot executable
    for positional calls whose trailing arguments are static strings (pytrees too)."""
    (call_args, call_kwargs), (args, kwargs) = taken, given
    settled = getattr(target.call, "settled", None)
    call = settled(call_args, call_kwargs) if settled is not None else target.call
    if call is None:  # a quick tier is in use, the optimized one pending
        return
    if fast is not None:
        values = (*args, *kwargs.values())
        route = route_of((*call_args, *call_kwargs.values()), values, len(kwargs))
        if route is not None:
            plain = route == tuple(range(len(values))) and not kwargs and not call_kwargs
            fn.calls.remember_fast(fast, call, None if plain else route, tuple(call_kwargs),
                                   compiled=settled is not None)
    if settled is None:
        return
    wanted = (*call_args, *call_kwargs.values())
    hot = _hot_form(wanted, (*args, *kwargs.values()),
                    not kwargs and not call_kwargs and _same_leaves(call_args, args), len(kwargs))
    if hot is None:
        return
    keywords = tuple(call_kwargs)
    by_position = getattr(target.call, "settled_by_position", None)
    if keywords and hot == ((), ()) and by_position is not None:
        twin = by_position(call_args, call_kwargs)  # ``export_with_kwargs``: no keyword binding
        if twin is not None:
            call, keywords = twin, ()
    fn.calls.remember_hot(hot_call(call, args, kwargs, *hot, keywords))


def _hot_form(wanted: tuple[Any, ...], values: tuple[Any, ...], same_trees: bool,
              keywords: int) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """How the hot path makes ``wanted`` (what the settled executable took) from a call's
    ``values`` (positional, then keyword), as ``(tail, constants)``: it takes the values before
    the tail as given, then the constants; the tail, scalars only, is compared on each call.
    ``None`` where the executable takes them otherwise (reordered, rebuilt, an array dropped).
    ``same_trees``: the executable took the call's leading pytrees, rebuilt by the checks with
    the very same leaves; ``keywords``: how many of ``values`` came by keyword (``ambiguous``)."""
    if keywords and ambiguous(values):
        return None
    split = len(wanted)
    picks = _picks(wanted, values)
    if picks is None and same_trees:
        picks = tuple(range(split))
    constants: tuple[Any, ...] = ()
    if picks != tuple(range(split)):  # scalars the full path converted, taken as constants?
        route = route_of(wanted, values, keywords)
        split = next((i for i, step in enumerate(route or ()) if type(step) is not int), split)
        if route is None or route[:split] != tuple(range(split)) or \
                not all(isinstance(step, Constant) for step in route[split:]):
            return None
        constants = tuple(step.value for step in route[split:])
    tail = values[split:]
    if not all(type(value) in SCALARS for value in tail):
        return None
    return tail, constants


def _call_sharded(fn: FunctionRecord, plan: CallPlan, key: tuple[Any, ...],
                  args: tuple[Any, ...], fast: Any, config: dict[str, Any]) -> Any:
    """A call of a function with mesh variants: the variant of the call's mesh, NumPy inputs
    placed onto that mesh with the artifact's in_specs. Only calls without any mesh take the
    fast path, guarded: the same arrays may run under a mesh set later."""
    from hatch_jaxexport.runtime.artifacts.placement import (
        call_mesh,
        current_mesh,
        place,
        select_variant,
    )

    spec = fn.export_spec
    assert spec.mesh is not None and spec.in_specs is not None
    found = call_mesh(plan.values)
    variant, mismatch = select_variant(spec.mesh, found)
    mesh = mesh_text(variant)
    key = (*key, mesh if not mismatch else ("no match", mesh_text(found.shape)),
           _ConfigKey(config.values()))
    target = fn.calls.target(key, lambda: _resolve(fn, plan, key[2], mesh, mismatch, config))
    values = plan.values
    if variant is not None and target.from_artifact and found.mesh is not None:
        values = place(spec.structures[plan.structure_index],
                       spec.in_specs[plan.structure_index], values, found.mesh)
    call_args, call_kwargs = _split(fn, target, plan, values)
    if not target.from_artifact:
        return run_source(fn, (call_args, call_kwargs), target.reason,
                          no_artifact_notice(fn, target.reason))
    if fast is not None and found.shape is None and not mismatch and not call_kwargs \
            and _picks(call_args, args) == tuple(range(len(args))):
        call = target.call

        def unless_a_mesh_is_set(*same_args: Any) -> Any:
            if current_mesh().shape is None:
                return call(*same_args)
            return call_exportable(fn, same_args, {})  # a mesh was set since: resolve again

        fn.calls.remember_fast(fast, unless_a_mesh_is_set, None)
    return target.call(*call_args, **call_kwargs)


class _ConfigKey(tuple):  # type: ignore[type-arg]
    """The jax config values (``LOWERING_CONFIG``) that end a resolution key."""

    __slots__ = ()


def loaded_from_artifact(fn: FunctionRecord) -> dict[Any, bool]:
    """For introspection and tests: which resolved call keys, ``(structure index, static
    values, platform[, mesh])``, use an artifact (True) or trace, under the jax config in
    effect now."""
    now = _ConfigKey(lowering_config().values())
    return {key[:-1]: target.from_artifact for key, target in fn.calls.targets.items()
            if isinstance(target, _Target) and key[-1] == now}


def call_report(fn: FunctionRecord) -> list[Any]:
    """How each first eager call of ``fn`` in this process was served (``ServedCall`` each):
    one per signature of each resolved artifact (symbolic, concrete-size, recorded, and the
    members of transformations), and one ``traced`` entry, with the reason, per reason the
    source ran instead. Calls traced by the caller's own ``jax.jit`` are not eager calls: jax
    compiles them with the caller's function."""
    from hatch_jaxexport.runtime.executables.eager_call import EagerCall

    served = []
    for target in list(fn.calls.targets.values()):
        call = getattr(target, "call", None)
        if isinstance(call, EagerCall):
            served += call.served_calls()
    for member in fn.calls.members:  # the transformations' members (jax.grad: the vjp)
        served += member.served_calls()
    return served + list(fn.calls.reports)  # concrete-size, recorded and traced calls


def tiered_calls(fn: FunctionRecord) -> list[Any]:
    """The ``EagerCall`` objects of a function's resolved targets (tests, benchmarks)."""
    from hatch_jaxexport.runtime.executables.eager_call import EagerCall

    return [target.call for target in fn.calls.targets.values()
            if isinstance(getattr(target, "call", None), EagerCall)]


__all__ = ["STRICT_ENV", "STRICT_FIX", "call_exportable", "call_report", "export_platform",
           "forget_package",
           "load_package_artifacts", "loaded_from_artifact", "strict_mode", "tiered_calls"]
