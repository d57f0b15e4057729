"""The Hatch build hook: real builds, in process (hatchling's builders) and with every front end.

The in-process tests drive hatchling's own ``WheelBuilder``/``SdistBuilder`` with the hook
registered by hand (the exports still run in worker processes). The slow tests build
``example_pkg`` with each front end a user has, in isolated environments that get
hatch-jaxexport as a local wheel, install the wheels into fresh virtual environments and call
every function in a fresh process with tracing forbidden, comparing against the source.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from _buildkit import (
    EXAMPLE,
    FAILING_MODULE,
    TINY_MODULE,
    artifact_files,
    assert_baked_run,
    compare_results,
    copy_project,
    hatch_pyproject,
    inprocess_build,
    jax_requirements,
    leaks,
    links_env,
    members,
    metadata,
    other_python,
    python_m_build,
    run_example,
    wheel_tag,
    write_project,
)
from conftest import _uv, make_venv, run

from hatch_jaxexport.errors import ConfigError, ExportError

JAX_VERSION = __import__("importlib.metadata").metadata.version("jax")


def tiny(root: Path, hook_table: str = "", *, name: str = "jxe_tiny", module: str = TINY_MODULE,
         **kwargs: str) -> Path:
    return write_project(root, {
        "pyproject.toml": hatch_pyproject(name.replace("_", "-"), hook_table, **kwargs),
        f"{name}/__init__.py": module,
    })


# -- in process ----------------------------------------------------------------------------------

def pinned_wheel(tmp_path: Path, requirements: list[str]) -> Path:
    """The tiny project, with these jax requirements instead of a bare ``jax``, built here with
    the exporting jax as the floor (``jax-requirement = true``)."""
    root = tiny(tmp_path / "proj", "jax-requirement = true\n")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        '"jax"]', f"{json.dumps(requirements)[1:-1]}]"))
    (wheel,) = inprocess_build(root, tmp_path / "dist")
    return wheel


def test_wheel_carries_each_artifact_file_and_the_projects_jax_requirement(tmp_path, capsys):
    root = tiny(tmp_path / "proj")
    (wheel,) = inprocess_build(root, tmp_path / "dist")
    files = artifact_files(wheel, "jxe_tiny")
    manifest = json.loads(files.pop("manifest.json"))
    assert sorted(files) == sorted([a["file"] for a in manifest["artifacts"]] +
                                   [e["file"] for a in manifest["artifacts"] for e in a["sized"]])
    # double, power p=2, power p=3 (cpu), and each one's module as text (the text form)
    assert len(manifest["artifacts"]) == 3 and len(files) == 6
    assert wheel.name == "jxe_tiny-0.1.0-py3-none-any.whl" and wheel_tag(wheel) == "py3-none-any"
    assert "Root-Is-Purelib: true" in members(wheel)["jxe_tiny-0.1.0.dist-info/WHEEL"].decode()
    # by default the project's own jax requirement is the wheel's, as the maintainer wrote it
    assert jax_requirements(wheel) == ["jax"] and f"jax>={JAX_VERSION}" not in metadata(wheel)
    err = capsys.readouterr().err
    assert "jaxexport: exporting jxe_tiny for cpu (1 worker, on-error fail)" in err
    assert "  jxe_tiny:double: 1 structure(s), platforms cpu, 1 artifact(s)" in err
    assert "  jxe_tiny:power: 1 structure(s), platforms cpu, 2 artifact(s)" in err
    assert re.search(r"  jxe_tiny:power: .*, [0-9.]+ kB, [0-9.]+ s \[[12]/2, [0-9.]+ s elapsed\]\n",
                     err), err
    assert "jaxexport: jxe_tiny: 2 function(s), 3 artifact(s)" in err
    assert not list((tmp_path / "dist").glob("jaxexport-*"))  # no scratch in the output dir


def test_a_pin_per_python_built_on_one_python_still_installs_on_the_other(tmp_path, capsys):
    """Per-Python pins built on this Python: tightening the other Python's pin with this jax
    would admit no version (``jax==0.4.30,>=0.10.2``); it is kept, the build says so, and
    the wheel's metadata still resolves there (evaluated for that Python's environment)."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.version import Version

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    older = f"{sys.version_info.major}.{sys.version_info.minor - 1}"
    own = [f'jax=={JAX_VERSION}; python_version >= "{here}"',
           f'jax==0.4.30; python_version < "{here}"']
    wheel = pinned_wheel(tmp_path, own)
    assert [r.replace("'", '"') for r in jax_requirements(wheel)] == [
        f'jax=={JAX_VERSION},>={JAX_VERSION}; python_version >= "{here}"',
        f'jax==0.4.30; python_version < "{here}"']  # the other Python's pin kept as written
    err = capsys.readouterr().err
    assert re.search(r"jaxexport: warning: the project's requirement `jax==0\.4\.30; "
                     rf"python_version < .{re.escape(here)}.` admits no jax that is also "
                     rf">={re.escape(JAX_VERSION)} ", err), err
    assert "build one wheel per Python" in err
    there = {**default_environment(), "python_version": older, "python_full_version": older}
    active = [Requirement(r) for r in jax_requirements(wheel)]
    active = [r for r in active if r.marker is None or r.marker.evaluate(there)]
    assert [str(r.specifier) for r in active] == ["==0.4.30"]
    assert Version("0.4.30") in active[0].specifier


