"""The recorded call sizes of a package: which sizes its functions are really called with.

``HATCH_JAXEXPORT_RECORD`` makes the loader note, for each function and structure, the sizes
its dimension symbols took in real calls (while the package's test suite or an example script
runs); the build reads the file beside the package's ``__init__.py`` and compiles precompiled
executables for those sizes, beside ``executable_sizes=``. This module is the file's format:
plain JSON, versioned, read and written here, validated on read (a bad file is an error that
names it, never silently ignored). Pure: it parses the text it is handed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

#: The file's name, beside the package's ``__init__.py``.
SIGNATURES_NAME = "jaxexport-signatures.json"
SIGNATURES_VERSION = 1

#: function name -> structure index -> the recorded sizes (symbol -> size), each once, sorted.
Recorded = dict[str, dict[int, list[dict[str, int]]]]


def parse_signatures(text: str, where: str) -> Recorded:
    """The recorded sizes in ``text``; ``ValueError`` naming ``where`` and the fault."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON ({err})") from None
    if not isinstance(raw, dict) or raw.get("version") != SIGNATURES_VERSION:
        raise ValueError(f"{where}: expected {{\"version\": {SIGNATURES_VERSION}, "
                         f"\"functions\": ...}}, got {str(raw)[:80]}")
    recorded: Recorded = {}
    for function, structures in dict(raw.get("functions") or {}).items():
        for index, sizes in dict(structures).items():
            if not str(index).isdigit() or not isinstance(sizes, list) or not all(
                    isinstance(s, dict) and all(isinstance(k, str) and isinstance(v, int)
                                                and not isinstance(v, bool) and v >= 0
                                                for k, v in s.items()) for s in sizes):
                raise ValueError(f"{where}: {function} structure {index}: expected a list of "
                                 f"{{symbol: size}} objects, got {str(sizes)[:80]}")
            recorded.setdefault(function, {})[int(index)] = sizes
    return recorded


def merged(*parts: Mapping[str, Mapping[int, Sequence[Mapping[str, int]]]]) -> Recorded:
    """The union of recorded sizes (each combination once, in a stable order)."""
    out: dict[str, dict[int, set[tuple[tuple[str, int], ...]]]] = {}
    for part in parts:
        for function, structures in part.items():
            for index, sizes in structures.items():
                found = out.setdefault(function, {}).setdefault(int(index), set())
                found |= {tuple(sorted(s.items())) for s in sizes}
    return {f: {i: [dict(s) for s in sorted(found)] for i, found in sorted(st.items())}
            for f, st in sorted(out.items())}


def signatures_text(recorded: Recorded) -> str:
    """The file's text (sorted, so a re-recording of the same calls changes nothing)."""
    return json.dumps({"version": SIGNATURES_VERSION,
                       "functions": {f: {str(i): s for i, s in st.items()}
                                     for f, st in merged(recorded).items()}},
                      indent=1, sort_keys=True) + "\n"


__all__ = ["SIGNATURES_NAME", "SIGNATURES_VERSION", "Recorded", "merged", "parse_signatures",
           "signatures_text"]
