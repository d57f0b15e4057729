"""Each function is exported under the jax config it runs under, not the build process's.

``jxe_x64cfg.m_x64`` turns ``jax_enable_x64`` on at import, like a scientific dependency; the
float32 modules imported before (``a_plain``) and after it (``z_plain``) must stay float32.
Tests that import ``m_x64`` run in fresh processes: it changes this process's global config.
"""

from __future__ import annotations

import json
import sys
import textwrap
import warnings

import numpy as np
import pytest

from hatch_jaxexport import ArtifactError, FallbackWarning, SpecError, exportable


@pytest.fixture(scope="module")
def x64_site(tmp_path_factory):
    """``jxe_x64cfg`` with its artifacts, on ``sys.path`` of this process for the module."""
    from conftest import export_into_copy

    site = export_into_copy(tmp_path_factory.mktemp("x64cfg-site"), "jxe_x64cfg", jobs=1)
    sys.path.insert(0, str(site))
    yield site
    sys.path.remove(str(site))


def _records(site):
    data = json.loads((site / "jxe_x64cfg" / "_jaxexport" / "manifest.json").read_text())
    found: dict[str, list[dict]] = {}
    for record in data["artifacts"]:
        found.setdefault(record["function"].split(":")[1], []).append(record)
    return found


def test_float32_modules_stay_float32_whatever_the_import_order(x64_site):
    records = _records(x64_site)
    for name in ("shift_before", "shift_after"):  # imported before / after m_x64
        (record,) = records[name]
        assert record["out_avals"] == ["float32[n]"], name
        assert record["jax_config"] == {"jax_enable_x64": False}, name
    for name in ("precise", "widened"):  # the module that turns x64 on
        (record,) = records[name]
        assert record["out_avals"] == ["float64[n]"], name
        assert record["jax_config"] == {"jax_enable_x64": True}, name


def test_both_bakes_one_variant_per_value_and_matmul_records_its_precision(x64_site):
    records = _records(x64_site)
    by_value = {r["variant"]["jax_enable_x64"]: r for r in records["shift_both"]}
    assert by_value[False]["out_avals"] == ["float32[n]"]
    assert by_value[True]["out_avals"] == ["float64[n]"]
    assert {r["jax_config"]["jax_enable_x64"] for r in by_value.values()} == {False, True}
    (matmul,) = records["matmul"]
    assert matmul["jax_config"] == {"jax_enable_x64": False,
                                     "jax_default_matmul_precision": None}


_FRESH_FLOAT32 = """
import sys, jax, numpy as np
from jxe_x64cfg import TRACES, a_plain, z_plain
x = np.arange(4, dtype=np.float32)
got = [a_plain.shift_before(x), z_plain.shift_after(x), a_plain.shift_both(x)]
assert TRACES["count"] == 0, TRACES
assert "jxe_x64cfg.m_x64" not in sys.modules and not jax.config.jax_enable_x64
source = jax.jit(a_plain.shift_before.__wrapped__)(x)
assert source.dtype == np.float32
for value in got:
    assert value.dtype == np.float32, value.dtype
    np.testing.assert_array_equal(value, source)
print("ok")
"""


def test_fresh_process_without_the_x64_module_gets_float32_from_artifacts(x64_site,
                                                                          run_python):
    proc = run_python(_FRESH_FLOAT32, cwd=x64_site, env={"HATCH_JAXEXPORT_STRICT": "1"})
    assert proc.stdout.strip() == "ok"


_AFTER_X64_MODULE = """
import jax, numpy as np
from jxe_x64cfg import TRACES, a_plain, m_x64
assert jax.config.jax_enable_x64
x64 = np.arange(4, dtype=np.float64)
x32 = np.arange(4, dtype=np.float32)
precise, widened, both = m_x64.precise(x64), m_x64.widened(x32), a_plain.shift_both(x32)
assert TRACES["count"] == 0, TRACES
np.testing.assert_allclose(precise, np.cumsum(x64) / 3.0)
assert precise.dtype == widened.dtype == both.dtype == np.float64
np.testing.assert_array_equal(both, x32 * 2 + 1)
print("ok")
"""


