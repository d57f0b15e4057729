"""pytest plugin: check that an installed wheel's baked artifacts match fresh exports of the source.

Registered through the ``pytest11`` entry point as ``jaxexport``; inert unless asked with
``pytest --jaxexport-check PACKAGE`` (repeatable) or the ini option ``jaxexport_packages``;
``--jaxexport-source PATH`` (or the ini option ``jaxexport_source``) puts the source tree first on
the import path, so the check compares the wheel with that source from any folder.
``-p no:jaxexport`` disables it. A thin adapter over :mod:`hatch_jaxexport.bake.check`: for each
package it adds a collector ``jaxexport:PACKAGE`` whose one test function, ``jaxexport``, is
parametrized (in ``pytest_generate_tests``) with one case per artifact id, so ids, counts, ``-k``
and xdist behave as for any parametrized test.

Importing this module imports neither jax nor the rest of hatch-jaxexport's build layer: that
happens only when a check is asked for.
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hatch_jaxexport.formats.manifest import artifact_sets
from hatch_jaxexport.formats.options import DEFAULT_CHECK_SHAPES

if TYPE_CHECKING:
    from hatch_jaxexport.bake.check import Outcome, Plan

# Imported in functions: the release check and its formats, only when a session asks for it: the
# plugin is inert in every other test session.

FIXTURE = "jaxexport_artifact"
_PROPERTY = "jaxexport"
#: The release check warns when the artifacts stop loading within this many days.
DEFAULT_EXPIRY_DAYS = 60


@dataclasses.dataclass
class _State:
    """What this run checks, the plans made so far and the outcomes reported."""

    packages: list[str]
    shapes: int
    only: bool = False
    sources: tuple[Path, ...] = ()
    #: Warn (``expiry_fails``: fail) when the artifacts expire within this many days.
    expiry_days: int = DEFAULT_EXPIRY_DAYS
    expiry_fails: bool = False
    plans: dict[str, Plan] = dataclasses.field(default_factory=dict)
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    outcomes: dict[str, dict[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)

    def plan(self, package: str) -> Plan:
        if package not in self.plans:
            from hatch_jaxexport.bake.check import plan_check

            self.plans[package] = plan_check(package, source_paths=self.sources)
        return self.plans[package]


_STATE = pytest.StashKey[_State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jaxexport", "hatch-jaxexport release check")
    group.addoption(
        "--jaxexport-check", action="append", default=[], metavar="PACKAGE",
        dest="jaxexport_check",
        help="check that the installed wheel's jax.export artifacts of PACKAGE (an import "
             "name) match fresh exports of its source; repeatable. Overrides the ini option "
             "jaxexport_packages.")
    group.addoption(
        "--jaxexport-only", action="store_true", default=False, dest="jaxexport_only",
        help="run only the release check: collect nothing from the test paths (explicit file "
             "arguments are still collected)")
    group.addoption(
        "--jaxexport-shapes", type=int, default=None, metavar="N", dest="jaxexport_shapes",
        help=f"concrete shapes each artifact runs on (default: {DEFAULT_CHECK_SHAPES}; 0 compares "
             "metadata and fingerprints only)")
    group.addoption(
        "--jaxexport-source", action="append", default=[], metavar="PATH",
        dest="jaxexport_source",
        help="the folder holding the source to compare with (`src` in a src layout, the project "
             "root in a flat layout), put first on the import path; repeatable. Overrides the "
             "ini option jaxexport_source. Without it, the source is whatever `import PACKAGE` "
             "finds, and the check refuses to run if that is the installed copy.")
    group.addoption(
        "--jaxexport-expiry-days", type=int, default=None, metavar="DAYS",
        dest="jaxexport_expiry_days",
        help="warn when the artifacts stop loading on newer jax within DAYS (default: "
             f"{DEFAULT_EXPIRY_DAYS}; jax reads an export for about 6 months after the "
             "exporting jax's release)")
    group.addoption(
        "--jaxexport-expiry-fails", action="store_true", default=False,
        dest="jaxexport_expiry_fails",
        help="fail instead of warning when the artifacts expire within the window")
    parser.addini("jaxexport_expiry_days", default="",
                  help="as --jaxexport-expiry-days")
    parser.addini("jaxexport_expiry_fails", type="bool", default=False,
                  help="as --jaxexport-expiry-fails")
    parser.addini("jaxexport_packages", type="args", default=[],
                  help="packages to check as with --jaxexport-check (whitespace-separated)")
    parser.addini("jaxexport_source", type="paths", default=[],
                  help="source folders as with --jaxexport-source (relative to the ini file)")


def _source_paths(config: pytest.Config, options: Any) -> tuple[Path, ...]:
    """``--jaxexport-source`` (relative to the invocation folder) or the ini option (to the ini
    file), put first on the import path; ``()`` when the check is not asked for or names none."""
    if not (options.jaxexport_check or config.getini("jaxexport_packages")):
        return ()
    given = [config.invocation_params.dir / p for p in options.jaxexport_source] \
        or list(config.getini("jaxexport_source"))
    if not given:
        return ()
    from hatch_jaxexport.bake.check import put_source_first
    from hatch_jaxexport.errors import CheckError

    try:
        return put_source_first(given)
    except CheckError as err:
        raise pytest.UsageError(f"--jaxexport-source (or ini jaxexport_source): {err}") from None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Put the source folders first on the import path before conftests are imported, so a
    conftest that imports the package imports the source, as the check does (pytest's own
    ``pythonpath`` ini option is applied at the same point)."""
    _source_paths(early_config, early_config.known_args_namespace)


