"""The reference pages list what the code accepts, read from the code itself.

- Every keyword option of ``hatch_jaxexport.exportable`` (from ``inspect.signature``) has a
  row in the options table of ``docs/spec-format.md`` (and no row names an option that is gone),
  and the per-function list of ``docs/configuration.md`` names it.
- Every ``HATCH_JAXEXPORT_*`` variable named anywhere in ``hatch_jaxexport/`` is declared in
  ``formats/settings.py`` (a ``*_ENV`` constant) and has a row in the run-time table of
  ``docs/configuration.md`` whose default is the one the code has: what the variable's reader
  in ``settings`` returns for an empty environment (``True``: on, ``False``: off), or, where it
  returns ``None`` (the caller decides), the caller's rule (``CALLER_DEFAULTS``).

A new variable needs a ``*_ENV`` constant and a reader taking ``environ`` in ``settings`` (as
the others have) and a row in the table; nothing here changes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import pytest
from conftest import ROOT

from hatch_jaxexport import exportable
from hatch_jaxexport.formats import settings

DOCS = ROOT / "docs"
SOURCE = ROOT / "hatch_jaxexport"
VARIABLE = re.compile(r"HATCH_JAXEXPORT_[A-Z0-9_]+")


def tables(markdown: str) -> list[list[list[str]]]:
    """Every pipe table of a Markdown page: its rows (header first, no separator row), each a
    list of stripped cells."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def table_with_header(markdown: str, first_cell: str) -> list[list[str]]:
    """The body rows of the first table whose header starts with ``first_cell``."""
    for table in tables(markdown):
        if table[0][0].lower() == first_cell.lower():
            return table[1:]
    raise AssertionError(f"no table with a {first_cell!r} column")


def code_names(cell: str) -> list[str]:
    return re.findall(r"`(\w+)`", cell)


