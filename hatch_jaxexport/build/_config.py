"""Build-integration options, shared by the Hatch hook and the setuptools command.

Both integrations read the same table (``[tool.hatch.build.targets.wheel.hooks.jaxexport]`` or
``[tool.jaxexport]``). Validation collects every problem, each with its full TOML path, and
raises them together as one ``ConfigError``. Also here: what both integrations print about a
finished export, and the jax requirement they add to the wheel's metadata.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.errors import ConfigError
from hatch_jaxexport.formats._options import DEFAULT_PLATFORMS, KNOWN_PLATFORMS, ON_ERROR_CHOICES

if TYPE_CHECKING:
    from hatch_jaxexport.build._orchestrate import BuildResult

#: Set to 1/true/yes/on to build without exporting (the loader then traces, with a warning).
#: Hatchling's own keys of a build hook table: they reach the hook's config and are let through.
HATCHLING_HOOK_KEYS = frozenset({
    "dependencies", "require-runtime-dependencies", "require-runtime-features",
    "enable-by-default",
})
EDITABLE = ("in-place", "trace")
DEFAULT_JAX_REQUIREMENT = "jax>={version}"

OPTION_NAMES = ("packages", "platforms", "jobs", "on-error", "jax-requirement", "editable")


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
    #: The runtime requirement added to the wheel (``{version}``: the exporting jax), or None.
    jax_requirement: str | None = DEFAULT_JAX_REQUIREMENT
    #: Editable installs: ``in-place`` exports into the source tree, ``trace`` exports nothing.
    editable: str = "in-place"

    def requirement_for(self, jax_version: str) -> str | None:
        """The requirement to add to the wheel's metadata, for artifacts made by ``jax_version``."""
        if self.jax_requirement is None:
            return None
        return self.jax_requirement.replace("{version}", jax_version)


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


def parse_options(raw: Mapping[str, Any], prefix: str, *,
                  passthrough: Collection[str] = ()) -> ExportOptions:
    """Validate a configuration table; ``ConfigError`` lists every problem at once.

    ``prefix`` is the table's TOML path (used in messages); keys in ``passthrough`` belong to the
    build tool and are ignored.
    """
    errors: list[str] = []
    values: dict[str, Any] = {}

    def bad(key: str, expected: str, value: Any) -> None:
        errors.append(f"{prefix}.{key} must be {expected}, got {value!r}")

    for key in sorted(raw):
        if key in OPTION_NAMES or key in passthrough:
            continue
        close = difflib.get_close_matches(key, OPTION_NAMES, n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        errors.append(f"{prefix}.{key} is not an option of hatch-jaxexport{hint}; "
                      f"known options: {', '.join(OPTION_NAMES)}")

    if "packages" in raw:
        value = raw["packages"]
        if not isinstance(value, list) or not value:
            bad("packages", "a non-empty array of top-level package names", value)
        else:
            for i, item in enumerate(value):
                if not isinstance(item, str) or not item.isidentifier():
                    errors.append(f"{prefix}.packages[{i}] must be the import name of a "
                                  f"top-level package (like \"my_pkg\"), got {item!r}")
            if len(set(map(str, value))) != len(value):
                bad("packages", "an array without duplicates", value)
            values["packages"] = tuple(map(str, value))

    if "platforms" in raw:
        value = raw["platforms"]
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items:
            bad("platforms", f"a non-empty array of {', '.join(map(repr, KNOWN_PLATFORMS))}",
                value)
        else:
            for i, item in enumerate(items):
                if item not in KNOWN_PLATFORMS:
                    errors.append(f"{prefix}.platforms[{i}] must be one of "
                                  f"{', '.join(map(repr, KNOWN_PLATFORMS))}, got {item!r}")
            values["platforms"] = tuple(dict.fromkeys(map(str, items)))

    if "jobs" in raw:
        value = raw["jobs"]
        if value == "auto":
            values["jobs"] = max(1, os.cpu_count() or 1)
        elif not _is_int(value) or value < 1:
            bad("jobs", "an int >= 1 or \"auto\"", value)
        else:
            values["jobs"] = value

    if "on-error" in raw:
        value = raw["on-error"]
        if value not in ON_ERROR_CHOICES:
            bad("on-error", " or ".join(map(repr, ON_ERROR_CHOICES)), value)
        else:
            values["on_error"] = value

    if "jax-requirement" in raw:
        value = raw["jax-requirement"]
        if value is True:
            values["jax_requirement"] = DEFAULT_JAX_REQUIREMENT
        elif value is False:
            values["jax_requirement"] = None
        elif isinstance(value, str):
            problem = _check_requirement(value)
            if problem:
                errors.append(f"{prefix}.jax-requirement must be true, false or a requirement "
                              f"like \"jax>={{version}}\", got {value!r}: {problem}")
            else:
                values["jax_requirement"] = value
        else:
            bad("jax-requirement", "true, false or a requirement like \"jax>={version}\"",
                value)

    if "editable" in raw:
        value = raw["editable"]
        if value not in EDITABLE:
            bad("editable", " or ".join(map(repr, EDITABLE)), value)
        else:
            values["editable"] = value

    if errors:
        raise ConfigError(errors)
    return ExportOptions(**values)


def _bytes(n: int) -> str:
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def describe_result(result: BuildResult, seconds: float) -> tuple[list[str], str]:
    """One progress line per exported function, and a summary line, for a finished export.

    A function's time is the sum over its artifacts (workers run in parallel); ``seconds`` is
    the wall-clock time of the whole export.
    """
    by_function: dict[str, list[Any]] = {}
    for record in result.manifest.artifacts:
        by_function.setdefault(record.function, []).append(record)
    skipped: dict[str, int] = {}
    for record in result.manifest.skipped:
        skipped[record.function] = skipped.get(record.function, 0) + 1
    #: Seconds each artifact took to export, by artifact id (``ArtifactRecord.id``).
    timings: Mapping[str, float] = getattr(result, "seconds", None) or {}
    lines = []
    for name in sorted(set(by_function) | set(skipped)):
        records = by_function.get(name, [])
        structures = len({r.structure_index for r in records})
        platforms = ",".join(sorted({r.platform for r in records})) or "-"
        size = sum(r.size for r in records)
        line = (f"  {name}: {structures} structure(s), platforms {platforms}, "
                f"{len(records)} artifact(s), {_bytes(size)}")
        if any(r.id in timings for r in records):
            line += f", {sum(timings.get(r.id, 0.0) for r in records):.2f} s"
        if name in skipped:
            line += f", {skipped[name]} skipped"
        lines.append(line)
    manifest = result.manifest
    total = sum(r.size for r in manifest.artifacts)
    summary = (f"{manifest.package}: {len(by_function)} function(s), {len(manifest.artifacts)} "
               f"artifact(s), {_bytes(total)}, {seconds:.1f} s (jax {manifest.jax_version})")
    if manifest.skipped:
        summary += f", {len(manifest.skipped)} skipped"
    return lines, summary


__all__ = [
    "HATCHLING_HOOK_KEYS",
    "ConfigError",
    "ExportOptions",
    "describe_result",
    "parse_options",
]