@pytest.mark.slow
def test_per_python_pins_built_here_install_on_the_other_python(tmp_path, project_wheel):
    """The same pins as above, but installed for real: pip of the other Python (3.12 beside
    3.11, 3.11 beside 3.12) resolves the wheel from the package index to its own jax pin."""
    other = other_python()
    if other is None:
        pytest.skip("no Python 3.11/3.12 besides this one to resolve the wheel with")
    other_version = run([other, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
                        ).stdout.strip()
    other_jax = "0.12.0.1" if other_version == "3.12" else "0.10.2"
    mine, theirs = ('<', '>=') if other_version == "3.12" else ('>=', '<')
    own = [f'jax=={JAX_VERSION}; python_version {mine} "3.12"',
           f'jax=={other_jax}; python_version {theirs} "3.12"']
    wheel = pinned_wheel(tmp_path, own)
    report = run([other, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                  "--disable-pip-version-check", "--report", "-", "--find-links",
                  project_wheel.parent, wheel])
    chosen = {item["metadata"]["name"]: item["metadata"]["version"]
              for item in json.loads(report.stdout)["install"]}
    assert chosen["jax"] == other_jax, chosen
    assert chosen["jxe-tiny"] == "0.1.0"


def test_options_reach_the_export(tmp_path):
    root = tiny(tmp_path / "proj", """
        platforms = ["cpu", "cuda"]
        jobs = 2
        jax-requirement = "jax>={version},<2"
        require-runtime-dependencies = true
        """)
    (wheel,) = inprocess_build(root, tmp_path / "dist")
    manifest = json.loads(artifact_files(wheel, "jxe_tiny")["manifest.json"])
    assert sorted({a["platform"] for a in manifest["artifacts"]}) == ["cpu", "cuda"]
    assert len(manifest["artifacts"]) == 6
    assert jax_requirements(wheel) == [f"jax<2,>={JAX_VERSION}"]


@pytest.mark.parametrize("own, expected", [
    ("jax[cpu]>=0.5", f"jax[cpu]>={JAX_VERSION}"),
    ("jax>=0.5,<99", f"jax<99,>={JAX_VERSION}"),
    ('jax>=0.5; python_version >= "3.11"', f'jax>={JAX_VERSION}; python_version >= "3.11"'),
])
def test_the_wheel_names_jax_once_the_stricter_of_the_projects_and_the_exporting(
        own, expected, tmp_path):
    root = tiny(tmp_path / "proj", "jax-requirement = true\n")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"jax"]', f"{json.dumps(own)}]"))
    (wheel,) = inprocess_build(root, tmp_path / "dist")
    assert jax_requirements(wheel) == [expected]
    assert "Requires-Dist: hatch-jaxexport" in metadata(wheel)
    assert json.dumps(own) in pyproject.read_text()  # the project's files are untouched


def test_jax_requirement_is_an_opt_in_and_global_table_works(tmp_path):
    root = tiny(tmp_path / "proj", "jax-requirement = true\n",
                hook_section="tool.hatch.build.hooks.jaxexport")
    (wheel,) = inprocess_build(root, tmp_path / "dist")
    assert "manifest.json" in artifact_files(wheel, "jxe_tiny")
    assert jax_requirements(wheel) == [f"jax>={JAX_VERSION}"]  # the project's `jax`, merged


def test_stale_source_tree_artifacts_are_not_shipped(tmp_path):
    root = tiny(tmp_path / "proj")
    stale = root / "jxe_tiny" / "_jaxexport"
    stale.mkdir()
    (stale / "manifest.json").write_text("{}")
    (stale / "old-0123.jaxexport").write_bytes(b"stale")
    (wheel,) = inprocess_build(root, tmp_path / "dist")
    files = artifact_files(wheel, "jxe_tiny")
    assert "old-0123.jaxexport" not in files
    assert json.loads(files["manifest.json"])["artifacts"]


