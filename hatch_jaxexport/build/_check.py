"""The release check: do an installed distribution's artifacts match fresh exports of the source?

Build layer. The pytest plugin (``hatch_jaxexport.integrations.pytest_plugin``) is a thin
adapter over this module; nothing here imports pytest.

- :func:`find_bundle` reads the artifacts of the *installed distribution* that provides an import
  package (through ``importlib.metadata``), whatever ``import PACKAGE`` resolves to;
- :func:`plan_check` imports the source, lists its exportables and pairs every bundled artifact
  with the artifact the source would export now (by artifact id): one :class:`Case` each, plus
  cases for source artifacts missing from the wheel and bundled artifacts the source no longer
  produces;
- :func:`check_case` exports one case afresh, compares the spec, the ``Exported`` metadata and the
  location-free fingerprint (a unified diff of the module text on mismatch), then runs both on
  inputs of a few concrete shapes on the current platform and compares outputs (and gradients
  where ``vjp_order >= 1``) within dtype-aware tolerances.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import random
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.build._discover import discover
from hatch_jaxexport.build._exporter import ExportTask, tasks_for
from hatch_jaxexport.errors import ArtifactError, CheckError, ExportError
from hatch_jaxexport.formats._options import DEFAULT_CHECK_SHAPES, DEFAULT_PLATFORMS
from hatch_jaxexport.formats.manifest import (
    ARTIFACT_DIR,
    MANIFEST_NAME,
    ArtifactRecord,
    Manifest,
    SkippedRecord,
    artifact_id,
    member_name,
    parse_manifest,
    sha256_hex,
)
from hatch_jaxexport.formats.spec import (
    X64_DTYPES,
    check_constraint,
    constraint_symbols,
    dim_symbols,
    evaluate_dim,
)
from hatch_jaxexport.runtime._jaxcompat import x64_context
from hatch_jaxexport.runtime.decorator import ExportableFunction

#: How many concrete shapes each artifact runs on by default.
#: At most this many lines of a module-text diff are shown.
DIFF_LINES = 40

REBUILD_HINT = ("rebuild the wheel from this source and install it again (e.g. `python -m build "
                "--wheel` then `pip install --force-reinstall dist/*.whl`), then rerun the check")

JAX_HINT = ("check with the jax that built the wheel, or build the wheel with the oldest jax "
            "you support: a jax.export artifact runs on a jax up to about 6 months newer, and "
            "only about 3 weeks older, than the jax that exported it")

MATCH, STALE, MISSING, ORPHAN, SKIPPED = "match", "stale", "missing", "orphan", "skipped"
UNUSABLE = "unusable"


# --------------------------------------------------------------------------------------------
# The installed distribution's artifacts


@dataclasses.dataclass(frozen=True)
class Bundle:
    """The artifacts an installed distribution carries for one import package."""

    package: str
    distribution: str
    version: str
    folder: Path  # <site-packages>/<package>/_jaxexport
    manifest: Manifest

    def read_blob(self, record: ArtifactRecord) -> bytes:
        """A blob's bytes, checked against the manifest's size and SHA-256."""
        path = self.folder / record.file
        try:
            data = path.read_bytes()
        except OSError as err:
            raise CheckError(f"cannot read artifact {path}: {err}") from None
        if len(data) != record.size or sha256_hex(data) != record.sha256:
            raise CheckError(f"artifact {path} does not match the manifest's SHA-256 (damaged or "
                             "modified after the build)")
        return data

    def describe(self) -> str:
        m = self.manifest
        return (f"wheel {self.distribution} {self.version} installed at {self.folder.parent.parent}"
                f": {len(m.artifacts)} artifact(s) built by {m.generator} with jax "
                f"{m.jax_version} (jaxlib {m.jaxlib_version})")


def _editable_origin(dist: Any) -> str | None:
    try:
        raw = dist.read_text("direct_url.json")
        info = json.loads(raw) if raw else {}
    except (OSError, ValueError):
        return None
    if isinstance(info, dict) and (info.get("dir_info") or {}).get("editable"):
        return str(info.get("url", "a source tree"))
    return None


def _import_location(package: str) -> str:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return f"`import {package}` finds nothing either"
    where = spec.origin if spec.origin not in (None, "namespace") else \
        ", ".join(spec.submodule_search_locations or ())
    if spec.origin and spec.submodule_search_locations:
        where = str(Path(spec.origin).parent)
    has = any((Path(p) / ARTIFACT_DIR / MANIFEST_NAME).is_file()
              for p in (spec.submodule_search_locations or ()))
    return f"`import {package}` resolves to {where}" + (
        " (a source tree holding artifacts of its own, from an editable install or a manual "
        "export; the check reads those of the installed wheel)" if has
        else " (a source tree without artifacts)")


def find_bundle(package: str) -> Bundle:
    """The artifacts of the installed distribution providing ``package``; ``CheckError`` if none.

    Read through ``importlib.metadata`` (the distribution's RECORD), never through the import
    system: run from a repository, ``import package`` finds the source checkout, but the bundled
    artifacts are those of the wheel installed in this environment.
    """
    from importlib import metadata

    names = list(dict.fromkeys(metadata.packages_distributions().get(package, [])))
    found: list[tuple[Any, Any]] = []
    without: list[str] = []
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # pragma: no cover - raced with an uninstall
            continue
        manifest = next((f for f in dist.files or ()
                         if tuple(f.parts) == (package, ARTIFACT_DIR, MANIFEST_NAME)), None)
        if manifest is None:
            editable = _editable_origin(dist)
            why = f"installed editable from {editable}" if editable else \
                "built without the hatch-jaxexport build hook, or without exportables"
            without.append(f"{dist.metadata['Name']} {dist.version} ({why})")
        else:
            found.append((dist, manifest))
    if not found:
        where = _import_location(package)
        if without:
            raise CheckError(
                f"the installed distribution providing {package!r} carries no "
                f"{package}/{ARTIFACT_DIR}/{MANIFEST_NAME}: {'; '.join(without)}; {where}. "
                f"Install the built wheel into this environment (an editable install carries "
                f"no artifacts), then rerun the check")
        raise CheckError(
            f"no installed distribution provides the import package {package!r} "
            f"(importlib.metadata knows none); {where}. The check compares the wheel installed "
            f"in this environment with the source: build the wheel and install it here "
            f"(`python -m build --wheel`, `pip install dist/*.whl`), then rerun the check")
    dist, manifest_file = found[0]
    path = Path(dist.locate_file(manifest_file))
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckError(f"cannot read {path}: {err}") from None
    try:
        manifest = parse_manifest(data, where=str(path))
    except Exception as err:
        raise CheckError(str(err)) from None
    return Bundle(package=package, distribution=str(dist.metadata["Name"]),
                  version=str(dist.version), folder=path.parent, manifest=manifest)


# --------------------------------------------------------------------------------------------
# The source


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """Where the source being checked was imported from."""

    package: str
    path: Path | None  # the package's folder (or module file)
    installed_copy: bool  # the same files as the installed distribution's
    has_artifacts: bool  # a _jaxexport/manifest.json sits beside the source

    def describe(self) -> str:
        if self.path is None:
            return f"source: {self.package} (location unknown)"
        if self.installed_copy:
            return f"source: {self.path} (the installed copy)"
        note = "" if self.has_artifacts else " without artifacts"
        return f"source: {self.path} (a source tree{note}, not the installed copy)"


def source_info(package: str, bundle: Bundle) -> SourceInfo:
    module = sys.modules.get(package) or importlib.import_module(package)
    paths = list(getattr(module, "__path__", []) or [])
    if not paths and getattr(module, "__file__", None):
        paths = [module.__file__]
    if not paths:
        return SourceInfo(package, None, False, False)
    path = Path(paths[0])
    installed = bundle.folder.parent
    same = os.path.realpath(path) == os.path.realpath(installed)
    has = (path / ARTIFACT_DIR / MANIFEST_NAME).is_file() if path.is_dir() else False
    return SourceInfo(package, path, same, has)


# --------------------------------------------------------------------------------------------
# Cases: bundled artifacts paired with what the source exports now


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
                       record.kind, record.batched, record.mesh)


def infer_default_platforms(manifest: Manifest, functions: Mapping[str, ExportableFunction]
                            ) -> tuple[str, ...]:
    """The build's default platforms, as seen in artifacts of functions that name none."""
    seen = [r.platform for r in (*manifest.artifacts, *manifest.skipped)
            if r.function in functions and functions[r.function].export_spec.platforms is None]
    return tuple(sorted(set(seen))) or DEFAULT_PLATFORMS


def plan_check(package: str, *, platforms: Sequence[str] | None = None) -> Plan:
    """Pair the installed wheel's artifacts of ``package`` with a fresh look at its source.

    ``platforms`` are the build's default platforms (for functions that name none); by default
    they are inferred from the wheel. Raises ``CheckError`` with a readable message when the
    check cannot start.
    """
    bundle = find_bundle(package)
    try:
        found = discover(package)
    except ExportError as err:
        raise CheckError(f"cannot import the source of {package!r}: {err}") from None
    functions = {fn.name: fn for fn in found}
    source = source_info(package, bundle)
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


# --------------------------------------------------------------------------------------------
# Outcomes


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The verdict on one case: ``match``, ``stale``, ``unusable``, ``missing``, ``orphan`` or
    ``skipped``."""

    status: str
    message: str = ""
    notes: tuple[str, ...] = ()
    ran: bool = False  # numerics ran on this platform

    @property
    def ok(self) -> bool:
        return self.status in (MATCH, SKIPPED)


def _where(fn: ExportableFunction) -> str:
    try:
        path = inspect.getsourcefile(fn.__wrapped__)
        line = inspect.getsourcelines(fn.__wrapped__)[1]
    except (TypeError, OSError):
        return ""
    return f" ({path}:{line})" if path else ""


def _other_jax(plan: Plan) -> bool:
    import jax

    return plan.bundle.manifest.jax_version != jax.__version__


def _versions(plan: Plan, status: str = STALE) -> str:
    import jax

    built = plan.bundle.manifest.jax_version
    if built == jax.__version__:
        return f"built and checked with jax {built}"
    text = f"built with jax {built}, checked with jax {jax.__version__}"
    if status == STALE:
        text += (": part of the difference may come from jax itself; check with the jax the "
                 "wheel was built with")
    return text


def _failure(plan: Plan, case: Case, status: str, headline: str, details: Sequence[str],
             notes: Sequence[str] = (), ran: bool = False, fix: str = REBUILD_HINT) -> Outcome:
    lines = [f"{case.id}: {headline}", *(f"  {d}" for d in details)]
    if status in (STALE, UNUSABLE):
        lines.append(f"  {_versions(plan, status)}")
    lines.append(f"  wheel: {plan.bundle.distribution} {plan.bundle.version}; "
                 f"{plan.source.describe()}")
    lines.append(f"To fix: {fix}.")
    return Outcome(status, "\n".join(lines), tuple(notes), ran)


def _describe_static(static: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(static.items())) or "none"


def _orphan_reason(plan: Plan, case: Case) -> str:
    owner = case.record or case.skipped
    assert owner is not None
    fn = plan.functions.get(owner.function)
    if fn is None:
        return (f"function {owner.function} is not @exportable in the source (removed, renamed "
                "or undecorated since the wheel was built)")
    spec = fn.export_spec
    if owner.structure_index >= len(spec.structures):
        return (f"{owner.function}{_where(fn)} has {len(spec.structures)} structure(s) now; "
                f"structure {owner.structure_index} ({owner.structure}) is gone from its spec")
    if owner.static not in spec.static_combinations():
        return (f"{owner.function}{_where(fn)} no longer lists the static values "
                f"{_describe_static(owner.static)} (now: "
                f"{'; '.join(_describe_static(s) for s in spec.static_combinations())})")
    platforms = spec.platforms or plan.default_platforms
    if owner.platform not in platforms:
        return (f"{owner.function}{_where(fn)} is no longer exported for {owner.platform} "
                f"(now: {', '.join(platforms)})")
    from hatch_jaxexport.formats._mesh import describe_mesh
    from hatch_jaxexport.formats.manifest import mesh_from_record

    variant = mesh_from_record(owner.mesh)
    if variant not in (spec.mesh or (None,)):
        now = "; ".join(describe_mesh(v) for v in spec.mesh or (None,))
        return (f"{owner.function}{_where(fn)} no longer declares {describe_mesh(variant)} "
                f"(now: {now})")
    return (f"{owner.function}{_where(fn)} no longer asks for the "
            f"{member_name(owner.kind, owner.batched)} artifact (ad_order={spec.ad_order}, "
            f"vmap={spec.vmap})")


def _missing_reason(plan: Plan, case: Case) -> str:
    fn = plan.functions[case.function]
    others = [r for r in plan.bundle.manifest.artifacts if r.function == case.function]
    if not others:
        return (f"function {case.function}{_where(fn)} is @exportable in the source but the "
                "wheel has no artifact for it (decorated, added or renamed since the wheel was "
                "built)")
    return (f"{case.function}{_where(fn)} asks for this artifact (a structure, static value, "
            "platform or transformation added to its spec since the wheel was built), but the "
            "wheel does not carry it")


def check_case(plan: Plan, case: Case, *, shapes: int = DEFAULT_CHECK_SHAPES) -> Outcome:
    """Check one case; see the module docstring."""
    if case.record is None and case.skipped is not None and case.task is not None:
        return Outcome(SKIPPED, f"the export failed at build time and was skipped: "
                                f"{case.skipped.reason}")
    if case.task is None:
        return _failure(plan, case, ORPHAN, "the wheel carries an artifact the source no longer "
                        "produces", [_orphan_reason(plan, case)])
    if case.record is None:
        return _failure(plan, case, MISSING, "missing from the wheel",
                        [_missing_reason(plan, case)])
    return _compare(plan, case, case.record, case.task, shapes)


# --------------------------------------------------------------------------------------------
# Comparing one bundled artifact with a fresh export


def _x64(avals: Sequence[Any]) -> bool:
    return any(str(a.dtype) in X64_DTYPES for a in avals)


def spec_differences(record: ArtifactRecord, fn: ExportableFunction, task: ExportTask
                     ) -> list[tuple[str, Any, Any]]:
    """``(field, bundled, source)`` for each spec field of the manifest record that changed."""
    spec = fn.export_spec
    structure = spec.structures[task.structure_index]
    vjp_order = spec.vjp_order if (task.kind, task.batched) == ("primal", False) else 0
    fields = [
        ("structure", record.structure, structure.key),
        ("constraints", list(record.constraints), list(structure.constraints)),
        ("static values", record.static, task.static),
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
    from hatch_jaxexport.build._exporter import metadata

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


def _compare(plan: Plan, case: Case, record: ArtifactRecord, task: ExportTask,
             shapes: int) -> Outcome:
    from hatch_jaxexport.build._exporter import export_exported, fingerprint, module_text
    from hatch_jaxexport.runtime._artifacts import deserialize_checked
    from hatch_jaxexport.runtime._matching import export_platform

    fn = plan.functions[case.function]
    details: list[str] = []
    notes: list[str] = []
    for name, bundled, source in spec_differences(record, fn, task):
        details.append(f"spec changed, {name}: wheel {_show(bundled)} != source {_show(source)}")
    spec = fn.export_spec
    vjp_order = spec.vjp_order if (task.kind, task.batched) == ("primal", False) else 0
    structure = spec.structures[task.structure_index]
    try:
        blob = plan.bundle.read_blob(record)
        with x64_context(structure.uses_x64 or any(d in a for d in X64_DTYPES
                                                   for a in record.in_avals)):
            bundled = deserialize_checked(blob, record.pytree_types, plan.package)
    except (CheckError, ArtifactError) as err:
        return _failure(plan, case, UNUSABLE, "the wheel's artifact cannot be loaded",
                        [*details, str(err)], fix=JAX_HINT if isinstance(err, ArtifactError)
                        and _other_jax(plan) else REBUILD_HINT)
    try:
        fresh = export_exported(fn, task)
    except Exception as err:
        return _failure(plan, case, STALE, f"{case.function}{_where(fn)} no longer exports",
                        [*details, f"fresh export failed: {type(err).__name__}: {err}"])
    import jax

    other_jax = _other_jax(plan)
    try:
        text_b = module_text(bundled)
    except Exception as err:  # e.g. StableHLO from a newer jax: "Failed to deserialize"
        return _failure(plan, case, UNUSABLE, "this jax cannot read the wheel's artifact",
                        [*details, f"{type(err).__name__}: {_first_line(err)}"],
                        fix=JAX_HINT if other_jax else REBUILD_HINT)
    meta = metadata_differences(bundled, fresh)
    for name, a, b in meta:
        if other_jax and name == "calling_convention":
            notes.append(f"calling convention {a} (jax {plan.bundle.manifest.jax_version}) vs "
                         f"{b} (jax {jax.__version__})")
            continue
        details.append(f"{name} differs: wheel {_show(a)} != source {_show(b)}")
    if fingerprint(fresh, vjp_order) != record.fingerprint:
        text_f = module_text(fresh)
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
        elif not meta:
            notes.append("the manifest's fingerprint differs from the artifact's own (computed "
                         "by another hatch-jaxexport); module text and metadata are equal")
    ran = False
    comparable = not any(name in ("in_tree", "in_avals", "out_tree", "out_avals")
                         for name, _, _ in meta)
    current = export_platform()
    if record.platform != current:
        notes.append(f"numerics not run: built for {record.platform}, this process runs on "
                     f"{current}")
    elif not comparable:
        notes.append("numerics not run: the signatures differ")
    elif shapes < 1:
        notes.append("numerics not run: 0 shapes asked for")
    elif record.mesh and _mesh_unavailable(record.mesh):
        notes.append(_mesh_unavailable(record.mesh))
    else:
        from hatch_jaxexport.build._sharded_export import mesh_context

        constraints = list(dict.fromkeys([*record.constraints, *structure.constraints]))
        # outside any mesh: jax derives the VJP of an in-memory export under the current mesh
        shipped = _as_shipped(fresh, vjp_order, structure.uses_x64) if record.mesh else fresh
        with mesh_context(record.mesh):  # a sharded variant runs on a mesh of its shape
            problems, run_notes = compare_numerics(bundled, shipped, constraints,
                                                   vjp_order=vjp_order, shapes=shapes,
                                                   seed=case.id)
        ran = not run_notes
        notes += run_notes
        details += problems
    if details:
        return _failure(plan, case, STALE, f"stale: the wheel's artifact differs from a fresh "
                        f"export of {case.function}{_where(fn)}", details, notes, ran)
    return Outcome(MATCH, "", tuple(notes), ran)


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

    from hatch_jaxexport.formats._mesh import describe_mesh, mesh_size
    from hatch_jaxexport.formats.manifest import mesh_from_record

    shape = mesh_from_record(mesh)
    if jax.device_count() < mesh_size(shape):
        return (f"numerics not run: sharded for {describe_mesh(shape)} ({mesh_size(shape)} "
                f"devices), this process has {jax.device_count()} (on CPU, set XLA_FLAGS="
                f"--xla_force_host_platform_device_count={mesh_size(shape)})")
    return ""


# --------------------------------------------------------------------------------------------
# Concrete shapes satisfying a structure's constraints


def _lone_symbol(side: str) -> str | None:
    side = side.strip()
    return side if side.isidentifier() else None


def solve_shapes(dims: Sequence[str], constraints: Sequence[str], count: int = DEFAULT_CHECK_SHAPES,
                 *, max_steps: int = 20000) -> list[dict[str, int]]:
    """Up to ``count`` distinct symbol assignments making every dim >= 1 and every constraint hold.

    ``dims`` and ``constraints`` are canonical texts (``"2*n"``, ``"a >= 2"``). Equality
    constraints with a lone symbol on one side are solved directly; the other symbols are
    searched with backtracking, preferring small, distinct values (a different preference per
    assignment). Returns ``[{}]`` when there are no symbols, ``[]`` when nothing satisfies them.
    """
    symbols = sorted(set().union(*(dim_symbols(d) for d in dims),
                                 *(constraint_symbols(c) for c in constraints)))
    if not symbols:
        return [{}]
    dims = list(dict.fromkeys(dims))

    def consistent(env: dict[str, int]) -> bool:
        for dim in dims:
            if dim_symbols(dim) <= env.keys() and evaluate_dim(dim, env) < 1:
                return False
        for constraint in constraints:
            if constraint_symbols(constraint) <= env.keys():
                try:
                    if not check_constraint(constraint, env):
                        return False
                except ZeroDivisionError:
                    return False
        return True

    equalities = []
    for constraint in constraints:
        if " == " in constraint:
            left, right = constraint.split(" == ", 1)
            for lone, other in ((left, right), (right, left)):
                if _lone_symbol(lone):
                    equalities.append((lone.strip(), other))

    results: list[dict[str, int]] = []
    for attempt in range(count * 3):
        rng = random.Random(f"jaxexport-shapes-{attempt}")
        preferences = {s: [*rng.sample(range(2, 10), 8), 1, *range(10, 65)] for s in symbols}
        steps = [0]

        def search(env: dict[str, int], preferences: dict[str, list[int]] = preferences,
                   steps: list[int] = steps) -> dict[str, int] | None:
            steps[0] += 1
            if steps[0] > max_steps:
                return None
            if len(env) == len(symbols):
                return dict(env)
            for lone, other in equalities:
                if lone not in env and constraint_symbols(other) <= env.keys():
                    try:
                        value = evaluate_dim(other, env)
                    except ZeroDivisionError:
                        return None
                    env[lone] = value
                    found = search(env) if consistent(env) else None
                    del env[lone]
                    return found
            symbol = next(s for s in symbols if s not in env)
            for value in preferences[symbol]:
                env[symbol] = value
                found = search(env) if consistent(env) else None
                del env[symbol]
                if found is not None:
                    return found
            return None

        found = search({})
        if found is not None and found not in results:
            results.append(found)
        if len(results) == count:
            break
    return results


# --------------------------------------------------------------------------------------------
# Numerics


def tolerance(dtype: Any) -> tuple[float, float] | None:
    """``(rtol, atol)`` for an inexact dtype by its precision; ``None``: compare exactly."""
    import jax.numpy as jnp

    if not jnp.issubdtype(dtype, jnp.inexact):
        return None
    bits = jnp.finfo(dtype).bits
    if bits <= 8:
        return 0.25, 0.25
    if bits <= 16:
        return 2e-2, 2e-2
    if bits <= 32:
        return 1e-4, 1e-5
    return 1e-10, 1e-12


def make_inputs(avals: Sequence[Any], env: Mapping[str, int], seed: int) -> list[Any]:
    """Arrays for ``avals`` with the symbols bound by ``env``: normal floats, small ints."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for aval in avals:
        shape = tuple(d if isinstance(d, int) else evaluate_dim(str(d), env)
                      for d in aval.shape)
        dtype = aval.dtype
        if jnp.issubdtype(dtype, jnp.complexfloating):
            value = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        elif jnp.issubdtype(dtype, jnp.floating):
            value = rng.standard_normal(shape)
        elif jnp.issubdtype(dtype, jnp.bool_):
            value = rng.random(shape) < 0.5
        elif jnp.issubdtype(dtype, jnp.unsignedinteger):
            value = rng.integers(0, 5, shape)
        else:
            value = rng.integers(-3, 5, shape)
        out.append(np.asarray(value).astype(dtype))
    return out


def _call(exported: Any) -> Any:
    import jax

    def call(*flat: Any) -> list[Any]:
        args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, flat)
        return jax.tree_util.tree_leaves(exported.call(*args, **kwargs))
    return jax.jit(call)


