"""``@exportable`` as a drop-in under and over other decorators (issue 35): jaxtyping with
beartype, equinox's ``filter_jit`` and a plain ``functools.wraps`` user decorator, in either
order. ``jxe_stacked`` is baked (the build finds each function in the decorator's registry,
whatever object the module attribute is) and called in a fresh process, strict, with a trace
counter that must stay at 0 (``tests/dropin_calls.py``)."""

from __future__ import annotations

import functools
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, call_baked_fresh, export_into_copy

from hatch_jaxexport import ExportableFunction
from hatch_jaxexport.runtime.call.decorator import registered_in

pytest.importorskip("jaxtyping")
pytest.importorskip("beartype")
pytest.importorskip("equinox")

X = np.linspace(-1.0, 1.0, 5, dtype=np.float32)
EXPECTED = {"typed_inner": np.sin(X) * 2, "typed_outer": np.sin(X) * 3,
            "filtered_inner": np.cos(X) + 1, "filtered_outer": np.cos(X) + 2,
            "logged_inner": X * X, "logged_outer": X * X + 1}


@pytest.fixture(scope="module")
def stacked_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_into_copy(tmp_path_factory.mktemp("stacked-site"), "jxe_stacked")


@pytest.fixture
def stacked(monkeypatch: pytest.MonkeyPatch):
    """The fixture's source imported in this process (nothing baked: no calls here)."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.delitem(sys.modules, "jxe_stacked", raising=False)
    import jxe_stacked

    return jxe_stacked


def test_either_order_is_served_from_artifacts_in_a_fresh_process(stacked_site: Path):
    run = call_baked_fresh(stacked_site, "dropin_calls.py", "stacked")
    assert run["traces"] == 0, run
    for name, want in EXPECTED.items():
        np.testing.assert_allclose(run[name], want, rtol=1e-6, err_msg=name)
    # jaxtyping outermost checks each call in Python: int32 is refused before any artifact
    assert run["typed_outer_int32"] == "TypeCheckError"
    assert run["logged"] == 1  # logged_outer's Python ran; logged_inner's was baked in


def test_the_build_finds_every_function_whatever_wraps_it(stacked, stacked_site: Path):
    manifest = (stacked_site / "jxe_stacked" / "_jaxexport" / "manifest.json").read_text()
    for name in EXPECTED:
        assert f'"jxe_stacked:{name}"' in manifest, name
    assert not isinstance(stacked.typed_outer, ExportableFunction)
    assert not isinstance(stacked.filtered_outer, ExportableFunction)
    found = {fn.name for fn in registered_in("jxe_stacked")}
    assert found >= {f"jxe_stacked:{name}" for name in EXPECTED}


def test_the_function_object_has_what_decorators_read_from_a_function(stacked):
    fn = stacked.logged_outer.__wrapped__  # functools.wraps in ``logged`` set it
    assert isinstance(fn, ExportableFunction)
    assert inspect.isfunction(fn)  # dm-pix's API test lists a module's functions this way
    source = inspect.unwrap(fn.__wrapped__)
    assert fn.__globals__ is vars(stacked)  # jaxtyping resolves string annotations there
    assert fn.__closure__ is not None and fn.__code__ is not source.__code__  # its own body
    assert (fn.__defaults__, fn.__kwdefaults__) == (None, None)
    assert (fn.__name__, fn.__qualname__, fn.__module__) == (
        "logged_outer", "logged_outer", "jxe_stacked")
    assert fn.__annotations__ == {"x": "Float[Array, ' n']", "return": "Float[Array, ' n']"}
    assert fn.__signature__ == inspect.signature(source) == inspect.signature(fn)
    assert fn.name == "jxe_stacked:logged_outer" and fn.calls is fn.__exportable__.calls
    wrapped = functools.wraps(fn)(lambda *a: fn(*a))
    assert wrapped.__wrapped__ is fn and inspect.signature(wrapped) == fn.__signature__
    assert not isinstance(wrapped, ExportableFunction)  # its __dict__ copy does not make it one
    partial = functools.partial(fn)
    assert inspect.signature(partial) == fn.__signature__