def test_sdist_never_carries_artifacts_when_the_hook_runs_for_it(tmp_path):
    root = tiny(tmp_path / "proj", hook_section="tool.hatch.build.hooks.jaxexport")
    stale = root / "jxe_tiny" / "_jaxexport"
    stale.mkdir()
    (stale / "manifest.json").write_text("{}")
    (sdist,) = inprocess_build(root, tmp_path / "dist", target="sdist")
    names = list(members(sdist))
    assert any(n.endswith("jxe_tiny/__init__.py") for n in names)
    assert not [n for n in names if "_jaxexport" in n]


# dev-mode-dirs: hatchling's explicit editable mode, which needs no `editables` package here
# (pip's editable install, detection mode, is tested end to end below).
DEV_MODE = '[tool.hatch.build.targets.wheel]\ndev-mode-dirs = ["."]\n'


def test_editable_writes_artifacts_into_the_source_tree(tmp_path, run_python, capsys):
    root = tiny(tmp_path / "proj", extra=DEV_MODE)
    (wheel,) = inprocess_build(root, tmp_path / "dist", versions=("editable",))
    err = capsys.readouterr().err
    assert "editable install: artifacts written to jxe_tiny/_jaxexport" in err
    assert "jxe_tiny/_jaxexport is not ignored by the project's .gitignore" in err
    (root / ".gitignore").write_text("_jaxexport/\n")
    inprocess_build(root, tmp_path / "dist", versions=("editable",))
    assert "is not ignored" not in capsys.readouterr().err
    assert not artifact_files(wheel, "jxe_tiny")  # nothing in site-packages
    assert jax_requirements(wheel) == ["jax"]
    folder = root / "jxe_tiny" / "_jaxexport"
    assert (folder / "manifest.json").is_file()
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    # The package imported from the source tree (what the editable .pth does) finds them.
    proc = run_python(
        "import numpy as np, jxe_tiny\n"
        "from hatch_jaxexport.runtime.call.loader import loaded_from_artifact\n"
        "print(np.asarray(jxe_tiny.power(np.arange(3, dtype=np.float32), p=3)).tolist(),"
        " loaded_from_artifact(jxe_tiny.power))",
        env={"PYTHONPATH": str(root), "HATCH_JAXEXPORT_STRICT": "1",
             "HATCH_JAXEXPORT_CACHE": "0"}, cwd=tmp_path)
    assert proc.stdout.startswith("[0.0, 1.0, 8.0] {") and "True" in proc.stdout
    # A second editable build replaces the folder; a wheel build never ships it.
    inprocess_build(root, tmp_path / "dist", versions=("editable",))
    (wheel,) = inprocess_build(root, tmp_path / "dist2")
    assert ".gitignore" not in artifact_files(wheel, "jxe_tiny")
    # `hatch clean` removes the folder (only folders the hook wrote).
    inprocess_build(root, tmp_path / "dist", clean_only=True)
    assert not folder.exists()


STALE_MODULE = """
from hatch_jaxexport import exportable

from jxe_stale.helpers import offset


@exportable({"x": ("n", "float32")})
def triple(x):
    return x * 2.0 + offset()


@exportable({"x": ("n", "float32")})
def other(x):
    return x - 1.0
"""

STALE_CALL = """
import json, warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import jxe_stale
    from hatch_jaxexport.runtime.call.loader import loaded_from_artifact
    x = np.ones(3, np.float32)
    got = [float(jxe_stale.triple(x)[0]), float(jxe_stale.other(x)[0]),
           float(jxe_stale.triple(x)[0])]
print(json.dumps({"got": got, "artifact": list(loaded_from_artifact(jxe_stale.triple).values()),
                  "warnings": [str(w.message) for w in caught]}))
"""