def test_the_x64_modules_functions_and_both_variants_run_from_artifacts(x64_site, run_python):
    proc = run_python(_AFTER_X64_MODULE, cwd=x64_site, env={"HATCH_JAXEXPORT_STRICT": "1"})
    assert proc.stdout.strip() == "ok"


_MISMATCH = """
import warnings, numpy as np
from jxe_x64cfg import TRACES, a_plain, m_x64
from hatch_jaxexport import ArtifactError, FallbackWarning
x = np.arange(4, dtype=np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        value = a_plain.shift_before(x)
    except ArtifactError as err:
        print("raised:", err)
    else:
        assert value.dtype == np.float64 and TRACES["count"] == 1  # the source, traced
        print("warned:", *[w.message for w in caught if w.category is FallbackWarning])
"""


@pytest.mark.parametrize("strict", ["0", "1"])
def test_an_x64_mismatch_names_the_setting(x64_site, run_python, strict, maintainer_warnings):
    proc = run_python(_MISMATCH, cwd=x64_site, env={"HATCH_JAXEXPORT_STRICT": strict})
    out = proc.stdout
    assert out.startswith("raised:" if strict == "1" else "warned:"), out
    assert "jax_enable_x64=False at export, True in this process" in out
    assert 'x64="both"' in out


def test_a_context_that_turns_x64_on_resolves_again_and_falls_back(x64_site, monkeypatch,
                                                                   maintainer_warnings):
    """In this process (x64 off): the artifact; under ``jax.enable_x64``: the mismatch."""
    import jax
    from jxe_x64cfg import a_plain

    x = np.arange(3, dtype=np.float32)
    fn = a_plain.shift_before
    fn.clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert fn(x).dtype == np.float32
    fn.clear_cache()  # the hot executable is not re-checked (docs/loader.md)
    with jax.enable_x64(True):
        with pytest.warns(FallbackWarning, match="jax_enable_x64=False at export"):
            assert fn(x).dtype == np.float64
        fn.clear_cache()
        monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
        with pytest.raises(ArtifactError, match="jax_enable_x64=False at export, True in"):
            fn(x)
        both = a_plain.shift_both
        both.clear_cache()
        assert both(x).dtype == np.float64  # the x64 variant, strict: no fallback
    fn.clear_cache()


def test_a_matmul_precision_mismatch_names_the_setting(x64_site, monkeypatch):
    import jax
    from jxe_x64cfg import z_plain

    a = np.ones((2, 3), np.float32)
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    z_plain.matmul.clear_cache()
    with jax.default_matmul_precision("highest"):
        with pytest.raises(ArtifactError, match="jax_default_matmul_precision=None at export, "
                                                "'highest' in this process"):
            z_plain.matmul(a, a.T)
    z_plain.matmul.clear_cache()
    np.testing.assert_array_equal(z_plain.matmul(a, a.T), a @ a.T)  # the artifact again


@pytest.mark.parametrize("bad", ["yes", 1, "True", ["both"]])
def test_x64_option_is_validated(bad):
    with pytest.raises(SpecError, match=r"x64 must be None .*True, False or 'both'.*got"):
        exportable({"x": ("n", "float32")}, x64=bad)(lambda x: x)


def test_decoration_records_config_without_importing_jax(run_python):
    """Before jax is imported, jax's default: ``JAX_ENABLE_X64`` parsed as jax parses it."""
    code = textwrap.dedent("""
        import sys
        from hatch_jaxexport import exportable
        spec = {"x": ("n", "float32")}
        on = exportable(spec)(lambda x: x).export_spec
        off = exportable(spec, x64=False)(lambda x: x).export_spec
        both = exportable(spec, x64="both")(lambda x: x).export_spec
        assert "jax" not in sys.modules
        print(on.jax_config["jax_enable_x64"], off.jax_config["jax_enable_x64"],
              both.x64_variants)
    """)
    for env_value, expected in (("1", "True"), ("TRUE", "True"), ("0", "False"), ("off", "False")):
        proc = run_python(code, env={"JAX_ENABLE_X64": env_value})
        assert proc.stdout.split() == [expected, "False", "(False,", "True)"], env_value
