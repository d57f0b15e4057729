"""The release check: ``pytest --jaxexport-check PACKAGE`` (the ``jaxexport`` pytest plugin).

A real wheel of ``tests/fixtures/plugin_release`` (artifacts exported first, then built with plain
hatchling) is installed with ``pip install --target`` (real dist-info) and checked by pytest in a
subprocess (``pytester.runpytest_subprocess``: jax state is per process). Run from a folder that
also holds an edited copy of the source, or given its folder with ``--jaxexport-source``, the
check compares the wheel with that source, as a release job run from the repository does; with
only the installed copy importable it refuses to compare the wheel with itself. The end-to-end
tests marked slow install the wheels into fresh virtual environments (with pytest-xdist, and with
another Python and jax).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from _buildkit import other_python as find_other_python
from conftest import FIXTURES, make_venv, run

pytest_plugins = ["pytester"]

PROJECT = FIXTURES / "plugin_release"
PKG = "jxe_release"
IDS = [
    "jxe_release.models:constrained/0/cpu",
    "jxe_release.models:dense/0/cpu",
    "jxe_release.models:mlp/0/cpu",
    "jxe_release.models:poly/0/mode='exact'/cpu",
    "jxe_release.models:poly/0/mode='fast'/cpu",
    "jxe_release.models:shifted/0/cpu",
    "jxe_release.models:shifted/0/cuda",
]
TIMEOUT = 300


def build_release_wheel(tmp: Path, python: str = sys.executable) -> Path:
    """The fixture project's wheel with baked artifacts (exported, then built by hatchling)."""
    project = tmp / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", "_jaxexport"))
    run([python, "-m", "hatch_jaxexport", "export", PKG, "--out", project / PKG / "_jaxexport",
         "--path", project], cwd=project)
    run([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
         tmp / "dist", project])
    (wheel,) = (tmp / "dist").glob("jxe_release-*.whl")
    return wheel


@pytest.fixture(scope="module")
def release_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_release_wheel(tmp_path_factory.mktemp("release-wheel"))


