"""Where each function's records lie in a manifest's bytes, so that a first call decodes its own.

A manifest lists every record of its package, and decoding all of it as JSON grows with the
package (about 1 ms per 100 kB: ``benchmarks/manifest_scale.py``), while a function's first call
needs its own records only. So the writer (``manifest.Manifest.to_bytes``) appends one last key,
``record_spans``:

- ``sha256``: the SHA-256 of the manifest's bytes before the key (from ``{`` to the comma);
- ``lists``: where each list of records (``artifacts``, ``executables``...) lies, ``[start,
  end]``, byte offsets of its ``[`` and one past its ``]``;
- ``functions``: per function, per list, the runs of its records: ``[start, end, first]``, the
  byte offsets of the first record's ``{`` and one past the last one's ``}``, and the first
  record's index in the list.

A reader that finds the key last and the hash matching decodes the header (the manifest with its
lists left empty) and, for a function, its runs (``read_spans``). Any other manifest (written
before the key existed, edited, damaged, or with spans that do not read cleanly) is decoded
whole, as it always was. The spans index the manifest's own text and are never a second copy of
a record: a record is always decoded from the manifest's bytes, and validated as before.
"""

import hashlib
import itertools
import json
from collections.abc import Mapping
from typing import Any

#: The manifest key that holds the spans, written last.
SPANS_KEY = "record_spans"
#: The lists of records a manifest spans, and the field that names each record's function
#: (an executable's ``artifact`` id starts with ``<function>/``).
SPANNED = {"artifacts": "function", "concrete": "function", "executables": "artifact",
           "failed_calls": "function", "skipped": "function"}
_MARKER = b',"' + SPANS_KEY.encode() + b'":'
_END = b"}\n"


def _dumps(value: Any) -> str:
    """A value as the manifest writes it: sorted keys, no spaces, ASCII."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def record_owner(record: Mapping[str, Any], field: str) -> str:
    """The function a record belongs to (``field``: ``SPANNED``'s)."""
    return str(record[field]).split("/", 1)[0]


def manifest_text(data: Mapping[str, Any]) -> str:
    """``data`` as the manifest's JSON text (``_dumps``, byte for byte), then the spans of its
    record lists as the last key, and a newline."""
    parts: list[str] = ["{"]
    offset = 1
    lists: dict[str, list[int]] = {}
    functions: dict[str, dict[str, list[list[int]]]] = {}
    for key in sorted(data):
        head = ("," if offset > 1 else "") + _dumps(key) + ":"
        offset += len(head)
        value = data[key]
        if key in SPANNED and isinstance(value, list):
            text = _spanned_list(key, value, offset, functions)
            lists[key] = [offset, offset + len(text)]
        else:
            text = _dumps(value)
        parts += (head, text)
        offset += len(text)
    body = "".join(parts)
    table = {"sha256": hashlib.sha256(body.encode()).hexdigest(), "lists": lists,
             "functions": functions}
    return body + ("," if offset > 1 else "") + _dumps(SPANS_KEY) + ":" + _dumps(table) + "}\n"


def _spanned_list(key: str, records: list[Any], offset: int,
                  functions: dict[str, dict[str, list[list[int]]]]) -> str:
    """The list ``records`` as text starting at ``offset``; each record's run is added to
    ``functions`` (a record that follows one of its function extends that run)."""
    texts = [_dumps(record) for record in records]
    start, previous = offset + 1, None
    for index, (record, text) in enumerate(zip(records, texts, strict=True)):
        owner = record_owner(record, SPANNED[key])
        runs = functions.setdefault(owner, {}).setdefault(key, [])
        if owner == previous:
            runs[-1][1] = start + len(text)
        else:
            runs.append([start, start + len(text), index])
        start, previous = start + len(text) + 1, owner
    return "[" + ",".join(texts) + "]"


class RecordSpans:
    """A manifest's bytes and their spans, checked against the bytes' hash: its header and
    each function's records, decoded apart."""

    __slots__ = ("body", "functions", "lists")

    def __init__(self, body: bytes, lists: list[tuple[str, int, int]],
                 functions: dict[str, Any]) -> None:
        self.body, self.lists, self.functions = body, lists, functions

    def header(self) -> dict[str, Any] | None:
        """The manifest's top-level object with every spanned list empty; ``None`` if that
        does not decode to an object."""
        pieces, at = [], 0
        for _key, start, end in self.lists:
            pieces += (self.body[at:start], b"[]")
            at = end
        pieces += (self.body[at:], b"}")
        try:
            found = json.loads(b"".join(pieces))
        except ValueError:
            return None
        return found if isinstance(found, dict) else None

    def records(self, function: str, key: str) -> list[tuple[int, Any]] | None:
        """``function``'s records of list ``key`` as ``(index, JSON)`` pairs; ``None`` where
        its runs do not lie inside that list or do not decode to a list of records."""
        bounds = next(((s, e) for k, s, e in self.lists if k == key), None)
        runs = self.functions.get(function, {})
        runs = runs.get(key, []) if isinstance(runs, dict) else None
        if not isinstance(runs, list) or (runs and bounds is None):
            return None
        found: list[tuple[int, Any]] = []
        for run in runs:
            if not (isinstance(run, list) and len(run) == 3 and _are_ints(run)
                    and bounds[0] < run[0] <= run[1] < bounds[1] and run[2] >= 0):
                return None
            try:
                items = json.loads(b"[" + self.body[run[0]:run[1]] + b"]")
            except ValueError:
                return None
            found += enumerate(items, start=run[2])
        return found


def _are_ints(values: list[Any]) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def read_spans(data: bytes) -> RecordSpans | None:
    """The spans of manifest bytes ``data`` where its last key holds them, they describe these
    very bytes (the hash) and every list's span lies in order inside them; else ``None``."""
    at = data.rfind(_MARKER)
    if at < 0 or not data.endswith(_END):
        return None
    body = data[:at]
    try:
        table = json.loads(data[at + len(_MARKER):-len(_END)])
    except ValueError:
        return None
    if not isinstance(table, dict) or not isinstance(table.get("lists"), dict) or \
            not isinstance(table.get("functions"), dict) or \
            table.get("sha256") != hashlib.sha256(body).hexdigest():
        return None
    lists = []
    for key, span in table["lists"].items():
        if key not in SPANNED or not isinstance(span, list) or len(span) != 2 or \
                not _are_ints(span) or not 0 < span[0] < span[1] <= len(body) or \
                body[span[0]:span[0] + 1] != b"[" or body[span[1] - 1:span[1]] != b"]":
            return None
        lists.append((key, span[0], span[1]))
    lists.sort(key=lambda span: span[1])
    if any(before[2] > after[1] for before, after in itertools.pairwise(lists)):
        return None  # overlapping lists
    return RecordSpans(body, lists, table["functions"])


__all__ = ["SPANNED", "SPANS_KEY", "RecordSpans", "manifest_text", "read_spans", "record_owner"]
