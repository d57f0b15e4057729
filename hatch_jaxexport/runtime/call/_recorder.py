"""Recording the sizes a package's functions are really called with (``HATCH_JAXEXPORT_RECORD``).

With the variable set (``1``: the file beside each package's ``__init__.py``; a folder: one file
per package in it), each call that matches a structure with dimension symbols notes the sizes
they took; at exit the notes are merged into ``jaxexport-signatures.json`` (what was there
stays), which the build reads to compile precompiled executables for the calls users make.
A call that no structure accepts (every call of a spec-less ``@exportable``) is noted whole
(``note_call``: each argument's tree of shapes and dtypes, its non-array values), and the build
bakes an artifact for exactly that signature. A call holding a function a caller passed
(``f(x, metric=my_fn)``) cannot be baked: it is counted instead, written under the file's
``unrecorded`` and told at exit on stderr (the recording run's summary), as the build log tells
it again. Off, the loader's only cost is one ``if``.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.formats.settings import RECORD_ENV, record_choice

if TYPE_CHECKING:
    from hatch_jaxexport.formats.signatures import CallSignature

# Imported in functions: the call descriptions and the signatures file's format, only while
# recording (HATCH_JAXEXPORT_RECORD); the loader imports this module on every first call.

#: package -> function -> structure index -> sizes seen (as sorted item tuples).
_SEEN: dict[str, dict[str, dict[int, set[tuple[tuple[str, int], ...]]]]] = {}
#: package -> function -> call key -> the call's signature (calls no structure accepted).
_CALLS: dict[str, dict[str, dict[str, CallSignature]]] = {}
#: package -> function -> why calls were not recorded -> how many (``unrecorded_reason``).
_UNRECORDED: dict[str, dict[str, dict[str, int]]] = {}
_LOCK = threading.Lock()
RECORDING = record_choice() is not False


def _at_exit_once() -> None:
    """Register ``write_all`` the first time anything is noted (caller holds ``_LOCK``)."""
    if not _SEEN and not _CALLS and not _UNRECORDED:
        atexit.register(write_all)


def note(package: str, function: str, structure_index: int, sizes: dict[str, int]) -> None:
    """Remember that ``function``'s structure was called with ``sizes`` (symbols only)."""
    if not sizes:
        return
    with _LOCK:
        _at_exit_once()
        _SEEN.setdefault(package, {}).setdefault(function, {}).setdefault(
            structure_index, set()).add(tuple(sorted(sizes.items())))


