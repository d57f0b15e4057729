"""The recorded call sizes of a package: which sizes its functions are really called with.

``HATCH_JAXEXPORT_RECORD`` makes the loader note, for each function and structure, the sizes
its dimension symbols took in real calls (while the package's test suite or an example script
runs); the build reads the file beside the package's ``__init__.py`` and compiles precompiled
executables for those sizes, beside ``executable_sizes=``. Version 2 adds ``calls``: the full
signature of each call that no structure accepted (a spec-less ``@exportable``, or a size its
structures refuse), which the build bakes as concrete-size artifacts. This module is the file's
format: plain JSON, versioned, read and written here, validated on read (a bad file is an error
that names it, never silently ignored); version 1 files still read. Pure: it parses the text it
is handed.

A call's signature (``CallSignature``) is its bound arguments by parameter name, each a tree of
nodes: ``{"array": [[dims...], dtype]}``, ``{"static": value}`` (a JSON scalar: a non-array
argument, baked into the artifact), ``{"list": [...]}``, ``{"tuple": [...]}`` and
``{"dict": {key: node}}``. ``call_key`` is its canonical text, what the loader looks a call up by.
An argument left at a default the signature cannot describe (a function: ``def f(x,
metric=euclidean)`` called as ``f(x)``) is left out: the export binds the default as the source
does.

``unrecorded`` (optional, ignored by older readers) counts, per function, the calls of the
latest recording run that could not be described because an argument held a function
(``{"argument 'metric' holds a function": 3}``): such calls run the source, and the build log
says so instead of asking for a recording that would change nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

#: The file's name, beside the package's ``__init__.py``.
SIGNATURES_NAME = "jaxexport-signatures.json"
SIGNATURES_VERSION = 2
#: The versions this module reads (1: sizes only; 2: sizes and full call signatures).
READABLE_VERSIONS = (1, 2)

#: function name -> structure index -> the recorded sizes (symbol -> size), each once, sorted.
Recorded = dict[str, dict[int, list[dict[str, int]]]]
#: One call's bound arguments: parameter name -> node tree (see the module's docstring).
CallSignature = dict[str, Any]
#: function name -> the signatures of its calls that no structure accepted, each once, sorted.
Calls = dict[str, list[CallSignature]]
#: function name -> why some of its calls were not recorded -> how many (the latest run's).
Unrecorded = dict[str, dict[str, int]]

_CONTAINERS = ("list", "tuple", "dict")
#: Why a call holding a function a caller passed is neither recorded nor baked (the recording
#: run's summary, the build log, the report's reason and strict's refusal all say it).
FUNCTION_HELD = "argument {!r} holds a function"
#: What follows ``FUNCTION_HELD`` wherever the tool tells it.
FUNCTION_RUNS_SOURCE = ": such calls run the source"


def call_key(signature: CallSignature) -> str:
    """The canonical text of a call's signature: equal signatures, equal texts."""
    return json.dumps(signature, sort_keys=True, separators=(",", ":"))


def node_problem(node: Any, depth: int = 0) -> str | None:
    """What is wrong with one node of a call signature (``None`` when it is well formed)."""
    if depth > 64 or not isinstance(node, dict) or len(node) != 1:
        return f"expected a one-key node object, got {str(node)[:60]}"
    ((kind, value),) = node.items()
    if kind == "array":
        ok = isinstance(value, list) and len(value) == 2 and isinstance(value[1], str) and \
            isinstance(value[0], list) and all(isinstance(d, int) and not isinstance(d, bool)
                                               and d >= 0 for d in value[0])
        return None if ok else f"malformed array node {str(value)[:60]}"
    if kind == "static":
        ok = value is None or isinstance(value, bool | int | float | str)
        return None if ok else f"static value {str(value)[:60]} is not a JSON scalar"
    if kind in ("list", "tuple") and isinstance(value, list):
        return next((p for p in (node_problem(v, depth + 1) for v in value) if p), None)
    if kind == "dict" and isinstance(value, dict):
        return next((p for p in (node_problem(v, depth + 1) for v in value.values()) if p),
                    None)
    return f"unknown node kind {kind!r:.40}"


def parse_signatures(text: str, where: str) -> Recorded:
    """The recorded sizes in ``text``; ``ValueError`` naming ``where`` and the fault."""
    raw = _checked_header(text, where)
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


def rebuild(signature: CallSignature, make_array: Any) -> dict[str, Any]:
    """A call's bound arguments by name, rebuilt from its signature: each array node becomes
    ``make_array(dims, dtype)``, in the canonical order (parameters by name, dict keys sorted),
    which is the order the loader passes a call's arrays in."""
    def build(node: dict[str, Any]) -> Any:
        ((kind, value),) = node.items()
        if kind == "array":
            return make_array(tuple(value[0]), value[1])
        if kind == "static":
            return value
        if kind == "dict":
            return {k: build(value[k]) for k in sorted(value)}
        items = [build(v) for v in value]
        return items if kind == "list" else tuple(items)

    return {name: build(signature[name]) for name in sorted(signature)}