def _pullback(exported: Any, flat: Sequence[Any], cotangent_seed: int) -> list[Any]:
    """``J^T c`` of the differentiable outputs w.r.t. the differentiable inputs (random ``c``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    din = [i for i, a in enumerate(exported.in_avals) if jnp.issubdtype(a.dtype, jnp.inexact)]
    dout = [j for j, a in enumerate(exported.out_avals) if jnp.issubdtype(a.dtype, jnp.inexact)]
    if not din or not dout:
        return []
    call = _call(exported)

    def restricted(*xd: Any) -> tuple[Any, ...]:
        full = list(flat)
        for i, value in zip(din, xd, strict=True):
            full[i] = value
        outs = call(*full)
        return tuple(outs[j] for j in dout)

    outs, pull = jax.vjp(restricted, *(flat[i] for i in din))
    rng = np.random.default_rng(cotangent_seed)
    cot = tuple(np.asarray(rng.standard_normal(np.shape(o))).astype(o.dtype) for o in outs)
    return list(pull(cot))


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def compare_arrays(label: str, bundled: Any, fresh: Any) -> str | None:
    """A one-line problem if two arrays differ beyond the dtype's tolerance, else ``None``."""
    import numpy as np

    a, b = np.asarray(bundled), np.asarray(fresh)
    if a.shape != b.shape or a.dtype != b.dtype:
        return (f"{label}: wheel gives {a.dtype}{list(a.shape)}, source gives "
                f"{b.dtype}{list(b.shape)}")
    tol = tolerance(a.dtype)
    if tol is None:
        if np.array_equal(a, b):
            return None
        bad = np.argwhere(a != b)
        return (f"{label}: {len(bad)} of {a.size} values differ (exact dtype {a.dtype}); "
                f"first at {tuple(int(i) for i in bad[0])}: wheel {a[tuple(bad[0])]!r}, "
                f"source {b[tuple(bad[0])]!r}")
    rtol, atol = tol
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    a64, b64 = a.astype(wide), b.astype(wide)
    if np.allclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True):
        return None
    err = np.abs(a64 - b64)
    err = np.where(np.isnan(err), np.inf, err)
    where = np.unravel_index(int(np.argmax(err)), err.shape) if err.shape else ()
    index = tuple(int(i) for i in where)
    return (f"{label}: max abs difference {float(err[where]):.3g} at {index or '()'} "
            f"(wheel {a64[where]:.6g}, source {b64[where]:.6g}; {a.dtype} tolerance rtol={rtol}, "
            f"atol={atol})")