def test_an_edited_editable_install_serves_its_source_with_one_notice(tmp_path, run_python):
    """Issue 37: the function edited, then the helper module it calls: each time the call
    gives the source's result, with one notice per process naming the changed file and the
    command that refreshes the artifacts (issue 42: a ``WARNING`` log record, which Python's
    logging prints on stderr when nothing is configured; a warning only with the maintainer's
    switch); reinstalled, the artifacts serve again."""
    root = write_project(tmp_path / "proj", {
        "pyproject.toml": hatch_pyproject("jxe-stale", extra=DEV_MODE),
        "jxe_stale/__init__.py": STALE_MODULE,
        "jxe_stale/helpers.py": "def offset():\n    return 1.0\n",
    })
    inprocess_build(root, tmp_path / "dist", versions=("editable",))
    env = {"PYTHONPATH": str(root), "HATCH_JAXEXPORT_CACHE": "0"}

    def call(**extra: str) -> tuple[dict, list[str]]:
        done = run_python(STALE_CALL, env={**env, **extra}, cwd=tmp_path)
        return json.loads(done.stdout), [line for line in done.stderr.splitlines()
                                         if "are stale" in line]

    def inspect() -> str:
        return run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_stale"], env=env,
                   cwd=tmp_path).stdout

    fresh, said = call()
    assert fresh == {"got": [3.0, 0.0, 3.0], "artifact": [True], "warnings": []} and not said
    shown = inspect()
    assert "sources: current (exported into the source tree from 2 module(s)" in shown
    assert "compatibility: loads on jax released until about " in shown  # the window
    module = root / "jxe_stale" / "__init__.py"
    module.write_text(module.read_text().replace("x * 2.0", "x * 3.0"))
    edited, said = call()
    assert edited == {"got": [4.0, 0.0, 4.0], "artifact": [False], "warnings": []}
    (notice,) = said  # one for the package, not one per function or call
    assert "the artifacts of jxe_stale are stale: jxe_stale/__init__.py changed" in notice
    assert "reinstall the project (`pip install -e .`)" in notice
    switched, _ = call(HATCH_JAXEXPORT_WARNINGS="1")
    (warning,) = switched["warnings"]  # the maintainer's switch: the same notice, a warning
    assert "the artifacts of jxe_stale are stale: jxe_stale/__init__.py changed" in warning
    assert "sources: the artifacts of jxe_stale are stale" in inspect()
    inprocess_build(root, tmp_path / "dist", versions=("editable",))  # the refresh
    assert call() == ({"got": [4.0, 0.0, 4.0], "artifact": [True], "warnings": []}, [])
    helper = root / "jxe_stale" / "helpers.py"
    helper.write_text("def offset():\n    return 5.0\n")  # the helper the function calls
    edited, said = call()
    assert edited["got"] == [8.0, 0.0, 8.0] and edited["artifact"] == [False]
    (notice,) = said
    assert "jxe_stale/helpers.py changed" in notice and "__init__" not in notice


def test_a_wheel_manifest_records_no_sources_so_calls_check_none(tmp_path):
    """Installed wheels pay nothing: their manifest holds no ``sources``, so the loader has
    no file to stat (``PackageArtifacts.stale`` returns before looking at any)."""
    (wheel,) = inprocess_build(tiny(tmp_path / "proj"), tmp_path / "dist")
    assert "sources" not in json.loads(artifact_files(wheel, "jxe_tiny")["manifest.json"])


def test_editable_trace_option_exports_nothing(tmp_path, capsys):
    root = tiny(tmp_path / "proj", 'editable = "trace"\n', extra=DEV_MODE)
    inprocess_build(root, tmp_path / "dist", versions=("editable",))
    assert not (root / "jxe_tiny" / "_jaxexport").exists()
    assert 'editable = "trace": no exports' in capsys.readouterr().err


def test_skip_environment_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HATCH_JAXEXPORT_SKIP", "1")
    root = tiny(tmp_path / "proj")
    (wheel,) = inprocess_build(root, tmp_path / "dist")
    assert not artifact_files(wheel, "jxe_tiny")
    assert "jax>=" not in metadata(wheel)
    assert "HATCH_JAXEXPORT_SKIP is set" in capsys.readouterr().err


def test_export_errors_name_the_function_and_reason(tmp_path, capsys):
    root = tiny(tmp_path / "proj", name="jxe_noisy", module=FAILING_MODULE)
    with pytest.raises(ExportError) as info:
        inprocess_build(root, tmp_path / "dist")
    assert "jxe_noisy:noisy, structure 0 (x: float32[n]), platform cpu" in str(info.value)
    assert "callback" in str(info.value).lower()
    err = capsys.readouterr().err
    assert "jaxexport: export of jxe_noisy failed (1 problem(s)):" in err
    assert 'set on-error = "skip"' in err
    assert not list((tmp_path / "dist").glob("*.whl"))