def _checked_header(text: str, where: str) -> dict[str, Any]:
    """The file's JSON object, of a version this module reads; ``ValueError`` if not."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON ({err})") from None
    if not isinstance(raw, dict) or raw.get("version") not in READABLE_VERSIONS:
        raise ValueError(f"{where}: expected {{\"version\": {SIGNATURES_VERSION}, "
                         f"\"functions\": ...}}, got {str(raw)[:80]}")
    return raw


def parse_calls(text: str, where: str) -> Calls:
    """The recorded call signatures in ``text`` (``{}`` in a version 1 file); ``ValueError``
    naming ``where``, the function and the fault."""
    raw = _checked_header(text, where)
    calls: Calls = {}
    for function, signatures in dict(raw.get("calls") or {}).items():
        if not isinstance(signatures, list):
            raise ValueError(f"{where}: calls of {function}: expected a list of call "
                             f"signatures, got {str(signatures)[:80]}")
        for signature in signatures:
            problem = "expected an object" if not isinstance(signature, dict) else next(
                (f"argument {name!r}: {p}" for name, node in signature.items()
                 if (p := node_problem(node))), None)
            if problem:
                raise ValueError(f"{where}: a call of {function}: {problem}")
        calls[function] = signatures
    return calls


def parse_unrecorded(text: str, where: str) -> Unrecorded:
    """The calls a recording could not keep, by function and reason (``{}`` where the file
    has none); ``ValueError`` naming ``where`` and the function when malformed."""
    raw = _checked_header(text, where)
    found: Unrecorded = {}
    for function, reasons in dict(raw.get("unrecorded") or {}).items():
        if not isinstance(reasons, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v > 0
                for k, v in reasons.items()):
            raise ValueError(f"{where}: unrecorded calls of {function}: expected "
                             f"{{reason: count}}, got {str(reasons)[:80]}")
        found[function] = dict(reasons)
    return found


def merged_unrecorded(*parts: Mapping[str, Mapping[str, int]]) -> Unrecorded:
    """Unrecorded calls merged: a later part's count of a reason replaces an earlier one's
    (recording the same tests again writes the same file)."""
    out: dict[str, dict[str, int]] = {}
    for part in parts:
        for function, reasons in part.items():
            out.setdefault(function, {}).update(reasons)
    return {f: dict(sorted(r.items())) for f, r in sorted(out.items()) if r}


def merged_calls(*parts: Mapping[str, Sequence[CallSignature]]) -> Calls:
    """The union of recorded call signatures (each once, sorted by ``call_key``)."""
    out: dict[str, dict[str, CallSignature]] = {}
    for part in parts:
        for function, signatures in part.items():
            out.setdefault(function, {}).update((call_key(s), s) for s in signatures)
    return {f: [found[k] for k in sorted(found)] for f, found in sorted(out.items())}


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


def signatures_text(recorded: Recorded, calls: Mapping[str, Sequence[CallSignature]] | None
                    = None, unrecorded: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """The file's text (sorted, so a re-recording of the same calls changes nothing).

    Compact JSON without spaces, one line per function's sizes and per recorded call: a
    thousand recorded calls wrote 326 kB indented, and a committed file still diffs line by
    line when a recording adds or drops a call."""
    functions = {f: {str(i): s for i, s in st.items()} for f, st in merged(recorded).items()}
    lines = [f"{_compact(name)}:{_compact(sizes)}" for name, sizes in functions.items()]
    parts = ['"functions":{' + ("\n" + ",\n".join(lines) if lines else "") + "}"]
    if calls:
        blocks = [f"{_compact(name)}:[\n" + ",\n".join(_compact(c) for c in signatures) + "]"
                  for name, signatures in merged_calls(calls).items()]
        parts.insert(0, '"calls":{\n' + ",\n".join(blocks) + "}")
    if unrecorded and (kept := merged_unrecorded(unrecorded)):
        lines = [f"{_compact(name)}:{_compact(reasons)}" for name, reasons in kept.items()]
        parts.append('"unrecorded":{\n' + ",\n".join(lines) + "}")
    parts.append(f'"version":{SIGNATURES_VERSION}')
    return "{" + ",\n".join(parts) + "}\n"


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


__all__ = ["FUNCTION_HELD", "FUNCTION_RUNS_SOURCE", "READABLE_VERSIONS", "SIGNATURES_NAME",
           "SIGNATURES_VERSION", "CallSignature", "Calls", "Recorded", "Unrecorded", "call_key",
           "merged", "merged_calls", "merged_unrecorded", "node_problem", "parse_calls",
           "parse_signatures", "parse_unrecorded", "rebuild", "signatures_text"]