@pytest.fixture(scope="module")
def release_site(release_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a folder (``pip install --target``: dist-info included)."""
    site = tmp_path_factory.mktemp("release-site")
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site,
         release_wheel])
    return site


def copy_site(site: Path, tmp: Path) -> Path:
    return Path(shutil.copytree(site, tmp / "site"))


@pytest.fixture
def check(pytester: pytest.Pytester, release_site: Path, monkeypatch: pytest.MonkeyPatch):
    """Run pytest in a subprocess in ``pytester.path`` with the wheel installed (by default)."""

    def runner(*args: str, site: Path | None = release_site) -> pytest.RunResult:
        if site is None:
            monkeypatch.delenv("PYTHONPATH", raising=False)
        else:
            monkeypatch.setenv("PYTHONPATH", str(site))
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=TIMEOUT)

    return runner


def lit(text: str) -> str:
    """``text`` as an fnmatch pattern matching itself (``[`` opens a character class there)."""
    return text.replace("[", "[[]")


def write_source(pytester: pytest.Pytester, folder: str = ".",
                 **replacements: tuple[str, str]) -> Path:
    """Copy the package's source into ``folder`` of the run folder (``"."``: importable from it,
    as in a flat layout; ``"src"``: not, as in a src layout), with ``(old, new)`` replacements."""
    source = pytester.path / folder / PKG
    shutil.copytree(PROJECT / PKG, source, ignore=shutil.ignore_patterns("__pycache__"))
    models = source / "models.py"
    text = models.read_text()
    for old, new in replacements.values():
        assert old in text, old
        text = text.replace(old, new)
    models.write_text(text)
    return source


# --------------------------------------------------------------------------------------------
# End to end, through pytester


def test_fresh_wheel_passes_one_item_per_artifact(check, pytester):
    source = write_source(pytester, "src")
    result = check("--jaxexport-check", PKG, "--jaxexport-source", "src", "-v")
    result.assert_outcomes(passed=7)
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"jaxexport: checking the installed artifacts of jxe_release "
                                 f"against the source in {source.parent}",
                                 "*collected 7 items"])
    result.stdout.fnmatch_lines([lit(f"jaxexport:jxe_release::jaxexport[{i}] PASSED") + "*"
                                 for i in IDS])
    result.stdout.fnmatch_lines([
        "*= jaxexport release check =*",
        "jxe_release: wheel jxe-release 1.0.0 installed at *: 7 artifact(s) built by "
        f"hatch-jaxexport * with jax *; source: {source} (a source tree without artifacts, not "
        "the installed copy); checking with jax *",
        "  7 checked: 7 match (6 also run and compared numerically on this platform)",
        "  1 x numerics not run: built for cuda, this process runs on cpu",
    ])


def test_ids_counts_and_k(check, pytester):
    write_source(pytester)
    collected = check("--jaxexport-check", PKG, "--collect-only", "-q")
    assert collected.ret == 0
    lines = [line for line in collected.outlines if line.startswith("jaxexport:")]
    assert lines == [f"jaxexport:jxe_release::jaxexport[{i}]" for i in IDS]
    collected.stdout.fnmatch_lines(["7 tests collected*"])

    selected = check("--jaxexport-check", PKG, "-k", "poly and exact", "-v",
                     "--jaxexport-shapes", "0")
    selected.assert_outcomes(passed=1, deselected=6)
    selected.stdout.fnmatch_lines(
        [lit("*jaxexport[jxe_release.models:poly/0/mode='exact'/cpu] PASSED*"),
         "  1 checked: 1 match (0 also run and compared numerically on this platform)",
         "  1 x numerics not run: 0 shapes asked for"])


def test_the_compatibility_window_is_shown_and_fails_the_run_by_option(check, pytester):
    """Issue 37: the summary says until when the installed artifacts load; within the
    project's window it warns, or fails the run with ``--jaxexport-expiry-fails``."""
    write_source(pytester)
    result = check("--jaxexport-check", PKG, "--jaxexport-shapes", "0",
                   "--jaxexport-expiry-days", "400", "--jaxexport-expiry-fails")
    result.assert_outcomes(passed=7)  # every artifact matches; the window alone fails the run
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*= jaxexport release check =*",
        "  compatibility: loads on jax released until about *(exported with jax *, released *;"
        " jax reads an export for about 6 months after the exporting jax's release)",
        "  expiry FAILS the check: they stop loading within the 400-day window of this check*"])
    warned = check("--jaxexport-check", PKG, "--jaxexport-shapes", "0",
                   "--jaxexport-expiry-days", "400")
    assert warned.ret == 0
    warned.stdout.fnmatch_lines(["  expiry warning: they stop loading within the 400-day*"])


STALE_EDITS = {
    "body": ("return jnp.tanh(x @ _W)", "return jnp.tanh(x @ _W) * 2.0"),
    "removed": ('@exportable({"params": {"w": ("i, o", "float32"), "b": ("o,", "float32")},\n'
                '             "x": ("n, i", "float32")}, vjp_order=1)\n', ""),
    "constraint": ('["a >= 2"]', '["a >= 3"]'),
    "static": ('["fast", "exact"]', '["fast", "cubic"]'),
    "decorated": ("def later(x):", '@exportable({"x": ("n", "float32")})\ndef later(x):'),
}


