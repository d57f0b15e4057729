"""Real libraries' own suites, baked: ``benchmarks/peer_suites.py --fast`` downloads tinygp and
dm-pix, applies the patches in peers/, builds the baked wheels through isolated builds, and runs
each library's own tests against the baked and the plain install; dm-pix also kept on flit,
through the wrapping PEP 517 backend."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT, run

SCRIPT = ROOT / "benchmarks" / "peer_suites.py"


def fast_figures(tmp_path, library: str) -> dict:
    """``peer_suites.py --fast --library LIBRARY``'s figures (its ``--json``), every library
    it ran by name."""
    out = tmp_path / "figures.json"
    run([sys.executable, SCRIPT, "--fast", "--library", library, "--cache",
         tmp_path / "sdists", "--json", out], timeout=1800)
    return json.loads(out.read_text())


def assert_nothing_lost(result: dict, library: str) -> None:
    """Every test the plain install passes passes baked, and strict mode refuses only calls no
    artifact covers, each with a refusal and the fix."""
    lost = {c: r["example"] for c, r in result["causes"].items()}
    assert result["plain"]["passed"] > 0, library
    assert result["baked"]["passed"] == result["plain"]["passed"], (library, lost)
    assert result["lost"] == 0, (library, lost)
    assert result["strict_other_count"] == 0, (library, result["strict_other"])


@pytest.mark.slow
def test_tinygp_fast_subset_passes_baked_as_it_passes_plain(tmp_path):
    """CI's subset: tinygp's distance and Kalman tests (about 2 minutes with fresh venvs).
    dm-pix and the whole suites run by the command (``python benchmarks/peer_suites.py``):
    dm-pix's TensorFlow files and 1,400 tests would take CI past its time."""
    figures = fast_figures(tmp_path, "tinygp")
    assert sorted(figures) == ["tinygp"]
    for library, result in figures.items():
        assert_nothing_lost(result, library)
        assert result["wheel_bytes"] > result["plain_wheel_bytes"], library


@pytest.mark.slow
def test_dm_pix_kept_on_flit_bakes_through_the_wrapping_backend(tmp_path):
    """dm-pix 0.4.5 keeps flit (``peers/dm-pix-0.4.5-flit.patch``): ``python -m build`` runs
    the wrapping PEP 517 backend, which has flit build the wheel and bakes it; dm-pix's own
    fast subset passes on it as on the plain install, and the same source builds the same
    bytes twice."""
    result = fast_figures(tmp_path, "dm-pix-flit")["dm-pix-flit"]
    assert_nothing_lost(result, "dm-pix-flit")
    assert result["build_backend"] == "hatch_jaxexport.integrations.pep517"
    assert result["wrapped_backend"] == "flit_core.buildapi"
    assert result["wheel_generator"].startswith("flit "), result["wheel_generator"]
    assert result["wheel_manifests"] == ["dm_pix/_jaxexport/manifest.json"]
    assert result["wheel_bytes"] > result["plain_wheel_bytes"]
    assert result["rebuild_identical"], (result["wheel_sha256"], result["rebuild_sha256"])
    assert result["served"] > 0 and result["traced"] <= result["served"]


@pytest.mark.slow
def test_jax_cosmo_large_programs_are_served_from_its_baked_wheel(tmp_path):
    """jax-cosmo 0.1.0 (``peers/jax-cosmo-0.1.0.patch``): a library whose users call large
    programs eagerly (an ``odeint`` in the distances, ``angular_cl``). Its fast subset passes
    baked as plain, and every first eager call of a decorated function is served from an
    artifact (none traced: the ``Cosmology`` and probe pytrees match their specs)."""
    result = fast_figures(tmp_path, "jax-cosmo")["jax-cosmo"]
    assert_nothing_lost(result, "jax-cosmo")
    assert result["served"] > 0 and result["traced"] == 0, result["by_function"]
