"""What the release check checks: bundled artifacts paired with what the source exports now.

:func:`plan_check` imports the source, lists its exportables and pairs every bundled artifact
with the artifact the source would export now (by artifact id): one :class:`Case` each, plus
cases for source artifacts missing from the wheel and bundled artifacts the source no longer
produces. :func:`orphan_reason` and :func:`missing_reason` say why a case has only one side.

Concrete-size artifacts (``ConcreteRecord``: a structure bound to one size where its symbolic
export failed, or one recorded call of a function, ``structure_index`` -1) are served by the
wheel as much as symbolic ones, so each is a case of its own, paired by what the build bakes
it from (:class:`ConcreteSource`: the structure's task and sizes, or the recorded call) with
what the source and its ``jaxexport-signatures.json`` ask for now.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from hatch_jaxexport.bake.check._bundle import (
    Bundle,
    SourceInfo,
    check_source_paths,
    find_bundle,
    put_source_first,
    refuse_installed_copy,
    source_info,
    source_location,
)
from hatch_jaxexport.bake.concrete.exports import recorded_calls
from hatch_jaxexport.bake.executables.compiling import recorded_sizes, structure_size_envs
from hatch_jaxexport.bake.export.discovery import discover
from hatch_jaxexport.bake.export.exporter import ExportTask, tasks_for
from hatch_jaxexport.errors import CheckError, ExportError
from hatch_jaxexport.formats.manifest import (
    ArtifactRecord,
    ConcreteRecord,
    Manifest,
    SkippedRecord,
    artifact_id,
    member_name,
    signature_text,
)
from hatch_jaxexport.formats.manifest_reader import mesh_from_record
from hatch_jaxexport.formats.mesh import describe_mesh
from hatch_jaxexport.formats.options import DEFAULT_PLATFORMS
from hatch_jaxexport.formats.signatures import SIGNATURES_NAME, Calls, Recorded, call_key, rebuild
from hatch_jaxexport.formats.statics import encode_static, static_text
from hatch_jaxexport.runtime.call.decorator import ExportableFunction


@dataclasses.dataclass(frozen=True)
class ConcreteSource:
    """What the source bakes a concrete-size artifact from now: a structure's primal ``task``
    bound to ``sizes``, or (``task`` ``None``) the recorded call ``signature``."""

    platform: str
    task: ExportTask | None = None
    sizes: dict[str, int] = dataclasses.field(default_factory=dict)
    signature: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    """One artifact id: what the wheel carries for it, and what the source asks for."""

    id: str
    function: str
    record: ArtifactRecord | None = None  # in the wheel
    skipped: SkippedRecord | None = None  # recorded as a failed export in the wheel
    task: ExportTask | None = None  # what the source exports now
    #: A concrete-size artifact in the wheel, and what the source bakes it from now.
    concrete: ConcreteRecord | None = None
    concrete_source: ConcreteSource | None = None
    #: Of a skipped export: how many concrete-size artifacts serve its structure instead.
    served_sizes: int = 0

    @property
    def is_concrete(self) -> bool:
        """A concrete-size or recorded-call case (compared by ``_compare.compare_concrete``)."""
        return self.concrete is not None or self.concrete_source is not None


@dataclasses.dataclass
class Plan:
    """Everything needed to check one package."""

    package: str
    bundle: Bundle
    source: SourceInfo
    functions: dict[str, ExportableFunction]
    default_platforms: tuple[str, ...]
    cases: list[Case]

    def header(self) -> str:
        import jax

        versions = f"checking with jax {jax.__version__}"
        if jax.__version__ != self.bundle.manifest.jax_version:
            versions += (f" (the artifacts were built with jax "
                         f"{self.bundle.manifest.jax_version}: compared on the fingerprint and "
                         "numerically)")
        return f"{self.package}: {self.bundle.describe()}; {self.source.describe()}; {versions}"


def _skipped_id(record: SkippedRecord) -> str:
    return artifact_id(record.function, record.structure_index, record.static, record.platform,
                       record.kind, record.batched, record.mesh, record.variant)


def infer_default_platforms(manifest: Manifest, functions: Mapping[str, ExportableFunction]
                            ) -> tuple[str, ...]:
    """The build's default platforms, as seen in artifacts of functions that name none."""
    seen = [r.platform for r in (*manifest.artifacts, *manifest.skipped)
            if r.function in functions and functions[r.function].export_spec.platforms is None]
    return tuple(sorted(set(seen))) or DEFAULT_PLATFORMS