def compare_numerics(bundled: Any, fresh: Any, constraints: Sequence[str], *, vjp_order: int,
                     shapes: int = DEFAULT_CHECK_SHAPES, seed: str = ""
                     ) -> tuple[list[str], list[str]]:
    """Run both exports on inputs of a few concrete shapes; ``(problems, notes)``.

    Outputs are compared within :func:`tolerance`; with ``vjp_order >= 1`` also the pullback of
    a random cotangent. ``notes`` says why nothing ran (no shapes satisfy the constraints).
    """
    import jax

    dims = [str(d) for a in bundled.in_avals for d in a.shape if not isinstance(d, int)]
    envs = solve_shapes(dims, constraints, shapes)
    if not envs:
        return [], [f"numerics not run: found no symbol values satisfying the constraints "
                    f"{', '.join(constraints) or '(none)'}"]
    out_paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(bundled.out_tree, list(range(len(bundled.out_avals)))))[0]]
    problems: list[str] = []
    with x64_context(_x64(bundled.in_avals) or _x64(bundled.out_avals)):
        call_bundled, call_fresh = _call(bundled), _call(fresh)
        for env in envs:
            where = ", ".join(f"{k}={v}" for k, v in env.items()) or "static shapes"
            flat = make_inputs(bundled.in_avals, env, _seed(f"{seed}/{where}"))
            try:
                outs_b = call_bundled(*flat)
            except Exception as err:
                problems.append(f"with {where}: the wheel's artifact fails: "
                                f"{type(err).__name__}: {_first_line(err)}")
                continue
            try:
                outs_f = call_fresh(*flat)
            except Exception as err:
                problems.append(f"with {where}: the fresh export fails: "
                                f"{type(err).__name__}: {_first_line(err)}")
                continue
            for i, (a, b) in enumerate(zip(outs_b, outs_f, strict=True)):
                label = f"output {out_paths[i] if i < len(out_paths) else i}".rstrip()
                problem = compare_arrays(f"with {where}, {label}", a, b)
                if problem:
                    problems.append(problem)
            if vjp_order >= 1:
                try:
                    grads_b = _pullback(bundled, flat, _seed(f"{seed}/{where}/cot"))
                    grads_f = _pullback(fresh, flat, _seed(f"{seed}/{where}/cot"))
                except Exception as err:
                    problems.append(f"with {where}: the gradient fails: "
                                    f"{type(err).__name__}: {_first_line(err)}")
                    continue
                for i, (a, b) in enumerate(zip(grads_b, grads_f, strict=True)):
                    problem = compare_arrays(f"with {where}, gradient {i}", a, b)
                    if problem:
                        problems.append(problem)
    return problems, []


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else ""


__all__ = [
    "Bundle",
    "Case",
    "CheckError",
    "Outcome",
    "Plan",
    "check_case",
    "compare_arrays",
    "compare_numerics",
    "find_bundle",
    "make_inputs",
    "metadata_differences",
    "module_diff",
    "plan_check",
    "solve_shapes",
    "spec_differences",
    "tolerance",
]
