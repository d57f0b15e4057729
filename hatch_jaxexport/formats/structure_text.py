"""Short forms of long structure texts, for call-time errors and ``jaxexport inspect``.

A structure's text (``Structure.key``: ``params: {w: float32[i, o], b: float32[o]}; x: ...``)
repeats a whole pytree: with flax or optax parameters that is hundreds of characters per
structure. ``abbreviate_structure`` keeps every argument's name and as many levels of its tree
as fit, the deeper ones elided as ``{…}`` (then the later items of a level as ``…``), so that one
structure fits a terminal row. Pure text in, text out: the manifest records structures as text,
and errors list the same text. ``HATCH_JAXEXPORT_FULL_STRUCTURES`` (``settings``) and
``jaxexport inspect --full`` show the whole text instead.
"""

from typing import NamedTuple

#: What stands for the elided part of a tree.
ELLIPSIS = "\u2026"
#: How wide an abbreviated structure may be (characters).
DEFAULT_WIDTH = 72

_CLOSERS = {"{": "}", "(": ")", "[": "]"}


class _Group(NamedTuple):
    """A bracketed part of a tree: ``{...}``, ``(...)`` (a tuple or a class's fields) or a
    list ``[...]``; ``items`` are its comma-separated parts, each a sequence of nodes."""

    opener: str
    items: "list[list[str | _Group]]"  # the class itself: a forward reference


def _quoted_end(text: str, start: int) -> int:
    """The position after the string literal opening at ``start`` (a repr in a static field)."""
    quote = text[start]
    pos = start + 1
    while pos < len(text) and text[pos] != quote:
        pos += 2 if text[pos] == "\\" else 1
    if pos >= len(text):
        raise ValueError("unterminated string")
    return pos + 1


def _bracket_end(text: str, start: int) -> int:
    """The position after the bracket opening at ``start`` and its match."""
    depth = 0
    pos = start
    while pos < len(text):
        char = text[pos]
        if char in "'\"":
            pos = _quoted_end(text, pos)
            continue
        depth += char in _CLOSERS
        depth -= char in _CLOSERS.values()
        pos += 1
        if depth == 0:
            return pos
    raise ValueError("unbalanced brackets")


def _parse(text: str, pos: int, closer: str) -> tuple[list[list[str | _Group]], int]:
    """The items of a group (or of the top level, ``closer=""``) from ``pos``, and the position
    after its closer. A ``[`` right after a name is a shape (``float32[n, 2*m]``): kept whole."""
    items: list[list[str | _Group]] = []
    current: list[str | _Group] = []
    start = pos

    def flush(end: int) -> None:
        if end > start:
            current.append(text[start:end])

    while pos < len(text):
        char = text[pos]
        if char in "'\"" or (char == "[" and pos and (text[pos - 1].isalnum()
                                                      or text[pos - 1] == "_")):
            pos = _quoted_end(text, pos) if char in "'\"" else _bracket_end(text, pos)
        elif char in _CLOSERS:
            flush(pos)
            inner, pos = _parse(text, pos + 1, _CLOSERS[char])
            current.append(_Group(char, inner))
            start = pos
        elif char in _CLOSERS.values():
            if char != closer:
                raise ValueError("unbalanced brackets")
            flush(pos)
            items.append(current)
            return items, pos + 1
        elif char == "," and text[pos + 1:].lstrip()[:1] not in ("", closer):
            flush(pos)
            items.append(current)
            current = []
            pos += 1
            while pos < len(text) and text[pos] == " ":
                pos += 1
            start = pos
        else:
            pos += 1
    if closer:
        raise ValueError("unbalanced brackets")
    flush(pos)
    items.append(current)
    return items, pos


def _depth(nodes: list[str | _Group]) -> int:
    return max((1 + max((_depth(item) for item in node.items), default=0)
                for node in nodes if isinstance(node, _Group)), default=0)


def _render(nodes: list[str | _Group], depth: int, keep: int, items: int | None) -> str:
    """The nodes with groups deeper than ``keep`` elided, and at most ``items`` items of each
    group shown."""
    out = []
    for node in nodes:
        if isinstance(node, str):
            out.append(node)
            continue
        closer = _CLOSERS[node.opener]
        if node.items in ([], [[]]):
            out.append(node.opener + closer)
        elif depth >= keep:
            out.append(node.opener + ELLIPSIS + closer)
        else:
            shown = node.items if items is None else node.items[:items]
            parts = [_render(item, depth + 1, keep, items) for item in shown]
            if len(shown) < len(node.items):
                parts.append(ELLIPSIS)
            out.append(node.opener + ", ".join(parts) + closer)
    return "".join(out)


def _parts(text: str) -> list[str]:
    """The ``; ``-separated parts of a structure's text (arguments, then ``where ...``)."""
    parts, start, pos = [], 0, 0
    while pos < len(text):
        if text[pos] in "'\"":
            pos = _quoted_end(text, pos)
        elif text[pos] in _CLOSERS:
            pos = _bracket_end(text, pos)
        elif text.startswith("; ", pos):
            parts.append(text[start:pos])
            pos = start = pos + 2
        else:
            pos += 1
    return [*parts, text[start:]]


def abbreviate_structure(text: str, width: int = DEFAULT_WIDTH) -> str:
    """``text`` if it is at most ``width`` characters, else the longest shorter form that fits:
    each argument's tree to some depth, deeper levels elided (``{…}``), and possibly only the
    first items of each level (then ``…``); as a last resort the arguments that fit, then
    ``; …`` (or the text cut at ``width``). Never raises: a text it cannot read
    (unbalanced brackets) is cut."""
    if len(text) <= width:
        return text
    try:
        trees = []
        for part in _parts(text):
            name, sep, tree = part.partition(": ")
            if part.startswith("where ") or not sep:
                trees.append((part, None))
            else:
                items = _parse(tree, 0, "")[0]
                trees.append((part, None) if len(items) != 1 else (name + sep, items[0]))
    except (ValueError, IndexError):
        return text[:width - 1] + ELLIPSIS
    deepest = max((_depth(tree) for _, tree in trees if tree is not None), default=0)
    # every level kept to some depth, or the first items of each level to a deeper one: the
    # longest form that fits says the most
    fitting = []
    for keep in range(deepest, -1, -1):
        for items in (None, 3, 1):
            short = "; ".join(head if tree is None else head + _render(tree, 0, keep, items)
                              for head, tree in trees)
            if len(short) <= width:
                fitting.append(short)
    if fitting:
        return max(fitting, key=len)
    cut = short.rfind("; ", 0, width - 2)  # too many arguments: the first ones, whole
    return short[:cut] + "; " + ELLIPSIS if cut > 0 else short[:width - 1] + ELLIPSIS


__all__ = ["DEFAULT_WIDTH", "ELLIPSIS", "abbreviate_structure"]