def test_stale_wheel_fails_with_diffs_naming_functions(check, pytester):
    source = write_source(pytester, **STALE_EDITS)
    result = check("--jaxexport-check", PKG, "-rfE")
    result.assert_outcomes(failed=6, passed=3)
    assert result.ret == 1
    models = source / "models.py"
    result.stdout.fnmatch_lines([
        # the edited body: a module diff and the outputs, naming the function and its file
        f"jxe_release.models:mlp/0/cpu: stale: the wheel's artifact differs from a fresh export "
        f"of jxe_release.models:mlp ({models}:*)",
        "  module text differs (locations stripped):",
        "    --- bundled (wheel)",
        "    +++ fresh export (source)",
        "*+    %* = stablehlo.multiply %*",
        "  with b=*, output: max abs difference * (wheel *, source *; float32 tolerance *)",
        "  built and checked with jax *",
        f"  wheel: jxe-release 1.0.0; source: {source} (a source tree without artifacts, not the "
        "installed copy)",
        "To fix: rebuild the wheel from this source and install it again*",
    ])
    result.stdout.fnmatch_lines([
        "jxe_release.models:constrained/0/cpu: stale: *",
        "  spec changed, structure: wheel x: float32[a, b]; y: float32[b]; where a >= 2 != "
        "source x: float32[a, b]; y: float32[b]; where a >= 3",
        '  spec changed, constraints: wheel ["a >= 2"] != source ["a >= 3"]',
    ])
    result.stdout.fnmatch_lines([
        "jxe_release.models:dense/0/cpu: the wheel carries an artifact the source no longer "
        "produces",
        "  function jxe_release.models:dense is not @exportable in the source (removed, renamed "
        "or undecorated since the wheel was built)",
    ])
    result.stdout.fnmatch_lines([
        "jxe_release.models:later/0/cpu: missing from the wheel",
        f"  function jxe_release.models:later ({models}:*) is @exportable in the source but the "
        "wheel has no artifact for it*",
    ])
    result.stdout.fnmatch_lines([
        "jxe_release.models:poly/0/mode='cubic'/cpu: missing from the wheel",
        "  jxe_release.models:poly (*) asks for this artifact (a structure, static value, *",
    ])
    result.stdout.fnmatch_lines([
        "jxe_release.models:poly/0/mode='exact'/cpu: the wheel carries an artifact the source "
        "no longer produces",
        "  jxe_release.models:poly (*) no longer lists the static values mode='exact' (now: "
        "mode='fast'; mode='cubic')",
    ])
    result.stdout.fnmatch_lines([
        "*= jaxexport release check =*",
        f"jxe_release: wheel jxe-release 1.0.0 *; source: {source} (a source tree without "
        "artifacts, not the installed copy); checking with jax *",
        "  9 checked: 3 match (2 also run and compared numerically on this platform)",
        "  stale (the wheel's artifact differs from a fresh export): 2",
        "    jxe_release.models:constrained/0/cpu",
        "    jxe_release.models:mlp/0/cpu",
        "  missing from the wheel (in the source, no artifact): 2",
        "    jxe_release.models:later/0/cpu",
        "    jxe_release.models:poly/0/mode='cubic'/cpu",
        "  not in the source (an artifact with no function or spec entry): 2",
        "    jxe_release.models:dense/0/cpu",
        "    jxe_release.models:poly/0/mode='exact'/cpu",
        "  1 x numerics not run: built for cuda, this process runs on cpu",
        "  To fix: rebuild the wheel *",
        "*= short test summary info =*",
    ])


def test_installed_copy_as_the_source_is_refused_and_jaxexport_source_points_at_it(
        check, pytester, release_site):
    """Where only the installed copy is importable, a fresh export of it reproduces the wheel
    whatever the source says: the check refuses to compare the wheel with itself, and says how to
    point it at the source. Given the edited source's folder (option or ini), it finds the stale
    artifact; a conftest importing the package gets that source too."""
    source = write_source(pytester, "src", body=STALE_EDITS["body"])  # src layout: not importable
    refused = check("--jaxexport-check", PKG, "--jaxexport-shapes", "0")
    assert refused.ret == pytest.ExitCode.INTERRUPTED
    refused.stdout.fnmatch_lines([
        "*ERROR collecting jaxexport:jxe_release*",
        f"jaxexport: cannot check jxe_release: `import jxe_release` resolves to "
        f"{release_site / PKG}, the installed distribution's own files (jxe-release 1.0.0), not "
        "your source tree: exporting them afresh reproduces the wheel whatever your source says, "
        "so the check would compare the wheel with itself and pass on a stale wheel. To check "
        "the release, point the check at your source tree with `--jaxexport-source PATH` (or the "
        "ini option `jaxexport_source`), PATH being the folder that holds the package folder: "
        "`src` in a src layout, the project root in a flat layout; or put that folder on the "
        "import path yourself, with pytest's ini option `pythonpath = src`, with "
        "`PYTHONPATH=src`, or, in a flat layout, by running `python -m pytest` from the project "
        "root*",
        "*= jaxexport release check =*",
        "jxe_release: cannot check: `import jxe_release` resolves to *",
    ])
    assert "passed" not in refused.stdout.str()

    by_path = check("--jaxexport-check", PKG, "--jaxexport-source", "src", "-k", "mlp", "-rf")
    by_path.assert_outcomes(failed=1, deselected=6)
    by_path.stdout.fnmatch_lines([
        f"jxe_release.models:mlp/0/cpu: stale: the wheel's artifact differs from a fresh export "
        f"of jxe_release.models:mlp ({source / 'models.py'}:*)",
    ])
    by_path.stdout.fnmatch_lines([
        f"jxe_release: wheel jxe-release 1.0.0 *; source: {source} (a source tree without "
        "artifacts, not the installed copy); checking with jax *",
        "  stale (the wheel's artifact differs from a fresh export): 1",
        "    jxe_release.models:mlp/0/cpu",
    ])

    pytester.makeini("[pytest]\njaxexport_source = src\n")
    pytester.makeconftest("import jxe_release\n"
                          f"assert jxe_release.__file__.startswith({str(source)!r})\n")
    by_ini = check("--jaxexport-check", PKG, "-k", "mlp", "--jaxexport-shapes", "0")
    by_ini.assert_outcomes(failed=1, deselected=6)
    by_ini.stdout.fnmatch_lines([f"jaxexport: checking the installed artifacts of jxe_release "
                                 f"against the source in {source.parent}"])


