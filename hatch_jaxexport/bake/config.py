"""Build-integration options, shared by the Hatch hook and the setuptools command.

Both integrations read the same table (``[tool.hatch.build.targets.wheel.hooks.jaxexport]`` or
``[tool.jaxexport]``). Validation collects every problem, each with its full TOML path, and
raises them together as one ``ConfigError``. Also here: the jax requirement both add to the wheel's
metadata, merged into the project's own requirement on jax (``merge_requirement``) so that the
metadata names jax once.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from hatch_jaxexport.errors import ConfigError, ExportError, SpecError
from hatch_jaxexport.formats.cpu_targets import TARGET_ALIASES, TARGETS, canonical_target
from hatch_jaxexport.formats.options import DEFAULT_PLATFORMS, KNOWN_PLATFORMS, ON_ERROR_CHOICES
from hatch_jaxexport.formats.settings import TRACEBACK_ENV, traceback_wanted

# Imported in functions: the executable targets, only for a build that ships executables (checking
# the options of any other build loads no compiler code).

#: What an uncaught ``ExportError`` prints at the end of a build, under the reporter's list.
EXPORT_FAILED = (f"the export failed: every problem is listed above ({TRACEBACK_ENV}=1 shows "
                 f"the whole errors with their tracebacks)")

#: Hatchling's own keys of a build hook table: they reach the hook's config and are let through.
HATCHLING_HOOK_KEYS = frozenset({
    "dependencies", "require-runtime-dependencies", "require-runtime-features",
    "enable-by-default",
})
EDITABLE = ("in-place", "trace")
#: What ``jax-requirement = true`` adds: the exporting jax as the wheel's floor. Not the
#: default: the maintainer's own jax range stays theirs, and a jax that cannot read the
#: artifacts runs the source, as every call no artifact serves.
TIGHTENED_JAX_REQUIREMENT = "jax>={version}"

OPTION_NAMES = ("packages", "platforms", "jobs", "on-error", "jax-requirement", "editable",
                "executables", "executable-jaxlibs", "executables-from", "jax-releases",
                "tpu-targets", "companion-wheels")


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """Validated options of one build."""

    #: Top-level import names to export; ``None``: every package the wheel ships.
    packages: tuple[str, ...] | None = None
    #: Platforms for functions whose ``@exportable`` names none.
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS
    #: Parallel export worker processes.
    jobs: int = 1
    #: ``fail`` the build on any failed export, or ``skip`` it (recorded in the manifest).
    on_error: str = "fail"
    #: The runtime requirement added to the wheel (``{version}``: the exporting jax); ``None``
    #: (the default): none, the project's own jax requirement is the wheel's.
    jax_requirement: str | None = None
    #: Editable installs: ``in-place`` exports into the source tree, ``trace`` exports nothing.
    editable: str = "in-place"
    #: Targets of precompiled executables to ship (``formats.cpu_targets.TARGETS``); none by
    #: default. ``true`` in the table: the targets of the builder's machine. The TPU targets of
    #: ``tpu-targets`` follow, by their keys (``tpu:v5e:1x1``, ``formats.tpu_targets``): they
    #: compile on this builder too, without a TPU.
    executables: tuple[str, ...] = ()
    #: Other jax/jaxlib versions to compile the executables with too (each in an environment of
    #: its own), so users of any of them skip the compile.
    executable_jaxlibs: tuple[str, ...] = ()
    #: Glob patterns of wheels other builders built of the same source (relative to the
    #: project root, where the build runs): their executables are added to this build's.
    executables_from: tuple[str, ...] = ()
    #: Other jax releases to export with too (each in an environment of its own), whose
    #: artifacts the wheel carries as sets beside the build's own jax's
    #: (``bake.workers.jax_sets``): users of a jax the build's own set does not serve are served.
    jax_releases: tuple[str, ...] = ()
    #: Which executables go into companion wheels of their own (``formats.companion_wheels``:
    #: ``none``, ``accelerators``, ``all``), installed through the package's extras; ``none``
    #: by default: the build's output stays one wheel (``pip wheel`` keeps only that).
    companion_wheels: str = "none"

    def requirement_for(self, jax_version: str) -> str | None:
        """The requirement to add to the wheel's metadata, for artifacts made by ``jax_version``."""
        if self.jax_requirement is None:
            return None
        return self.jax_requirement.replace("{version}", jax_version)


