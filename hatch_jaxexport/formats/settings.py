"""Every ``HATCH_JAXEXPORT_*`` environment variable, its name and how its value is read.

One place, so every variable accepts the same spellings (``1/true/yes/on`` and
``0/false/no/off``, any case, surrounding spaces ignored) and the docs can list them from here.
Each reader takes the environment it is handed (``os.environ`` by default) and does no other I/O.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

#: Errors instead of falling back to tracing (the loader and the transformation family).
STRICT_ENV = "HATCH_JAXEXPORT_STRICT"
#: Drop-in notices (calls the artifacts do not cover) as warnings too, not only log records: a
#: maintainer's switch for their own test runs (off: nothing new in the end user's process).
WARNINGS_ENV = "HATCH_JAXEXPORT_WARNINGS"
#: Structures in call-time errors and ``jaxexport inspect`` in full (off: long ones abbreviated).
FULL_STRUCTURES_ENV = "HATCH_JAXEXPORT_FULL_STRUCTURES"
#: Tiered compilation of eager first calls: on, off, or unset for the per-function default.
TIERED_ENV = "HATCH_JAXEXPORT_TIERED"
#: The loader's caches (its executable cache, and JAX's when turned on): off, on (the default
#: folder), or a folder.
CACHE_ENV = "HATCH_JAXEXPORT_CACHE"
#: The most bytes hatch-jaxexport keeps in its cache folders (``500M``, ``2G``; ``0``: no limit).
CACHE_MAX_BYTES_ENV = "HATCH_JAXEXPORT_CACHE_MAX_BYTES"
#: Turn JAX's persistent compilation cache on in the loader's folder (off: jax's config is
#: never changed; a cache the user configured is used either way).
JAX_CACHE_ENV = "HATCH_JAXEXPORT_JAX_CACHE"
#: Build a wheel without exporting anything (the integrations).
SKIP_ENV = "HATCH_JAXEXPORT_SKIP"
#: Set to 0 to ignore the precompiled executables a wheel ships (compile the StableHLO).
EXECUTABLES_ENV = "HATCH_JAXEXPORT_EXECUTABLES"
#: One line on stderr per first call of a signature: how it was served, its time, and why no
#: shipped executable served it.
REPORT_ENV = "HATCH_JAXEXPORT_REPORT"
#: Record the sizes calls use, for the build's executables: 1 (beside each package) or a folder.
RECORD_ENV = "HATCH_JAXEXPORT_RECORD"
#: Build errors with their whole text and tracebacks (off: one line per cause, with hints).
TRACEBACK_ENV = "HATCH_JAXEXPORT_TRACEBACK"
#: Tiered compilation's background compiles running at once on a machine (per cache folder):
#: a count, ``0`` for none (tiering off); unset for the runtime's default from the CPU count.
BACKGROUND_COMPILES_ENV = "HATCH_JAXEXPORT_BACKGROUND_COMPILES"
#: Seconds one background compile may run before it ends itself.
BACKGROUND_TIMEOUT_ENV = "HATCH_JAXEXPORT_BACKGROUND_TIMEOUT"
#: ``BACKGROUND_TIMEOUT_ENV`` unset: ten minutes, far beyond a compile's usual seconds, so that
#: only a runaway is ended.
DEFAULT_BACKGROUND_TIMEOUT_S = 600

ON_VALUES = ("1", "true", "yes", "on")
#: The cache limit when ``HATCH_JAXEXPORT_CACHE_MAX_BYTES`` is unset: 1 GiB holds thousands of
#: executables of typical functions (10 kB to a few MB each), and a user never notices it on a
#: disk, while a cache that only grows reaches tens of GB over releases and jaxlib upgrades.
DEFAULT_CACHE_MAX_BYTES = 1 << 30
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
               "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
               "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
OFF_VALUES = ("0", "false", "no", "off")


def flag(name: str, environ: Mapping[str, str] = os.environ) -> bool | None:
    """``True``/``False`` for an on/off spelling of variable ``name``; ``None`` when unset or
    anything else (the caller's default applies)."""
    value = environ.get(name, "").strip().lower()
    if value in ON_VALUES:
        return True
    if value in OFF_VALUES:
        return False
    return None


def strict_mode(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_STRICT`` asks for errors instead of falling back to tracing."""
    return flag(STRICT_ENV, environ) is True


def warnings_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_WARNINGS`` asks for the runtime's notices as warnings too."""
    return flag(WARNINGS_ENV, environ) is True


def full_structures(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_FULL_STRUCTURES`` asks for whole structure texts (default:
    long ones abbreviated, ``formats.structure_text``)."""
    return flag(FULL_STRUCTURES_ENV, environ) is True


def shipped_executables_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_EXECUTABLES`` leaves shipped executables on (the default)."""
    return flag(EXECUTABLES_ENV, environ) is not False


def skip_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_SKIP`` asks for a build without exports."""
    return flag(SKIP_ENV, environ) is True


def call_report_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_REPORT`` asks for a line per first call of a signature."""
    return flag(REPORT_ENV, environ) is True


def record_choice(environ: Mapping[str, str] = os.environ) -> bool | str:
    """``HATCH_JAXEXPORT_RECORD``: ``False`` (off, also when unset), ``True`` (the file beside
    each package) or the folder it names."""
    value = environ.get(RECORD_ENV, "").strip()
    if value == "" or value.lower() in OFF_VALUES:
        return False
    return True if value.lower() in ON_VALUES else value


def traceback_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_TRACEBACK`` asks for build errors in full, with tracebacks."""
    return flag(TRACEBACK_ENV, environ) is True


def tiered_choice(environ: Mapping[str, str] = os.environ) -> bool | None:
    """``HATCH_JAXEXPORT_TIERED``: forced on, forced off, or ``None`` (per-function default)."""
    return flag(TIERED_ENV, environ)


def cache_choice(environ: Mapping[str, str] = os.environ) -> bool | str:
    """``HATCH_JAXEXPORT_CACHE``: ``False`` (off), ``True`` (the default folder, also when
    unset) or the folder it names."""
    value = environ.get(CACHE_ENV, "").strip()
    if value.lower() in OFF_VALUES:
        return False
    if value == "" or value.lower() in ON_VALUES:
        return True
    return value


def background_compiles(environ: Mapping[str, str] = os.environ) -> int | None:
    """``HATCH_JAXEXPORT_BACKGROUND_COMPILES``: how many background compiles may run at once
    (``0``: none), or ``None`` when unset or not a whole number >= 0 (the runtime's default,
    which depends on the CPU count, applies)."""
    value = environ.get(BACKGROUND_COMPILES_ENV, "").strip()
    try:
        count = int(value)
    except ValueError:
        return None
    return count if count >= 0 else None


def background_timeout(environ: Mapping[str, str] = os.environ) -> float:
    """``HATCH_JAXEXPORT_BACKGROUND_TIMEOUT``: seconds a background compile may run, a positive
    number (fractions allowed); ``DEFAULT_BACKGROUND_TIMEOUT_S`` when unset or anything else."""
    value = environ.get(BACKGROUND_TIMEOUT_ENV, "").strip()
    try:
        seconds = float(value)
    except ValueError:
        return DEFAULT_BACKGROUND_TIMEOUT_S
    return seconds if 0 < seconds < float("inf") else DEFAULT_BACKGROUND_TIMEOUT_S


def parse_byte_size(text: str) -> int:
    """Bytes from a size such as ``500M``, ``2G``, ``1.5GiB`` or ``1048576``.

    Units are binary (``K`` = 1024), as ``du -h`` and pip show them, whichever spelling
    (``M``, ``MB``, ``MiB``, any case): a limit is about disk blocks, not marketing sizes.
    ``ValueError`` says what was expected when the text is none of these.
    """
    found = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*", text)
    unit = found and _SIZE_UNITS.get(found.group(2).lower())
    if not found or unit is None:
        raise ValueError(f"{text!r} is not a size: give bytes or a number with K, M, G or T "
                         "(binary units), e.g. 500M or 2G")
    return int(float(found.group(1)) * unit)


def cache_max_bytes(environ: Mapping[str, str] = os.environ) -> int | None:
    """``HATCH_JAXEXPORT_CACHE_MAX_BYTES``: the limit in bytes (``DEFAULT_CACHE_MAX_BYTES``
    when unset or empty), ``None`` for no limit (``0`` or an off word). ``ValueError`` for a
    value that is not a size, naming the variable."""
    value = environ.get(CACHE_MAX_BYTES_ENV, "").strip()
    if value == "":
        return DEFAULT_CACHE_MAX_BYTES
    if value.lower() in OFF_VALUES:
        return None
    try:
        limit = parse_byte_size(value)
    except ValueError as err:
        raise ValueError(f"{CACHE_MAX_BYTES_ENV}={value}: {err}") from None
    return limit or None


def jax_cache_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_JAX_CACHE`` asks the loader to turn JAX's persistent
    compilation cache on (default off: a library leaves its host's jax config alone)."""
    return flag(JAX_CACHE_ENV, environ) is True


__all__ = ["BACKGROUND_COMPILES_ENV", "BACKGROUND_TIMEOUT_ENV", "CACHE_ENV", "CACHE_MAX_BYTES_ENV",
           "DEFAULT_BACKGROUND_TIMEOUT_S", "DEFAULT_CACHE_MAX_BYTES", "EXECUTABLES_ENV",
           "FULL_STRUCTURES_ENV", "JAX_CACHE_ENV", "OFF_VALUES", "ON_VALUES", "RECORD_ENV",
           "REPORT_ENV", "SKIP_ENV", "STRICT_ENV", "TIERED_ENV", "TRACEBACK_ENV", "WARNINGS_ENV",
           "background_compiles", "background_timeout", "cache_choice", "cache_max_bytes",
           "call_report_wanted", "flag", "full_structures", "jax_cache_wanted", "parse_byte_size",
           "record_choice", "shipped_executables_wanted", "skip_requested", "strict_mode",
           "tiered_choice", "traceback_wanted", "warnings_wanted"]
