"""Patterns real libraries use (issue 61), baked in process from ``jxe_patterns`` and called in
strict mode: a namedtuple bound under another name than its typename is found where it lives;
one that truly cannot be found is refused with the real cause."""

from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FIXTURES, import_baked

from hatch_jaxexport.bake import export_package
from hatch_jaxexport.runtime.artifacts import pytrees


@pytest.fixture(scope="module")
def patterns_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("patterns-site")
    shutil.copytree(FIXTURES / "jxe_patterns", site / "jxe_patterns",
                    ignore=shutil.ignore_patterns("__pycache__"))
    export_package("jxe_patterns", site / "jxe_patterns" / "_jaxexport", search_path=[site],
                   on_error="skip")
    return site


@pytest.fixture
def pkg(patterns_site: Path, monkeypatch: pytest.MonkeyPatch):
    return import_baked(patterns_site, "jxe_patterns", monkeypatch)


def _manifest(site: Path) -> dict:
    return json.loads((site / "jxe_patterns" / "_jaxexport" / "manifest.json").read_text())


def _records(site: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for record in _manifest(site)["artifacts"]:
        found.setdefault(record["function"], []).append(record)
    return found


def _skipped(site: Path) -> dict[str, str]:
    return {s["function"]: s["reason"] for s in _manifest(site)["skipped"]}


def test_a_renamed_namedtuple_is_named_where_it_lives(patterns_site: Path) -> None:
    (record,) = _records(patterns_site)["jxe_patterns:step"]
    assert record["pytree_types"] == ["jxe_patterns:StepOutput"]


def test_a_renamed_namedtuple_output_is_served_and_equals_the_source(pkg) -> None:
    x = jnp.arange(4, dtype=jnp.float32)
    got = pkg.step(x)
    assert pkg.TRACES["count"] == 0
    assert type(got) is pkg.StepOutput
    want = jax.jit(pkg.step.__wrapped__)(x)
    np.testing.assert_allclose(got.value, want.value)
    np.testing.assert_allclose(got.scale, want.scale)


def test_a_namedtuple_made_in_a_function_is_refused_with_the_real_cause(
        patterns_site: Path) -> None:
    reason = _skipped(patterns_site)["jxe_patterns:local_pair"]
    assert "jxe_patterns:local_pair: cannot serialize pytree type 'jxe_patterns:LocalPair': " \
           "no module-level name of 'jxe_patterns' holds it (made inside a function? each " \
           "call makes a new class, which the loader cannot find again); make it once at " \
           "module level and bind it to a name there (e.g. LocalPair = ...)" in reason, reason


def test_a_class_defined_in_a_function_is_named_so() -> None:
    def make() -> type:
        class Local(tuple):
            _fields = ("a",)
        return Local

    assert pytrees._not_found_again(make()) == (
        "it is defined inside a function (test_a_class_defined_in_a_function_is_named_so."
        "<locals>.make.<locals>.Local): each call makes a new class, which the loader cannot "
        "find again; define it at module level")


def test_a_class_bound_to_no_module_name_says_so() -> None:
    cls = collections.namedtuple("Orphan", ["a"])
    cls.__module__ = __name__
    assert pytrees.type_ref(cls) == f"{__name__}:Orphan"
    assert pytrees._not_found_again(cls) == (
        f"no module-level name of {__name__!r} holds it (made inside a function? each call "
        f"makes a new class, which the loader cannot find again); make it once at module level "
        f"and bind it to a name there (e.g. Orphan = ...)")
    globals()["Renamed"] = cls
    try:
        assert pytrees.type_ref(cls) == f"{__name__}:Renamed"
        assert pytrees._not_found_again(cls) == ""
    finally:
        del globals()["Renamed"]