def brief_uncaught_build_errors() -> None:
    """From now on, print a build error that nobody catches without the backend's traceback.

    A build backend runs the hooks in a process of its own (pyproject_hooks for pip and build,
    uv's runner, ``hatchling build`` for hatch), and an exception that escapes it reaches
    ``sys.excepthook``, whose default prints some twenty lines of the backend's frames above the
    message. The integrations call this just before they raise a ``ConfigError`` or
    ``SpecError`` (printed as its message alone) or an ``ExportError`` (whose problems the
    reporter has just listed: one line that points at them, so the list shows once). The error
    keeps its type for any caller that catches it (a build run in process, a test), and only
    the last-resort report changes. Other exceptions go to the previous hook, untouched, and so
    does everything when ``HATCH_JAXEXPORT_TRACEBACK=1`` asks for tracebacks.
    """
    import sys

    previous = sys.excepthook
    if getattr(previous, "jaxexport_brief", False):
        return

    def report(kind: type[BaseException], value: BaseException, traceback: Any) -> None:
        if traceback_wanted():
            previous(kind, value, traceback)
        elif isinstance(value, ConfigError | SpecError):
            print(f"error: {value}", file=sys.stderr, flush=True)
        elif isinstance(value, ExportError):
            print(f"error: {EXPORT_FAILED}", file=sys.stderr, flush=True)
        else:
            previous(kind, value, traceback)

    report.jaxexport_brief = True  # type: ignore[attr-defined]
    sys.excepthook = report


def merge_requirement(dependencies: Sequence[str], requirement: str
                      ) -> tuple[list[str], str | None]:
    """``dependencies`` with ``requirement`` merged into the project's own requirement(s) on the
    same distribution, and what is left to add (``None`` when merged).

    The wheel's metadata then names jax once, as the stricter of both: the specifiers combined,
    redundant bounds dropped (``jax[cpu]>=0.5`` and ``jax>=0.10.2`` give ``jax[cpu]>=0.10.2``),
    the project's extras and marker kept. A project requirement with a marker is tightened under
    its marker: where the project needs jax, it needs the exporting version. Nothing merges, and
    ``requirement`` is returned to be added as it is, when the project has no requirement on
    that distribution, when its requirement is a direct reference (``jax @ URL``), or when
    ``requirement`` has a marker of its own. Unparsable entries are left alone.
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        added = Requirement(requirement)
    except InvalidRequirement as err:
        raise ValueError(f"merge_requirement: expected a requirement such as 'jax>=0.10.2', "
                         f"got {requirement!r} ({err})") from None
    name = canonicalize_name(added.name)
    merged_any = False
    result = []
    for entry in dependencies:
        try:
            own = Requirement(entry)
        except InvalidRequirement:
            result.append(entry)
            continue
        if canonicalize_name(own.name) != name or own.url or added.marker is not None:
            result.append(entry)
            continue
        merged_any = True
        if not _admits_a_version(own.specifier & added.specifier):
            result.append(entry)  # kept as the project wrote it (``requirement_conflicts``)
            continue
        own.extras |= added.extras
        own.specifier = _strictest(own.specifier & added.specifier)
        result.append(str(own))
    return result, None if merged_any else requirement


def requirement_name(requirement: str) -> str:
    """The canonical project name of a requirement line (``"Jax[cpu]>=0.5"``: ``jax``), as
    ``merge_requirement`` compares them; an unparsable line is its own name."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        return str(canonicalize_name(Requirement(requirement).name))
    except InvalidRequirement:
        return requirement