def pytest_configure(config: pytest.Config) -> None:
    packages = config.getoption("jaxexport_check") or config.getini("jaxexport_packages")
    if not packages:
        if config.getoption("jaxexport_only"):
            raise pytest.UsageError("--jaxexport-only needs --jaxexport-check PACKAGE (or the "
                                    "ini option jaxexport_packages)")
        if config.getoption("jaxexport_source"):
            raise pytest.UsageError("--jaxexport-source needs --jaxexport-check PACKAGE (or the "
                                    "ini option jaxexport_packages)")
        return  # inert
    shapes = config.getoption("jaxexport_shapes")
    if shapes is not None and shapes < 0:
        raise pytest.UsageError(f"--jaxexport-shapes must be >= 0, got {shapes}")
    state = _State(list(dict.fromkeys(packages)),
                   DEFAULT_CHECK_SHAPES if shapes is None else shapes,
                   only=config.getoption("jaxexport_only"),
                   sources=_source_paths(config, config.option),
                   expiry_days=_expiry_days(config),
                   expiry_fails=bool(config.getoption("jaxexport_expiry_fails")
                                     or config.getini("jaxexport_expiry_fails")))
    config.stash[_STATE] = state
    config.pluginmanager.register(_Reporter(state), "jaxexport-reporter")


def _expiry_days(config: pytest.Config) -> int:
    """``--jaxexport-expiry-days``, else the ini option, else the default; >= 0."""
    given = config.getoption("jaxexport_expiry_days")
    if given is None:
        text = str(config.getini("jaxexport_expiry_days")).strip()
        try:
            given = int(text) if text else DEFAULT_EXPIRY_DAYS
        except ValueError:
            raise pytest.UsageError(f"ini jaxexport_expiry_days must be an int, got {text!r}") \
                from None
    if given < 0:
        raise pytest.UsageError(f"--jaxexport-expiry-days must be >= 0, got {given}")
    return int(given)


def pytest_ignore_collect(collection_path: Any, config: pytest.Config) -> bool | None:
    """With ``--jaxexport-only``, nothing under the test paths is collected."""
    state = config.stash.get(_STATE, None)
    return True if state is not None and state.only else None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """Add one ``jaxexport:PACKAGE`` collector per checked package to the session's top level."""
    report = yield
    state = collector.config.stash.get(_STATE, None)
    if state is not None and isinstance(collector, pytest.Session) and report.passed:
        for package in state.packages:
            report.result.append(CheckModule.from_parent(
                collector, path=collector.config.rootpath / f"jaxexport:{package}",
                package=package))
    return report


def jaxexport(jaxexport_artifact: Artifact) -> None:
    """One artifact of the installed wheel against a fresh export of the source."""
    jaxexport_artifact.check()


jaxexport.__test__ = True  # type: ignore[attr-defined]  # collected under this name