def test_jaxexport_source_refuses_what_cannot_be_the_source(check, pytester):
    write_source(pytester, "src")
    missing = check("--jaxexport-check", PKG, "--jaxexport-source", "nowhere")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines([
        "ERROR: --jaxexport-source (or ini jaxexport_source): put_source_first: the source "
        f"folder '{pytester.path / 'nowhere'}' (*) does not exist; expected the folder that "
        "holds the package folder (`src` in a src layout, the project root in a flat layout)"])

    alone = check("--jaxexport-source", "src")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    alone.stderr.fnmatch_lines(["ERROR: --jaxexport-source needs --jaxexport-check PACKAGE*"])

    root = check("--jaxexport-check", PKG, "--jaxexport-source", ".")  # a src layout's root
    assert root.ret == pytest.ExitCode.INTERRUPTED
    root.stdout.fnmatch_lines([
        f"jaxexport: cannot check jxe_release: the source folder(s) given ({pytester.path}) "
        "hold no package 'jxe_release': looked for jxe_release/ and jxe_release.py in each. "
        "Give the folder that holds the package folder: `src` in a src layout, the project "
        "root in a flat layout"])

    # imported (here as a plugin, from the installed copy) before the source could come first
    early = check("-p", PKG, "--jaxexport-check", PKG, "--jaxexport-source", "src")
    assert early.ret == pytest.ExitCode.INTERRUPTED
    early.stdout.fnmatch_lines([
        "jaxexport: cannot check jxe_release: 'jxe_release' was already imported from "
        f"*{PKG} before the check put the source folder(s) ({pytester.path / 'src'}) first on "
        "the import path, so the check would export that copy. Something imported it earlier *"])


def test_no_installed_distribution_fails_saying_so(check, pytester, release_site, tmp_path):
    source = write_source(pytester)
    result = check("--jaxexport-check", PKG, site=None)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "*ERROR collecting jaxexport:jxe_release*",
        "jaxexport: cannot check jxe_release: no installed distribution provides the import "
        f"package 'jxe_release' (importlib.metadata knows none); `import jxe_release` resolves "
        f"to {source} (a source tree without artifacts). The check compares the wheel installed "
        "in this environment with the source: build the wheel and install it here*",
        "*= jaxexport release check =*",
        "jxe_release: cannot check: no installed distribution provides *",
    ])

    # a distribution that provides the package but whose RECORD lists no manifest
    site = copy_site(release_site, tmp_path)
    (record,) = site.glob("jxe_release-*.dist-info/RECORD")
    record.write_text("".join(line for line in record.read_text().splitlines(keepends=True)
                              if "_jaxexport" not in line))
    result = check("--jaxexport-check", PKG, site=site)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "jaxexport: cannot check jxe_release: the installed distribution providing "
        "'jxe_release' carries no jxe_release/_jaxexport/manifest.json: jxe-release 1.0.0 "
        "(built without the hatch-jaxexport build hook, or without exportables); * Install the "
        "built wheel into this environment (an editable install carries no artifacts)*",
    ])