def test_missing_build_dependency_gets_a_hint(tmp_path, capsys):
    root = tiny(tmp_path / "proj", name="jxe_needy",
                module="import not_installed_anywhere\n" + TINY_MODULE)
    with pytest.raises(ExportError, match="cannot import package 'jxe_needy': "
                       "ModuleNotFoundError: No module named 'not_installed_anywhere'"):
        inprocess_build(root, tmp_path / "dist")
    assert "set require-runtime-dependencies = true" in capsys.readouterr().err


def test_an_import_time_spec_error_gets_no_on_error_hint(tmp_path, capsys):
    """Issue 37: ``on-error = "skip"`` skips failed exports; it cannot skip a package that
    does not import, so the build does not suggest it then."""
    module = 'from hatch_jaxexport import exportable\n\n\n@exportable({"x": ("n", "flot32")})\n' \
             "def bad(x):\n    return x\n"
    root = tiny(tmp_path / "proj", name="jxe_badspec", module=module)
    with pytest.raises(ExportError, match="cannot import package 'jxe_badspec': SpecError"):
        inprocess_build(root, tmp_path / "dist")
    err = capsys.readouterr().err
    assert "jaxexport: export of jxe_badspec failed" in err
    assert "set on-error" not in err and "did you mean 'float32'" in err


def test_on_error_skip_builds_and_records_the_reason(tmp_path, capsys):
    root = tiny(tmp_path / "proj", 'on-error = "skip"\n', name="jxe_noisy",
                module=FAILING_MODULE + TINY_MODULE.split("from hatch_jaxexport import "
                                                         "exportable", 1)[1])
    (wheel,) = inprocess_build(root, tmp_path / "dist")
    manifest = json.loads(artifact_files(wheel, "jxe_noisy")["manifest.json"])
    assert [s["function"] for s in manifest["skipped"]] == ["jxe_noisy:noisy"]
    assert "callback" in manifest["skipped"][0]["reason"].lower()
    assert len(manifest["artifacts"]) == 3
    err = capsys.readouterr().err
    assert "jaxexport: warning: skipped jxe_noisy:noisy" in err
    assert "1 skipped" in err


def test_config_errors_are_reported_together_with_their_toml_path(tmp_path):
    root = tiny(tmp_path / "proj", """
        jobs = "x"
        platforms = ["cpu", "gpu"]
        on-error = "ignore"
        job = 2
        require-runtime-dependencies = true
        """)
    with pytest.raises(ConfigError) as info:
        inprocess_build(root, tmp_path / "dist")
    prefix = "tool.hatch.build.targets.wheel.hooks.jaxexport"
    assert info.value.errors == [
        f"{prefix}.job is not an option of hatch-jaxexport (did you mean `jobs`?); known "
        "options: packages, platforms, jobs, on-error, jax-requirement, editable, executables, "
        "executable-jaxlibs, executables-from, jax-releases, tpu-targets, companion-wheels",
        f"{prefix}.platforms[1] must be one of 'cpu', 'cuda', 'rocm', 'tpu', got 'gpu'",
        f"{prefix}.jobs must be an int >= 1 or \"auto\", got 'x'",
        f"{prefix}.on-error must be 'fail' or 'skip', got 'ignore'",
    ]


def test_packages_option_and_unknown_packages(tmp_path):
    root = tiny(tmp_path / "proj", 'packages = ["jxe_tiny", "nowhere"]\n')
    with pytest.raises(ConfigError, match=r"packages\[1\]: cannot find package 'nowhere' "
                       r"\(looked for nowhere, src/nowhere with an __init__.py\)"):
        inprocess_build(root, tmp_path / "dist")


def test_src_layout_and_two_packages(tmp_path):
    root = write_project(tmp_path / "proj", {
        "pyproject.toml": hatch_pyproject("two-pkgs", extra=(
            '[tool.hatch.build.targets.wheel]\npackages = ["src/alpha", "src/beta"]\n')),
        "src/alpha/__init__.py": TINY_MODULE,
        "src/beta/__init__.py": "from alpha import double as twice\n" + TINY_MODULE.replace(
            "def double", "def triple").replace("2 * x + 1", "3 * x"),
    })
    (wheel,) = inprocess_build(root, tmp_path / "dist")
    alpha = json.loads(artifact_files(wheel, "alpha")["manifest.json"])
    beta = json.loads(artifact_files(wheel, "beta")["manifest.json"])
    assert {a["function"] for a in alpha["artifacts"]} == {"alpha:double", "alpha:power"}
    assert {a["function"] for a in beta["artifacts"]} == {"beta:triple", "beta:power"}


# -- front ends, end to end ----------------------------------------------------------------------