def plan_check(package: str, *, platforms: Sequence[str] | None = None,
               source_paths: Sequence[str | os.PathLike[str]] = ()) -> Plan:
    """Pair the installed wheel's artifacts of ``package`` with a fresh look at its source.

    ``platforms`` are the build's default platforms (for functions that name none); by default
    they are inferred from the wheel. ``source_paths`` are folders put first on the import path
    for the source (``--jaxexport-source``); the package must be imported from one of them.
    Raises ``CheckError`` with a readable message when the check cannot start, including when
    the source resolves to the installed distribution's own files (a check of the wheel
    against itself).
    """
    bundle = find_bundle(package)
    if source_paths:
        check_source_paths(package, put_source_first(source_paths))
    try:
        found = discover(package)
    except ExportError as err:
        raise CheckError(f"cannot import the source of {package!r}: {err}") from None
    functions = {fn.name: fn for fn in found}
    source = source_info(package, bundle)
    refuse_installed_copy(source, bundle)
    defaults = tuple(platforms) if platforms else infer_default_platforms(bundle.manifest,
                                                                          functions)
    tasks = {task.id: task for fn in found for task in tasks_for(fn, defaults)}
    records = {r.id: r for r in bundle.manifest.artifacts}
    skipped = {_skipped_id(s): s for s in bundle.manifest.skipped}
    served = _served_sizes(bundle.manifest.concrete)
    cases = []
    for case_id in sorted(set(tasks) | set(records) | set(skipped)):
        task = tasks.get(case_id)
        record = records.get(case_id)
        skip = skipped.get(case_id) if record is None else None
        owner = record or skip or task
        assert owner is not None
        cases.append(Case(case_id, owner.function, record, skip, task,
                          served_sizes=served.get(case_id, 0) if skip else 0))
    cases += concrete_cases(package, bundle.manifest, functions, tasks, defaults)
    return Plan(package, bundle, source, functions, defaults, cases)


def _base_id(record: ConcreteRecord | SkippedRecord) -> str:
    """The id of the symbolic artifact a concrete-size record stands in for (of a recorded
    call: its function, ``-1`` and platform)."""
    return artifact_id(record.function, record.structure_index, record.static, record.platform,
                       variant=record.variant)


def _served_sizes(concrete: Sequence[ConcreteRecord]) -> dict[str, int]:
    """How many concrete-size artifacts serve each structure, by the id of its primal."""
    counts: dict[str, int] = {}
    for record in concrete:
        if record.structure_index >= 0:
            counts[_base_id(record)] = counts.get(_base_id(record), 0) + 1
    return counts


def _concrete_key(function: str, structure_index: int, static: Mapping[str, Any],
                  platform: str, variant: Mapping[str, Any], sizes: Mapping[str, int],
                  call: str) -> str:
    """What pairs a wheel's concrete-size artifact with the source's: what the build bakes
    it from (``static`` encoded, as the manifest writes it)."""
    return json.dumps([function, structure_index, static, platform, variant, sizes, call],
                      sort_keys=True)


def _record_key(record: ConcreteRecord) -> str:
    return _concrete_key(record.function, record.structure_index, record.static,
                         record.platform, record.variant, record.sizes, record.call)