def test_build_skips_damaged_blobs_and_another_jax_version(check, pytester, release_site,
                                                           tmp_path):
    source = write_source(pytester)
    site = copy_site(release_site, tmp_path)
    manifest_path = site / PKG / "_jaxexport" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["jax_version"] = "0.0.1"
    (exact,) = [a for a in manifest["artifacts"] if a["static"] == {"mode": "exact"}]
    manifest["artifacts"].remove(exact)
    manifest["skipped"].append({key: exact[key] for key in (
        "function", "structure", "structure_index", "static", "platform", "kind", "batched")}
        | {"reason": "ValueError: boom"})
    manifest_path.write_text(json.dumps(manifest))
    (mlp,) = [a for a in manifest["artifacts"] if a["function"].endswith(":mlp")]
    blob = site / PKG / "_jaxexport" / mlp["file"]
    blob.write_bytes(blob.read_bytes()[:-1] + b"!")

    result = check("--jaxexport-check", PKG, "-k", "mlp or poly", "-rsf", site=site)
    result.assert_outcomes(passed=1, failed=1, skipped=1, deselected=4)
    result.stdout.fnmatch_lines([
        "jxe_release.models:mlp/0/cpu: the wheel's artifact cannot be loaded",
        "  artifact */jxe_release/_jaxexport/* does not match the manifest's SHA-256 (damaged "
        "or modified after the build)",
        "  built with jax 0.0.1, checked with jax *",
        f"  wheel: jxe-release 1.0.0; source: {source} (a source tree without artifacts, not "
        "the installed copy)",
        "To fix: rebuild the wheel from this source and install it again *",
    ])
    result.stdout.fnmatch_lines([
        "jxe_release: wheel jxe-release 1.0.0 *; checking with jax * (the artifacts were built "
        "with jax 0.0.1: compared on the fingerprint and numerically)",
        "  3 checked: 1 match (1 also run and compared numerically on this platform)",
        "  unusable here (the wheel's artifact cannot be read or loaded by this jax): 1",
        "  skipped (the export failed at build time): 1",
        "    jxe_release.models:poly/0/mode='exact'/cpu",
        "  To fix the unusable ones: if damaged, rebuild the wheel; if another jax built them, "
        "check with the jax that built the wheel, *",
    ])
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] *the export failed at build time and was "
                                 "skipped: ValueError: boom"])


def test_inert_unless_asked_ini_option_and_p_no(check, pytester):
    write_source(pytester)
    pytester.makepyfile(test_other="""
        import sys

        def test_no_jax_imported():
            assert "jax" not in sys.modules
    """)
    plain = check()
    plain.assert_outcomes(passed=1)
    plain.stdout.fnmatch_lines(["plugins: *hatch-jaxexport-*"])  # loaded, and inert
    assert "jaxexport:" not in plain.stdout.str()
    assert "jaxexport release check" not in plain.stdout.str()

    disabled = check("-p", "no:jaxexport", "--jaxexport-check", PKG)
    assert disabled.ret == pytest.ExitCode.USAGE_ERROR
    disabled.stderr.fnmatch_lines(["*unrecognized arguments: --jaxexport-check*"])

    only = check("--jaxexport-check", PKG, "--jaxexport-only", "-k", "mlp or other")
    only.assert_outcomes(passed=1, deselected=6)  # test_other.py is not even collected

    pytester.makeini(f"[pytest]\njaxexport_packages = {PKG}\n")
    from_ini = check("-k", "mlp", "-q")
    from_ini.assert_outcomes(passed=1, deselected=7)
    assert "jaxexport release check" in from_ini.stdout.str()
    off = check("-p", "no:jaxexport", "-W", "ignore::pytest.PytestConfigWarning")
    off.assert_outcomes(passed=1)
    assert "jaxexport release check" not in off.stdout.str()


# --------------------------------------------------------------------------------------------
# End to end in fresh virtual environments


@pytest.mark.slow
def test_wheel_installed_in_a_fresh_venv_with_xdist(tmp_path, project_wheel, release_wheel):
    python = make_venv(tmp_path / "venv", project_wheel, release_wheel, "pytest",
                       "pytest-xdist")
    workdir = tmp_path / "work"
    shutil.copytree(PROJECT / PKG, workdir / "src" / PKG,
                    ignore=shutil.ignore_patterns("__pycache__"))
    proc = run([python, "-m", "pytest", "-p", "no:cacheprovider", "--jaxexport-check", PKG,
                "--jaxexport-source", "src", "-n", "2"], cwd=workdir)
    assert "2 workers [7 items]" in proc.stdout
    assert "7 passed" in proc.stdout
    assert "  7 checked: 7 match (6 also run and compared numerically on this platform)" \
        in proc.stdout
    assert "(the installed copy)" not in proc.stdout  # xdist's controller imports no source


