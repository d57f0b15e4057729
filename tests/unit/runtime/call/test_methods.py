"""Methods and operator classes: a pyxu-style operator whose maps are exported static methods
(``__call__``, ``adjoint``, ``jacobian`` through ``jax.jacfwd``), a pytree object whose exported
``__call__`` takes the object itself, and the refusals that say what to write instead."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import export_into_copy, import_baked

from hatch_jaxexport import exportable
from hatch_jaxexport.errors import SpecError


@pytest.fixture(scope="module")
def methods_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_into_copy(tmp_path_factory.mktemp("methods-site"), "jxe_methods")


@pytest.fixture
def pkg(methods_site: Path, monkeypatch: pytest.MonkeyPatch):
    return import_baked(methods_site, "jxe_methods", monkeypatch)


def _source_fft(x):
    spectrum = jnp.fft.fft(x)
    return jnp.stack([spectrum.real, spectrum.imag])


def test_an_operator_class_calls_its_exported_static_methods(pkg) -> None:
    x = jnp.linspace(0.0, 1.0, 8, dtype=jnp.float32)
    op = pkg.FFTOp(8)
    forward = op(x)
    np.testing.assert_allclose(forward, _source_fft(x), atol=1e-5)
    adjoint = op.adjoint(forward)  # F^T F = n I for the real-stacked DFT
    np.testing.assert_allclose(adjoint, 8 * x, atol=1e-4)
    jacobian = op.jacobian(x)
    np.testing.assert_allclose(jacobian, jax.jacfwd(_source_fft)(x), atol=1e-5)
    batch = jax.vmap(op)(jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(batch[1], 2 * _source_fft(x), atol=1e-4)
    assert pkg.TRACES["count"] == 0, "an operator method traced its source"


def test_a_pytree_object_is_an_argument_of_its_exported_call(pkg) -> None:
    w = jnp.arange(1.0, 6.0, dtype=jnp.float32)
    x = jnp.linspace(0.0, 1.0, 5, dtype=jnp.float32)
    op = pkg.Diagonal(w=w)
    np.testing.assert_allclose(op(x), w * jnp.sin(x), rtol=1e-6)
    grad_w = jax.grad(lambda d: d(x).sum())(op)  # self is a pytree: grad reaches its weights
    np.testing.assert_allclose(grad_w.w, jnp.sin(x), rtol=1e-6)
    np.testing.assert_allclose(jax.jacfwd(op)(x), jnp.diag(w * jnp.cos(x)), rtol=1e-5)
    assert pkg.TRACES["count"] == 0, "the pytree operator traced its source"


def test_the_methods_are_in_the_manifest_by_their_qualified_names(methods_site: Path) -> None:
    import json

    manifest = json.loads((methods_site / "jxe_methods" / "_jaxexport" / "manifest.json")
                          .read_text())
    names = {record["function"] for record in manifest["artifacts"]}
    assert {"jxe_methods:FFTOp.apply", "jxe_methods:FFTOp.adjoint_apply",
            "jxe_methods:Diagonal.__call__"} <= names


def test_a_method_whose_self_has_no_spec_says_what_to_write() -> None:
    with pytest.raises(SpecError) as caught:
        class Op:
            @exportable({"x": ("n", "float32")})
            def apply(self, x):
                return x

    message = str(caught.value)
    assert "Op.apply" in message and "argument 'self' has no spec" in message
    assert "@staticmethod" in message
    assert "Op.apply = exportable({'self': Op(...), ...})(Op.apply)" in message


def test_a_classmethod_is_refused_with_the_staticmethod_to_write() -> None:
    for order in ("above", "below"):
        with pytest.raises(SpecError) as caught:
            if order == "above":
                class Op:
                    @exportable({"x": ("n", "float32")})
                    @classmethod
                    def make(cls, x):
                        return x
            else:
                class Op:
                    @classmethod
                    @exportable({"x": ("n", "float32")})
                    def make(cls, x):
                        return x
        message = str(caught.value)
        assert "Op.make" in message and "argument 'cls' has no spec" in message
        assert "decorate a @staticmethod instead" in message, order


def test_a_method_looked_up_on_the_class_is_the_exportable_itself(pkg) -> None:
    assert pkg.Diagonal.__dict__["__call__"] is pkg.Diagonal.__call__
    bound = pkg.Diagonal(w=jnp.ones(3))
    assert bound.__call__.__func__ is pkg.Diagonal.__call__
    assert bound.__call__.name == "jxe_methods:Diagonal.__call__"
