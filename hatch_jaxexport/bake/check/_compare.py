"""The structural comparison of one case: the wheel's artifact against a fresh export.

:func:`check_case` decides a case: skipped, orphan and missing cases from the plan alone; a case
with both sides is exported afresh and compared step by step: the spec recorded in the manifest
(:func:`spec_differences`), the ``Exported`` metadata (:func:`metadata_differences`), the
location-free fingerprint (a unified diff of the module text on mismatch, :func:`module_diff`),
then, where this process can run them, the numerics (:mod:`._numerics`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hatch_jaxexport.bake.check._bundle import source_location
from hatch_jaxexport.bake.check._numerics import compare_numerics
from hatch_jaxexport.bake.check._outcome import (
    CONCRETE,
    JAX_HINT,
    MATCH,
    MISSING,
    ORPHAN,
    REBUILD_HINT,
    SKIPPED,
    STALE,
    UNUSABLE,
    Outcome,
    failure,
    first_line,
)
from hatch_jaxexport.bake.check._plan import (
    Case,
    ConcreteSource,
    Plan,
    concrete_orphan_reason,
    missing_reason,
    orphan_reason,
)
from hatch_jaxexport.bake.export.exporter import (
    ExportTask,
    export_exported,
    fingerprint,
    metadata,
    module_text,
)
from hatch_jaxexport.errors import ArtifactError, CheckError
from hatch_jaxexport.formats.manifest import ArtifactRecord, ConcreteRecord, member_name
from hatch_jaxexport.formats.manifest_reader import mesh_from_record
from hatch_jaxexport.formats.mesh import describe_mesh, mesh_size
from hatch_jaxexport.formats.options import DEFAULT_CHECK_SHAPES
from hatch_jaxexport.formats.spec import X64_DTYPES, Structure
from hatch_jaxexport.formats.statics import encode_static
from hatch_jaxexport.runtime.call.decorator import ExportableFunction
from hatch_jaxexport.runtime.jaxcompat import x64_context

# Imported in functions: the concrete-size exports, sharded meshes and the runtime's readers, only
# for the cases whose artifacts need them.

#: At most this many lines of a module-text diff are shown.
DIFF_LINES = 40


def check_case(plan: Plan, case: Case, *, shapes: int = DEFAULT_CHECK_SHAPES) -> Outcome:
    """The outcome of one case of the plan; see the module docstring."""
    if case.is_concrete:
        return compare_concrete(plan, case, shapes)
    if case.record is None and case.skipped is not None and case.task is not None:
        if case.served_sizes:
            return _served_at_concrete_sizes(plan, case)
        return Outcome(SKIPPED, f"the export failed at build time and was skipped: "
                                f"{case.skipped.reason}")
    if case.task is None:
        return failure(plan, case, ORPHAN, "the wheel carries an artifact the source no longer "
                        "produces", [orphan_reason(plan, case)])
    if case.record is None:
        return failure(plan, case, MISSING, "missing from the wheel",
                        [missing_reason(plan, case)])
    return compare_with_fresh_export(plan, case, case.record, case.task, shapes)


def _served_at_concrete_sizes(plan: Plan, case: Case) -> Outcome:
    """A structure the wheel serves only at concrete sizes: ``concrete`` while its symbolic
    export still fails (each size is compared as a case of its own), ``missing`` once the
    source exports it symbolically (a rebuilt wheel would serve every size from it)."""
    assert case.task is not None
    fn = plan.functions[case.function]
    try:
        export_exported(fn, case.task)
    except Exception as err:
        return Outcome(CONCRETE, f"served at {case.served_sizes} concrete size(s); its symbolic "
                                 f"export fails now as at build time: {type(err).__name__}: "
                                 f"{first_line(err)}")
    return failure(plan, case, MISSING, "the source exports this structure symbolically now",
                   [f"{case.function}{source_location(fn)} exports structure "
                    f"{case.task.structure_index} for every size now; the wheel serves it only "
                    f"at {case.served_sizes} concrete size(s) (its symbolic export failed at "
                    "build time)"])


# --------------------------------------------------------------------------------------------
# The differences, field by field and line by line


def spec_differences(record: ArtifactRecord, fn: ExportableFunction, task: ExportTask
                     ) -> list[tuple[str, Any, Any]]:
    """``(field, bundled, source)`` for each spec field of the manifest record that changed."""
    spec = fn.export_spec
    structure = spec.structures[task.structure_index]
    vjp_order = spec.vjp_order if (task.kind, task.batched) == ("primal", False) else 0
    fields = [
        ("structure", record.structure, structure.key),
        ("constraints", list(record.constraints), list(structure.constraints)),
        ("static values", record.static, encode_static(task.static)),
        ("kind", member_name(record.kind, record.batched), member_name(task.kind, task.batched)),
        ("vjp order", record.vjp_order, vjp_order),
        ("export_with_kwargs", record.kwargs, spec.export_with_kwargs),
    ]
    return [(name, a, b) for name, a, b in fields if a != b]


#: ``Exported`` metadata fields, in the order they are reported.
META_FIELDS = ("in_tree", "in_avals", "out_tree", "out_avals", "platforms", "calling_convention",
               "nr_devices", "ordered_effects", "unordered_effects", "disabled_safety_checks",
               "in_shardings", "out_shardings")


def metadata_differences(bundled: Any, fresh: Any) -> list[tuple[str, Any, Any]]:
    """``(field, bundled, fresh)`` for each ``Exported`` metadata field that differs."""
    a, b = metadata(bundled), metadata(fresh)
    return [(key, a.get(key), b.get(key)) for key in (*META_FIELDS, *sorted(set(a) - set(
        META_FIELDS))) if a.get(key) != b.get(key)]


def module_diff(bundled_text: str, fresh_text: str, *, limit: int = DIFF_LINES,
                width: int = 200) -> list[str]:
    """A unified diff of two location-free module texts, trimmed to ``limit`` lines.

    A changed line longer than ``width`` is cut to a window around its first difference from
    the line it replaces, so the change stays visible in long attribute lists.
    """
    lines = list(difflib.unified_diff(bundled_text.splitlines(), fresh_text.splitlines(),
                                      "bundled (wheel)", "fresh export (source)", n=2,
                                      lineterm=""))
    more = len(lines) - limit
    lines = lines[:limit]
    pairs = _changed_pairs(lines)
    out = []
    for i, line in enumerate(lines):
        if len(line) > width:
            other = pairs.get(i)
            start = 0 if other is None else _first_difference(line[1:], other[1:])
            start = max(0, min(start - width // 3, len(line) - width))
            line = (line[0] + " ..." + line[start + 1:start + width] if start > 0
                    else line[:width]) + (" ..." if start + width < len(line) else "")
        out.append(line)
    return [*out, f"... ({more} more diff lines)"] if more > 0 else out


def _changed_pairs(lines: Sequence[str]) -> dict[int, str]:
    """For each removed/added line of a unified diff, the added/removed line it pairs with."""
    pairs: dict[int, str] = {}
    i = 0
    while i < len(lines):
        minus = []
        while i < len(lines) and lines[i].startswith("-") and not lines[i].startswith("---"):
            minus.append(i)
            i += 1
        plus = []
        while i < len(lines) and lines[i].startswith("+") and not lines[i].startswith("+++"):
            plus.append(i)
            i += 1
        for a, b in zip(minus, plus, strict=False):
            pairs[a], pairs[b] = lines[b], lines[a]
        if not minus and not plus:
            i += 1
    return pairs


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


_DIAGNOSTIC = re.compile(r'error_message = "(?:[^"\\]|\\.)*"')


def without_diagnostics(text: str) -> str:
    """Module text with jax's shape-assertion error messages blanked.

    Those messages are diagnostics, not semantics, and their wording (a documentation link)
    changes between jax versions: artifacts built by another jax are compared without them.
    """
    return _DIAGNOSTIC.sub('error_message = "..."', text)


def _show(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + " ..."


# --------------------------------------------------------------------------------------------
# One bundled artifact against a fresh export, step by step


def compare_with_fresh_export(plan: Plan, case: Case, record: ArtifactRecord, task: ExportTask,
                              shapes: int) -> Outcome:
    """Compare the wheel's artifact of one case with a fresh export of the source: spec,
    loading, metadata, module text, numerics; ``stale`` with every difference found."""
    fn = plan.functions[case.function]
    spec = fn.export_spec
    vjp_order = spec.vjp_order if (task.kind, task.batched) == ("primal", False) else 0
    structure = spec.structures[task.structure_index]
    details = [f"spec changed, {name}: wheel {_show(bundled)} != source {_show(source)}"
               for name, bundled, source in spec_differences(record, fn, task)]
    loaded = _load_bundled_and_export_fresh(plan, case, record, task, structure, details)
    if isinstance(loaded, Outcome):
        return loaded
    bundled, fresh, bundled_text = loaded
    meta = metadata_differences(bundled, fresh)
    meta_details, notes = _metadata_findings(plan, meta)
    text_details, text_notes = _module_text_findings(plan, record.fingerprint, bundled_text,
                                                     fresh, vjp_order, bool(meta))
    details += [*meta_details, *text_details]
    notes += text_notes
    why_not = _why_numerics_cannot_run(record.platform, record.mesh, meta, shapes)
    return _verdict(plan, case, why_not, lambda: _run_numerics(
        case, record, structure, vjp_order, bundled, fresh, shapes), details, notes)


def _verdict(plan: Plan, case: Case, why_not: str,
             numerics: Callable[[], tuple[list[str], list[str]]], details: list[str],
             notes: list[str]) -> Outcome:
    """The outcome of one comparison, whatever the artifact's kind: its numerics run unless
    ``why_not`` says why they cannot (``numerics()`` gives problems and notes), then
    ``stale`` naming the function and where it is if anything differs, else a match."""
    ran = False
    if why_not:
        notes.append(why_not)
    else:
        problems, run_notes = numerics()
        ran = not run_notes
        notes += run_notes
        details += problems
    if details:
        fn = plan.functions[case.function]
        return failure(plan, case, STALE, f"stale: the wheel's artifact differs from a fresh "
                       f"export of {case.function}{source_location(fn)}", details, notes, ran)
    return Outcome(MATCH, "", tuple(notes), ran)


def _load_bundled_and_export_fresh(plan: Plan, case: Case, record: ArtifactRecord,
                                   task: ExportTask, structure: Structure, details: Sequence[str]
                                   ) -> tuple[Any, Any, str] | Outcome:
    """``(bundled, fresh, bundled module text)``, or the outcome of a case that stops here: an
    artifact that cannot be read or loaded (``unusable``), or a source that no longer exports
    (``stale``)."""
    from hatch_jaxexport.runtime.artifacts.package_artifacts import deserialize_checked

    fn = plan.functions[case.function]
    try:
        blob = plan.bundle.read_blob(record)
        with x64_context(structure.uses_x64 or any(d in a for d in X64_DTYPES
                                                   for a in record.in_avals)):
            bundled = deserialize_checked(blob, record.pytree_types, plan.package)
    except (CheckError, ArtifactError) as err:
        return failure(plan, case, UNUSABLE, "the wheel's artifact cannot be loaded",
                       [*details, str(err)], fix=JAX_HINT if isinstance(err, ArtifactError)
                       and _other_jax(plan) else REBUILD_HINT)
    try:
        fresh = export_exported(fn, task)
    except Exception as err:
        return failure(plan, case, STALE, f"{case.function}{source_location(fn)} no longer "
                       "exports", [*details, f"fresh export failed: {type(err).__name__}: {err}"])
    try:
        bundled_text = module_text(bundled)
    except Exception as err:  # e.g. StableHLO from a newer jax: "Failed to deserialize"
        return failure(plan, case, UNUSABLE, "this jax cannot read the wheel's artifact",
                       [*details, f"{type(err).__name__}: {first_line(err)}"],
                       fix=JAX_HINT if _other_jax(plan) else REBUILD_HINT)
    return bundled, fresh, bundled_text


def _metadata_findings(plan: Plan, meta: Sequence[tuple[str, Any, Any]]
                       ) -> tuple[list[str], list[str]]:
    """``(details, notes)`` for the metadata fields that differ: a calling convention that
    differs because another jax built the artifact is a note, anything else a detail."""
    import jax

    other_jax = _other_jax(plan)
    details: list[str] = []
    notes: list[str] = []
    for name, a, b in meta:
        if other_jax and name == "calling_convention":
            notes.append(f"calling convention {a} (jax {plan.bundle.manifest.jax_version}) vs "
                         f"{b} (jax {jax.__version__})")
            continue
        details.append(f"{name} differs: wheel {_show(a)} != source {_show(b)}")
    return details, notes


def _module_text_findings(plan: Plan, expected: str, bundled_text: str, fresh: Any,
                          vjp_order: int, metadata_differ: bool) -> tuple[list[str], list[str]]:
    """``(details, notes)`` when the fresh export's fingerprint is not ``expected`` (the
    manifest's, or a concrete-size artifact's own): the module-text diff, or a note saying why
    there is none."""
    import jax

    details: list[str] = []
    notes: list[str] = []
    if fingerprint(fresh, vjp_order) == expected:
        return details, notes
    other_jax = _other_jax(plan)
    text_b, text_f = bundled_text, module_text(fresh)
    if other_jax:  # the messages' wording is jax's, not the source's
        text_b, text_f = without_diagnostics(text_b), without_diagnostics(text_f)
    diff = module_diff(text_b, text_f)
    if diff:
        details.append("module text differs (locations stripped"
                       + (", jax's diagnostic messages left out" if other_jax else "")
                       + "):")
        details += [f"  {line}" for line in diff]
    elif other_jax:
        notes.append(f"fingerprint differs only in jax's diagnostic messages (built with "
                     f"jax {plan.bundle.manifest.jax_version}, checked with jax "
                     f"{jax.__version__})")
    elif not metadata_differ:
        notes.append("the manifest's fingerprint differs from the artifact's own (computed "
                     "by another hatch-jaxexport); module text and metadata are equal")
    return details, notes


def _why_numerics_cannot_run(platform: str, mesh: Mapping[str, Any],
                             meta: Sequence[tuple[str, Any, Any]], shapes: int) -> str:
    """Why the numerics of an artifact for ``platform`` (on ``mesh``) cannot run in this
    process (``""`` if they can)."""
    from hatch_jaxexport.runtime.call.matching import export_platform

    comparable = not any(name in ("in_tree", "in_avals", "out_tree", "out_avals")
                         for name, _, _ in meta)
    current = export_platform()
    if platform != current:
        return f"numerics not run: built for {platform}, this process runs on {current}"
    if not comparable:
        return "numerics not run: the signatures differ"
    if shapes < 1:
        return "numerics not run: 0 shapes asked for"
    if mesh:
        return _mesh_unavailable(mesh)
    return ""


def _run_numerics(case: Case, record: ArtifactRecord, structure: Structure, vjp_order: int,
                  bundled: Any, fresh: Any, shapes: int) -> tuple[list[str], list[str]]:
    """Both exports run on a few concrete shapes (a sharded one on a mesh of its shape):
    ``(problems, notes)`` as :func:`compare_numerics` gives them."""
    from hatch_jaxexport.bake.export.sharded import mesh_context

    constraints = list(dict.fromkeys([*record.constraints, *structure.constraints]))
    # outside any mesh: jax derives the VJP of an in-memory export under the current mesh
    shipped = _as_shipped(fresh, vjp_order, structure.uses_x64) if record.mesh else fresh
    with mesh_context(record.mesh):  # a sharded variant runs on a mesh of its shape
        return compare_numerics(bundled, shipped, constraints, vjp_order=vjp_order,
                                shapes=shapes, seed=case.id)


def _other_jax(plan: Plan) -> bool:
    import jax

    return plan.bundle.manifest.jax_version != jax.__version__


def _as_shipped(exported: Any, vjp_order: int, x64: bool) -> Any:
    """A fresh export serialized (outside any mesh) and read back, as a wheel carries it: jax
    derives the VJP of an in-memory export when first asked, and a sharded one derived under
    ``jax.set_mesh`` fails to refine its symbolic shapes."""
    from jax import export

    with x64_context(x64):
        return export.deserialize(bytearray(exported.serialize(vjp_order=vjp_order)))


def _mesh_unavailable(mesh: Mapping[str, Any]) -> str:
    """Why a sharded artifact's numerics cannot run in this process ("" if they can)."""
    import jax

    shape = mesh_from_record(mesh)
    if jax.device_count() < mesh_size(shape):
        return (f"numerics not run: sharded for {describe_mesh(shape)} ({mesh_size(shape)} "
                f"devices), this process has {jax.device_count()} (on CPU, set XLA_FLAGS="
                f"--xla_force_host_platform_device_count={mesh_size(shape)})")
    return ""


