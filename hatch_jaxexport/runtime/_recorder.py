"""Recording the sizes a package's functions are really called with (``HATCH_JAXEXPORT_RECORD``).

With the variable set (``1``: the file beside each package's ``__init__.py``; a folder: one file
per package in it), each call that matches a structure with dimension symbols notes the sizes
they took; at exit the notes are merged into ``jaxexport-signatures.json`` (what was there
stays), which the build reads to compile precompiled executables for the calls users make.
Off, the loader's only cost is one ``if``.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import threading
from pathlib import Path

from hatch_jaxexport.formats._settings import RECORD_ENV, record_choice
from hatch_jaxexport.formats._signatures import (
    SIGNATURES_NAME,
    merged,
    parse_signatures,
    signatures_text,
)

#: package -> function -> structure index -> sizes seen (as sorted item tuples).
_SEEN: dict[str, dict[str, dict[int, set[tuple[tuple[str, int], ...]]]]] = {}
_LOCK = threading.Lock()
RECORDING = record_choice() is not False


def note(package: str, function: str, structure_index: int, sizes: dict[str, int]) -> None:
    """Remember that ``function``'s structure was called with ``sizes`` (symbols only)."""
    if not sizes:
        return
    with _LOCK:
        if not _SEEN:
            atexit.register(write_all)
        _SEEN.setdefault(package, {}).setdefault(function, {}).setdefault(
            structure_index, set()).add(tuple(sorted(sizes.items())))


def signatures_file(package: str) -> Path | None:
    """Where ``package``'s recorded sizes go: beside its ``__init__.py``, or in the folder the
    variable names."""
    choice = record_choice()
    if choice is False:
        return None
    if choice is not True:
        return Path(choice) / package / SIGNATURES_NAME
    import importlib

    module = importlib.import_module(package)
    return Path(module.__file__ or "").parent / SIGNATURES_NAME


def write_all() -> None:
    """Merge what this process saw into each package's file (atomically: a reader never sees
    half a file; two processes at once keep at least one's notes, never a broken file)."""
    with _LOCK:
        seen = {p: {f: {i: [dict(s) for s in sizes] for i, sizes in st.items()}
                    for f, st in fns.items()} for p, fns in _SEEN.items()}
    for package, recorded in seen.items():
        path = signatures_file(package)
        if path is None:
            continue
        try:
            before = parse_signatures(path.read_text(), str(path)) if path.exists() else {}
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False,
                                             prefix=f".{SIGNATURES_NAME}.") as out:
                out.write(signatures_text(merged(before, recorded)))
            os.replace(out.name, path)
        except (OSError, ValueError) as err:
            import sys

            print(f"hatch-jaxexport: {RECORD_ENV}: cannot record the sizes of {package} into "
                  f"{path}: {err}", file=sys.stderr)


__all__ = ["RECORDING", "note", "signatures_file", "write_all"]