def requirement_conflicts(dependencies: Sequence[str], requirement: str) -> list[str]:
    """The build's warnings for the project's requirements on jax that ``requirement`` (the
    exporting jax's) cannot tighten: merged, they would admit no version, and a wheel whose
    metadata admits none installs nowhere. ``merge_requirement`` keeps each as it is.

    The usual cause is a pin per Python (``jax==0.10.2; python_version < "3.12"`` beside
    ``jax==0.12.0.1; python_version >= "3.12"``) built on the other Python: the wheel installs
    there with the project's pin, and the loader falls back to tracing (with a
    ``FallbackWarning``) where that jax cannot read the artifacts."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    added = Requirement(requirement)
    conflicts = []
    for entry in dependencies:
        try:
            own = Requirement(entry)
        except InvalidRequirement:
            continue
        if canonicalize_name(own.name) == canonicalize_name(added.name) and not own.url and \
                added.marker is None and not _admits_a_version(own.specifier & added.specifier):
            conflicts.append(
                f"the project's requirement `{entry}` admits no {added.name} that is also "
                f"{added.specifier} (the {added.name} these artifacts were exported with): kept "
                f"as it is, so the wheel still installs where it applies, and there the loader "
                f"traces the source if that {added.name} cannot read the artifacts; to ship "
                f"artifacts for those Pythons, build one wheel per Python (each with the "
                f"{added.name} it pins)")
    return conflicts


def _admits_a_version(specifiers: Any) -> bool:
    """Whether ``specifiers`` admits one of the versions its clauses name: for pins and bounds
    (what requirements on jax use), ``False`` means no version at all can satisfy them
    (``==0.10.2,>=0.12.0.1``; ``>=0.12,<0.11``). A wildcard or legacy clause: ``True``."""
    from packaging.version import InvalidVersion, Version

    named = []
    for spec in specifiers:
        try:
            version = Version(spec.version)
        except InvalidVersion:
            return True
        *head, last = version.release  # and the next release, for ``> V``
        named += [version, Version(".".join(map(str, [*head, last + 1])))]
    return not named or any(specifiers.contains(v, prereleases=True) for v in named)


def _strictest(specifiers: Any) -> Any:
    """``specifiers`` with only the tightest lower and upper bound (``>=0.5,>=0.10.2``:
    ``>=0.10.2``); other clauses (``==``, ``!=``, ``~=``) are kept as they are."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    def key(spec: Any, lower: bool) -> tuple[Version, bool]:
        strict = spec.operator in (">", "<")
        return Version(spec.version), strict if lower else not strict

    kept, lower, upper = [], None, None
    try:
        for spec in specifiers:
            if spec.operator in (">=", ">"):
                lower = spec if lower is None or key(spec, True) > key(lower, True) else lower
            elif spec.operator in ("<=", "<"):
                upper = spec if upper is None or key(spec, False) < key(upper, False) else upper
            else:
                kept.append(spec)
    except InvalidVersion:  # a legacy or wildcard version: no ordering, keep every clause
        return specifiers
    return SpecifierSet(",".join(str(s) for s in [*kept, lower, upper] if s is not None))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_requirement(text: str) -> str | None:
    """Why ``text`` is not a valid requirement (``{version}`` filled in), or None."""
    filled = text.replace("{version}", "0.1")
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover - hatchling and setuptools both ship packaging
        return None if filled.strip() else "it is empty"
    try:
        Requirement(filled)
    except InvalidRequirement as err:
        return str(err).splitlines()[0]
    return None


#: What a validation step returns: the parsed value, and the problems found (none: value valid).
Checked = tuple[Any, list[str]]


def _must_be(path: str, expected: str, value: Any) -> str:
    """The uniform message for an option whose value has the wrong kind."""
    return f"{path} must be {expected}, got {value!r}"


