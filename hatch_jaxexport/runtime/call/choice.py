"""Choosing what serves a matched call: the first step after matching, and a pure one.

Given the structure and static values a call matched (``matching.CallPlan``), the platform,
the mesh variant and the jax config in effect, ``choose_artifact`` reads the package's
manifest (no blob, no jax) and says what serves the call: one artifact record, the structure's
concrete-size records (its code is not shape-polymorphic), or the reason there is none, in the
words a user can act on. Building the call is the next step (``executables.artifact_calls``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hatch_jaxexport.formats.manifest import ArtifactRecord, ConcreteRecord, variant_text
from hatch_jaxexport.formats.spec import static_key
from hatch_jaxexport.runtime.artifacts.package_artifacts import (
    PackageArtifacts,
    artifact_key,
    load_package_artifacts,
    record_key,
    stale_reason,
)
from hatch_jaxexport.runtime.call.matching import CallPlan, shown_structure
from hatch_jaxexport.runtime.jaxcompat import LOWERING_CONFIG

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord


class Choice:
    """What serves a (structure, static values, platform[, mesh]) call: an artifact
    ``record``, the structure's ``concrete`` records, or neither and the ``reason``.

    A slotted class, not a NamedTuple: in a module that postpones its annotations a NamedTuple
    compiles each field's annotation when it is created (0.15 ms of a first call for one of
    nine fields, where a slotted class costs 0.005 ms), and nothing uses it as a tuple.

    ``variant``: the x64 variant the artifact was chosen for (``""``: the function bakes one).
    """

    __slots__ = ("concrete", "package", "reason", "record", "variant")

    def __init__(self, package: PackageArtifacts | None, record: ArtifactRecord | None = None,
                 concrete: tuple[ConcreteRecord, ...] = (), variant: str = "",
                 reason: str = "") -> None:
        self.package, self.record, self.concrete = package, record, concrete
        self.variant, self.reason = variant, reason


def choose_artifact(fn: FunctionRecord, plan: CallPlan, platform: str, mesh: str,
                    config: dict[str, Any]) -> Choice:
    """What serves the call ``plan`` on ``platform`` (and ``mesh``) under ``config``."""
    package = load_package_artifacts(fn.package)
    if package is None:
        return Choice(None, reason=stale_reason(fn.package) or (
            f"package {fn.package!r} has no baked artifacts (not built with hatch-jaxexport, "
            "or imported from a source checkout)"))
    structure = fn.export_spec.structures[plan.structure_index]
    variant = variant_text({"jax_enable_x64": config["jax_enable_x64"]}
                           if fn.export_spec.x64_variants else None)
    record = package.records(fn.name).by_key.get(
        artifact_key(fn.name, structure.key, plan.static_key, platform, mesh, variant))
    if record is not None:
        mismatch = config_mismatch(record.jax_config, config)
        if mismatch:
            return Choice(package, reason=mismatch)
        return Choice(package, record, variant=variant)
    concrete = () if mesh else tuple(
        c for c in package.records(fn.name).manifest.concrete
        if c.structure_index == plan.structure_index and c.platform == platform
        and static_key(c.static) == plan.static_key and variant_text(c.variant) == variant)
    if concrete:
        return Choice(package, concrete=concrete, variant=variant)
    return Choice(package, variant=variant,
                  reason=_missing_reason(fn, package, plan, platform, mesh, variant))


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


def config_mismatch(recorded: dict[str, Any], current: dict[str, Any]) -> str:
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


__all__ = ["Choice", "choose_artifact", "config_mismatch"]
