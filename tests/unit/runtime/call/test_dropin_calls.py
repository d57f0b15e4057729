"""Drop-in calls and composition (issue 35), on ``jxe_compose`` baked in process.

- An ``@exportable`` called inside another's export (directly, under ``grad``, ``vmap`` and
  ``scan``) is inlined at build, so the outer artifacts exist and their calls trace nothing.
- A call no structure accepts runs the source with the source's result, one ``FallbackWarning``
  per reason, a ``traced`` entry in ``call_report()``; where the source refuses it too, its own
  error carries our message; strict mode refuses as before.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import export_into_copy, import_baked

from hatch_jaxexport import FallbackWarning
from hatch_jaxexport.errors import CallMismatch, DtypeMismatch

RNG = np.random.default_rng(0)
W = RNG.normal(size=(3, 2)).astype(np.float32)
X = RNG.normal(size=(4, 3)).astype(np.float32)
Y = RNG.normal(size=(4, 2)).astype(np.float32)


@pytest.fixture(scope="module")
def compose_site(tmp_path_factory: pytest.TempPathFactory):
    return export_into_copy(tmp_path_factory.mktemp("compose-site"), "jxe_compose", jobs=1)


@pytest.fixture
def baked(compose_site, monkeypatch):
    module = import_baked(compose_site, "jxe_compose", monkeypatch)
    for name in ("forward", "loss", "norm", "row_norms", "running", "reduce",
                 "shifted_norm", "sized_norm"):
        getattr(module, name).clear_cache()
    return module


def _reference(fn, *args, **kwargs):
    """The source's result, every exportable inside it run from its source."""
    from hatch_jaxexport.runtime.call.inlining import sources_inlined

    with sources_inlined():
        return fn.__wrapped__(*args, **kwargs)


def test_outer_exports_that_call_exportables_are_baked(compose_site):
    import json

    manifest = json.loads((compose_site / "jxe_compose" / "_jaxexport" / "manifest.json")
                          .read_text())
    exported = {record["function"] for record in manifest["artifacts"]}
    assert {"jxe_compose:loss", "jxe_compose:row_norms", "jxe_compose:running"} <= exported
    # only the two that are not shape-polymorphic by design skip their symbolic export
    assert {s["function"] for s in manifest.get("skipped", [])} == \
        {"jxe_compose:shifted_norm", "jxe_compose:sized_norm"}


def test_composed_calls_are_served_without_tracing(baked):
    params = {"w": W}
    got = [baked.loss(params, X, Y), baked.row_norms(X), baked.running(X)]
    assert baked.TRACES["count"] == 0
    want = [_reference(baked.loss, params, X, Y), _reference(baked.row_norms, X),
            _reference(baked.running, X)]
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want),
                    strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_uncovered_calls_run_the_source_and_warn_once_per_reason(baked, monkeypatch,
                                                                 maintainer_warnings):
    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT")
    x64 = np.arange(5.0)  # float64: jax sees float32 with x64 off, a covered call
    ints = np.arange(5, dtype=np.int32)  # another dtype: not covered
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert float(baked.norm(x64)) == pytest.approx(np.sqrt(30 + 5))
        assert float(baked.norm(ints)) == pytest.approx(np.sqrt(30 + 5))
        assert float(baked.norm(ints + 1)) == pytest.approx(np.sqrt(55 + 5))
        assert float(baked.reduce(x64, "max", scale=3)) == 12.0  # static value, keyword
        matrix = baked.norm(jnp.ones((2, 3)))  # an extra axis the spec does not have
    assert float(matrix) == pytest.approx(np.sqrt(6 + 2))
    fallbacks = [str(w.message) for w in caught if w.category is FallbackWarning]
    assert len(fallbacks) == 3, fallbacks  # dtype, static value, rank: once each
    assert "expects dtype float32" in fallbacks[0] and "got int32" in fallbacks[0]
    assert "jxe_compose:reduce: static argument 'mode' got 'max'" in fallbacks[1]
    traced = [r for r in baked.norm.call_report() if r.tier == "traced"]
    assert len(traced) == 2 and all("no exported structure accepts" in r.not_shipped
                                    for r in traced)


def test_by_default_uncovered_calls_issue_no_warning_and_are_logged(baked, monkeypatch,
                                                                    caplog):
    """An end user's process: nothing new, not even under an error filter; the logger and
    ``call_report()`` say what happened."""
    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT")
    monkeypatch.delenv("HATCH_JAXEXPORT_WARNINGS", raising=False)
    ints = np.arange(5, dtype=np.int32)
    with warnings.catch_warnings(), caplog.at_level("INFO", logger="hatch_jaxexport"):
        warnings.simplefilter("error")
        assert float(baked.norm(ints)) == pytest.approx(np.sqrt(30 + 5))
        assert float(baked.reduce(np.arange(5.0), "max", scale=3)) == 12.0
        with pytest.raises(TypeError, match="bogus"):  # the source's own error, no warning
            baked.reduce(np.ones(3, np.float32), "sum", bogus=1)
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "hatch_jaxexport"]
    assert [level for level, _ in logged] == ["INFO", "INFO"], logged  # once per reason
    assert "expects dtype float32" in logged[0][1] and "tracing the source" in logged[0][1]
    assert "static argument 'mode' got 'max'" in logged[1][1]
    assert [r.tier for r in baked.norm.call_report()] == ["traced"]