#: The front ends that build example_pkg here: an sdist then a wheel from it, and a direct
#: install. ``python -m build --wheel``, ``pip wheel``, ``uv build`` and ``hatch build`` each build
#: the getting-started package once (tests/examples/test_getting_started.py, which also checks
#: that their four wheels carry the same artifacts): building example_pkg again with each of
#: them cost about 110 s of CI and showed nothing the two builds here and those four do not.
FRONT_ENDS = ["python -m build", "pip install ."]


@pytest.fixture(scope="module")
def frontend_env(project_wheel: Path, tmp_path_factory) -> dict[str, str]:
    """Environment of every isolated build: hatch-jaxexport from the local wheel."""
    env = links_env(project_wheel.parent)
    env["HATCH_JAXEXPORT_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    return env


@pytest.fixture(scope="module")
def runtime_requirements(project_wheel: Path) -> list[str]:
    return [str(project_wheel), f"jax=={JAX_VERSION}", "flatbuffers"]


@pytest.fixture(scope="module")
def reproducible_builds(tmp_path_factory, frontend_env) -> list[Path]:
    """example_pkg built twice with ``uv build`` from two directories, a fake user's HOME."""
    epoch = "1700000000"
    wheels = []
    for i, where in enumerate(("first-place", "elsewhere/deeper")):
        base = tmp_path_factory.mktemp(f"repro{i}")
        source = copy_project(EXAMPLE, base / where / "example_pkg")
        home = base / "home" / "jxe-leak-user"
        home.mkdir(parents=True)
        env = {**frontend_env, "SOURCE_DATE_EPOCH": epoch, "HOME": str(home),
               "USER": "jxe-leak-user", "LOGNAME": "jxe-leak-user",
               "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache/uv")),
               "PIP_CACHE_DIR": str(Path.home() / ".cache/pip")}
        run([_uv(), "build", "--wheel", "-o", base / "dist", source], env=env, cwd=source)
        (wheel,) = (base / "dist").glob("example_pkg-*.whl")
        wheels.append(wheel)
    return wheels


@pytest.fixture(scope="module")
def source_results(tmp_path_factory, reproducible_builds, runtime_requirements) -> Path:
    """example_pkg's results traced from source (jax.jit of the bodies), in a fresh process."""
    venv = make_venv(tmp_path_factory.mktemp("source-venv") / "venv", *runtime_requirements,
                     reproducible_builds[0])
    report, out = run_example(venv, "source", tmp_path_factory.mktemp("source-run"),
                              strict=False)
    assert {row["ran"] for row in report["rows"]} == {"traced from source"}
    return out


def _build_sdist_then_wheel(source: Path, out: Path, env: dict[str, str]) -> Path:
    """``python -m build`` of example_pkg: an sdist without artifacts, then the wheel built from
    it; returns the wheel."""
    run(python_m_build("-o", out, source), env=env)
    (sdist,) = out.glob("example_pkg-*.tar.gz")
    names = list(members(sdist))
    assert any(n.endswith("src/example_pkg/nn.py") for n in names)
    assert not [n for n in names if "_jaxexport" in n], "the sdist carries artifacts"
    (wheel,) = out.glob("example_pkg-*.whl")
    return wheel


@pytest.mark.slow
@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_front_end_builds_a_wheel_that_runs_without_tracing(
        front_end, tmp_path, frontend_env, runtime_requirements, source_results):
    source = copy_project(EXAMPLE, tmp_path / "src" / "example_pkg")
    if front_end == "pip install .":
        python = make_venv(tmp_path / "venv", *runtime_requirements)
        run([python, "-m", "pip", "install", "--find-links", Path(runtime_requirements[0]).parent,
             "."], env=frontend_env, cwd=source)
        site = Path(run([python, "-c", "import example_pkg, os; print(os.path.dirname("
                                       "example_pkg.__file__))"], cwd=tmp_path).stdout.strip())
        assert (site / "_jaxexport" / "manifest.json").is_file()
        assert "site-packages" in str(site)
    else:
        wheel = _build_sdist_then_wheel(source, tmp_path / "dist", frontend_env)
        assert wheel.name == "example_pkg-0.1.0-py3-none-any.whl"
        assert f"Requires-Dist: jax>={JAX_VERSION}" not in metadata(wheel)  # its own range
        files = artifact_files(wheel, "example_pkg")
        manifest = json.loads(files.pop("manifest.json"))
        portable = json.loads(files.pop("portable.json"))  # example_pkg asks for 2 variants
        for variant in portable["variants"]:
            for entry in variant["files"].values():
                assert files.pop(entry["file"]), entry
        listed = [a["file"] for a in manifest["artifacts"]]
        assert len(set(listed)) == len(listed)  # each artifact its own file
        # every file listed, none unlisted (a text form jax printed alike for cpu and cuda is
        # one file that both records name and hash)
        listed += [form["file"] for a in manifest["artifacts"] for form in a["sized"]]
        assert sorted(files) == sorted(set(listed))
        assert any(a["sized"] for a in manifest["artifacts"])  # concrete-size forms shipped
        assert len(files) >= 18 and not manifest["skipped"]
        python = make_venv(tmp_path / "venv", *runtime_requirements, wheel)
    assert not (source / "src" / "example_pkg" / "_jaxexport").exists()
    report, out = run_example(python, "artifact", tmp_path / "run")
    assert_baked_run(report, compare_results(out, source_results))