@pytest.mark.slow
def test_stale_wheel_in_a_fresh_venv_refused_as_its_own_source_then_checked_by_path(
        tmp_path, project_wheel, release_wheel):
    """The getting-started situation: a src-layout checkout with an edited body, the wheel
    installed in a venv, the check run from the project root. Without the source's folder the
    check refuses (it would compare the wheel with itself and pass); with `--jaxexport-source
    src` it reports the stale artifact."""
    python = make_venv(tmp_path / "venv", project_wheel, release_wheel, "pytest")
    project = tmp_path / "project"
    shutil.copytree(PROJECT / PKG, project / "src" / PKG,
                    ignore=shutil.ignore_patterns("__pycache__"))
    models = project / "src" / PKG / "models.py"
    models.write_text(models.read_text().replace(*STALE_EDITS["body"]))
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "--jaxexport-check", PKG,
               "--jaxexport-only", "--jaxexport-shapes", "1"]

    refused = run(command, cwd=project, check=False)
    assert refused.returncode == pytest.ExitCode.INTERRUPTED, refused.stdout[-3000:]
    assert "the installed distribution's own files (jxe-release 1.0.0), not your source tree" \
        in refused.stdout and "compare the wheel with itself" in refused.stdout
    assert "`--jaxexport-source PATH`" in refused.stdout and "passed" not in refused.stdout

    checked = run([*command, "--jaxexport-source", "src"], cwd=project, check=False)
    assert checked.returncode == pytest.ExitCode.TESTS_FAILED, checked.stdout[-3000:]
    assert re.search(r"\n=+ 1 failed, 6 passed in ", checked.stdout), checked.stdout[-3000:]
    assert f"source: {project / 'src' / PKG} (a source tree without artifacts, not the " \
           "installed copy)" in checked.stdout
    assert "  stale (the wheel's artifact differs from a fresh export): 1\n" \
           "    jxe_release.models:mlp/0/cpu\n" in checked.stdout, checked.stdout[-3000:]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


@pytest.mark.slow
def test_artifacts_built_by_another_jax(tmp_path, project_wheel, release_wheel, release_site):
    """Newer jax checking older artifacts: fingerprint (without jax's diagnostic messages) and
    numbers, versions stated. Older jax checking newer artifacts: a clear 'cannot read'."""
    other = find_other_python()
    if other is None:
        pytest.skip("no Python 3.11/3.12 besides this one to install another jax into")
    other_python = make_venv(tmp_path / "venv", project_wheel, "pytest", "hatchling",
                             python=other)
    other_jax = run([other_python, "-c", "import jax; print(jax.__version__)"]).stdout.strip()
    import jax

    this_jax = jax.__version__
    if other_jax == this_jax:
        pytest.skip(f"the other Python also got jax {other_jax}")
    other_wheel = build_release_wheel(tmp_path / "other-build", python=other_python)
    other_site = tmp_path / "other-site"
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", other_site,
         other_wheel])
    run([other_python, "-m", "pip", "install", "-q", "--no-deps", release_wheel])

    def check_with(python: str, site: Path | None, workdir: Path) -> str:
        path = [os.fspath(workdir)] + ([os.fspath(site)] if site else [])
        proc = run([python, "-m", "pytest", "-p", "no:cacheprovider", "--jaxexport-check", PKG],
                   cwd=workdir, check=False, env={"PYTHONPATH": os.pathsep.join(path)})
        assert proc.returncode in (0, 1), proc.stdout[-4000:] + proc.stderr[-2000:]
        return proc.stdout

    if _version(other_jax) > _version(this_jax):
        newer, newer_site, older, older_site = other_python, None, sys.executable, other_site
        old_jax, new_jax = this_jax, other_jax
    else:
        newer, newer_site, older, older_site = sys.executable, other_site, other_python, None
        old_jax, new_jax = other_jax, this_jax

    # the newer jax checks artifacts of the older one, against a source with one edited body
    edited = tmp_path / "edited"
    shutil.copytree(PROJECT / PKG, edited / PKG, ignore=shutil.ignore_patterns("__pycache__"))
    models = edited / PKG / "models.py"
    models.write_text(models.read_text().replace(*STALE_EDITS["body"]))
    out = check_with(newer, newer_site, edited)
    assert "1 failed, 6 passed" in out, out[-4000:]
    assert f"built with jax {old_jax}, checked with jax {new_jax}" in out
    assert "module text differs (locations stripped, jax's diagnostic messages left out):" in out
    assert f"checking with jax {new_jax} (the artifacts were built with jax {old_jax}: " \
           "compared on the fingerprint and numerically)" in out
    assert "  7 checked: 6 match" in out

    # the older jax checks artifacts of the newer one: readable, or said to be unreadable
    unedited = tmp_path / "unedited"
    shutil.copytree(PROJECT / PKG, unedited / PKG, ignore=shutil.ignore_patterns("__pycache__"))
    out = check_with(older, older_site, unedited)
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-4000:]
    if " failed" in out:
        # refused when the blob loads (the module is parsed then), or when it first runs
        assert ("the wheel's artifact cannot be loaded" in out
                or "this jax cannot read the wheel's artifact" in out), out[-4000:]
        assert f"built with jax {new_jax}, checked with jax {old_jax}" in out
        assert "To fix: check with the jax that built the wheel" in out
        assert "unusable here (the wheel's artifact cannot be read or loaded by this jax)" in out


