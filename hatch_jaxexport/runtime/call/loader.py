"""The call path: runs a call of an ``@exportable`` function on its baked artifact, or the source.

A first call of a kind walks forward, one module a step:

1. ``matching.plan_call``: which structure and static values accept the call (a call none
   accepts runs the source: ``_call_uncovered``);
2. ``choice.choose_artifact``: what serves it (pure: an artifact record, concrete-size
   records, or the reason there is none), resolved once per (structure, static values,
   platform[, mesh variant], jax config);
3. ``executables.artifact_calls.build_artifact_call``: the chosen artifact's call (or
   ``recorded_calls.ConcreteDispatch`` for concrete sizes);
4. the call runs; where no artifact serves it, the source runs (``_source_calls.run_source``)
   and ``refusals`` refuses (strict mode), tells and reports;
5. ``fast_path``: the settled executable is handed to the function's ``ResolvedCalls``, so
   that later calls of the same kind skip all of this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.errors import CallMismatch
from hatch_jaxexport.formats.export_spec import baked_kinds
from hatch_jaxexport.formats.manifest_reader import mesh_text
from hatch_jaxexport.formats.settings import STRICT_ENV, record_choice, strict_mode
from hatch_jaxexport.runtime.artifacts.package_artifacts import (
    forget_package,
    load_package_artifacts,
)
from hatch_jaxexport.runtime.call._resolved_calls import fast_key, prime_fast_path
from hatch_jaxexport.runtime.call.choice import Choice, choose_artifact
from hatch_jaxexport.runtime.call.fast_path import (
    positions_of,
    settle_artifact_call,
    settle_traced_call,
)
from hatch_jaxexport.runtime.call.inlining import runs_inline
from hatch_jaxexport.runtime.call.matching import (
    CallPlan,
    committed_platform,
    export_platform,
    plan_call,
)
from hatch_jaxexport.runtime.call.targets import Attempt, Target, source_target
from hatch_jaxexport.runtime.executables.artifact_calls import CallSite, build_artifact_call
from hatch_jaxexport.runtime.executables.eager_call import EagerCall
from hatch_jaxexport.runtime.jaxcompat import evaluating_eagerly, lowering_config

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

# Imported in functions: the mesh placement (a function with mesh variants), the recorded
# calls (concrete sizes, a call no structure accepts), the source's calls and their refusals
# (a call no artifact serves), the recorder (HATCH_JAXEXPORT_RECORD) and the family's source
# (a transformation a baked VJP or family cannot serve), only where a call needs them: a
# plain first call imports 2 ms less (benchmarks/first_call_parts.py, "our modules"), and one
# a shipped executable serves imports none of the source's path; the plans kept for traced
# calls, at the first call under a transformation; the source's mark, for a call inside an
# export.

#: Whether ``HATCH_JAXEXPORT_RECORD`` is on in this process (read once, as the recorder does).
_RECORDING = record_choice() is not False


def _resolve(fn: FunctionRecord, plan: CallPlan, platform: str, mesh: str = "",
             mismatch: str = "", config: dict[str, Any] | None = None) -> Target:
    """What serves a (structure, static values, platform[, mesh]): the chosen artifact's
    call, or the source with the reason (``no_artifact``: strict mode refuses here)."""
    config = lowering_config() if config is None else config
    choice = Choice(None, reason=mismatch) if mismatch else \
        choose_artifact(fn, plan, platform, mesh, config)
    reason = choice.reason
    if choice.record is not None:  # an artifact it cannot read: the fail-safe line decides
        call = build_artifact_call(_site(fn, plan, platform, mesh, choice.variant),
                                   choice.package, choice.record)  # type: ignore[arg-type]
        return Target(call, static_in_call=False, from_artifact=True)
    elif choice.concrete:
        from hatch_jaxexport.runtime.call.recorded_calls import ConcreteDispatch

        return Target(ConcreteDispatch(fn, choice.package, choice.concrete,
                                        plan.structure_index, dict(plan.static)),
                       static_in_call=False, from_artifact=True)
    return source_target(fn, reason)


def _site(fn: FunctionRecord, plan: CallPlan, platform: str, mesh: str, variant: str
          ) -> CallSite:
    """What building the chosen artifact's call needs of ``fn`` and the call, as values."""
    spec = fn.export_spec
    structure = spec.structures[plan.structure_index]
    order = max(spec.ad_order, 1 if mesh and spec.vjp_order else 0)
    static = dict(plan.static)

    def flat_source(in_tree: Any) -> Callable[..., tuple[Any, ...]]:
        from hatch_jaxexport.runtime.artifacts.family import source_flat

        return source_flat(fn, plan.structure_index, static, in_tree)
    return CallSite(
        function=fn.name, package=fn.package, platform=platform,
        family_key=(fn.name, structure.key, plan.static_key, platform, mesh, variant),
        tiered=spec.tiered, uses_family=spec.uses_family,
        wanted_kinds=frozenset(baked_kinds(order, spec.vjp_order)), strict=strict_mode(),
        source_flat=flat_source)


