"""The dimension grammar: symbolic shapes and constraints, parsed, checked and evaluated (pure).

A shape is jax.export's symbolic shape string (``"a, b"``, ``"2*n, 3"``, ``""`` for a scalar)
or a tuple of ints and such strings; a constraint is one comparison of two dimension
expressions (``"a >= 2"``). Python's parser reads both; ``find_shape_problem`` scans a shape the
way a user reads it, so that a message points at the character at fault (``"batch d"``: a comma
is missing before ``d``) with a caret line, and states the grammar (``SHAPE_GRAMMAR``).
The structure model built on it is ``spec``.
"""

from __future__ import annotations

import ast
import functools
import keyword
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: Function names allowed in symbolic dimension expressions (those jax.export parses).
DIM_FUNCTIONS = frozenset({"max", "min", "mod", "floordiv"})
#: The symbol of a batched member's batch dimension (``vmap=True``): in its artifact's shapes,
#: and in the signatures file beside a structure's own symbols, for an eager ``vmap``'s size.
BATCH_SYMBOL = "jxe_batch"
_CONSTRAINT_OPS = {ast.GtE: ">=", ast.LtE: "<=", ast.Eq: "=="}



#: The shape grammar, as the parser accepts it (stated in every shape error).
SHAPE_GRAMMAR = (
    "a shape is a string of comma-separated dimensions, each an integer >= 0 (3), a symbol "
    "(n, batch: a Python name) or an expression of them with +, -, * and max, min, mod, "
    "floordiv of two arguments (2*n, n + 1, max(a, b)); '' is a scalar, 'n' or 'n,' a vector, "
    "and the whole may be in parentheses; a tuple of ints and such strings, (3, 'n'), works too")

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
        if previous == "name" and last_name in DIM_FUNCTIONS and token != "(":
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
    if previous == "name" and last_name in DIM_FUNCTIONS:
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



class _DimensionError(ValueError):
    """A dimension expression that is not allowed; ``node`` is the part at fault (its position
    goes into the shape's message)."""

    def __init__(self, node: ast.AST, message: str) -> None:
        super().__init__(message)
        self.node = node


def _check_dim_ast(node: ast.AST, text: str) -> None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(
        node.value, bool
    ):
        if node.value < 0:
            raise _DimensionError(node, f"negative dimension in {text!r}")
        return
    if isinstance(node, ast.Name):
        if keyword.iskeyword(node.id) or node.id in DIM_FUNCTIONS:
            raise _DimensionError(node, f"{node.id!r} cannot be a dimension symbol")
        return
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
        _check_dim_ast(node.left, text)
        _check_dim_ast(node.right, text)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check_dim_ast(node.operand, text)
        return
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in DIM_FUNCTIONS and len(node.args) == 2 and not node.keywords):
        for arg in node.args:
            _check_dim_ast(arg, text)
        return
    part = ast.unparse(node)
    where = "" if part == text else f" in {text!r}"
    if isinstance(node, ast.Call):
        raise _DimensionError(node, f"{part!r}{where}: only max, min, mod and floordiv can be "
                              "called, each with two arguments")
    raise _DimensionError(node, f"unsupported dimension expression {part!r}{where} (use "
                          "integers, symbols, +, -, *, max, min, mod, floordiv)")


def parse_shape(raw: Any) -> tuple[str, ...]:
    """Parse ``"a, b"``, ``"(a, 2*b)"``, ``""`` or a sequence of ints/strings into dims;
    ``ValueError`` naming the character or position at fault and stating the grammar."""
    if isinstance(raw, str):
        return _parse_shape_text(raw)  # cached: a package repeats its shapes
    if isinstance(raw, Sequence):
        return tuple(_sequence_dim(raw, index, item) for index, item in enumerate(raw))
    raise ValueError(f"a shape is a string such as 'a, b' or a tuple such as (3, 'n'), got "
                     f"{raw!r} ({type(raw).__name__}); {SHAPE_GRAMMAR}")


def _shape_body(raw: str) -> tuple[str, int]:
    """The dimensions' text of a shape string (no outer parentheses or trailing comma) and
    where it starts in ``raw``."""
    start = len(raw) - len(raw.lstrip())
    text = raw.strip()
    if text.startswith("(") and text.endswith(")") and _closing_paren(text) == len(text) - 1:
        inner = text[1:-1]
        start += 1 + len(inner) - len(inner.lstrip())
        text = inner.strip()
    if text.endswith(","):
        text = text[:-1].rstrip()
    return text, start