def _unknown_keys(raw: Mapping[str, Any], prefix: str, passthrough: Collection[str]
                  ) -> list[str]:
    """One problem per key that is no option of ours (nor the build tool's), with a hint."""
    errors = []
    for key in sorted(raw):
        if key in OPTION_NAMES or key in passthrough:
            continue
        close = difflib.get_close_matches(key, OPTION_NAMES, n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        errors.append(f"{prefix}.{key} is not an option of hatch-jaxexport{hint}; "
                      f"known options: {', '.join(OPTION_NAMES)}")
    return errors


def _check_packages(value: Any, path: str) -> Checked:
    """``packages``: a non-empty array of distinct top-level import names."""
    if not isinstance(value, list) or not value:
        return None, [_must_be(path, "a non-empty array of top-level package names", value)]
    errors = [f"{path}[{i}] must be the import name of a top-level package (like \"my_pkg\"), "
              f"got {item!r}" for i, item in enumerate(value)
              if not isinstance(item, str) or not item.isidentifier()]
    if len(set(map(str, value))) != len(value):
        errors.append(_must_be(path, "an array without duplicates", value))
    return tuple(map(str, value)), errors


def _check_platforms(value: Any, path: str) -> Checked:
    """``platforms``: one known platform or a non-empty array of them (duplicates dropped)."""
    items = [value] if isinstance(value, str) else value
    known = ", ".join(map(repr, KNOWN_PLATFORMS))
    if not isinstance(items, list) or not items:
        return None, [_must_be(path, f"a non-empty array of {known}", value)]
    errors = [f"{path}[{i}] must be one of {known}, got {item!r}"
              for i, item in enumerate(items) if item not in KNOWN_PLATFORMS]
    return tuple(dict.fromkeys(map(str, items))), errors


def _check_jobs(value: Any, path: str) -> Checked:
    """``jobs``: an int >= 1, or ``"auto"`` (one worker per CPU)."""
    if value == "auto":
        return max(1, os.cpu_count() or 1), []
    if not _is_int(value) or value < 1:
        return None, [_must_be(path, "an int >= 1 or \"auto\"", value)]
    return value, []


def _check_on_error(value: Any, path: str) -> Checked:
    """``on-error``: one of ``ON_ERROR_CHOICES``."""
    if value not in ON_ERROR_CHOICES:
        return None, [_must_be(path, " or ".join(map(repr, ON_ERROR_CHOICES)), value)]
    return value, []


def _check_jax_requirement(value: Any, path: str) -> Checked:
    """``jax-requirement``: false (the default: none), true (the exporting jax as the floor)
    or a requirement."""
    if value is True:
        return TIGHTENED_JAX_REQUIREMENT, []
    if value is False:
        return None, []
    if not isinstance(value, str):
        return None, [_must_be(path, "true, false or a requirement like \"jax>={version}\"",
                               value)]
    problem = _check_requirement(value)
    if problem:
        return None, [f"{path} must be true, false or a requirement like \"jax>={{version}}\", "
                      f"got {value!r}: {problem}"]
    return value, []


def _check_editable(value: Any, path: str) -> Checked:
    """``editable``: one of ``EDITABLE``."""
    if value not in EDITABLE:
        return None, [_must_be(path, " or ".join(map(repr, EDITABLE)), value)]
    return value, []


def _check_executables(value: Any, path: str) -> Checked:
    """``executables``: true (the builder's targets), false (none) or an array of targets."""
    from hatch_jaxexport.bake.executables.compiling import resolve_targets

    if value is True:
        return tuple(resolve_targets(True)), []
    if value is False:
        return (), []
    known = ", ".join(map(repr, [*TARGETS, *TARGET_ALIASES]))
    if not isinstance(value, list):
        return None, [_must_be(path, f"true, false or an array of {known}", value)]
    errors = [f"{path}[{i}] must be one of {known}, got {item!r}" for i, item in enumerate(value)
              if not isinstance(item, str) or canonical_target(item) is None]
    return tuple(dict.fromkeys((isinstance(item, str) and canonical_target(item)) or str(item)
                               for item in value)), errors


def _check_tpu_targets(value: Any, path: str) -> Checked:
    """``tpu-targets``: an array of TPU hosts (``"v5e"``, ``"v5e:2x2"``, ``"v6e:8"``), each
    kept by its key (``tpu:v5e:2x2``)."""
    from hatch_jaxexport.formats.tpu_targets import describe_tpu_targets, parse_tpu_target

    known = f"a TPU generation, or a generation and its host's topology or device count: " \
        f"{describe_tpu_targets()}"
    if not isinstance(value, list):
        return None, [_must_be(path, f'an array of TPU targets such as ["v5e", "v5e:2x2"] '
                                     f'({known})', value)]
    parsed = [parse_tpu_target(item) for item in value]
    errors = [f"{path}[{i}] must be {known}; got {item!r}"
              for i, (item, target) in enumerate(zip(value, parsed, strict=True))
              if target is None]
    return tuple(dict.fromkeys(t.key for t in parsed if t is not None)), errors


def _check_jaxlibs(value: Any, path: str) -> Checked:
    """``executable-jaxlibs``, ``jax-releases``: an array of jax versions (``"0.10.1"``), each
    installable."""
    from packaging.version import InvalidVersion, Version

    if not isinstance(value, list):
        return None, [_must_be(path, "an array of jax versions such as [\"0.10.1\"]", value)]
    def valid(item: Any) -> bool:
        try:
            return isinstance(item, str) and bool(Version(item))
        except InvalidVersion:
            return False

    errors = [f"{path}[{i}] must be a jax version such as \"0.10.1\", got {item!r}"
              for i, item in enumerate(value) if not valid(item)]
    return tuple(dict.fromkeys(map(str, value))), errors


def _check_companion_wheels(value: Any, path: str) -> Checked:
    """``companion-wheels``: ``true`` (the accelerators'), ``false``, or one of
    ``formats.companion_wheels.SPLIT_CHOICES``."""
    from hatch_jaxexport.formats.companion_wheels import SPLIT_CHOICES

    if value is True or value is False:
        return ("accelerators" if value else "none"), []
    if value not in SPLIT_CHOICES:
        return None, [_must_be(path, 'true, false, "accelerators" (TPU and GPU executables), '
                                     '"all" (the CPU\'s too) or "none"', value)]
    return value, []


def _check_wheel_patterns(value: Any, path: str) -> Checked:
    """``executables-from``: an array of glob patterns of wheels (``"wheels/*/*.whl"``)."""
    if not isinstance(value, list):
        return None, [_must_be(path, 'an array of wheel paths or patterns such as '
                                     '["wheels/*/*.whl"]', value)]
    errors = [f"{path}[{i}] must be a path or pattern ending in .whl, got {item!r}"
              for i, item in enumerate(value)
              if not isinstance(item, str) or not item.endswith(".whl")]
    return tuple(dict.fromkeys(map(str, value))), errors


#: Each option's key, in message order: the ``ExportOptions`` field it sets and its validation.
_OPTION_STEPS: dict[str, tuple[str, Callable[[Any, str], Checked]]] = {
    "packages": ("packages", _check_packages),
    "platforms": ("platforms", _check_platforms),
    "jobs": ("jobs", _check_jobs),
    "on-error": ("on_error", _check_on_error),
    "jax-requirement": ("jax_requirement", _check_jax_requirement),
    "editable": ("editable", _check_editable),
    "executables": ("executables", _check_executables),
    "executable-jaxlibs": ("executable_jaxlibs", _check_jaxlibs),
    "executables-from": ("executables_from", _check_wheel_patterns),
    "jax-releases": ("jax_releases", _check_jaxlibs),
    "tpu-targets": ("executables", _check_tpu_targets),
    "companion-wheels": ("companion_wheels", _check_companion_wheels),
}


def parse_options(raw: Mapping[str, Any], prefix: str, *,
                  passthrough: Collection[str] = ()) -> ExportOptions:
    """Validate a configuration table; ``ConfigError`` lists every problem at once.

    ``prefix`` is the table's TOML path (used in messages); keys in ``passthrough`` belong to the
    build tool and are ignored.
    """
    errors = _unknown_keys(raw, prefix, passthrough)
    values: dict[str, Any] = {}
    for key, (field, check) in _OPTION_STEPS.items():
        if key not in raw:
            continue
        value, problems = check(raw[key], f"{prefix}.{key}")
        errors.extend(problems)
        if not problems:  # tpu-targets add to the executables' targets
            values[field] = (*values.get(field, ()), *value) if key == "tpu-targets" else value
    if "tpu-targets" in raw and "tpu" not in values.get("platforms", DEFAULT_PLATFORMS):
        errors.append(f"{prefix}.tpu-targets compiles the functions' tpu artifacts, but "
                      f"{prefix}.platforms ({list(values.get('platforms', DEFAULT_PLATFORMS))}) "
                      "lacks \"tpu\": add it")
    if errors:
        raise ConfigError(errors)
    return ExportOptions(**values)


__all__ = [
    "HATCHLING_HOOK_KEYS",
    "ConfigError",
    "ExportOptions",
    "EXPORT_FAILED",
    "brief_uncaught_build_errors",
    "merge_requirement",
    "requirement_conflicts",
    "parse_options",
    "requirement_name",
]