@pytest.mark.slow
def test_builds_from_two_directories_are_byte_identical(reproducible_builds):
    first, second = reproducible_builds
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.slow
def test_wheels_hold_no_build_path_or_user_name(reproducible_builds):
    needles = ["jxe-leak-user", "first-place", "elsewhere/deeper", str(Path.home()),
               f"/{getpass.getuser()}/", str(Path(reproducible_builds[0]).parents[2])]
    for wheel in reproducible_builds:
        assert leaks(wheel, [n for n in needles if n not in ("/", "")]) == []


CONFIG_ERROR_FRONT_ENDS = {
    "uv build": lambda root, out: [_uv(), "build", "--wheel", "-o", out, root],
    "python -m build": lambda root, out: [sys.executable, "-m", "build", "--wheel", "-o", out,
                                          root],
    "pip wheel": lambda root, out: [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out,
                                    root],
}


BROADCAST_MODULE = """
from hatch_jaxexport import exportable


@exportable({"x": ("batch, 3", "float32"), "y": ("n, 3", "float32")}, ad_order=1)
def difference(x, y):
    return x - y
"""


@pytest.mark.slow
def test_export_error_reaches_the_user_once_at_the_line_without_a_traceback(tmp_path,
                                                                             frontend_env):
    """Through ``python -m build``: the reporter's list (one folded line with the user's
    file:line and a hint) and one closing line, where the problem used to be printed twice
    (the list, then the ``ExportError`` under 30 lines of the backend's frames)."""
    root = tiny(tmp_path / "proj", name="jxe_bcast", module=BROADCAST_MODULE)
    source = (root / "jxe_bcast" / "__init__.py").read_text().splitlines()
    line = source.index("    return x - y") + 1
    proc = run(CONFIG_ERROR_FRONT_ENDS["python -m build"](root, tmp_path / "dist"),
               env=frontend_env, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert output.count("incompatible shapes for broadcasting") == 1, output
    assert ("jxe_bcast:difference, structure 0 (x: float32[batch, 3]; y: float32[n, 3]), "
            f"platform cpu, primal, jvp, vjp artifacts at jxe_bcast/__init__.py:{line}: TypeError: "
            "sub got incompatible shapes for broadcasting: (batch, 3), (n, 3).") in output
    assert "hint: 'batch' and 'n' are independent symbols" in output
    assert "error: the export failed: every problem is listed above" in output
    assert "Traceback (most recent call last)" not in output
    assert str(root) not in output.replace(f"{root}/dist", "")  # no build path in the messages
    assert not list((tmp_path / "dist").glob("*.whl"))


@pytest.mark.slow
@pytest.mark.parametrize("front_end", sorted(CONFIG_ERROR_FRONT_ENDS))
def test_config_error_reaches_the_user_through_a_front_end(front_end, tmp_path, frontend_env):
    """Every problem, with its TOML path and a suggestion, and no traceback of the backend
    (before: 22 more lines of frames from pyproject_hooks, hatchling and this hook)."""
    root = tiny(tmp_path / "proj", 'job = 2\nplatforms = "metal"\n')
    proc = run(CONFIG_ERROR_FRONT_ENDS[front_end](root, tmp_path / "dist"), env=frontend_env,
               check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "error: invalid hatch-jaxexport configuration (2 errors):" in output
    assert ("tool.hatch.build.targets.wheel.hooks.jaxexport.job is not an option of "
            "hatch-jaxexport (did you mean `jobs`?)") in output
    assert ("tool.hatch.build.targets.wheel.hooks.jaxexport.platforms[0] must be one of "
            "'cpu', 'cuda', 'rocm', 'tpu', got 'metal'") in output
    assert "Traceback (most recent call last)" not in output
    assert "hatch_jaxexport/" not in output  # no frame of ours either
    assert not list((tmp_path / "dist").glob("*.whl"))


@pytest.mark.slow
def test_editable_install_with_pip(tmp_path, frontend_env, runtime_requirements, run_python):
    source = copy_project(EXAMPLE, tmp_path / "src" / "example_pkg")
    python = make_venv(tmp_path / "venv", *runtime_requirements)
    run([python, "-m", "pip", "install", "--find-links", Path(runtime_requirements[0]).parent,
         "-e", "."], env=frontend_env, cwd=source)
    folder = source / "src" / "example_pkg" / "_jaxexport"
    assert (folder / "manifest.json").is_file() and (folder / ".gitignore").is_file()
    report, _ = run_example(python, "artifact", tmp_path / "run")
    assert report["bodies_ran"] == [] and {r["ran"] for r in report["rows"]} == {
        "artifact (cpu)"}
    # issue 37: an edit after `pip install -e .` is served from the source, said once
    chain = source / "src" / "example_pkg" / "chain.py"
    chain.write_text(chain.read_text().replace("x = jnp.sin(x) * 1.01", "x = jnp.sin(x) * 1.02"))
    edited = run([python, "-W", "always", "-c",
                  "import numpy as np, jax, example_pkg.chain as c\n"
                  "x = np.ones((8, 16), np.float32)\n"
                  "print(bool(np.allclose(c.elementwise_chain(x), "
                  "jax.jit(c.elementwise_chain.__wrapped__)(x))))"], cwd=tmp_path)
    assert edited.stdout.strip() == "True"
    assert edited.stderr.count("are stale: example_pkg/chain.py changed") == 1, edited.stderr
    shutil.rmtree(folder)


AGAIN_MODULE = """
from hatch_jaxexport import exportable


@exportable({"x": ("n", "float32")})
def scale(x):
    return x * 2.0 + 1.0
"""

#: One call in a fresh process, strict (a call no artifact serves raises): its result, whether
#: the artifact served it and the lines saying the artifacts are stale.
AGAIN_CALL = """
import json
import numpy as np
import jxe_again
from hatch_jaxexport.runtime.call.loader import loaded_from_artifact
got = jxe_again.scale(np.ones(3, np.float32)).tolist()
print(json.dumps({"got": got, "artifact": list(loaded_from_artifact(jxe_again.scale).values()),
                  "file": jxe_again.__file__}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("front_end", ["pip", "uv"])
def test_an_editable_install_reinstalls_with_and_without_an_edit(front_end, tmp_path,
                                                                 frontend_env,
                                                                 runtime_requirements):
    """Issue 44: the reinstall the stale notice recommends works, as often as it is run. The
    first ``pip install -e .`` writes ``_editable_impl_jxe_again.pth`` naming ``src``; pip's
    isolated build of the next one strips every folder that file adds from its processes'
    ``sys.path``, the export workers' ``PYTHONPATH`` included, and the export failed with ``No
    module named 'jxe_again'`` (uv's isolation keeps it). Each install is followed by a call in
    a fresh process that the artifacts serve with the source's result as it is now."""
    root = write_project(tmp_path / "proj", {
        "pyproject.toml": hatch_pyproject("jxe-again", "require-runtime-dependencies = true\n"),
        "src/jxe_again/__init__.py": AGAIN_MODULE})
    module = root / "src" / "jxe_again" / "__init__.py"
    python = make_venv(tmp_path / "venv", *runtime_requirements)
    install = ([python, "-m", "pip", "install", "-q", "-e", "."] if front_end == "pip" else
               [_uv(), "pip", "install", "-q", "-p", python, "-e", "."])
    for factor in ("2.0", "2.0", "3.0"):  # installed, reinstalled unedited, then edited
        module.write_text(AGAIN_MODULE.replace("x * 2.0", f"x * {factor}"))
        run(install, env=frontend_env, cwd=root)
        done = run([python, "-c", AGAIN_CALL], cwd=tmp_path,
                   env={"HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_CACHE": "0",
                        "PYTHONPATH": ""})  # the package found through the install alone
        assert json.loads(done.stdout) == {"got": [float(factor) + 1.0] * 3, "artifact": [True],
                                           "file": str(module)}, (factor, done.stderr)
        assert "are stale" not in done.stderr
    if front_end == "pip":
        site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
                        ).stdout.strip())
        assert (site / "_editable_impl_jxe_again.pth").read_text().strip() == str(root / "src")
