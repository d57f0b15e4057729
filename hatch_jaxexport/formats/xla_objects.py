"""One order for the object files inside a serialized XLA:CPU executable, so builds repeat.

A serialized CPU executable (``PjRtClient.serialize_executable``) is a length-prefixed IFRT
header, then the compilation result: a protobuf whose field 1 holds XLA's
``CompilationResultProto``, which lists one object file per LLVM module it compiled (its
repeated field 8: the ELF bytes and the emitter's name). XLA appends each as its compile task
finishes on a thread pool, so two compiles of one function list the same object files in
another order: the bytes differ (by kilobytes: everything after the first swap moves), and so do
the manifest's SHA-256 and the wheel's ``RECORD``. Measured on jax 0.10.2: an MLP's batch-1
executable had 6 distinct serializations in 6 fresh processes, no XLA flag or compile option
fixed it, and sorting the entries made all 57 runs of every tried configuration identical.

``canonical_order`` sorts that run of entries by their bytes. Nothing else moves and no length
changes; XLA loads the object files by name, and a sorted executable loads and gives results
bitwise-equal to an unsorted one (``tests/integration/test_reproducible_executables.py``).
Where the layout is not the one described, the bytes are returned as they are: the build stays
correct, only not byte-identical. A dozen lines of wire-format reading rather than the
``protobuf`` package: it would add a dependency to the build for two field numbers, and it has
no schema for jaxlib's private message either.
"""

from __future__ import annotations

#: The field of the IFRT envelope that holds the compilation result, and the result's field
#: that repeats once per object file (both length-delimited).
RESULT_FIELD, OBJECT_FILE_FIELD = 1, 8
_LENGTH_DELIMITED = 2


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """``(field, wire type, entry start, value start, entry end)`` of each field in
    ``data[start:end]``; ``ValueError`` where it is not protobuf wire format."""
    found, at = [], start
    while at < end:
        entry = at
        key, at = _varint(data, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, at = _varint(data, at)
            value = at
        elif wire in (1, 5):
            value, at = at, at + (8 if wire == 1 else 4)
        elif wire == _LENGTH_DELIMITED:
            size, value = _varint(data, at)
            at = value + size
        else:
            raise ValueError(f"wire type {wire}")
        if at > end:
            raise ValueError("a field runs past its message")
        found.append((field, wire, entry, value, at))
    return found


def canonical_order(blob: bytes) -> bytes:
    """``blob`` with its object-file entries sorted by their bytes (unchanged where the layout
    is not the expected one, or holds fewer than two)."""
    try:
        header, at = _varint(blob, 0)
        results = [f for f in _fields(blob, at + header, len(blob))
                   if f[0] == RESULT_FIELD and f[1] == _LENGTH_DELIMITED]
        if len(results) != 1:
            return blob
        inner = _fields(blob, results[0][3], results[0][4])
        runs = [i for i, f in enumerate(inner)
                if f[0] == OBJECT_FILE_FIELD and f[1] == _LENGTH_DELIMITED]
        if len(runs) < 2 or runs != list(range(runs[0], runs[-1] + 1)):
            return blob  # none to order, or not one contiguous run: leave it
        start, end = inner[runs[0]][2], inner[runs[-1]][4]
        entries = sorted(blob[inner[i][2]:inner[i][4]] for i in runs)
        return blob[:start] + b"".join(entries) + blob[end:]
    except (IndexError, ValueError):
        return blob


__all__ = ["OBJECT_FILE_FIELD", "RESULT_FIELD", "canonical_order"]