EXAMPLE = Path(__file__).resolve().parents[2] / "example_pkg"


@pytest.mark.slow
def test_example_pkg_wheel_matches_the_repository_source(tmp_path, project_wheel,
                                                          example_wheel):
    """The release check of this repository's example: its wheel, built with the build hook,
    installed in a fresh venv, against ``example_pkg/src`` (as a release job runs it)."""
    wheel = example_wheel
    python = make_venv(tmp_path / "venv", project_wheel, wheel, "pytest",
                       find_links=[project_wheel.parent])
    workdir = tmp_path / "work"
    workdir.mkdir()
    proc = run([python, "-m", "pytest", "-p", "no:cacheprovider", "--jaxexport-check",
                "example_pkg", "--jaxexport-only"], cwd=workdir,
               env={"PYTHONPATH": os.fspath(EXAMPLE / "src")})
    assert f"source: {EXAMPLE / 'src' / 'example_pkg'} (a source tree without artifacts, not " \
           "the installed copy)" in proc.stdout, proc.stdout[-3000:]
    summary = proc.stdout.split("jaxexport release check")[1]
    counted = re.search(r"\n  (\d+) checked: (\d+) match", summary)
    assert counted and counted[1] == counted[2] and int(counted[1]) > 0, summary
    assert re.search(rf"\n=+ {counted[1]} passed in ", proc.stdout), proc.stdout[-3000:]


# --------------------------------------------------------------------------------------------
# The comparison logic (hatch_jaxexport.bake.check), in process


def test_solve_shapes_satisfies_dims_and_constraints():
    from hatch_jaxexport.bake.check import solve_shapes
    from hatch_jaxexport.formats.dimensions import check_constraint, evaluate_dim

    assert solve_shapes(["3", "4"], []) == [{}]
    cases = [
        (["a", "b"], ["a >= 2"]),
        (["a", "c"], ["c == 2*a"]),
        (["2*a", "b"], ["b == a + 1", "a <= 3"]),
        (["n - 3", "jxe_batch"], []),
        (["floordiv(n, 2)", "mod(n, 3) + 1"], ["n <= 20"]),
        (["a", "b"], ["max(a, b) <= 4", "a >= b"]),
    ]
    for dims, constraints in cases:
        envs = solve_shapes(dims, constraints, 3)
        assert 1 <= len(envs) <= 3 and len({json.dumps(e, sort_keys=True) for e in envs}) == \
            len(envs), (dims, envs)
        for env in envs:
            assert all(evaluate_dim(d, env) >= 1 for d in dims), (dims, env)
            assert all(check_constraint(c, env) for c in constraints), (constraints, env)
    assert len(solve_shapes(["a", "b"], [], 3)) == 3
    assert solve_shapes(["a"], ["a >= 5", "a <= 3"]) == []