# --------------------------------------------------------------------------------------------
# A concrete-size or recorded-call artifact against a fresh export at the same types


def fresh_concrete(fn: ExportableFunction, source: ConcreteSource) -> Any:
    """The ``Exported`` the build would bake now for ``source``: its structure bound to its
    sizes, or its recorded call (``bake.concrete.exports``, the build's own code)."""
    from hatch_jaxexport.bake.concrete.exports import call_exported, structure_exported

    if source.task is not None:
        return structure_exported(fn, source.task, source.sizes)[0]
    assert source.signature is not None
    return call_exported(fn, source.signature, source.platform)[0]


def _concrete_missing(plan: Plan, case: Case, source: ConcreteSource) -> Outcome:
    """A concrete-size artifact the source asks for and the wheel lacks: ``missing`` where the
    source exports it, ``skipped`` where that export fails (a build would leave it out too)."""
    fn = plan.functions[case.function]
    try:
        fresh_concrete(fn, source)
    except Exception as err:
        return Outcome(SKIPPED, f"not in the wheel, and its export fails (a build leaves it out "
                                f"too): {type(err).__name__}: {first_line(err)}")
    what = (f"the sizes {', '.join(f'{k}={v}' for k, v in sorted(source.sizes.items()))} of "
            f"structure {source.task.structure_index}" if source.task is not None
            else "a call recorded in its jaxexport-signatures.json")
    return failure(plan, case, MISSING, "missing from the wheel",
                   [f"{case.function}{source_location(fn)} asks for a concrete-size artifact "
                    f"({what}) that the wheel does not carry (named or recorded since the "
                    "wheel was built)"])


