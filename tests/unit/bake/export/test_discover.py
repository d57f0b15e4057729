"""Discovery imports every module of a package but its test modules."""

from __future__ import annotations

import sys
import textwrap

from hatch_jaxexport.bake import discover
from hatch_jaxexport.bake.export.discovery import is_test_module


def test_test_modules_by_pytest_names():
    assert is_test_module("dm_pix._src.metrics_test")
    assert is_test_module("pkg.test_ops")
    assert is_test_module("pkg.conftest")
    assert not is_test_module("pkg.metrics")
    assert not is_test_module("pkg.testing")
    assert not is_test_module("pkg.attest")


def test_discover_skips_test_modules_that_need_test_dependencies(tmp_path, monkeypatch):
    pkg = tmp_path / "jxe_with_tests"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(textwrap.dedent("""
        from hatch_jaxexport import exportable

        @exportable({"x": ("n", "float32")})
        def double(x):
            return 2 * x
        """))
    (pkg / "ops_test.py").write_text("import not_installed_reference_library\n")
    (pkg / "test_more.py").write_text("import not_installed_reference_library\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [fn.name for fn in discover("jxe_with_tests")] == ["jxe_with_tests.ops:double"]
    assert "jxe_with_tests.ops_test" not in sys.modules
