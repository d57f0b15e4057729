"""Every combination of ``vjp_order`` x ``ad_order`` x ``vmap`` under every transformation.

``tests/option_matrix.py`` runs in a fresh process with ``HATCH_JAXEXPORT_STRICT=1`` over
``jxe_options`` (one function baked per cell) and a trace counter. A cell whose baked members
serve a transformation must give the source's result without tracing; any other raises the
documented error, which names the option to set (jax's own error for the cells that keep
jax's native ``vjp_order`` mechanism). The table in docs/transformations.md is this one.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
from conftest import TESTS, export_into_copy, run
from option_matrix import MODES, TRANSFORMATIONS

CELLS = [(v, a, m) for v in (0, 1, 2) for a in (0, 1, 2) for m in (0, 1)]
REVERSE = ("grad", "value_and_grad", "vjp", "jacrev", "vmap_of_grad", "grad_of_vmap")
FORWARD = ("jvp", "linearize", "jacfwd")
#: What the native cells (``vjp_order`` alone: jax's own VJP) cannot serve, in our words.
NATIVE_BATCHING = "needs the batched artifacts, which were not baked (vjp_order alone keeps " \
    "jax's native VJP); set vmap=True in @exportable(...)"
NATIVE_FORWARD = "needs the jvp artifact, which was not baked (vjp_order alone keeps jax's " \
    "native VJP); set ad_order=1 in @exportable(...)"
#: Forward mode on a native VJP under jax.linearize or inside jax.jit: jax raises it where the
#: staged tangent is evaluated, after the loaded function returned, so it stays jax's words.
JAX_FORWARD = "can't apply forward-mode autodiff (jvp) to a custom_vjp function"
NATIVE_SECOND = "needs the VJP of the VJP, which was not baked; set vjp_order=2 (or ad_order=2)"


def expected_error(v: int, a: int, m: int, transformation: str, mode: str) -> str | None:
    """``None`` where the cell serves the transformation from artifacts, else a fragment of
    the error it raises in strict mode."""
    if transformation == "call":
        return None
    if v >= 1 and a == 0 and not m:  # jax's own mechanism (no family)
        if transformation in ("grad", "value_and_grad", "vjp"):
            return None
        if transformation == "grad_of_grad":
            return None if v >= 2 else NATIVE_SECOND
        if transformation == "linearize" or (transformation == "jvp" and mode == "jit"):
            return JAX_FORWARD
        return NATIVE_FORWARD if transformation in (*FORWARD, "hessian") else NATIVE_BATCHING
    if transformation == "vmap":
        return None
    if transformation in REVERSE:
        return None if a >= 1 or v >= 1 else "set ad_order=1 (or vjp_order=1"
    if transformation in FORWARD:
        return None if a >= 1 else "set ad_order=1"
    if transformation == "grad_of_grad":
        return None if a == 2 or v >= 2 else "set ad_order="
    # hessian = jacfwd(jacrev): jvp and vjp_jvp; with vjp_order=2 alone, jax.jit drops the
    # primal's forward tangent that eager mode evaluates
    served = a == 2 or (v >= 2 and (a == 1 or mode == "jit"))
    return None if served else "set ad_order="


CASES = [(cell, t, mode) for cell in CELLS for t in TRANSFORMATIONS for mode in MODES]


@pytest.fixture(scope="session")
def options_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``jxe_options`` with its artifacts baked beside it."""
    return export_into_copy(tmp_path_factory.mktemp("options-site"), "jxe_options", jobs=2)


@pytest.fixture(scope="session")
def option_results(options_site: Path) -> dict[str, dict]:
    proc = run([sys.executable, TESTS / "option_matrix.py"],
               env={"PYTHONPATH": str(options_site), "HATCH_JAXEXPORT_STRICT": "1"})
    return json.loads(proc.stdout)


def test_vjp_order_with_vmap_serves_reverse_mode_from_artifacts(options_site, monkeypatch):
    """Issue 16: ``vjp_order=1, vmap=True`` used to ask ``jax.grad`` for a jvp artifact."""
    import jax
    import jax.numpy as jnp

    from hatch_jaxexport.errors import ArtifactError

    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    monkeypatch.syspath_prepend(str(options_site))
    module = importlib.import_module("jxe_options")
    f = module.f_v1_a0_m1
    x = jnp.linspace(0.1, 1.0, 4, dtype=jnp.float32)
    before = module.TRACES["count"]
    got = jax.grad(lambda z: f(z)[1])(x)
    batched = jax.vmap(jax.grad(lambda z: f(z)[1]))(jnp.stack([x, 2 * x]))
    assert module.TRACES["count"] == before, "the source was traced"
    want = jax.grad(lambda z: f.__wrapped__(z)[1])(x)
    assert jnp.allclose(got, want, rtol=2e-5) and jnp.allclose(batched[0], want, rtol=2e-5)
    with pytest.raises(ArtifactError, match=r"needs the jvp artifact.*set ad_order=1 in"):
        jax.jvp(f, (x,), (x,))


def test_vmap_of_a_native_vjp_function_traces_the_source_saying_what_to_set(
        options_site, monkeypatch, maintainer_warnings):
    """Not strict: a transformation no baked member serves says what is missing, with the
    function's name and the option, then traces the source (the documented fallback)."""
    import jax
    import jax.numpy as jnp

    from hatch_jaxexport.errors import FallbackWarning

    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT", raising=False)
    monkeypatch.syspath_prepend(str(options_site))
    f = importlib.import_module("jxe_options").f_v1_a0_m0
    xs = jnp.stack([jnp.linspace(0.1, 1.0, 4, dtype=jnp.float32)] * 2)
    with pytest.warns(FallbackWarning, match=r"jxe_options\.f_v1_a0_m0: tracing the source: "
                      r"jax\.vmap .*set vmap=True in @exportable"):
        got = jax.vmap(f)(xs)
    want = jax.vmap(f.__wrapped__)(xs)
    assert all(jnp.allclose(a, b) for a, b in zip(got, want, strict=True))


def test_every_cell_bakes_what_its_options_ask_for() -> None:
    from hatch_jaxexport.bake.export.exporter import tasks_for
    from hatch_jaxexport.runtime.call.decorator import exportable

    def members(**options: object) -> set[tuple[str, bool]]:
        def identity(x):
            return x
        fn = exportable("jxe_cells.identity", {"x": ("n", "float32")}, **options)(identity)
        return {(t.kind, t.batched) for t in tasks_for(fn, ("cpu",))}

    assert members(vjp_order=1) == {("primal", False)}  # jax's own mechanism
    assert members(vjp_order=1, vmap=True) == {(k, b) for k in ("primal", "vjp")
                                               for b in (False, True)}
    assert members(vjp_order=2, ad_order=1) == {(k, False) for k in
                                                ("primal", "jvp", "vjp", "vjp_jvp")}


@pytest.mark.parametrize(("cell", "transformation", "mode"), CASES,
                         ids=[f"v{c[0]}_a{c[1]}_m{c[2]}-{t}-{m}" for c, t, m in CASES])
def test_option_cell_serves_or_names_the_option(option_results, cell, transformation, mode):
    v, a, m = cell
    result = option_results[f"f_v{v}_a{a}_m{m}-{transformation}-{mode}"]
    want_error = expected_error(v, a, m, transformation, mode)
    assert result["traced"] == 0, "the source was traced"
    if want_error is None:
        assert "error" not in result, result.get("error")
        assert result["equal"], "loaded and source results differ"
    else:
        assert want_error in result.get("error", ""), result
