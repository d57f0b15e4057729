"""Every ``HATCH_JAXEXPORT_*`` variable is read by formats/settings, with one set of spellings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hatch_jaxexport.formats import settings

PACKAGE_DIR = Path(__file__).resolve().parents[3] / "hatch_jaxexport"


@pytest.mark.parametrize("value", ["1", "true", "YES", " on ", "True"])
def test_on_spellings(value: str) -> None:
    env = {settings.STRICT_ENV: value, settings.SKIP_ENV: value, settings.TIERED_ENV: value}
    assert settings.strict_mode(env) and settings.skip_requested(env)
    assert settings.tiered_choice(env) is True


@pytest.mark.parametrize("value", ["0", "false", "No", " off"])
def test_off_spellings(value: str) -> None:
    env = {settings.STRICT_ENV: value, settings.TIERED_ENV: value, settings.CACHE_ENV: value}
    assert not settings.strict_mode(env)
    assert settings.tiered_choice(env) is False
    assert settings.cache_choice(env) is False


def test_unset_and_unknown_values_leave_the_default() -> None:
    assert settings.tiered_choice({}) is None
    assert settings.tiered_choice({settings.TIERED_ENV: "sometimes"}) is None
    assert not settings.strict_mode({settings.STRICT_ENV: "sometimes"})
    assert settings.cache_choice({}) is True
    assert settings.cache_choice({settings.CACHE_ENV: " /tmp/jxe-cache "}) == "/tmp/jxe-cache"


def test_no_other_module_reads_a_hatch_jaxexport_variable_itself() -> None:
    """The variables' names come from settings: a string literal naming one elsewhere would be
    a second parser (docstrings and messages may mention them)."""
    names = {settings.STRICT_ENV, settings.TIERED_ENV, settings.CACHE_ENV, settings.SKIP_ENV}
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path.name == "settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(PACKAGE_DIR)}:{node.lineno} {node.value}")
    assert found == []


def test_shipped_executables_are_on_unless_turned_off():
    assert settings.shipped_executables_wanted({})
    assert settings.shipped_executables_wanted({settings.EXECUTABLES_ENV: "yes"})
    assert settings.shipped_executables_wanted({settings.EXECUTABLES_ENV: "maybe"})
    assert not settings.shipped_executables_wanted({settings.EXECUTABLES_ENV: " Off "})


def test_background_compiles_is_a_count_or_the_runtimes_default():
    read = settings.background_compiles
    assert read({}) is None and read({settings.BACKGROUND_COMPILES_ENV: " "}) is None
    assert read({settings.BACKGROUND_COMPILES_ENV: " 3 "}) == 3
    assert read({settings.BACKGROUND_COMPILES_ENV: "0"}) == 0  # none: tiering off
    for odd in ("-1", "two", "1.5"):
        assert read({settings.BACKGROUND_COMPILES_ENV: odd}) is None


def test_background_timeout_is_positive_seconds_or_the_default():
    read, default = settings.background_timeout, settings.DEFAULT_BACKGROUND_TIMEOUT_S
    assert read({}) == default == 600
    assert read({settings.BACKGROUND_TIMEOUT_ENV: "90"}) == 90.0
    assert read({settings.BACKGROUND_TIMEOUT_ENV: " 0.25"}) == 0.25
    for odd in ("0", "-5", "soon", "inf", "nan"):
        assert read({settings.BACKGROUND_TIMEOUT_ENV: odd}) == default


@pytest.mark.parametrize(("value", "limit"), [
    ("", settings.DEFAULT_CACHE_MAX_BYTES), ("500M", 500 << 20), ("2G", 2 << 30),
    ("1.5GiB", 3 << 29), (" 10 kb ", 10240), ("1048576", 1 << 20), ("0", None), ("off", None)])
def test_the_cache_limit_reads_sizes_in_binary_units(value: str, limit: int | None) -> None:
    assert settings.cache_max_bytes({settings.CACHE_MAX_BYTES_ENV: value}) == limit


@pytest.mark.parametrize("value", ["lots", "1X", "-5M", "on"])
def test_a_cache_limit_that_is_no_size_names_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match=f"HATCH_JAXEXPORT_CACHE_MAX_BYTES={value}: "
                                         f"'{value}' is not a size: give bytes or a number"):
        settings.cache_max_bytes({settings.CACHE_MAX_BYTES_ENV: value})
