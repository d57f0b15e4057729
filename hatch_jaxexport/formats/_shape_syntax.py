"""What is wrong with a shape string, where, and the grammar (pure; for ``spec``'s messages).

Python's parser, which reads shapes, reports ``"batch d"`` as invalid syntax at ``batch``; a
user needs the character at fault (``d``: a comma is missing before it) and the syntax itself.
``find_shape_problem`` scans the text the way a user reads it and ``shape_message`` points at the
character with a caret line and states the grammar.
"""

from __future__ import annotations

import keyword
import re

#: The shape grammar, as the parser accepts it (stated in every shape error).
SHAPE_GRAMMAR = (
    "a shape is a string of comma-separated dimensions, each an integer >= 0 (3), a symbol "
    "(n, batch: a Python name) or an expression of them with +, -, * and max, min, mod, "
    "floordiv of two arguments (2*n, n + 1, max(a, b)); '' is a scalar, 'n' or 'n,' a vector, "
    "and the whole may be in parentheses; a tuple of ints and such strings, (3, 'n'), works too")

_FUNCTIONS = frozenset({"max", "min", "mod", "floordiv"})
#: One token of a shape (compiled on first use, by ``re``'s cache: not at import).
_TOKEN = r"\s+|(?P<name>[^\W\d]\w*)|(?P<number>\d+)|(?P<op>\*\*|//|\.\.\.|[-+*(),])|."
#: Characters a user may try, and what to write instead.
_INSTEAD = {
    "/": "use floordiv(a, b)", "//": "use floordiv(a, b)", "%": "use mod(a, b)",
    "**": "write the product, n*n", ".": "sizes are integers",
    "...": "'...' is not supported: name every dimension",
    "'": "write the dimensions without quotes, 'a, b'",
    '"': "write the dimensions without quotes, 'a, b'", "[": "use parentheses or none",
    "]": "use parentheses or none", "?": "name the size with a symbol such as n",
}


def _lexical_problem(kind: str, token: str, previous: str | None) -> str | None:
    """What is wrong with ``token`` after a token of kind ``previous``, or ``None``."""
    operand_end = previous in ("name", "number", ")")
    if kind == "other":
        hint = _INSTEAD.get(token, "only names, integers, + - * ( ) and commas may appear")
        return f"unexpected {token!r}: {hint}"
    if kind == "op" and token in _INSTEAD:
        return f"unexpected {token!r}: {_INSTEAD[token]}"
    if kind in ("name", "number") and operand_end:
        return (f"a dimension ends before {token!r}: separate dimensions with ',' or join "
                "them with an operator such as '*'")
    if kind == "name" and keyword.iskeyword(token):
        return f"{token!r} is a Python keyword and cannot be a dimension symbol"
    if token == "(" and previous in ("number", ")"):
        return "an operator is missing before '('"
    if token in (",", ")") and previous in (None, ",", "(", "+", "-", "*"):
        return ("an empty dimension" if previous in (None, ",", "(")
                else f"{previous!r} needs a right operand before {token!r}")
    return None


def find_shape_problem(text: str) -> tuple[int, str] | None:
    """The index of the first character at fault in a shape's text, and what is wrong."""
    previous: str | None = None  # the kind of the previous token ("name", ...) or an operator
    open_parens: list[int] = []
    last_name, last_name_start = "", 0
    for match in re.finditer(_TOKEN, text):
        token = match.group()
        if token.isspace():
            continue
        kind = match.lastgroup or "other"
        problem = _lexical_problem(kind, token, previous)
        if problem is not None:
            return match.start(), problem
        if previous == "name" and last_name in _FUNCTIONS and token != "(":
            return last_name_start, f"{last_name!r} is a function, as in max(a, b), not a symbol"
        if token == "(":
            open_parens.append(match.start())
        elif token == ")":
            if not open_parens:
                return match.start(), "this ')' closes nothing"
            open_parens.pop()
        last_name, last_name_start = (token, match.start()) if kind == "name" else ("", 0)
        previous = kind if kind in ("name", "number") else token
    if open_parens:
        return open_parens[-1], "this '(' is never closed"
    end = len(text.rstrip()) - 1
    if previous in ("+", "-", "*"):
        return end, f"{previous!r} needs a right operand"
    if previous == ",":
        return end, "an empty dimension"
    if previous == "name" and last_name in _FUNCTIONS:
        return last_name_start, f"{last_name!r} is a function, as in max(a, b), not a symbol"
    return None


def shape_message(raw: str, index: int, problem: str) -> str:
    """``cannot parse shape`` with the character at ``index`` named and marked, and the
    grammar."""
    index = max(0, min(index, len(raw) - 1))
    char = raw[index] if raw else ""
    import textwrap  # only an error pays for it

    grammar = textwrap.fill(SHAPE_GRAMMAR[0].upper() + SHAPE_GRAMMAR[1:] + ".", 96,
                            initial_indent="  ", subsequent_indent="  ")
    return (f"cannot parse shape {raw!r} at character {index + 1} ({char!r}): {problem}\n"
            f"    {raw}\n    {' ' * index}^\n{grammar}")


__all__ = ["SHAPE_GRAMMAR", "find_shape_problem", "shape_message"]