def _closing_paren(text: str) -> int:
    """The index of the ``)`` that closes the ``(`` at index 0 (-1 if none)."""
    depth = 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return index
    return -1


@functools.lru_cache(maxsize=4096)
def _parse_shape_text(raw: str) -> tuple[str, ...]:
    text, start = _shape_body(raw)
    if not text:
        return ()
    problem = find_shape_problem(text)
    if problem is None:
        try:
            tree = ast.parse(f"({text},)", mode="eval").body
        except SyntaxError as err:  # what the scan missed: Python's own position and words
            problem = ((err.offset or 2) - 2, err.msg)
    if problem is not None:
        raise ValueError(shape_message(raw, start + problem[0], problem[1]))
    assert isinstance(tree, ast.Tuple)
    try:
        return tuple(_checked_dim(dim) for dim in tree.elts)
    except _DimensionError as err:  # col_offset counts the "(" the text was wrapped in
        raise ValueError(shape_message(raw, start + err.node.col_offset - 1, str(err))) from None


def _checked_dim(dim: ast.expr) -> str:
    text = ast.unparse(dim)
    _check_dim_ast(dim, text)
    if not dim_symbols(text) and _eval(dim, {}) < 0:
        raise _DimensionError(dim, f"negative dimension {text!r}")
    return text


def _sequence_dim(shape: Sequence[Any], index: int, item: Any) -> str:
    """One item of a tuple shape: an int, a dimension string or a jax symbolic dimension."""
    if item is None or (isinstance(item, bool | float | complex | Sequence | Mapping)
                        and not isinstance(item, str)):
        example = tuple("n" if d is None else d for d in shape)
        hint = (f"None is not a dimension: a size known only at call time needs a symbol: "
                f"write {example!r} or {', '.join(map(str, example))!r}" if item is None else
                "a dimension is an int >= 0, or a string such as 'n' or '2*n'")
        raise ValueError(f"the shape {shape!r} has {item!r} at position {index}: {hint}")
    if isinstance(item, int | np.integer) and item < 0:
        raise ValueError(f"the shape {shape!r} has the negative size {item} at position {index}")
    text = str(int(item) if isinstance(item, np.integer) else item)  # jax symbolic dims: str()
    try:
        dims = _parse_shape_text(text)
    except ValueError as err:
        raise ValueError(f"the shape {shape!r}, position {index}: {err}") from None
    if len(dims) != 1:
        raise ValueError(f"the shape {shape!r} has {item!r} at position {index}: one item is "
                         "one dimension (write the whole shape as one string, 'a, b', or "
                         "each dimension as an item, ('a', 'b'))")
    return dims[0]


@functools.lru_cache(maxsize=4096)
def _dim_ast(dim: str) -> ast.expr:
    return ast.parse(dim, mode="eval").body


@functools.lru_cache(maxsize=4096)
def dim_symbols(dim: str) -> frozenset[str]:
    """The symbol names a canonical dimension string uses."""
    return frozenset(
        n.id for n in ast.walk(_dim_ast(dim))
        if isinstance(n, ast.Name) and n.id not in DIM_FUNCTIONS
    )