class CheckModule(pytest.Module):
    """The release check of one package: a module holding the parametrized ``jaxexport``."""

    def __init__(self, *, package: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.package = package

    def _getobj(self) -> types.ModuleType:
        from hatch_jaxexport.errors import CheckError

        state = self.config.stash[_STATE]
        try:
            state.plan(self.package)
        except CheckError as err:
            state.errors[self.package] = str(err)
            raise self.CollectError(f"jaxexport: cannot check {self.package}: {err}") from None
        module = types.ModuleType(f"jaxexport:{self.package}")
        module.jaxexport = jaxexport  # type: ignore[attr-defined]
        return module


@dataclasses.dataclass(frozen=True)
class _CaseRef:
    package: str
    id: str

    def __repr__(self) -> str:
        return self.id


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    collector = metafunc.definition.parent
    if FIXTURE not in metafunc.fixturenames or not isinstance(collector, CheckModule):
        return
    plan = metafunc.config.stash[_STATE].plan(collector.package)
    refs = [_CaseRef(collector.package, case.id) for case in plan.cases]
    metafunc.parametrize(FIXTURE, refs, ids=[ref.id for ref in refs], indirect=True)


class Artifact:
    """The ``jaxexport_artifact`` fixture's value: one case of a package's check."""

    def __init__(self, state: _State, ref: _CaseRef, node: pytest.Item) -> None:
        self.state, self.ref, self.node = state, ref, node

    @property
    def plan(self) -> Plan:
        return self.state.plan(self.ref.package)

    def outcome(self) -> Outcome:
        from hatch_jaxexport.bake.check import check_case

        plan = self.plan
        (case,) = [c for c in plan.cases if c.id == self.ref.id]
        return check_case(plan, case, shapes=self.state.shapes)

    def check(self) -> None:
        """Run the check; fail with its readable diff, skip for exports skipped at build."""
        outcome = self.outcome()
        self.node.user_properties.append((_PROPERTY, {
            "package": self.ref.package, "id": self.ref.id, "status": outcome.status,
            "notes": list(outcome.notes), "ran": outcome.ran}))
        if outcome.status == "skipped":
            pytest.skip(outcome.message)
        if not outcome.ok:
            pytest.fail(outcome.message, pytrace=False)


@pytest.fixture
def jaxexport_artifact(request: pytest.FixtureRequest) -> Artifact:
    """One artifact case of ``--jaxexport-check`` (parametrized by the plugin itself)."""
    state = request.config.stash.get(_STATE, None)
    ref = getattr(request, "param", None)
    if state is None or not isinstance(ref, _CaseRef):
        pytest.fail("the jaxexport_artifact fixture is parametrized by the jaxexport plugin for "
                    "its own items; run `pytest --jaxexport-check PACKAGE`", pytrace=False)
    return Artifact(state, ref, request.node)


_HEADINGS = {
    "concrete": "served only at concrete sizes (the symbolic export fails, as at build time)",
    "stale": "stale (the wheel's artifact differs from a fresh export)",
    "unusable": "unusable here (the wheel's artifact cannot be read or loaded by this jax)",
    "missing": "missing from the wheel (in the source, no artifact)",
    "orphan": "not in the source (an artifact with no function or spec entry)",
    "skipped": "skipped (the export failed at build time)",
}


class _Reporter:
    """Registered only when a check is asked for: collects outcomes, writes the summary."""

    def __init__(self, state: _State) -> None:
        self.state = state

    def pytest_report_header(self) -> str:
        header = f"jaxexport: checking the installed artifacts of {', '.join(self.state.packages)}"
        if self.state.sources:
            header += f" against the source in {', '.join(map(str, self.state.sources))}"
        return header

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == _PROPERTY and isinstance(value, dict):
                self.state.outcomes.setdefault(value["package"], {})[value["id"]] = value

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        _summary(self.state, terminalreporter)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """``--jaxexport-expiry-fails``: a package whose artifacts expire within the window
        fails the run, whatever its items did."""
        if self.state.expiry_fails and any(_window(self.state, p)[1] for p in self.state.packages
                                           if p not in self.state.errors):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _summary(state: _State, tr: Any) -> None:
    tr.write_sep("=", "jaxexport release check")
    for package in state.packages:
        if package in state.errors:
            tr.write_line(f"{package}: cannot check: {state.errors[package]}")
            continue
        tr.write_line(_header(state, package))
        window, soon = _window(state, package)
        for line in window:
            tr.write_line(f"  {line}")
        if soon:
            verb = "FAILS the check" if state.expiry_fails else "warning"
            tr.write_line(f"  expiry {verb}: they stop loading within the {state.expiry_days}-day "
                          "window of this check (--jaxexport-expiry-days): rebuild with a newer "
                          "jax, the oldest you support that is still inside its window")
        outcomes = state.outcomes.get(package, {})
        if not outcomes:
            tr.write_line("  no artifact was checked in this run")
            continue
        by_status: dict[str, list[str]] = {}
        for case_id, value in sorted(outcomes.items()):
            by_status.setdefault(value["status"], []).append(case_id)
        matched = len(by_status.get("match", []))
        ran = sum(1 for v in outcomes.values() if v["ran"] and v["status"] == "match")
        tr.write_line(f"  {len(outcomes)} checked: {matched} match "
                      f"({ran} also run and compared numerically on this platform)")
        for status, heading in _HEADINGS.items():
            ids = by_status.get(status, [])
            if ids:
                tr.write_line(f"  {heading}: {len(ids)}")
                for case_id in ids:
                    tr.write_line(f"    {case_id}")
        not_run = sorted({note for v in outcomes.values() for note in v["notes"]})
        for note in not_run:
            count = sum(note in v["notes"] for v in outcomes.values())
            tr.write_line(f"  {count} x {note}")
        from hatch_jaxexport.bake.check import JAX_HINT, REBUILD_HINT

        if any(s in by_status for s in ("stale", "missing", "orphan")):
            tr.write_line(f"  To fix: {REBUILD_HINT}.")
        if "unusable" in by_status:
            tr.write_line(f"  To fix the unusable ones: if damaged, rebuild the wheel; if another "
                          f"jax built them, {JAX_HINT}.")


def _window(state: _State, package: str) -> tuple[list[str], bool]:
    """The installed artifacts' compatibility as lines (each set's window where the wheel was
    baked with several jax releases, and the releases its own jax requirement allows that no
    set serves), and whether the newest set's window ends within the check's window
    (``([], False)`` where the wheel cannot be read)."""
    try:
        plan = state.plans.get(package)
        if plan is not None:
            bundle = plan.bundle
        else:
            from hatch_jaxexport.bake.check import find_bundle

            bundle = find_bundle(package)
        import jax

        from hatch_jaxexport.formats.jax_window import (
            days_left,
            jax_release_date,
            sets_lines,
            window_text,
        )

        sets = [(s.jax_version, s.jax_released or jax_release_date(s.jax_version))
                for s in bundle.sets or artifact_sets(bundle.manifest)]
        newest = max(sets, key=lambda s: s[1])
        lines = [f"compatibility: {window_text(*newest)}"] if len(sets) == 1 else \
            [f"compatibility: artifacts for {len(sets)} jax releases (jax-releases)"] + \
            [f"  {line}" for line in sets_lines(sets, jax.__version__)]
        return lines + _uncovered(bundle.jax_requirement, sets), \
            days_left(newest[1]) <= state.expiry_days
    except Exception:  # cannot check: the summary says why elsewhere
        return [], False


def _uncovered(requirement: str, sets: list[tuple[str, str]]) -> list[str]:
    """A line naming the jax releases ``requirement`` (the wheel's own) allows that no set's
    window holds, if any: their users' calls run the source."""
    from packaging.requirements import Requirement

    from hatch_jaxexport.formats.jax_window import releases_text, uncovered_releases

    if not requirement:
        return []
    specifier = Requirement(requirement).specifier
    uncovered = uncovered_releases(sets, lambda version: specifier.contains(version))
    if not uncovered:
        return []
    return [f"  uncovered: the wheel requires {requirement}, and no set serves jax "
            f"{releases_text(uncovered)}: there its calls run the source (add releases to "
            "jax-releases to serve them)"]


def _header(state: _State, package: str) -> str:
    plan = state.plans.get(package)
    if plan is not None:
        return plan.header()
    try:  # xdist's controller does not collect: describe the wheel without importing the source
        from hatch_jaxexport.bake.check import find_bundle

        return f"{package}: {find_bundle(package).describe()}"
    except Exception as err:
        return f"{package}: {err}"


__all__ = ["Artifact", "CheckModule", "jaxexport_artifact"]