def _signatures_of(package: str) -> tuple[Recorded, Calls | None]:
    """The source's recorded sizes and calls; calls ``None`` where the source has no
    signatures file (the wheel's recorded calls are then compared as they were recorded)."""
    import importlib
    from pathlib import Path

    folder = Path(importlib.import_module(package).__file__ or "").parent
    if not (folder / SIGNATURES_NAME).is_file():
        return {}, None
    try:
        return recorded_sizes(package), recorded_calls(package)
    except (ExportError, ValueError) as err:
        raise CheckError(f"cannot read the source's {SIGNATURES_NAME}: {err}") from None


def _source_candidates(manifest: Manifest, functions: Mapping[str, ExportableFunction],
                       tasks: Mapping[str, ExportTask], defaults: tuple[str, ...],
                       recorded: Recorded, calls: Calls | None
                       ) -> dict[str, tuple[str, str, ConcreteSource]]:
    """What a build of the source bakes at concrete sizes, by ``_concrete_key``: ``(id,
    function, source)``. The sizes of each structure whose symbolic export failed at build
    time (the wheel's skipped primals: whether it fails now is its own case), and every
    recorded call of the signatures file."""
    found: dict[str, tuple[str, str, ConcreteSource]] = {}
    for skip in manifest.skipped:
        task, fn = tasks.get(_base_id(skip)), functions.get(skip.function)
        if task is None or fn is None or skip.mesh or \
                (skip.kind, skip.batched) != ("primal", False):
            continue
        spec = fn.export_spec
        for env in structure_size_envs(fn, skip.structure_index, recorded,
                                       (spec.concrete or {}, spec.executable_sizes or {})):
            if env:
                key = _concrete_key(skip.function, skip.structure_index, skip.static,
                                    skip.platform, skip.variant, env, "")
                sizes = ",".join(f"{k}={v}" for k, v in sorted(env.items()))
                found[key] = (f"{_base_id(skip)}#{sizes}", skip.function,
                              ConcreteSource(skip.platform, task, env))
    for name, signatures in (calls or {}).items():
        fn = functions.get(name)
        if fn is None:
            continue
        for signature in signatures:
            for platform in fn.export_spec.platforms or defaults:
                key = _concrete_key(name, -1, {}, platform, {}, {}, call_key(signature))
                found[key] = (f"{artifact_id(name, -1, {}, platform)}#{_call_text(signature)}",
                              name, ConcreteSource(platform, signature=signature))
    return found


def _call_text(signature: Mapping[str, Any]) -> str:
    """A recorded call's arrays, as ``inspect`` shows them (``float32[6]``)."""
    leaves: list[Any] = []
    rebuild(dict(signature), lambda dims, dtype: leaves.append([list(dims), dtype]))
    digest = hashlib.sha256(call_key(dict(signature)).encode()).hexdigest()[:16]
    return f"{signature_text(leaves)}#call={digest}"


def concrete_cases(package: str, manifest: Manifest, functions: Mapping[str, ExportableFunction],
                   tasks: Mapping[str, ExportTask], defaults: tuple[str, ...]) -> list[Case]:
    """One case per concrete-size artifact of the wheel, paired with what the source bakes
    it from now (none: an orphan), and one per concrete-size artifact the source asks for
    that the wheel lacks."""
    recorded, calls = _signatures_of(package)
    wanted = _source_candidates(manifest, functions, tasks, defaults, recorded, calls)
    cases = []
    for record in sorted(manifest.concrete, key=lambda r: r.id):
        key = _record_key(record)
        source = wanted.pop(key, (None, None, None))[2]
        if source is None and calls is None and record.structure_index < 0 and \
                record.function in functions:  # no signatures file: compare as recorded
            fn = functions[record.function]
            if record.platform in (fn.export_spec.platforms or defaults):
                source = ConcreteSource(record.platform, signature=json.loads(record.call))
        cases.append(Case(record.id, record.function, concrete=record, concrete_source=source))
    for case_id, function, source in sorted(wanted.values(), key=lambda w: w[0]):
        cases.append(Case(case_id, function, concrete_source=source))
    return cases


