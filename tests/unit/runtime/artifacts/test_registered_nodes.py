"""Registered pytree nodes first: a default ``chex.dataclass`` (a ``Mapping`` too) and sparse
``BCOO``/``BCSR`` arrays (with ``.shape`` and ``.dtype``) as inputs and outputs, baked in process
and called in strict mode without tracing, equal to the source."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FIXTURES, import_baked

from hatch_jaxexport.bake import export_package

chex = pytest.importorskip("chex")
sparse = pytest.importorskip("jax.experimental.sparse")


@pytest.fixture(scope="module")
def nodes_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("nodes-site")
    shutil.copytree(FIXTURES / "jxe_nodes", site / "jxe_nodes",
                    ignore=shutil.ignore_patterns("__pycache__"))
    export_package("jxe_nodes", site / "jxe_nodes" / "_jaxexport", search_path=[site],
                   on_error="skip")
    return site


@pytest.fixture
def pkg(nodes_site: Path, monkeypatch: pytest.MonkeyPatch):
    return import_baked(nodes_site, "jxe_nodes", monkeypatch)


def _manifest(site: Path) -> dict:
    return json.loads((site / "jxe_nodes" / "_jaxexport" / "manifest.json").read_text())


def _assert_trees_equal(got, want) -> None:
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_every_function_is_baked_with_its_node_types(nodes_site: Path) -> None:
    manifest = _manifest(nodes_site)
    (skipped,) = manifest["skipped"]
    assert skipped["function"] == "jxe_nodes:csr_dot"
    assert "custom calls whose targets have no compatibility guarantees" in skipped["reason"]
    assert "cpu_csr_sparse_dense" in skipped["reason"]
    types = {r["function"]: r["pytree_types"] for r in manifest["artifacts"]}
    assert types["jxe_nodes:affine"] == ["jxe_nodes:State"]
    assert types["jxe_nodes:sparse_matmul"] == ["jax.experimental.sparse.bcoo:BCOO"]
    assert types["jxe_nodes:csr_matvec"] == ["jax.experimental.sparse.bcsr:BCSR"]


def test_a_chex_dataclass_input_and_output_equal_the_source(pkg) -> None:
    state = pkg.State(w=jnp.arange(6, dtype=jnp.float32).reshape(3, 2),
                      b=jnp.ones(2, jnp.float32))
    x = jnp.linspace(0, 1, 12, dtype=jnp.float32).reshape(4, 3)
    got = pkg.affine(state, x)
    assert pkg.TRACES["count"] == 0
    assert type(got[0]) is pkg.State
    _assert_trees_equal(got, jax.jit(pkg.affine.__wrapped__)(state, x))


def test_a_bcoo_of_symbolic_nse_in_and_out_equals_the_source(pkg) -> None:
    dense = jnp.where(jnp.arange(20).reshape(5, 4) % 3 == 0,
                      jnp.arange(20, dtype=jnp.float32).reshape(5, 4), 0)
    x = jnp.ones((4, 2), jnp.float32)
    for nse in (6, 9):  # the six non-zeros, then with padding
        fromdense = sparse.BCOO.fromdense(dense, nse=nse)
        m = sparse.BCOO((fromdense.data, fromdense.indices), shape=(5, 4))
        product, doubled = pkg.sparse_matmul(m, x)
        assert pkg.TRACES["count"] == 0
        assert type(doubled) is sparse.BCOO and doubled.shape == (5, 4)
        want = jax.jit(pkg.sparse_matmul.__wrapped__)(m, x)
        _assert_trees_equal((product, doubled), want)
        np.testing.assert_allclose(doubled.todense(), 2 * dense)
        pkg.TRACES["count"] = 0  # the source just traced


def test_a_bcoo_from_eval_shape_and_a_bcsr_equal_the_source(pkg) -> None:
    dense = jnp.array([[1.0, 0, 2], [0, 3, 0], [4, 0, 0]], jnp.float32)
    m = sparse.BCOO.fromdense(dense, nse=4)
    np.testing.assert_allclose(pkg.sparse_rows(m), [3, 3, 4])
    csr = sparse.BCSR.fromdense(dense, nse=4)
    v = jnp.array([1.0, 2.0, 3.0], jnp.float32)
    product, doubled = pkg.csr_matvec(csr, v)
    assert pkg.TRACES["count"] == 0
    np.testing.assert_allclose(product, dense @ v)
    assert type(doubled) is sparse.BCSR
    np.testing.assert_allclose(doubled.todense(), 2 * dense)
    _assert_trees_equal((product, doubled), jax.jit(pkg.csr_matvec.__wrapped__)(csr, v))


def test_a_bcoo_with_other_aux_data_is_refused_with_both(pkg) -> None:
    m = sparse.BCOO.fromdense(jnp.eye(5, 4, dtype=jnp.float32))  # indices_sorted=True
    with pytest.raises(TypeError) as caught:
        pkg.sparse_matmul(m, jnp.ones((4, 2), jnp.float32))
    message = str(caught.value)
    assert message.startswith("jxe_nodes:sparse_matmul: no exported structure accepts this "
                              "call"), message
    assert ("argument 'm' expects a BCOO with aux data {'shape': (5, 4), 'indices_sorted': "
            "False, 'unique_indices': False}, got aux data {'shape': (5, 4), 'indices_sorted': "
            "True, 'unique_indices': True}; pass one with the same aux data, or bake a "
            "structure for it") in message, message
    with pytest.raises(TypeError, match=r"argument 'm' expects a BCOO, got"):
        pkg.sparse_matmul(jnp.ones((5, 4), jnp.float32), jnp.ones((4, 2), jnp.float32))
    assert pkg.TRACES["count"] == 0
    assert "jxe_nodes" in sys.modules