def _split(fn: FunctionRecord, target: Target, plan: CallPlan, values: dict[str, Any]
           ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The target's positional and keyword arguments (statics passed only to the fallback)."""
    layout = fn.layouts[plan.structure_index]
    if target.static_in_call:
        return layout.split({**values, **plan.static})
    return layout.split(values, skip=plan.static)


def call_exportable(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any],
                    attempt: Attempt | None = None) -> Any:
    """A call's artifact side, for a function with structures: matched, resolved and run
    (``failsafe.serve`` calls it, and turns what it raises into the source's result; the
    resolution key it reaches goes to ``attempt``)."""
    prime_fast_path()
    if runs_inline(args, kwargs):  # inside an export: the outer artifact holds the source
        from hatch_jaxexport.runtime.source_errors import run_as_source

        return run_as_source(fn.__wrapped__, *args, **kwargs)
    attempt = Attempt() if attempt is None else attempt
    fast = fast_key(args, kwargs)
    try:
        plan = _plan(fn, args, kwargs, fast)
    except CallMismatch as refusal:
        return _call_uncovered(fn, (args, kwargs), refusal, fast)
    key: tuple[Any, ...] = (plan.structure_index, plan.static_key,
                            export_platform(committed_platform(plan.values)))
    # the jax config ends the key: a process that changes it resolves again
    config = lowering_config()
    if fn.export_spec.mesh is not None:  # sharded variants: the call's mesh picks one
        result = _call_sharded(fn, plan, key, args, None if kwargs else fast, config, attempt)
    else:
        resolved = attempt.key = (*key, _ConfigKey(config.values()))
        target = fn.calls.target(resolved, lambda: _resolve(fn, plan, key[2], config=config))
        result = _run(fn, resolved, target, plan, (args, kwargs), fast)
    if _RECORDING:  # what the source completed: a call it refuses is not baked
        from hatch_jaxexport.runtime.call import _recorder as recorder

        recorder.note(fn.package, fn.name, plan.structure_index, plan.sizes)
        if fn.export_spec.vmap and fast is None:  # under a transformation: an eager vmap?
            recorder.note_batched(fn, plan.structure_index, plan.sizes, (args, kwargs))
    return result


def _plan(fn: FunctionRecord, args: tuple[Any, ...], kwargs: dict[str, Any], fast: Any
          ) -> CallPlan:
    """The call's plan: matched in full for a call of plain values (it has a fast key) or
    one made outside any trace; a call under a transformation may rebuild the plan kept for
    its types (``traced_plans``)."""
    if fast is not None or evaluating_eagerly():
        return plan_call(fn, args, kwargs)
    from hatch_jaxexport.runtime.call.traced_plans import traced_plan  # pytrees and tracers

    return traced_plan(fn, args, kwargs, plan_call)


def _run(fn: FunctionRecord, key: tuple[Any, ...], target: Target, plan: CallPlan,
         given: tuple[tuple[Any, ...], dict[str, Any]], fast: Any) -> Any:
    """Run the call resolved under ``key`` (``fn.calls.targets``'), then hand what ran to the
    fast path. An artifact found unusable on first use (``UnreadableArtifact``) is replaced by
    the source under that key for good."""
    if target.from_artifact:  # an artifact found unusable on first use (``UnreadableArtifact``)
        taken = _split(fn, target, plan, plan.values)  # raises: the fail-safe line settles the key
        result = target.call(*taken[0], **taken[1])
        settle_artifact_call(fn, target, taken, given, fast)
        return result
    taken = _split(fn, target, plan, plan.values)
    result = _run_source(fn, taken, target.reason)
    settle_traced_call(fn, taken, given, fast)
    return result


