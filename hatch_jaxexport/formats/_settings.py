"""Every ``HATCH_JAXEXPORT_*`` environment variable, its name and how its value is read.

One place, so every variable accepts the same spellings (``1/true/yes/on`` and
``0/false/no/off``, any case, surrounding spaces ignored) and the docs can list them from here.
Each reader takes the environment it is handed (``os.environ`` by default) and does no other I/O.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: Errors instead of falling back to tracing (the loader and the transformation family).
STRICT_ENV = "HATCH_JAXEXPORT_STRICT"
#: Structures in call-time errors and ``jaxexport inspect`` in full (off: long ones abbreviated).
FULL_STRUCTURES_ENV = "HATCH_JAXEXPORT_FULL_STRUCTURES"
#: Tiered compilation of eager first calls: on, off, or unset for the per-function default.
TIERED_ENV = "HATCH_JAXEXPORT_TIERED"
#: The loader's caches (its executable cache, and JAX's when turned on): off, on (the default
#: folder), or a folder.
CACHE_ENV = "HATCH_JAXEXPORT_CACHE"
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

ON_VALUES = ("1", "true", "yes", "on")
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


def full_structures(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_FULL_STRUCTURES`` asks for whole structure texts (default:
    long ones abbreviated, ``formats._structure_text``)."""
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


def jax_cache_wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``HATCH_JAXEXPORT_JAX_CACHE`` asks the loader to turn JAX's persistent
    compilation cache on (default off: a library leaves its host's jax config alone)."""
    return flag(JAX_CACHE_ENV, environ) is True


__all__ = ["CACHE_ENV", "EXECUTABLES_ENV", "FULL_STRUCTURES_ENV", "JAX_CACHE_ENV", "OFF_VALUES",
           "ON_VALUES", "RECORD_ENV", "REPORT_ENV", "SKIP_ENV", "STRICT_ENV", "TIERED_ENV",
           "TRACEBACK_ENV", "cache_choice", "call_report_wanted", "flag", "full_structures",
           "jax_cache_wanted", "record_choice", "shipped_executables_wanted", "skip_requested",
           "strict_mode", "tiered_choice", "traceback_wanted"]