def _eval(node: ast.AST, env: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        return -_eval(node.operand, env)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        return left * right
    if isinstance(node, ast.Call):
        a, b = (_eval(arg, env) for arg in node.args)
        name = node.func.id  # type: ignore[attr-defined]
        if name == "max":
            return max(a, b)
        if name == "min":
            return min(a, b)
        if b == 0:
            raise ZeroDivisionError(f"division by zero in {ast.unparse(node)}")
        return a % b if name == "mod" else a // b
    raise ValueError(f"cannot evaluate {ast.unparse(node)}")


def evaluate_dim(dim: str, env: Mapping[str, int]) -> int:
    """Evaluate a canonical dimension string with concrete symbol values (KeyError if unbound)."""
    return _eval(_dim_ast(dim), env)


@functools.lru_cache(maxsize=4096)
def aval_parts(text: str) -> tuple[str, tuple[str, ...]] | None:
    """The dtype name and dimensions of a type as jax prints it and a manifest records it
    (``float32[batch,8]``, ``int32[]``); ``None`` for a text outside this grammar (an extended
    dtype such as ``key<fry>[]``, a weak type's suffix, a dimension jax writes otherwise)."""
    dtype, bracket, rest = text.partition("[")
    if not bracket or not rest.endswith("]") or not dtype.isidentifier():
        return None
    try:
        return dtype, parse_shape(rest[:-1])
    except ValueError:
        return None


def typed_outputs(in_avals: Sequence[str], out_avals: Sequence[str],
                  in_types: Sequence[tuple[tuple[int, ...], str]]
                  ) -> list[tuple[tuple[int, ...], str]] | None:
    """The output types (shape, dtype name) of an artifact whose manifest record lists
    ``in_avals`` and ``out_avals`` (``aval_parts``), called with ``in_types``.

    The input dimensions that are a bare symbol bind it; every other input dimension is
    checked against the call's, and each output dimension is evaluated. This types a member
    of a transformation family without reading its StableHLO (which ``jax.eval_shape`` of its
    ``Exported`` would deserialize). ``None`` wherever the texts do not say exactly: a text
    outside the grammar, a symbol no input binds, a call of other types. The caller then
    types the call from the artifact itself."""
    if len(in_avals) != len(in_types):
        return None
    env: dict[str, int] = {}
    derived: list[tuple[str, int]] = []
    for text, (shape, dtype) in zip(in_avals, in_types, strict=True):
        parts = aval_parts(text)
        if parts is None or parts[0] != dtype or len(parts[1]) != len(shape):
            return None
        for dim, size in zip(parts[1], shape, strict=True):
            if dim.isdigit():
                if int(dim) != size:
                    return None
            elif dim.isidentifier():
                if env.setdefault(dim, size) != size:
                    return None
            else:
                derived.append((dim, size))
    outputs = [aval_parts(text) for text in out_avals]
    try:
        if any(evaluate_dim(dim, env) != size for dim, size in derived):
            return None
        typed = [(tuple(evaluate_dim(dim, env) for dim in parts[1]), parts[0])
                 for parts in outputs if parts is not None]
    except (KeyError, ValueError, ZeroDivisionError):
        return None
    if len(typed) != len(outputs) or any(size < 0 for shape, _ in typed for size in shape):
        return None
    return typed


def parse_constraint(raw: str) -> str:
    """Validate a jax.export constraint (``"a >= 2"``, ``"b <= 10"``, ``"c == 2*a"``)."""
    if not isinstance(raw, str):
        raise ValueError(f"a constraint must be a string, got {type(raw).__name__}")
    try:
        node = ast.parse(raw, mode="eval").body
    except SyntaxError as err:
        raise ValueError(f"cannot parse constraint {raw!r}") from err
    if (not isinstance(node, ast.Compare) or len(node.ops) != 1
            or type(node.ops[0]) not in _CONSTRAINT_OPS):
        raise ValueError(f"constraint {raw!r} must be one comparison with >=, <= or ==")
    for side in (node.left, node.comparators[0]):
        _check_dim_ast(side, raw)
    return f"{ast.unparse(node.left)} {_CONSTRAINT_OPS[type(node.ops[0])]} " \
           f"{ast.unparse(node.comparators[0])}"


def check_constraint(constraint: str, env: Mapping[str, int]) -> bool:
    """Whether concrete symbol values satisfy a canonical constraint."""
    node = _dim_ast(constraint)
    assert isinstance(node, ast.Compare)
    left, right = _eval(node.left, env), _eval(node.comparators[0], env)
    op = node.ops[0]
    if isinstance(op, ast.GtE):
        return left >= right
    if isinstance(op, ast.LtE):
        return left <= right
    return left == right


def constraint_symbols(constraint: str) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(_dim_ast(constraint))
                     if isinstance(n, ast.Name) and n.id not in DIM_FUNCTIONS)


__all__ = ["BATCH_SYMBOL", "DIM_FUNCTIONS", "SHAPE_GRAMMAR", "aval_parts", "check_constraint",
           "constraint_symbols", "dim_symbols", "evaluate_dim", "find_shape_problem",
           "parse_constraint", "parse_shape", "shape_message", "typed_outputs"]