def _run_source(fn: FunctionRecord, taken: tuple[tuple[Any, ...], dict[str, Any]],
                reason: str) -> Any:
    """The source's result for a call no artifact serves, for ``reason`` (told, reported)."""
    from hatch_jaxexport.runtime.call._source_calls import run_source
    from hatch_jaxexport.runtime.call.refusals import no_artifact_notice

    return run_source(fn, taken, reason, no_artifact_notice(fn, reason))


def _call_uncovered(fn: FunctionRecord, given: tuple[tuple[Any, ...], dict[str, Any]],
                    refusal: CallMismatch, fast: Any) -> Any:
    """A call no baked structure accepts: the artifact recorded for exactly this call, else
    the source's result (``run_source``: the source's own error first, told after). A call
    of plain arrays and scalars hands its trace to the fast path (``fast``), so later calls
    like it cost what ``jax.jit`` of the source costs."""
    from hatch_jaxexport.runtime.call._source_calls import run_source
    from hatch_jaxexport.runtime.call.recorded_calls import recorded_call
    from hatch_jaxexport.runtime.call.refusals import refuse_uncovered, uncovered_notice

    args, kwargs = given
    run, _ = recorded_call(fn, args, kwargs)  # baked at exactly this call's recorded sizes
    if run is not None:
        try:
            return run()
        except NotImplementedError:  # forward mode: a concrete-size artifact has none
            pass  # the source, traced under the caller's jvp, serves it
    refuse_uncovered(refusal)
    reason = str(refusal)
    result = run_source(fn, given, reason, uncovered_notice(reason))
    if _RECORDING:  # completed by the source: the build can bake it
        from hatch_jaxexport.runtime.call import _recorder as recorder

        recorder.note_call(fn, args, kwargs)
    settle_traced_call(fn, given, given, fast)
    return result


def _call_sharded(fn: FunctionRecord, plan: CallPlan, key: tuple[Any, ...],
                  args: tuple[Any, ...], fast: Any, config: dict[str, Any], attempt: Attempt
                  ) -> Any:
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
    attempt.key = key
    target = fn.calls.target(key, lambda: _resolve(fn, plan, key[2], mesh, mismatch, config))
    values = plan.values
    if variant is not None and target.from_artifact and found.mesh is not None:
        values = place(spec.structures[plan.structure_index],
                       spec.in_specs[plan.structure_index], values, found.mesh)
    call_args, call_kwargs = _split(fn, target, plan, values)
    if not target.from_artifact:
        return _run_source(fn, (call_args, call_kwargs), target.reason)
    if fast is not None and found.shape is None and not mismatch and not call_kwargs \
            and positions_of(call_args, args) == tuple(range(len(args))):
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
            if isinstance(target, Target) and key[-1] == now}


def call_report(fn: FunctionRecord) -> list[Any]:
    """How each first eager call of ``fn`` in this process was served (``ServedCall`` each):
    one per signature of each resolved artifact (symbolic, concrete-size, recorded, and the
    members of transformations), and one ``traced`` entry, with the reason, per reason the
    source ran instead. Calls traced by the caller's own ``jax.jit`` are not eager calls: jax
    compiles them with the caller's function."""
    calls = tiered_calls(fn)
    served = [line for call in calls for line in call.served_calls()]
    for call in calls:  # the transformations' members (jax.grad: the vjp)
        served += [line for member in call.member_calls() for line in member.served_calls()]
    return served + list(fn.calls.reports)  # concrete-size, recorded and traced calls


def tiered_calls(fn: FunctionRecord) -> list[Any]:
    """The ``EagerCall`` objects of a function's resolved targets (tests, benchmarks)."""
    return [target.call for target in fn.calls.targets.values()
            if isinstance(getattr(target, "call", None), EagerCall)]


__all__ = ["STRICT_ENV", "call_exportable", "call_report", "export_platform",
           "forget_package",
           "load_package_artifacts", "loaded_from_artifact", "strict_mode", "tiered_calls"]