def test_tolerances_and_array_comparison():
    import jax.numpy as jnp
    import numpy as np

    from hatch_jaxexport.bake.check import compare_arrays, tolerance

    assert tolerance(jnp.float32) == (1e-4, 1e-5)
    assert tolerance(jnp.float64) == (1e-10, 1e-12)
    assert tolerance(jnp.bfloat16) == tolerance(jnp.float16) == (2e-2, 2e-2)
    assert tolerance(jnp.complex64) == tolerance(jnp.float32)
    assert tolerance(jnp.int32) is None and tolerance(jnp.bool_) is None

    x = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)
    assert compare_arrays("out", x, x + 1e-7) is None
    assert compare_arrays("out", x, np.where(np.isnan(x), 0, x)) is None
    y = x.copy()
    y[1, 2] = 5
    message = compare_arrays("out", x, y)
    assert message is not None and message.startswith("out: max abs difference 4 at (1, 2)")
    assert compare_arrays("out", x, x[:1]) == "out: wheel gives float32[2, 3], source gives " \
                                              "float32[1, 3]"
    ints = np.arange(4, dtype=np.int32)
    assert compare_arrays("k", ints, ints) is None
    assert compare_arrays("k", ints, ints + np.array([0, 0, 1, 0], np.int32)) == \
        "k: 1 of 4 values differ (exact dtype int32); first at (2,): wheel np.int32(2), " \
        "source np.int32(3)"
    nan = np.array([np.nan, 1.0], np.float32)
    assert compare_arrays("n", nan, nan) is None
    assert "max abs difference inf" in compare_arrays("n", nan, np.array([0.0, 1.0], np.float32))


def test_module_diff_is_trimmed_and_windows_long_lines():
    from hatch_jaxexport.bake.check import module_diff, without_diagnostics

    filler = "x" * 300
    old = "\n".join(["a", f'call @f() {{{filler} value = 1 {filler}}}', "b"] +
                    [f"line {i}" for i in range(100)])
    new = "\n".join(["a", f'call @f() {{{filler} value = 2 {filler}}}', "b"] +
                    [f"changed {i}" for i in range(100)])
    diff = module_diff(old, new, limit=12, width=120)
    assert len(diff) == 13 and diff[-1].startswith("... (") and "more diff lines" in diff[-1]
    minus = [line for line in diff if line.startswith("-") and "value" in line]
    plus = [line for line in diff if line.startswith("+") and "value" in line]
    assert minus and "value = 1" in minus[0] and minus[0].startswith("- ...")
    assert plus and "value = 2" in plus[0] and len(plus[0]) <= 130

    text = ('custom_call @shape_assertion(%1) {error_message = "see \\"docs\\" at https://a/b", '
            'x = 1}')
    assert without_diagnostics(text) == 'custom_call @shape_assertion(%1) {error_message = ' \
                                        '"...", x = 1}'


def test_find_bundle_explains_a_missing_distribution():
    from hatch_jaxexport.bake.check import find_bundle
    from hatch_jaxexport.errors import CheckError

    with pytest.raises(CheckError, match=r"no installed distribution provides the import package "
                                         r"'jxe_not_installed_anywhere'.*finds nothing either"):
        find_bundle("jxe_not_installed_anywhere")


def test_plugin_module_is_light_and_the_package_does_not_import_pytest():
    code = ("import sys, hatch_jaxexport.integrations.pytest_plugin\n"
            "assert 'jax' not in sys.modules\n"
            "assert 'hatch_jaxexport.bake.check' not in sys.modules\n")
    run([sys.executable, "-c", code])
    code = ("import sys, hatch_jaxexport.bake.check\n"
            "assert 'pytest' not in sys.modules and '_pytest' not in sys.modules\n")
    run([sys.executable, "-c", code])


def test_put_source_first_orders_dedups_and_refuses_a_non_folder(tmp_path, monkeypatch):
    tmp_path = tmp_path.resolve()  # compared with resolved paths
    from hatch_jaxexport.bake.check import put_source_first
    from hatch_jaxexport.errors import CheckError

    monkeypatch.setattr(sys, "path", ["/somewhere/else", os.fspath(tmp_path / "b")])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    given = put_source_first([tmp_path / "a", os.fspath(tmp_path / "b"), tmp_path / "a" / ".."
                              / "a"])
    assert given == (tmp_path / "a", tmp_path / "b")
    assert sys.path == [os.fspath(tmp_path / "a"), os.fspath(tmp_path / "b"), "/somewhere/else"]
    (tmp_path / "file.py").write_text("")
    with pytest.raises(CheckError, match=r"put_source_first: the source folder '.*file\.py' "
                                         r"\(.*\) is not a folder; expected the folder that "
                                         r"holds the package folder"):
        put_source_first([tmp_path / "file.py"])
