"""What a build serves of each function: symbolically, only at concrete sizes, or not at all.

A structure whose symbolic export failed may still be served at the sizes the build knew
(``ConcreteRecord``), and a spec-less function only at its recorded calls; a user deciding
whether a wheel is a drop-in for its source needs that per function, in the build's log and
in ``jaxexport inspect``. Pure: it reads a ``Manifest``.
"""

from __future__ import annotations

import json
from typing import Any

from hatch_jaxexport.formats.manifest import Manifest, signature_text
from hatch_jaxexport.formats.statics import static_values_text


def _sizes_text(sizes: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(sizes.items()))


def _node_text(node: dict[str, Any]) -> str:
    ((kind, value),) = node.items()
    if kind == "array":
        return signature_text([value])
    if kind == "static":
        return repr(value)
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {_node_text(value[k])}" for k in sorted(value)) + "}"
    items = ", ".join(_node_text(v) for v in value)
    return f"[{items}]" if kind == "list" else f"({items}{',' if len(value) == 1 else ''})"


def call_text(call: str) -> str:
    """A recorded call (``formats.signatures.call_key`` text) for people: ``x=float32[6],
    mode='mul'``, its arrays' types and its static values, which tell apart two artifacts of
    calls with the same arrays (arguments by name, as the signature sorts them)."""
    try:
        signature = json.loads(call)
        return ", ".join(f"{name}={_node_text(signature[name])}" for name in sorted(signature))
    except (ValueError, TypeError, AttributeError, KeyError):  # not a signature: as written
        return call[:120]


def _node_distance(a: Any, b: Any) -> float:
    """How far apart two signature nodes are, from 0 (the same) to 1: an array of the same
    dtype and rank at other sizes is near (0.25), another dtype of the same shape nearer than
    another kind of value; containers of the same form by their items."""
    if a == b:
        return 0.0
    try:
        ((kind, value),), ((other_kind, other),) = a.items(), b.items()
    except (AttributeError, ValueError):
        return 1.0
    if kind != other_kind:
        return 1.0
    if kind == "array":
        same_rank = len(value[0]) == len(other[0])
        return 0.25 if same_rank and value[1] == other[1] else 0.5 if \
            value[0] == other[0] else 1.0
    if kind in ("list", "tuple") and len(value) == len(other) and value:
        return sum(map(_node_distance, value, other)) / len(value)
    if kind == "dict" and set(value) == set(other) and value:
        return sum(_node_distance(value[k], other[k]) for k in value) / len(value)
    return 1.0


def nearest_calls(call: str, recorded: Any, count: int = 3) -> list[str]:
    """The ``count`` recorded calls (``call_key`` texts) nearest to ``call``, each for people
    with the arguments it differs in: ``(mode='add', x=float32[6]) differs in x``. What a
    strict refusal of a spec-less function's call shows beside the call itself."""
    try:
        wanted = json.loads(call)
        ranked = []
        for text in recorded:
            other = json.loads(text)
            names = sorted(set(wanted) | set(other))
            far = {n: _node_distance(wanted.get(n), other.get(n)) for n in names}
            ranked.append((sum(far.values()), text, [n for n in names if far[n]]))
    except (ValueError, TypeError, AttributeError):  # not signatures: nothing to compare
        return []
    ranked.sort(key=lambda item: (item[0], item[1]))
    return [f"({call_text(text)})" + (f" differs in {', '.join(differ)}" if differ else "")
            for _, text, differ in ranked[:count]]


def coverage(manifest: Manifest) -> dict[str, str]:
    """Per function (sorted): ``symbolic: structure 0; only at sizes: structure 1 (n=8; n=16);
    not served: structure 2``. Only the parts that apply are named."""
    symbolic: dict[str, set[int]] = {}
    for record in manifest.artifacts:
        if (record.kind, record.batched) == ("primal", False):
            symbolic.setdefault(record.function, set()).add(record.structure_index)
    sized: dict[str, dict[int, set[str]]] = {}
    for record in manifest.concrete:
        static = static_values_text(record.static)
        text = " ".join(filter(None, [static, _sizes_text(record.sizes)])) \
            if record.structure_index >= 0 else \
            (call_text(record.call) if record.call else "") or signature_text(record.inputs) or "()"
        sized.setdefault(record.function, {}).setdefault(record.structure_index, set()).add(text)
    failed: dict[str, set[int]] = {}
    for skip in manifest.skipped:
        failed.setdefault(skip.function, set()).add(skip.structure_index)
    lines = {}
    for name in sorted(set(symbolic) | set(sized) | set(failed)):
        parts = []
        if symbolic.get(name):
            parts.append("symbolic: structure " + ", ".join(map(str, sorted(symbolic[name]))))
        for index, texts in sorted(sized.get(name, {}).items()):
            what = "only its recorded calls" if index < 0 else \
                f"only at sizes: structure {index}"
            parts.append(f"{what} ({'; '.join(sorted(texts))})")
        none = failed.get(name, set()) - symbolic.get(name, set()) - set(sized.get(name, {}))
        if none:
            parts.append("not served: structure " + ", ".join(map(str, sorted(none))))
        lines[name] = "; ".join(parts)
    return lines


def partial_coverage(manifest: Manifest) -> dict[str, str]:
    """``coverage`` of the functions not served symbolically in full (what a build log
    names: a function whose every structure has its symbolic artifact needs no line)."""
    return {name: text for name, text in coverage(manifest).items()
            if not text.startswith("symbolic") or ";" in text}


__all__ = ["call_text", "coverage", "nearest_calls", "partial_coverage"]
