"""What a function's body warns while it is traced for export is kept with its records: the
package's own warnings (category, message, module, line; no path), not jax's, not ours, not
those attributed to files outside the package; every platform's record the same, although jax
traces a function once for all of them."""

from __future__ import annotations

import getpass
import json
import uuid

import pytest

from hatch_jaxexport.bake import discover
from hatch_jaxexport.bake.concrete.exports import structure_exported
from hatch_jaxexport.bake.export.body_warnings import category_name
from hatch_jaxexport.bake.export.exporter import export_task, tasks_for
from hatch_jaxexport.formats.manifest import CALLER_LINE, ArtifactRecord, Manifest
from hatch_jaxexport.formats.manifest_reader import parse_manifest

SOURCE = '''\
import warnings

from hatch_jaxexport import exportable
from {name}.helpers import deprecated_helper, old_helper


class LegacyWarning(PendingDeprecationWarning):
    """The package's own category: recorded by its name."""


def _local_category():
    class Local(DeprecationWarning):
        pass
    return Local


@exportable({{"x": ("n", "float32")}}, platforms=("cpu", "tpu"))
def legacy(x):
    warnings.warn("legacy is deprecated; use scaled", PendingDeprecationWarning)
    warnings.warn("a category of the package", LegacyWarning)
    warnings.warn("a category defined in a function", _local_category())
    warnings.warn("pointed at the caller's line", UserWarning, stacklevel=2)
    old_helper()
    deprecated_helper()
    return x * 2
'''

HELPERS = '''\
import warnings


def old_helper():
    warnings.warn("old_helper is deprecated", FutureWarning, stacklevel=2)


def deprecated_helper():
    warnings.warn("the caller of the caller", DeprecationWarning, stacklevel=3)
'''


@pytest.fixture
def legacy(tmp_path, monkeypatch):
    """``legacy`` of a package of its own (a unique name: this process imports it once)."""
    name = f"jxe_warns_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text(SOURCE.format(name=name))
    (tmp_path / name / "helpers.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    (fn,) = discover(name)
    return name, fn, tmp_path


def _line(name: str, text: str, tmp_path) -> int:
    lines = (tmp_path / name / "__init__.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_a_real_export_keeps_the_packages_own_warnings_without_a_path(legacy):
    name, fn, tmp_path = legacy
    records = [export_task(fn, task)[1] for task in tasks_for(fn, ("cpu",))]
    assert [r.platform for r in records] == ["cpu", "tpu"]
    expected = [  # in the order the body issued them: the plain library's
        {"category": "builtins:PendingDeprecationWarning", "module": name,
         "message": "legacy is deprecated; use scaled",
         "lineno": _line(name, "legacy is deprecated", tmp_path)},
        {"category": f"{name}:LegacyWarning", "module": name,
         "message": "a category of the package",
         "lineno": _line(name, "a category of the package", tmp_path)},
        {"category": "builtins:DeprecationWarning", "module": name,  # Local's base
         "message": "a category defined in a function",
         "lineno": _line(name, "a category defined in a function", tmp_path)},
        # a stacklevel above the body (jax's tracing here; the user's line on their machine):
        # the module whose code issued it, at CALLER_LINE
        {"category": "builtins:UserWarning", "module": name, "lineno": CALLER_LINE,
         "message": "pointed at the caller's line"},
        {"category": "builtins:FutureWarning", "module": name,  # the helper's caller's line
         "message": "old_helper is deprecated", "lineno": _line(name, "old_helper()", tmp_path)},
        {"category": "builtins:DeprecationWarning", "module": f"{name}.helpers",
         "lineno": CALLER_LINE, "message": "the caller of the caller"},
    ]
    for record in records:  # the tpu export found jax's trace cached: the same warnings
        assert record.warnings == expected
    manifest = Manifest(package=name, generator="test", jax_version="0", jaxlib_version="0",
                        artifacts=tuple(records))
    text = manifest.to_bytes()
    assert parse_manifest(text).artifacts[0].warnings == expected
    for leak in (str(tmp_path), "__init__.py", getpass.getuser() + "/"):
        assert leak.encode() not in text
    assert json.loads(text)["artifacts"][0]["warnings"] == expected


def test_concrete_size_exports_keep_them_on_every_platform(legacy):
    """The second platform's export at the same concrete types hits jax's trace cache (its
    body does not run again) and records what the first trace said."""
    _, fn, _ = legacy
    (cpu, tpu) = tasks_for(fn, ("cpu",))
    found = [structure_exported(fn, task, {"n": 5})[3] for task in (cpu, tpu)]
    assert found[0] == found[1]
    assert [w["message"] for w in found[0]] == [
        "legacy is deprecated; use scaled", "a category of the package",
        "a category defined in a function", "pointed at the caller's line",
        "old_helper is deprecated", "the caller of the caller"]


def test_a_package_that_warns_of_nothing_records_nothing(monkeypatch):
    from conftest import FIXTURES

    monkeypatch.syspath_prepend(str(FIXTURES))
    fn = next(f for f in discover("jxe_demo") if f.name == "jxe_demo.funcs:scale")
    _, record = export_task(fn, tasks_for(fn, ("cpu",))[0])
    assert record.warnings == [] and isinstance(record, ArtifactRecord)


def test_a_category_is_named_by_the_nearest_class_its_name_finds():
    assert category_name(PendingDeprecationWarning) == "builtins:PendingDeprecationWarning"

    class Inner(RuntimeWarning):
        pass

    assert category_name(Inner) == "builtins:RuntimeWarning"
    assert category_name(pytest.PytestWarning) == "pytest:PytestWarning"
