"""Long structure texts get a short form that fits a row; short ones stay as they are."""

from __future__ import annotations

import pytest

from hatch_jaxexport.formats import settings
from hatch_jaxexport.formats.structure_reader import parse_structure
from hatch_jaxexport.formats.structure_text import DEFAULT_WIDTH, ELLIPSIS, abbreviate_structure

E = ELLIPSIS


def key(spec: dict) -> str:
    return parse_structure("f", spec, 0).key


FLAX = {"params": {"params": {f"Dense_{i}": {"bias": ("h,", "float32"),
                                             "kernel": ("h, h", "float32")} for i in range(3)}},
        "x": ("n, h", "float32")}


@pytest.mark.parametrize("text", ["x: float32[a, b]", "x: float32[n]; y: float32[n]; where n >= 2",
                                  "t: (float32[n],)", "s: Stats(mean=float32[n], spread=None)"])
def test_short_texts_are_unchanged(text):
    assert abbreviate_structure(text) == text


def test_a_flax_tree_keeps_its_argument_names_and_top_levels():
    full = key(FLAX)
    assert len(full) > 150
    short = abbreviate_structure(full)
    assert short == f"params: {{params: {{Dense_0: {{bias: float32[h], {E}}}, {E}}}}}; " \
                    "x: float32[n, h]"
    assert len(short) <= DEFAULT_WIDTH
    assert abbreviate_structure(full, width=55) == \
        f"params: {{params: {{Dense_0: {{{E}}}, {E}}}}}; x: float32[n, h]"
    assert abbreviate_structure(full, width=30) == f"params: {{{E}}}; x: float32[n, h]"


def test_many_items_at_one_level_show_the_first_ones():
    layers = {f"layer_{i}": {"w": ("8, 8", "float32"), "b": ("8,", "float32")} for i in range(30)}
    short = abbreviate_structure(key({"params": layers, "x": ("n, 8", "float32")}))
    assert short == (f"params: {{layer_0: {{{E}}}, layer_1: {{{E}}}, layer_2: {{{E}}}, {E}}}; "
                     "x: float32[n, 8]")


def test_shapes_strings_and_constraints_are_kept_whole():
    text = ("p: Pair(left=float32[n, 2*m + 1], right=Stats(mean=float32[max(n, m)], "
            "spread=float32[n]), tag='a}b{('); where mod(n, 2) == 0, n >= 2")
    short = abbreviate_structure(text, width=70)
    assert short == f"p: Pair(left=float32[n, 2*m + 1], {E}); where mod(n, 2) == 0, n >= 2"
    quoted = "q: Cls(x={a: float32[n], b: float32[n], c: float32[n]}, tag='a}b{(')"
    assert abbreviate_structure(quoted, width=30) == f"q: Cls(x={{{E}}}, tag='a}}b{{(')"


def test_too_many_arguments_keep_the_first_ones_whole():
    text = "; ".join(f"x{i}: float32[n]" for i in range(20))
    short = abbreviate_structure(text)
    assert short == "; ".join(f"x{i}: float32[n]" for i in range(4)) + f"; {E}"


@pytest.mark.parametrize("text", ["x: {{{ " + "a" * 100, "x: )" + "b" * 100,
                                  "x: 'unterminated " + "c" * 100])
def test_a_text_it_cannot_read_is_cut_never_an_error(text):
    short = abbreviate_structure(text)
    assert len(short) == DEFAULT_WIDTH and short.endswith(E)


def test_the_switch_is_a_setting():
    assert settings.full_structures({settings.FULL_STRUCTURES_ENV: "1"})
    assert not settings.full_structures({})
    assert not settings.full_structures({settings.FULL_STRUCTURES_ENV: "off"})
