"""What the release check checks: bundled artifacts paired with what the source exports now.

:func:`plan_check` imports the source, lists its exportables and pairs every bundled artifact
with the artifact the source would export now (by artifact id): one :class:`Case` each, plus
cases for source artifacts missing from the wheel and bundled artifacts the source no longer
produces. :func:`orphan_reason` and :func:`missing_reason` say why a case has only one side.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from hatch_jaxexport.bake._discover import discover
from hatch_jaxexport.bake._exporter import ExportTask, tasks_for
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
from hatch_jaxexport.errors import CheckError, ExportError
from hatch_jaxexport.formats._options import DEFAULT_PLATFORMS
from hatch_jaxexport.formats._statics import encode_static, static_text
from hatch_jaxexport.formats.manifest import (
    ArtifactRecord,
    Manifest,
    SkippedRecord,
    artifact_id,
    member_name,
)
from hatch_jaxexport.runtime.call.decorator import ExportableFunction


@dataclasses.dataclass(frozen=True)
class Case:
    """One artifact id: what the wheel carries for it, and what the source asks for."""

    id: str
    function: str
    record: ArtifactRecord | None = None  # in the wheel
    skipped: SkippedRecord | None = None  # recorded as a failed export in the wheel
    task: ExportTask | None = None  # what the source exports now


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
    cases = []
    for case_id in sorted(set(tasks) | set(records) | set(skipped)):
        task = tasks.get(case_id)
        record = records.get(case_id)
        skip = skipped.get(case_id) if record is None else None
        owner = record or skip or task
        assert owner is not None
        cases.append(Case(case_id, owner.function, record, skip, task))
    return Plan(package, bundle, source, functions, defaults, cases)


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
    from hatch_jaxexport.formats._mesh import describe_mesh
    from hatch_jaxexport.formats.manifest import mesh_from_record

    variant = mesh_from_record(owner.mesh)
    if variant not in (spec.mesh or (None,)):
        now = "; ".join(describe_mesh(v) for v in spec.mesh or (None,))
        return (f"{owner.function}{where} no longer declares {describe_mesh(variant)} "
                f"(now: {now})")
    return (f"{owner.function}{where} no longer asks for the "
            f"{member_name(owner.kind, owner.batched)} artifact (ad_order={spec.ad_order}, "
            f"vmap={spec.vmap})")


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


__all__ = ["Case", "Plan", "infer_default_platforms", "missing_reason", "orphan_reason",
           "plan_check"]
