"""Replaying the warnings a body issued while traced: through the user's filters and the
module's own registry, an error the library's (marked), nothing imported outside the package."""

from __future__ import annotations

import sys
import uuid
import warnings

import pytest

from hatch_jaxexport.formats.manifest import CALLER_LINE
from hatch_jaxexport.runtime.artifacts.replayed_warnings import replay
from hatch_jaxexport.runtime.source_errors import is_source_error


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package of its own with a submodule that defines a warning category."""
    name = f"jxe_replay_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("".join(f"X{i} = {i}\n" for i in range(9)))
    (tmp_path / name / "notes.py").write_text(
        "class LegacyWarning(PendingDeprecationWarning):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def _entry(package: str, **changes: object) -> dict:
    return {"category": "builtins:PendingDeprecationWarning", "lineno": 7,
            "message": "legacy is deprecated", "module": package, **changes}


def test_a_replayed_warning_has_the_category_message_and_origin_the_build_recorded(package):
    import importlib

    module = importlib.import_module(package)
    with pytest.warns(PendingDeprecationWarning, match="legacy is deprecated") as caught:
        replay(package, [_entry(package)])
    (found,) = caught.list
    assert (found.filename, found.lineno) == (module.__file__, 7)
    assert found.category is PendingDeprecationWarning
    with pytest.warns(PendingDeprecationWarning) as caught:  # a line the install lacks
        replay(package, [_entry(package, lineno=900)])
    assert caught.list[0].lineno == 900


def test_the_modules_registry_shows_it_once_under_the_default_filter(package):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):  # three resolved keys of one artifact
            replay(package, [_entry(package)])
    assert len(caught) == 1
    assert sys.modules[package].__warningregistry__  # the library's own registry


def test_under_error_filters_it_raises_marked_as_the_sources(package):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(PendingDeprecationWarning, match="legacy is deprecated") as info:
            replay(package, [_entry(package)])
    assert is_source_error(info.value)


def test_a_category_of_the_package_is_imported_with_its_module(package):
    entry = _entry(package, category=f"{package}.notes:LegacyWarning", module=f"{package}.notes")
    with pytest.warns(PendingDeprecationWarning) as caught:
        replay(package, [entry])
    assert type(caught.list[0].message).__name__ == "LegacyWarning"
    assert caught.list[0].filename == sys.modules[f"{package}.notes"].__file__


@pytest.mark.parametrize("changes", [
    {"category": "antigravity:Fly"},  # a module outside the package: never imported
    {"category": "builtins:ValueError"},  # not a Warning
    {"category": "builtins:NoSuchWarning"},
    {"module": "os"},  # attributed to a module outside the package
    {"module": "missing_module_of_nobody"},
])
def test_what_cannot_be_found_inside_the_package_is_left_out(package, changes):
    name = package
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")  # nothing raises: nothing is issued
        replay(name, [_entry(name, **changes)])
    assert caught == [] and "antigravity" not in sys.modules


def _replay_here(package: str, entry: dict) -> int:
    """Replay ``entry`` from here (a caller of the baked function); the line it is made on."""
    line = sys._getframe().f_lineno + 1
    replay(package, [entry])
    return line


def test_a_warning_recorded_at_the_caller_is_issued_at_the_caller_of_the_baked_function(
        package):
    """``stacklevel=2`` in the decorated body names, on the plain library, the line that
    called it: the replay names the first frame that is not hatch-jaxexport's, with that
    frame's module and registry (here this test's)."""
    entry = _entry(package, lineno=CALLER_LINE, message="call with y instead")
    with pytest.warns(PendingDeprecationWarning, match="call with y instead") as caught:
        line = _replay_here(package, entry)
    (found,) = caught.list
    assert (found.filename, found.lineno) == (__file__, line)
    with warnings.catch_warnings(record=True) as again:  # once per location, as stacklevel
        warnings.simplefilter("default")
        for _ in range(3):
            _replay_here(package, entry)
    assert len(again) == 1
    assert globals()["__warningregistry__"]  # the caller's registry, as Python's own
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(PendingDeprecationWarning) as raised:
            _replay_here(package, entry)
    assert is_source_error(raised.value)
