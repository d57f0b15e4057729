"""Shape strings that do not parse: the message names and marks the character at fault and
states the grammar."""

from __future__ import annotations

import pytest

from hatch_jaxexport import SpecError, exportable
from hatch_jaxexport.formats.dimensions import SHAPE_GRAMMAR, find_shape_problem, parse_shape


def _double(x):
    return x * 2


def _refusal(shape: str) -> str:
    with pytest.raises(SpecError) as caught:
        exportable({"x": (shape, "float32")})(_double)
    return str(caught.value)


def test_batch_d_names_the_d_marks_it_and_states_the_grammar():
    message = _refusal("batch d")
    first, shown, caret, *grammar = message.splitlines()
    assert first == (f"@exportable spec of {__name__}:_double, structure 0, argument 'x': cannot "
                     "parse shape 'batch d' at character 7 ('d'): a dimension ends before 'd': "
                     "separate dimensions with ',' or join them with an operator such as '*'")
    assert shown == "    batch d"
    assert caret == "          ^" and caret.index("^") == shown.index("d")
    grammar_text = " ".join(line.strip() for line in grammar)
    assert grammar_text.startswith("A shape is a string of comma-separated dimensions")
    for piece in ("an integer >= 0 (3)", "a symbol (n, batch: a Python name)",
                  "max, min, mod, floordiv", "'' is a scalar"):
        assert piece in grammar_text


@pytest.mark.parametrize(("shape", "position", "problem"), [
    ("n, a / 2", 6, "unexpected '/': use floordiv(a, b)"),
    ("n % 2", 3, "unexpected '%': use mod(a, b)"),
    ("n**2", 2, "unexpected '**': write the product, n*n"),
    ("n, 2.5", 5, "unexpected '.': sizes are integers"),
    ("n, ...", 4, "unexpected '...': '...' is not supported: name every dimension"),
    ("'n', 3", 1, "unexpected \"'\": write the dimensions without quotes"),
    ("2n", 2, "a dimension ends before 'n'"),
    ("(n, m", 1, "this '(' is never closed"),
    ("n, m)", 5, "this ')' closes nothing"),
    ("n +", 3, "'+' needs a right operand"),
    ("n, , m", 4, "an empty dimension"),
    ("n, if", 4, "'if' is a Python keyword and cannot be a dimension symbol"),
    ("max, n", 1, "'max' is a function, as in max(a, b), not a symbol"),
    ("n, f(n)", 4, "'f(n)': only max, min, mod and floordiv can be called"),
    ("n, -1", 4, "negative dimension '-1'"),
    ("  batch d", 9, "a dimension ends before 'd'"),  # positions count the raw string
    ("(a, b c)", 7, "a dimension ends before 'c'"),
])
def test_each_problem_is_named_at_its_character(shape, position, problem):
    message = _refusal(shape)
    assert f"cannot parse shape {shape!r} at character {position} " \
           f"({shape[position - 1]!r}): {problem}" in message
    shown, caret = message.splitlines()[1:3]
    assert shown == f"    {shape}" and caret == " " * (3 + position) + "^"


@pytest.mark.parametrize("shape", ["a, b", "(a, 2*b)", "n,", "", "()", "max(a, b), mod(c, 2)",
                                   "2*n + 1, 3", "floordiv(n, 2)", "(a) + (b)", "-1 + n"])
def test_the_grammar_accepts_what_it_states(shape):
    parse_shape(shape)  # raises if not


@pytest.mark.parametrize("body", ["a, b", "a, 2*b", "n", "max(a, b), mod(c, 2)", "(a) + (b)",
                                  "2*n + 1, 3", "-1 + n"])
def test_the_scan_finds_nothing_wrong_in_valid_dimensions(body):
    assert find_shape_problem(body) is None


def test_a_tuple_item_that_does_not_parse_is_named_by_position():
    with pytest.raises(SpecError) as caught:
        exportable({"x": (("n", "m m"), "float32")})(_double)
    assert "argument 'x': the shape ('n', 'm m'), position 1: cannot parse shape 'm m' at " \
           "character 3 ('m')" in str(caught.value)


def test_grammar_names_what_the_parser_accepts():
    for accepted in ("+, -, *", "max, min, mod", "floordiv", "parentheses", "(3, 'n')"):
        assert accepted in SHAPE_GRAMMAR