def exportable_options() -> dict[str, inspect.Parameter]:
    return {name: p for name, p in inspect.signature(exportable).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


# --------------------------------------------------------------------------------------------
# @exportable's options


def test_every_exportable_option_has_a_row_on_the_spec_format_page():
    options = exportable_options()
    assert {"name", "platforms", "tiered", "x64", "mesh", "concrete"} <= set(options)
    rows = table_with_header((DOCS / "spec-format.md").read_text(), "Option")
    documented = {name: row for row in rows for name in code_names(row[0])}
    missing = sorted(set(options) - set(documented))
    assert not missing, f"spec-format.md's options table lacks {missing}"
    stale = sorted(set(documented) - set(options))
    assert not stale, f"spec-format.md documents options @exportable no longer takes: {stale}"
    for name, parameter in options.items():  # a plain default is stated as the code has it
        default = parameter.default
        if isinstance(default, bool | int) and default is not None:
            assert f"`{default!r}`" in documented[name][1], (name, default, documented[name][1])


def test_the_configuration_page_lists_every_exportable_option_per_function():
    text = (DOCS / "configuration.md").read_text()
    found = re.search(r"^- \*\*Per function\*\*(.*?)^- \*\*Per build\*\*", text, re.M | re.S)
    assert found, "configuration.md has no **Per function** item"
    missing = sorted(set(exportable_options()) - set(code_names(found.group(1))))
    assert not missing, f"configuration.md's per-function options omit {missing}"


# --------------------------------------------------------------------------------------------
# HATCH_JAXEXPORT_* variables


def variables_in_source() -> dict[str, list[str]]:
    """Each ``HATCH_JAXEXPORT_*`` name in the package's source, with the files naming it."""
    found: dict[str, list[str]] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        for name in set(VARIABLE.findall(path.read_text())):
            found.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    return found


def declared_variables() -> dict[str, str]:
    """``HATCH_JAXEXPORT_*`` name to its constant's name in ``formats/settings.py``."""
    return {value: key for key, value in vars(settings).items()
            if key.endswith("_ENV") and isinstance(value, str) and VARIABLE.fullmatch(value)}


def readers(constant: str) -> list[Callable[..., object]]:
    """The functions of ``settings`` that read the variable of ``constant``."""
    return [fn for _, fn in inspect.getmembers(settings, inspect.isfunction)
            if fn.__module__ == settings.__name__ and constant in fn.__code__.co_names]


def _tiered_default() -> str:
    """``HATCH_JAXEXPORT_TIERED`` unset: the size rule of ``runtime/executables/tier_policy.py``."""
    from hatch_jaxexport.runtime.executables.tier_policy import (
        QUICK_OPTIONS,
        TIER_MIN_MODULE_BYTES,
        tiering_wanted,
    )

    threshold = TIER_MIN_MODULE_BYTES
    assert tiering_wanted("cpu", None, threshold) and not tiering_wanted("cpu", None, threshold - 1)
    assert set(QUICK_OPTIONS) == {"cpu"}
    assert not any(tiering_wanted(p, None, 10 * threshold) for p in ("cuda", "rocm", "tpu"))
    assert threshold % 1024 == 0, "state the threshold in bytes on the page and here"
    return f"on for CPU artifacts of {threshold // 1024} kB or more"


def _background_compiles_default() -> str:
    """``HATCH_JAXEXPORT_BACKGROUND_COMPILES`` unset: the rule of
    ``runtime/executables/_background.py``."""
    from hatch_jaxexport.runtime.executables._background import default_slots

    assert [default_slots(n) for n in (1, 4, 7, 8, 12, 16, 64)] == [1, 1, 1, 2, 3, 4, 4]
    return "a quarter of the CPU cores, 1 to 4"


#: Variables whose reader returns ``None`` when unset (the caller's default applies): how the
#: page states that default, checked against the caller's code.
CALLER_DEFAULTS: dict[str, Callable[[], str]] = {
    settings.TIERED_ENV: _tiered_default,
    settings.BACKGROUND_COMPILES_ENV: _background_compiles_default,
}


def code_default(variable: str, constant: str) -> str:
    """The default of ``variable`` as the page should state it, from the code."""
    functions = readers(constant)
    assert functions, (f"{variable}: no function of formats/settings.py reads {constant}; add "
                       "a reader taking `environ`, so that its default can be read")
    values = set()
    for fn in functions:
        assert "environ" in inspect.signature(fn).parameters, (fn.__name__, "takes no environ")
        values.add(fn(environ={}))
    assert len(values) == 1, f"{variable}: its readers disagree when it is unset: {values}"
    (value,) = values
    if value is None:
        assert variable in CALLER_DEFAULTS, (
            f"{variable} unset leaves the default to the caller: add the caller's rule to "
            "CALLER_DEFAULTS in this test")
        return CALLER_DEFAULTS[variable]()
    return {True: "on", False: "off"}.get(value, str(value))  # type: ignore[call-overload]


def configuration_variables() -> dict[str, str]:
    """The run-time table of configuration.md: variable to its stated default."""
    rows = table_with_header((DOCS / "configuration.md").read_text(), "variable")
    return {row[0].strip("`"): row[1].replace("`", "").strip() for row in rows}


def test_every_variable_the_code_names_is_declared_in_settings():
    declared = declared_variables()
    assert set(declared) >= {"HATCH_JAXEXPORT_STRICT", "HATCH_JAXEXPORT_TIERED"}, declared
    undeclared = {name: files for name, files in variables_in_source().items()
                  if name not in declared}
    assert not undeclared, ("declare these in hatch_jaxexport/formats/settings.py (a NAME_ENV "
                            f"constant and a reader), as every other one is: {undeclared}")


def test_the_configuration_page_lists_every_variable():
    wanted = set(declared_variables()) | set(variables_in_source())
    on_page = set(configuration_variables())
    assert not wanted - on_page, f"configuration.md's table lacks {sorted(wanted - on_page)}"
    assert not on_page - wanted, f"configuration.md lists unknown {sorted(on_page - wanted)}"


@pytest.mark.parametrize("variable", sorted(declared_variables()))
def test_the_configuration_page_states_the_default_the_code_has(variable, monkeypatch):
    monkeypatch.delenv(variable, raising=False)  # a caller's rule reads the real environment
    expected = code_default(variable, declared_variables()[variable])
    stated = configuration_variables().get(variable)
    assert stated == expected, (f"configuration.md says {variable} defaults to {stated!r}; "
                                f"the code: {expected!r}")


def test_the_tiered_default_reads_the_same_on_the_spec_format_page(monkeypatch):
    monkeypatch.delenv(settings.TIERED_ENV, raising=False)
    assert _tiered_default() in (DOCS / "spec-format.md").read_text()