def note_batched(fn: Any, structure_index: int, sizes: dict[str, int],
                 given: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
    """Remember an eager ``jax.vmap`` call of a function baked with ``vmap=True`` (``fn``: its
    record): its structure's sizes with the batch size under the batched member's batch
    symbol, so that the build compiles the batched member's executable for it (on a TPU, each
    new batch shape of an eager ``vmap`` is otherwise a compile). Nested ``vmap``s are noted
    at their sizes multiplied, the one call the loader folds them into."""
    import jax

    from hatch_jaxexport.formats.dimensions import BATCH_SYMBOL
    from hatch_jaxexport.runtime.jaxcompat import eager_vmap_size

    batch = eager_vmap_size(jax.tree_util.tree_leaves(given))
    if batch is not None:
        note(fn.package, fn.name, structure_index, {**sizes, BATCH_SYMBOL: batch})


def note_call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Remember the whole signature of a call of ``fn`` (an ``ExportableFunction``) that no
    structure accepted, when ``HATCH_JAXEXPORT_RECORD`` is on; whether it was noted.

    The build bakes one concrete artifact per noted signature. A call whose arguments are not
    arrays, JSON scalars, or lists, tuples and dicts (string keys) of them cannot be described
    for the build and is not noted (it keeps tracing the source)."""
    if not RECORDING:
        return False
    from hatch_jaxexport.formats.signatures import call_key
    from hatch_jaxexport.runtime.call.recorded_calls import describe_call

    signature = describe_call(fn, args, kwargs)
    if signature is None:
        _count_unrecorded(fn, args, kwargs)
        return False
    with _LOCK:
        _at_exit_once()
        _CALLS.setdefault(fn.package, {}).setdefault(fn.name, {})[call_key(signature)] = \
            signature
    return True


def _count_unrecorded(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Count a call that could not be noted because it holds a function a caller passed, so
    that the summary and the build say why it runs the source (other such calls: not told)."""
    from hatch_jaxexport.runtime.call.recorded_calls import unrecorded_reason

    reason = unrecorded_reason(fn, args, kwargs)
    if reason is None:
        return
    with _LOCK:
        _at_exit_once()
        counts = _UNRECORDED.setdefault(fn.package, {}).setdefault(fn.name, {})
        counts[reason] = counts.get(reason, 0) + 1


def summary_lines(unrecorded: dict[str, dict[str, dict[str, int]]]) -> list[str]:
    """The recording run's summary of calls it could not keep, one line per function and
    reason: ``hatch-jaxexport: HATCH_JAXEXPORT_RECORD: 3 call(s) of pkg:f not recorded:
    argument 'metric' holds a function: such calls run the source``."""
    from hatch_jaxexport.formats.signatures import FUNCTION_RUNS_SOURCE

    return [f"hatch-jaxexport: {RECORD_ENV}: {count} call(s) of {function} not recorded: "
            f"{reason}{FUNCTION_RUNS_SOURCE}"
            for package in sorted(unrecorded) for function, reasons in
            sorted(unrecorded[package].items()) for reason, count in sorted(reasons.items())]


def signatures_file(package: str) -> Path | None:
    """Where ``package``'s recorded sizes go: beside its ``__init__.py``, or in the folder the
    variable names."""
    from hatch_jaxexport.formats.signatures import SIGNATURES_NAME

    choice = record_choice()
    if choice is False:
        return None
    if choice is not True:
        return Path(choice) / package / SIGNATURES_NAME
    import importlib

    module = importlib.import_module(package)
    return Path(module.__file__ or "").parent / SIGNATURES_NAME


def _file_mode() -> int:
    """The mode an ordinary new file gets here: 0666 less the process's umask (the file is
    committed and shipped like any source file)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_all() -> None:
    """Merge what this process saw into each package's file (atomically: a reader never sees
    half a file; two processes at once keep at least one's notes, never a broken file)."""
    import sys

    from hatch_jaxexport.formats.signatures import (
        SIGNATURES_NAME,
        merged,
        merged_calls,
        merged_unrecorded,
        parse_calls,
        parse_signatures,
        parse_unrecorded,
        signatures_text,
    )

    with _LOCK:
        seen = {p: {f: {i: [dict(s) for s in sizes] for i, sizes in st.items()}
                    for f, st in fns.items()} for p, fns in _SEEN.items()}
        calls = {p: {f: list(found.values()) for f, found in fns.items()}
                 for p, fns in _CALLS.items()}
        unrecorded = {p: {f: dict(r) for f, r in fns.items()} for p, fns in _UNRECORDED.items()}
    for line in summary_lines(unrecorded):
        print(line, file=sys.stderr)
    for package in sorted(set(seen) | set(calls) | set(unrecorded)):
        path = signatures_file(package)
        if path is None:
            continue
        try:
            text = path.read_text() if path.exists() else None
            before = parse_signatures(text, str(path)) if text else {}
            calls_before = parse_calls(text, str(path)) if text else {}
            skipped = merged_unrecorded(parse_unrecorded(text, str(path)) if text else {},
                                        unrecorded.get(package, {}))
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False,
                                             prefix=f".{SIGNATURES_NAME}.") as out:
                out.write(signatures_text(merged(before, seen.get(package, {})),
                                          merged_calls(calls_before, calls.get(package, {})),
                                          skipped))
            os.chmod(out.name, _file_mode())  # a temporary file is private (0600): not this one
            os.replace(out.name, path)
        except (OSError, ValueError) as err:
            print(f"hatch-jaxexport: {RECORD_ENV}: cannot record the sizes of {package} into "
                  f"{path}: {err}", file=sys.stderr)


__all__ = ["RECORDING", "note", "note_batched", "note_call", "signatures_file", "summary_lines",
           "write_all"]
