"""The suite's own marks: a test that starts a process is ``slow`` (the fast loop leaves it
out), found from what the test, its fixtures and its module's helpers call."""

from __future__ import annotations

import types

from conftest import starts_processes

from tests.unit.bake.workers import test_build_faults
from tests.unit.formats import test_spec


def _test(module: types.ModuleType, name: str, *fixtures: str) -> types.SimpleNamespace:
    """What ``starts_processes`` reads of a collected test: its module, function, fixtures."""
    return types.SimpleNamespace(module=module, function=getattr(module, name),
                                 fixturenames=list(fixtures))


def test_a_test_thatstarts_processes_through_a_fixtures_class_is_slow() -> None:
    fixtures = {name: getattr(test_build_faults, name) for name in ("build",)}
    item = _test(test_build_faults, "test_import_error_in_one_module_names_it", "build")
    assert starts_processes(item, fixtures)  # type: ignore[arg-type]


def test_a_pure_test_is_not_slow() -> None:
    name = next(n for n in vars(test_spec) if n.startswith("test_"))
    assert not starts_processes(_test(test_spec, name), {})  # type: ignore[arg-type]