def _load_concrete(plan: Plan, case: Case, record: ConcreteRecord) -> Any:
    """The wheel's concrete-size artifact, deserialized; the ``unusable`` outcome if not."""
    from hatch_jaxexport.runtime.artifacts.package_artifacts import deserialize_checked

    x64 = bool(record.jax_config.get("jax_enable_x64")) or \
        any(d in str(dtype) for d in X64_DTYPES for _, dtype in record.inputs)
    try:
        blob = plan.bundle.read_blob(record)
        with x64_context(x64):
            return deserialize_checked(blob, [], plan.package)
    except (CheckError, ArtifactError) as err:
        return failure(plan, case, UNUSABLE, "the wheel's artifact cannot be loaded", [str(err)],
                       fix=JAX_HINT if isinstance(err, ArtifactError) and _other_jax(plan)
                       else REBUILD_HINT)


def compare_concrete(plan: Plan, case: Case, shapes: int) -> Outcome:
    """A concrete-size or recorded-call case: an orphan without a source, missing without a
    wheel's artifact, else the wheel's artifact against the build's export of the source now,
    compared as symbolic artifacts are (metadata, location-free fingerprint with a module
    diff, numerics at its one shape, the gradient where it carries its VJP)."""
    record, source = case.concrete, case.concrete_source
    if source is None:
        return failure(plan, case, ORPHAN, "the wheel carries a concrete-size artifact the "
                       "source no longer bakes", [concrete_orphan_reason(plan, case)])
    if record is None:
        return _concrete_missing(plan, case, source)
    fn = plan.functions[case.function]
    bundled = _load_concrete(plan, case, record)
    if isinstance(bundled, Outcome):
        return bundled
    try:
        fresh = fresh_concrete(fn, source)
    except Exception as err:
        return failure(plan, case, STALE, f"{case.function}{source_location(fn)} no longer "
                       "exports", [f"fresh export failed: {type(err).__name__}: {err}"])
    try:
        bundled_text = module_text(bundled)
    except Exception as err:  # e.g. StableHLO from a newer jax
        return failure(plan, case, UNUSABLE, "this jax cannot read the wheel's artifact",
                       [f"{type(err).__name__}: {first_line(err)}"],
                       fix=JAX_HINT if _other_jax(plan) else REBUILD_HINT)
    meta = metadata_differences(bundled, fresh)
    details, notes = _metadata_findings(plan, meta)
    text_details, text_notes = _module_text_findings(plan, fingerprint(bundled, 0), bundled_text,
                                                     fresh, 0, bool(meta))
    details += text_details
    notes += text_notes
    why_not = _why_numerics_cannot_run(record.platform, {}, meta, shapes)
    return _verdict(plan, case, why_not, lambda: compare_numerics(
        bundled, fresh, [], vjp_order=1 if bundled.has_vjp() else 0, shapes=shapes,
        seed=case.id), details, notes)


__all__ = ["DIFF_LINES", "META_FIELDS", "check_case", "compare_concrete",
           "compare_with_fresh_export", "fresh_concrete", "metadata_differences", "module_diff",
           "spec_differences", "without_diagnostics"]