def _describe_static(static: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={static_text(v)}" for k, v in sorted(static.items())) or "none"


def orphan_reason(plan: Plan, case: Case) -> str:
    """Why the wheel carries an artifact the source no longer produces."""
    owner = case.record or case.skipped
    assert owner is not None
    fn = plan.functions.get(owner.function)
    if fn is None:
        return (f"function {owner.function} is not @exportable in the source (removed, renamed "
                "or undecorated since the wheel was built)")
    spec = fn.export_spec
    where = source_location(fn)
    if owner.structure_index >= len(spec.structures):
        return (f"{owner.function}{where} has {len(spec.structures)} structure(s) now; "
                f"structure {owner.structure_index} ({owner.structure}) is gone from its spec")
    now = [encode_static(s) for s in spec.static_combinations(owner.structure_index)]
    if owner.static not in now:
        return (f"{owner.function}{where} no longer lists the static values "
                f"{_describe_static(owner.static)} (now: "
                f"{'; '.join(_describe_static(s) for s in now)})")
    platforms = spec.platforms or plan.default_platforms
    if owner.platform not in platforms:
        return (f"{owner.function}{where} is no longer exported for {owner.platform} "
                f"(now: {', '.join(platforms)})")

    variant = mesh_from_record(owner.mesh)
    if variant not in (spec.mesh or (None,)):
        now = "; ".join(describe_mesh(v) for v in spec.mesh or (None,))
        return (f"{owner.function}{where} no longer declares {describe_mesh(variant)} "
                f"(now: {now})")
    return (f"{owner.function}{where} no longer asks for the "
            f"{member_name(owner.kind, owner.batched)} artifact (ad_order={spec.ad_order}, "
            f"vmap={spec.vmap})")


def concrete_orphan_reason(plan: Plan, case: Case) -> str:
    """Why the wheel carries a concrete-size artifact the source no longer bakes."""
    record = case.concrete
    assert record is not None
    fn = plan.functions.get(record.function)
    if fn is None:
        return (f"function {record.function} is not @exportable in the source (removed, "
                "renamed or undecorated since the wheel was built)")
    where = source_location(fn)
    if record.structure_index < 0:
        platforms = fn.export_spec.platforms or plan.default_platforms
        if record.platform not in platforms:
            return (f"{record.function}{where} is no longer exported for {record.platform} "
                    f"(now: {', '.join(platforms)})")
        return (f"the source's {SIGNATURES_NAME} no longer records this call of "
                f"{record.function}{where} (recorded again without it since the wheel was "
                "built)")
    sizes = ", ".join(f"{k}={v}" for k, v in sorted(record.sizes.items()))
    owner = SkippedRecord(record.function, "", record.structure_index, record.static,
                          record.platform, "", "primal", False, {}, record.variant)
    if _base_id(record) not in {t.id for t in _tasks_of(plan, fn)}:
        return orphan_reason(plan, Case(case.id, case.function, skipped=owner))
    return (f"{record.function}{where} no longer names or records the sizes {sizes} for "
            f"structure {record.structure_index} (concrete=, executable_sizes= or "
            f"{SIGNATURES_NAME})")


def _tasks_of(plan: Plan, fn: ExportableFunction) -> list[ExportTask]:
    return tasks_for(fn, plan.default_platforms)


def missing_reason(plan: Plan, case: Case) -> str:
    """Why the source asks for an artifact the wheel does not carry."""
    fn = plan.functions[case.function]
    others = [r for r in plan.bundle.manifest.artifacts if r.function == case.function]
    if not others:
        return (f"function {case.function}{source_location(fn)} is @exportable in the source "
                "but the wheel has no artifact for it (decorated, added or renamed since the "
                "wheel was built)")
    return (f"{case.function}{source_location(fn)} asks for this artifact (a structure, static "
            "value, platform or transformation added to its spec since the wheel was built), "
            "but the wheel does not carry it")


__all__ = ["Case", "ConcreteSource", "Plan", "concrete_cases", "concrete_orphan_reason",
           "infer_default_platforms", "missing_reason", "orphan_reason", "plan_check"]