def test_a_call_the_source_refuses_too_keeps_the_sources_error(baked, monkeypatch):
    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT")
    with pytest.raises(TypeError) as info:
        baked.reduce(np.ones(3, np.float32), "sum", bogus=1)
    assert "bogus" in str(info.value)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "hatch-jaxexport: jxe_compose:reduce:" in notes and "refused it too" in notes


def test_strict_mode_refuses_what_no_artifact_covers(baked):
    with pytest.raises(DtypeMismatch, match=r"jxe_compose:norm: .*expects dtype float32") as info:
        baked.norm(np.arange(5, dtype=np.int32))
    # the refusal ends with the ways to serve the call
    assert str(info.value).endswith("unset HATCH_JAXEXPORT_STRICT to trace the source instead]")
    assert "add a structure that accepts it, or record it (HATCH_JAXEXPORT_RECORD=1" in \
        str(info.value)
    with pytest.raises(CallMismatch, match="to serve it"):
        baked.reduce(np.ones(3, np.float32), "max")
    assert baked.TRACES["count"] == 0


class _Blocks:
    """A pytree whose ``shape`` property raises, as tinygp's ``Block`` does for 3-D blocks:
    the call checks must not run into it, the source never reads it."""

    def __init__(self, data):
        self.data = data

    @property
    def shape(self):
        raise AssertionError("only 2-D blocks have a shape")

    dtype = np.dtype("float32")


jax.tree_util.register_pytree_node(_Blocks, lambda b: ((b.data,), None),
                                   lambda _, children: _Blocks(*children))


def test_an_argument_whose_properties_raise_reaches_the_source(baked, monkeypatch):
    """The checks refuse it as a mismatch (not the property's AssertionError); the source then
    meets it and its own error, noted, is what the user sees."""
    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT")
    with pytest.raises(TypeError) as info:
        baked.norm(_Blocks(jnp.ones((2, 3, 3))))
    assert "_Blocks" in str(info.value)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "argument 'x' expects an array float32[n]" in notes and "refused it too" in notes


def test_an_uncovered_call_under_vmap_inlines_the_exportables_it_calls(baked, monkeypatch):
    """dm-pix's ``TestVmap``: an uncovered call (``shift`` is not baked) traces the source,
    which calls ``sized_norm``, served at n=3 by a plain artifact; under the caller's
    ``jax.vmap`` that trace is batched, and such an artifact has no batching rule, so the inner
    call must run its source inside the trace, as ``jax.jit`` of the plain library would."""
    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT")
    assert float(baked.sized_norm(X[0])) == pytest.approx(np.sqrt(np.sum(X[0] ** 2) + 3))
    assert [r.tier for r in baked.sized_norm.call_report()] != ["traced"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        got = jax.vmap(lambda row: baked.shifted_norm(row, shift=1.5))(X)
        eager = baked.shifted_norm(X[1], shift=1.5)  # the same static part, not under vmap
    want = np.sqrt(np.sum(X * X, axis=1) + 3) + 1.5
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
    assert float(eager) == pytest.approx(want[1], rel=1e-5)


def test_a_concrete_size_artifact_serves_jacrev_vmap_of_jit_and_jvp(baked, monkeypatch):
    """dm-pix's ``hsv_to_rgb`` test: ``jax.jacrev`` of a call served at concrete sizes only.
    Staged as the artifact, its pullback failed later, when jacrev batched it (no batching
    rule for ``call_exported``), out of reach of any fallback: a call under a transformation
    is now staged as rules jax can batch, under ``jax.jit`` too (the caller may batch what it
    stages), also after an eager call left the artifact on the hot path; forward mode runs
    the source."""
    monkeypatch.delenv("HATCH_JAXEXPORT_STRICT")
    row = jnp.asarray(X[0])
    assert float(baked.sized_norm(row)) == pytest.approx(np.sqrt(np.sum(X[0] ** 2) + 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        before = baked.TRACES["count"]
        jacobian = jax.jacrev(baked.sized_norm)(row)
        jitted = jax.jit(baked.sized_norm)(row)
        jit_jacobian = jax.jacrev(jax.jit(baked.sized_norm))(row)  # dm-pix's with_jit variant
        rows = jax.vmap(jax.jit(baked.sized_norm))(jnp.asarray(X))
        assert baked.TRACES["count"] == before  # all served by the artifact and its VJP
        _, tangent = jax.jvp(baked.sized_norm, (row,), (jnp.ones(3),))  # the source
    want = X[0] / np.sqrt(np.sum(X[0] ** 2) + 3)
    np.testing.assert_allclose(np.asarray(jacobian), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(jit_jacobian), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(rows),
                               np.sqrt(np.sum(X ** 2, axis=1) + 3), rtol=1e-5)
    assert float(tangent) == pytest.approx(float(want.sum()), rel=1e-5)
    assert float(jitted) == pytest.approx(np.sqrt(np.sum(X[0] ** 2) + 3), rel=1e-6)
    assert float(baked.sized_norm(row)) == pytest.approx(float(jitted), rel=1e-6)
