"""End to end: a package written with flax (linen and nnx), equinox and diffrax, built by the
Hatch hook through an isolated ``python -m build``, installed in a fresh venv and called in
strict mode with a trace counter that must stay at 0; every result equals the source's, run in
another process (``tests/ecosystem_calls.py`` lists the cases). One module turns
``jax_enable_x64`` on at import, as some scientific libraries do: its float64 function runs from
its artifact, and the float32 functions, called in processes that do not import it, stay float32.

The libraries come from the ``ecosystem`` extra of this project (``scripts/test.sh`` installs it
for the default Python); the fresh venv gets the same versions, so a missing library fails the
test instead of skipping it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _buildkit import build_install_and_call, metadata
from conftest import TESTS

LIBRARIES = ("jax", "flax", "equinox", "diffrax")
CASES = [f"{kind}-{what}" for kind in ("linen", "nnx")
         for what in ("forward", "loss", "grad", "grad-jit", "value_and_grad")] + [
    "eqx-module-argument", "eqx-module-argument-jit", "eqx-module-output-fed-back",
    "eqx-static-fields-output", "eqx-static-fields-argument",
    "eqx-static-fields-argument-grad"] + [
    f"diffrax-{what}{jit}" for what in ("value", "grad", "vmap-all-batched", "vmap-rate-shared",
                                        "vmap-y0-shared") for jit in ("", "-jit")]


@pytest.fixture(scope="module")
def ecosystem_runs(tmp_path_factory: pytest.TempPathFactory, project_wheel: Path
                   ) -> dict[str, dict[str, Any]]:
    """Build, install, verify; then the calls' results from the artifacts and from the source."""
    wheel, runs = build_install_and_call(
        tmp_path_factory.mktemp("ecosystem"), "jxe_ecosystem", LIBRARIES, project_wheel,
        TESTS / "ecosystem_calls.py", ("artifact", "source", "x64"))
    assert all(f"Requires-Dist: {name}" in metadata(wheel) for name in LIBRARIES[1:])
    return runs


@pytest.mark.slow
def test_static_shape_functions_ran_their_shipped_executables(
        ecosystem_runs: dict[str, dict[str, Any]]) -> None:
    # an equinox Module as output, a diffrax solve: loaded from the wheel's executables (the
    # loaded-equals-source cases below check their results)
    assert ecosystem_runs["artifact"]["tiers"]["eqx_make_linear"] == ["shipped"]
    assert "shipped" in ecosystem_runs["artifact"]["tiers"]["ode_solve"]


@pytest.mark.slow
def test_no_body_ran_from_the_wheel(ecosystem_runs: dict[str, dict[str, Any]]) -> None:
    assert ecosystem_runs["artifact"]["traces"] == 0
    assert ecosystem_runs["source"]["traces"] > 0
    assert sorted(ecosystem_runs["artifact"]["cases"]) == sorted(CASES)


@pytest.mark.slow
def test_float32_cases_run_where_the_x64_module_is_not_imported(
        ecosystem_runs: dict[str, dict[str, Any]]) -> None:
    """The package's x64 module changed neither its float32 artifacts nor their calls."""
    for mode in ("artifact", "source"):
        run_info = ecosystem_runs[mode]
        assert (run_info["x64"], run_info["x64_module_imported"]) == (False, False)
    dtypes = {d for case in ecosystem_runs["artifact"]["cases"].values()
              for d in case.get("dtypes", [])}
    # (int64 is there: equinox's static fields are Python ints, not arrays)
    assert "float32" in dtypes and "float64" not in dtypes, dtypes


@pytest.mark.slow
def test_the_x64_module_runs_float64_from_its_artifact(
        ecosystem_runs: dict[str, dict[str, Any]]) -> None:
    """Imported, the module turns x64 on; its float64 function runs from the artifact."""
    run_info = ecosystem_runs["x64"]
    assert (run_info["x64"], run_info["x64_module_imported"]) == (True, True)
    assert run_info["traces"] == 0 and run_info["source_traces"] > 0
    baked, traced = run_info["cases"], run_info["source_cases"]
    assert sorted(baked) == sorted(traced) == ["x64-value", "x64-value-jit"]
    for case, want in traced.items():
        got = baked[case]
        assert "error" not in want, want.get("error")
        assert "error" not in got, got["error"]
        assert got["dtypes"] == want["dtypes"] == ["float64"]
        np.testing.assert_allclose(got["leaves"], want["leaves"], rtol=1e-14)
    # 1e-3 squared behind 1e3 squared: kept in float64, it would be 0 in float32
    assert baked["x64-value"]["leaves"][0][1] == pytest.approx(1e-6, rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_loaded_equals_source(ecosystem_runs: dict[str, dict[str, Any]], case: str) -> None:
    want = ecosystem_runs["source"]["cases"][case]
    got = ecosystem_runs["artifact"]["cases"][case]
    assert "error" not in want, want.get("error")
    assert "error" not in got, got["error"]
    assert (got["tree"], got["dtypes"]) == (want["tree"], want["dtypes"])
    for mine, theirs in zip(got["leaves"], want["leaves"], strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=2e-5, atol=2e-6)
