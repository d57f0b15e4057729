"""End to end, the second field: a package written with blackjax, numpyro, flax nnx and chex,
with a sparse matrix and a pyxu-style operator class, built by the Hatch hook through an
isolated ``python -m build``, installed in a fresh venv and called in strict mode with a trace
counter that must stay at 0; every result equals the source's, run in another process
(``tests/field2_calls.py`` lists the cases). The heavy installs run once, on the default Python
(the ``ecosystem`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _buildkit import build_install_and_call
from conftest import TESTS

LIBRARIES = ("jax", "blackjax", "numpyro", "flax", "chex")
CASES = ["blackjax-chain-fed-back", "numpyro-draws", "numpyro-vmap-keys",
         "numpyro-grad-mu-sigma", "nnx-dropout", "chex-dataclass", "chex-dataclass-grad",
         "sparse-matvec", "sparse-matvec-grad", "operator-class"]


@pytest.fixture(scope="module")
def field2_runs(tmp_path_factory: pytest.TempPathFactory, project_wheel: Path
                ) -> dict[str, dict[str, Any]]:
    """Build, install, verify; then the calls' results from the artifacts and from the source."""
    _, runs = build_install_and_call(tmp_path_factory.mktemp("field2"), "jxe_field2", LIBRARIES,
                                     project_wheel, TESTS / "field2_calls.py",
                                     ("artifact", "source"))
    return runs


@pytest.mark.slow
def test_no_body_ran_from_the_wheel(field2_runs: dict[str, dict[str, Any]]) -> None:
    assert field2_runs["artifact"]["traces"] == 0
    assert field2_runs["source"]["traces"] > 0
    assert sorted(field2_runs["artifact"]["cases"]) == sorted(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_loaded_equals_source(field2_runs: dict[str, dict[str, Any]], case: str) -> None:
    mine, reference = field2_runs["artifact"]["cases"][case], field2_runs["source"]["cases"][case]
    assert "error" not in mine, mine.get("error")
    assert "error" not in reference, reference.get("error")
    assert (mine["dtypes"], mine["types"]) == (reference["dtypes"], reference["types"])
    for got, want in zip(mine["leaves"], reference["leaves"], strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


@pytest.mark.slow
def test_the_sampler_state_came_back_as_blackjax_s_own_type(
        field2_runs: dict[str, dict[str, Any]]) -> None:
    chain = field2_runs["artifact"]["cases"]["blackjax-chain-fed-back"]
    assert "MALAState" in chain["types"]
    assert chain["dtypes"][-1] == "uint32"  # the fed-back key's data: the key moved each step


@pytest.mark.slow
def test_vmap_without_batched_artifacts_names_the_function_and_the_option(
        field2_runs: dict[str, dict[str, Any]]) -> None:
    refusal = field2_runs["artifact"]["vmap_refusal"]
    assert refusal.startswith("ArtifactError"), refusal
    assert "jxe_field2:softplus_sum" in refusal and "vmap=True" in refusal
