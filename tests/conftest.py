"""Shared fixtures: this project's own wheel, fresh virtual environments, fresh processes."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent  # conftest.py and the support modules beside it
FIXTURES = TESTS / "fixtures"


def _share_bytecode() -> None:
    """Let the processes the tests start write their bytecode, into one folder of their own
    (``PYTHONPYCACHEPREFIX``), never beside a source file: where ``PYTHONDONTWRITEBYTECODE``
    is set (as on this project's CI machines), every fresh process in a fresh virtual
    environment or isolated build compiled jax's sources again (``import jax``: 3.6 s against
    1.4 s on 2 cores); now the first does, once per environment. Python checks each cached
    file against its source's size and time, so the folder is shared by runs and workers.
    No ``__pycache__`` lands in a project a test builds, so no wheel can carry one."""
    import tempfile

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(
        tempfile.gettempdir(), f"jaxexport-test-bytecode-{os.getuid()}"))


def pytest_configure(config: pytest.Config) -> None:
    """Keep the loader's caches (JAX's and the executable cache) out of the user's home: one
    folder per test session, inherited by the processes the tests start. Tests that need their
    own cache set ``HATCH_JAXEXPORT_CACHE`` or ``XDG_CACHE_HOME`` (see ``run``) themselves.
    Under pytest-xdist each worker gets a folder of its own (the controller's would be inherited
    by every worker, and one worker's compiles would be the other's cache hits)."""
    _share_bytecode()
    ours = os.environ.get("_JAXEXPORT_TEST_CACHE_OWNER")
    if "HATCH_JAXEXPORT_CACHE" not in os.environ or (ours and ours != str(os.getpid())):
        import tempfile

        os.environ["HATCH_JAXEXPORT_CACHE"] = tempfile.mkdtemp(prefix="jaxexport-test-cache-")
        os.environ["_JAXEXPORT_TEST_CACHE_OWNER"] = str(os.getpid())


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the cache folder this process made in ``pytest_configure`` (each xdist worker
    its own, the controller its own), so that a test session leaves nothing in the temporary
    folder: every process that used it, started by a test, has ended by now."""
    if os.environ.get("_JAXEXPORT_TEST_CACHE_OWNER") == str(os.getpid()):
        shutil.rmtree(os.environ.pop("HATCH_JAXEXPORT_CACHE"), ignore_errors=True)
        del os.environ["_JAXEXPORT_TEST_CACHE_OWNER"]


#: The test files that take longest (builds, fresh venvs, many fresh processes), heaviest first,
#: from ``--durations`` of a clean-clone run of ``scripts/test.sh``. They are collected first so
#: that the xdist workers (``--dist loadfile``: a file stays on one worker) start them at
#: once and finish together: collected in path order, ``test_tiers.py`` and ``test_transforms.py``
#: came last, and one worker ran them alone for minutes while the other
#: idled (longest-processing-time-first scheduling). Only the order changes, never what runs.
LONGEST_FIRST = (
    # only in the whole run (``WHOLE_ONLY``), where they are the longest
    "tests/integration/test_ecosystem.py",
    "tests/examples/test_getting_started.py",
    "tests/integration/test_field2.py",
    # CI's run, from a clean-clone run's durations (December 2026, three workers)
    "tests/integration/test_deviceless_tpu.py",  # libtpu's download (once), then TPU compiles
    "tests/integration/test_hatch_hook.py",
    "tests/integration/test_pytest_plugin.py",
    "tests/integration/test_setuptools.py",
    "tests/integration/test_peer_suites.py",
    # the sixth wave's (December 2026): the generated packages' builds, the fault checks' fresh
    # processes, the other backends' builds, the device script's stand-in run
    "tests/integration/test_generated_packages.py",
    "tests/integration/test_never_break_a_call.py",
    "tests/integration/test_any_backend.py",
    "tests/examples/test_tpu_executables_script.py",
    "tests/unit/runtime/artifacts/test_transforms.py",
    "tests/unit/runtime/artifacts/test_option_matrix.py",
    "tests/examples/test_example_pkg.py",
    "tests/examples/test_accelerator_check.py",
    "tests/unit/runtime/executables/test_tiers.py",
    "tests/unit/runtime/artifacts/test_sharding.py",
    "tests/integration/test_shipped_executables.py",
    "tests/unit/runtime/executables/test_shipped.py",
    "tests/integration/test_multi_process.py",
    "tests/integration/test_multi_device_cache.py",
    "tests/integration/test_merge.py",
    "tests/unit/runtime/call/test_argument_kinds.py",
    "tests/examples/test_readme_commands.py",
    "tests/unit/runtime/artifacts/test_fuzz.py",
    "tests/unit/formats/test_manifest.py",
    "tests/unit/runtime/artifacts/test_aux_keys.py",
    "tests/integration/test_dependency_pytrees.py",
    "tests/integration/test_concrete_sizes.py",
    "tests/integration/test_recorded_sizes.py",
    "tests/integration/test_release_check_concrete.py",
    "tests/integration/test_reproducible_executables.py",
)


#: Tests only the whole run runs (``bash scripts/test.sh --whole``): marked ``whole`` here, in
#: one list, and deselected by CI's run (``-m "not whole"``), which must fit in 20 minutes on
#: 2 cores. Each repeats, at a cost of half a minute or more, what a test CI keeps already
#: shows: another front end of one build, another device count of one check, a matrix whose
#: core cell runs in CI, or a benchmark's smoke run. ``(file, part of the test's id)`` each
#: (``""``: the whole file), with the reason.
WHOLE_ONLY: tuple[tuple[str, str], ...] = (
    # the JAX ecosystem matrices (flax, equinox, diffrax, optax, blackjax, numpyro): their
    # wheels' builds take minutes; CI keeps a real library's own suite (tinygp) and optax's
    # training step (test_dependency_pytrees)
    ("tests/integration/test_ecosystem.py", ""), ("tests/integration/test_field2.py", ""),
    # another jaxlib's compile or executables: merging two builds, and a wheel whose
    # executables are another jaxlib's, stay in CI
    ("tests/integration/test_merge.py", "::test_builders_with_other_targets_and_jaxlibs"),
    ("tests/integration/test_shipped_executables.py", "::test_one_wheel_serves_several_jaxlib"),
    # the getting-started page's commands: the build, install and calls of test_example_pkg
    # and test_readme_commands (both in CI), as the page writes them
    ("tests/examples/test_getting_started.py", ""),
    # one wheel with artifacts for three jax releases, installed with five: seven environments
    # with jax, four of them old releases CI would download for this test alone
    ("tests/integration/test_jax_releases.py", ""),
    # the background compiles' queue (a cap per machine, queued compiles dropped at exit): CI
    # keeps the tiers themselves, a compile in flight elsewhere and the concurrent first calls
    ("tests/unit/runtime/executables/test_tiers.py",
     "::test_background_compiles_are_capped_per_machine"),
    ("tests/unit/runtime/executables/test_tiers.py", "::test_queued_compiles_are_dropped_at_exit"),
    # an editable install through the wrapping build backend (a venv with jax of its own):
    # flit's and poetry-core's wheels, baked and installed, and the command stay in CI
    ("tests/integration/test_any_backend.py", "::test_an_editable_install_through_the_wrapper"),
    # the device script's CPU stand-in: the script ran on the TPU itself (2026-12-07,
    # docs/executables.md); its parts (compile-executables, merge, verify, inspect, the release
    # check of an accelerator target) stay in CI (test_device_executables, test_merge)
    ("tests/examples/test_tpu_executables_script.py", ""),
    # dm-pix kept on flit, baked through the wrapping backend, its fast subset: CI keeps a
    # real library's own suite (tinygp) and a flit package built through the wrapper
    # (test_any_backend); `python benchmarks/peer_suites.py --library dm-pix-flit` runs it whole
    ("tests/integration/test_peer_suites.py",
     "::test_dm_pix_kept_on_flit_bakes_through_the_wrapping_backend"),
    # jax-cosmo's fast subset: its build exports 47 artifacts of large programs (minutes);
    # `python benchmarks/peer_suites.py --library jax-cosmo` runs it whole
    ("tests/integration/test_peer_suites.py",
     "::test_jax_cosmo_large_programs_are_served_from_its_baked_wheel"),
    # benchmark smoke runs: the benchmarks run by their own commands
    ("tests/integration/test_build_benchmark.py", ""),
    # TPU targets compiled without a TPU through every other integration (three isolated
    # builds, each compiling two TPU hosts) and the matrix merge of a CPU and a TPU build: CI
    # keeps the Hatch hook's build of both hosts, its records field by field, verify, inspect
    # and the release check (libtpu installed once)
    ("tests/integration/test_deviceless_tpu.py", "::test_every_integration_writes_the_same"),
    ("tests/integration/test_deviceless_tpu.py", "::test_a_cpu_builders_wheel_and_a_tpu_builds"),
    # companion wheels through setuptools' and the wrapping backend's isolated builds, and
    # installed by uv from a find-links folder into a fresh venv (CI keeps the Hatch hook's
    # records and extras, the loader's every case, the damaged blob and the reproducible
    # split and merge); the concrete-size executables with executables turned off (CI keeps
    # them served)
    ("tests/integration/test_companion_wheels.py", "::test_setuptools_and_the_wrapping"),
    ("tests/integration/test_companion_wheels.py", "::test_uv_installs_the_extra"),
    ("tests/integration/test_concrete_executables.py", "::test_without_executables"),
    # the accelerator bundle, example_pkg with its TPU v5e executables (27, 145 s of compile):
    # its build ran for the TPU run (docs/gpu.md); CI compiles TPU targets in test_deviceless_tpu
    ("tests/examples/test_accelerator_bundle.py", ""),
    ("tests/integration/test_manifest_scale_benchmark.py", ""),
    # IREE's tools (the portable export without jax stays in CI)
    ("tests/unit/bake/concrete/test_portable.py", "::test_wheel_runs_through_iree_without_jax"),
    ("tests/unit/bake/concrete/test_portable.py", "::test_bundle_compiles_and_runs_with_the_iree"),
    # other front ends of one build: CI builds with python -m build and reinstalls with pip
    # (uv and pip also run in the getting-started test)
    ("tests/integration/test_hatch_hook.py", "[pip install .]"),
    ("tests/integration/test_hatch_hook.py", "[pip wheel]"),
    ("tests/integration/test_hatch_hook.py", "[uv build]"),
    ("tests/integration/test_hatch_hook.py", "::test_an_editable_install_reinstalls_with_and_"
     "without_an_edit[uv]"),
    # editable installs: CI installs with pip twice in a row and edits (hatchling), and the
    # strict src-layout mode of setuptools twice; example_pkg's pip editable install and
    # setuptools' lenient modes (the same .pth mechanism) run in the whole run
    ("tests/integration/test_hatch_hook.py", "::test_editable_install_with_pip"),
    ("tests/integration/test_setuptools.py", "::test_editable_install[lenient"),
    # the committed signatures file through hatchling (its setuptools build, where the file
    # used to be lost, stays in CI; hatchling builds read recordings in test_invisible_dropin)
    ("tests/integration/test_committed_signatures.py", "::test_hatchling_build"),
    # the release check against another jax and under xdist in a fresh venv: the check of a
    # fresh venv's wheel (stale, refused as its own source) stays in CI
    ("tests/integration/test_pytest_plugin.py", "::test_artifacts_built_by_another_jax"),
    ("tests/integration/test_pytest_plugin.py", "::test_wheel_installed_in_a_fresh_venv_with"),
    # a second device count of the sharding checks and of the release check on a mesh
    ("tests/unit/runtime/artifacts/test_sharding.py", "[8-devices"),
    ("tests/integration/test_multi_device_cache.py", "[8-devices"),
    ("tests/unit/runtime/artifacts/test_sharding.py",
     "::test_release_check_compares_sharded_artifacts_on_a_mesh_of_their_shape[1]"),
)


#: The process-starting tests that run on every jax CI covers (``-m across_jax``): on Python
#: 3.12 with the newest jax, CI runs these and the fast loop (``not slow``), not every slow
#: unit test again. Each file exercises a jax API that changes between releases: exporting and
#: loading (``jax.export``), every transformation of a loaded artifact, serialized VJPs,
#: pytree serialization, executables compiled, cached and shipped, concrete-size and text
#: forms compiled from their bytes (jaxlib's refinement and compile entry points).
ACROSS_JAX = (
    "tests/unit/bake/export/test_export.py",
    "tests/unit/bake/concrete/test_forms.py",
    "tests/unit/runtime/call/test_loader.py",
    "tests/unit/runtime/artifacts/test_transforms.py",
    "tests/unit/runtime/artifacts/test_native_vjp.py",
    "tests/unit/runtime/artifacts/test_pytrees.py",
    "tests/unit/runtime/executables/test_executables.py",
    "tests/unit/runtime/executables/test_shipped.py",
)


def _whole_only(nodeid: str) -> bool:
    """Whether a test is one of ``WHOLE_ONLY``."""
    return any(nodeid.startswith(path) and part in nodeid[len(path):]
               for path, part in WHOLE_ONLY)


#: What starts a process (a build's workers, a fresh interpreter, a venv): a test that uses
#: one of these names, directly or through its fixtures or its module's helpers, is ``slow``.
PROCESS_STARTERS = frozenset({
    "subprocess", "Popen", "run", "run_python", "make_venv", "call_baked_fresh",
    "export_into_copy", "export_package", "list_tasks", "main", "bake", "warmup_package",
    "compile_executables",
    "pytester", "project_wheel", "example_wheel",
})


def _code_names(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object and the functions nested in it use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def starts_processes(item: pytest.Item, fixtures: dict[str, Any]) -> bool:
    """Whether ``item`` starts a process: it, a fixture it uses (``fixtures``: every
    conftest's and its module's) or a helper of its module names one of ``PROCESS_STARTERS``."""
    module = getattr(item, "module", None)
    if module is None:
        return False
    found = {**fixtures, **{name: value for name, value in vars(module).items()
                            if callable(value)}}
    todo = [getattr(item, "function", None), *(found.get(n) for n in item.fixturenames)]
    seen: set[int] = set()
    while todo:
        obj = todo.pop()
        if isinstance(obj, type):  # a helper class: its methods
            todo += [method for method in vars(obj).values() if callable(method)]
            continue
        code = getattr(inspect.unwrap(obj), "__code__", None) if obj is not None else None
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        names = _code_names(code)
        if names & PROCESS_STARTERS:
            return True
        todo += [found[n] for n in names if n in found]
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the ``WHOLE_ONLY`` tests ``whole`` and the tests that start processes ``slow``
    (``-m "not slow" tests/unit`` is the fast loop); collect the ``LONGEST_FIRST`` files first,
    heaviest first; the rest keep their order (a stable sort: the tests of a file keep
    theirs)."""
    fixtures = {name: value for plugin in config.pluginmanager.get_plugins()
                if isinstance(plugin, types.ModuleType)
                and plugin.__name__.rsplit(".", 1)[-1] == "conftest"
                for name, value in vars(plugin).items() if hasattr(value, "_fixture_function")}
    for item in items:
        if _whole_only(item.nodeid):
            item.add_marker(pytest.mark.whole)
        if item.get_closest_marker("slow") is None and starts_processes(item, fixtures):
            item.add_marker(pytest.mark.slow)
        if item.nodeid.split("::")[0] in ACROSS_JAX:
            item.add_marker(pytest.mark.across_jax)
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


#: The head of a script run in a fresh process that counts XLA's backend compiles in
#: ``compiles`` (one event per executable XLA compiled, none for one loaded from disk), and
#: imports ``jxe_exec`` as ``m`` with numpy, jax and the loader's ``tiered_calls``.
COUNT_COMPILES = """
import json, sys, warnings
import numpy as np, jax
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: compiles.append(event)
    if event == "/jax/core/compile/backend_compile_duration" else None)
import jxe_exec as m
from hatch_jaxexport.runtime.call.loader import tiered_calls
f32 = np.float32
"""


def run(cmd: Sequence[str | os.PathLike[str]], *, cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None, check: bool = True, timeout: float = 900,
        ) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure show its output in the assertion."""
    merged = {**os.environ, **(env or {})}
    if env and "XDG_CACHE_HOME" in env and "HATCH_JAXEXPORT_CACHE" not in env:
        merged.pop("HATCH_JAXEXPORT_CACHE", None)  # the test picks the default folder under it
    proc = subprocess.run([os.fspath(c) for c in cmd], cwd=cwd, env=merged, text=True,
                          capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n"
                             f"--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n"
                             f"{proc.stderr[-6000:]}")
    return proc


def _uv() -> str | None:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    return found if Path(found).exists() else None


def make_venv(path: Path, *requirements: str | os.PathLike[str],
              find_links: Sequence[Path] = (), python: str | None = None) -> Path:
    """A fresh virtual environment with ``requirements`` installed; returns its python."""
    python = python or sys.executable
    uv = _uv()
    links = [arg for d in find_links for arg in ("--find-links", os.fspath(d))]
    if uv:
        run([uv, "venv", "-q", "--seed", path, "-p", python])
        venv_python = path / "bin" / "python"
        if requirements:
            run([uv, "pip", "install", "-q", "-p", venv_python, *links,
                 *map(os.fspath, requirements)])
    else:
        run([python, "-m", "venv", path])
        venv_python = path / "bin" / "python"
        if requirements:
            run([venv_python, "-m", "pip", "install", "-q", *links,
                 *map(os.fspath, requirements)])
    return venv_python


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This project built as a wheel (the way users get it), once per session."""
    out = tmp_path_factory.mktemp("project-wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", out, ROOT])
    (wheel,) = out.glob("hatch_jaxexport-*.whl")
    return wheel


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], Path]) -> Path:
    """What ``build`` makes in a folder of its own, once per test session whatever the number
    of xdist workers: the first worker to ask builds it under a lock in the session's base
    folder (the workers' common parent), the others wait for it and reuse it."""
    import fcntl

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    record = root / f"built-once-{name}.json"
    with open(root / f"built-once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if record.is_file():
            return Path(json.loads(record.read_text())["path"])
        folder = root / f"built-once-{name}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        built = build(folder)
        record.write_text(json.dumps({"path": str(built)}))
        return built


@pytest.fixture(scope="session")
def example_wheel(tmp_path_factory: pytest.TempPathFactory, project_wheel: Path) -> Path:
    """``example_pkg`` built as a wheel by the Hatch hook with this interpreter's jax, once per
    session, shared by the xdist workers (the release check and the portable bundle's tests
    share it; each build took about 40 s)."""
    return built_once(tmp_path_factory, "example-wheel",
                      lambda tmp: _build_example_wheel(tmp, project_wheel))


def _build_example_wheel(tmp: Path, project_wheel: Path) -> Path:
    project = Path(shutil.copytree(ROOT / "example_pkg", tmp / "example_pkg", ignore=shutil.
                                   ignore_patterns("_jaxexport", "dist", "build", "__pycache__")))
    links = {"PIP_FIND_LINKS": " ".join(filter(None, [os.fspath(project_wheel.parent),
                                                       os.environ.get("PIP_FIND_LINKS")])),
             "UV_FIND_LINKS": ",".join(filter(None, [os.fspath(project_wheel.parent),
                                                      os.environ.get("UV_FIND_LINKS")]))}
    uv = _uv()
    if uv:  # built by this interpreter's jax, as a release job builds and checks with one jax
        run([uv, "build", "--wheel", "-q", "-p", sys.executable, "-o", tmp / "dist", project],
            env=links)
    else:
        run([sys.executable, "-m", "build", "--wheel", "-o", tmp / "dist", project], env=links)
    (wheel,) = (tmp / "dist").glob("example_pkg-*.whl")
    return wheel


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run Python code in a fresh process: ``run_python(code, python=..., env=..., check=...)``."""

    def runner(code: str, *, python: str | os.PathLike[str] = sys.executable,
               env: dict[str, str] | None = None, check: bool = True,
               cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
        return run([python, "-c", code], env=env, check=check, cwd=cwd)

    return runner


@pytest.fixture
def maintainer_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The maintainer's switch on (``HATCH_JAXEXPORT_WARNINGS=1``, inherited by the processes
    a test starts): the runtime's notices are warnings too, as in a maintainer's own test runs.
    Without it (an end user's process) they are log records only."""
    monkeypatch.setenv("HATCH_JAXEXPORT_WARNINGS", "1")


def export_into_copy(tmp: Path, package: str, **options: object) -> Path:
    """Copy a fixture package into ``tmp`` and bake its artifacts beside it (as a wheel would)."""
    from hatch_jaxexport.bake import export_package

    shutil.copytree(FIXTURES / package, tmp / package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    export_package(package, tmp / package / "_jaxexport", search_path=[tmp], **options)
    return tmp


def import_baked(site: Path, package: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``package`` imported from ``site`` in this process in strict mode (any fallback to its
    source raises), its ``TRACES`` counter (where it has one) back at 0."""
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")
    monkeypatch.syspath_prepend(str(site))
    module = import_from(site, package)
    if hasattr(module, "TRACES"):
        module.TRACES["count"] = 0
    return module


@pytest.fixture(scope="session")
def demo_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``jxe_demo`` with its baked artifacts, like site-packages after install."""
    return export_into_copy(tmp_path_factory.mktemp("demo-site"), "jxe_demo", jobs=2)


@pytest.fixture(scope="session")
def exec_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``jxe_exec`` baked with precompiled executables for both x86-64 targets."""
    return export_into_copy(tmp_path_factory.mktemp("exec-site"), "jxe_exec", jobs=2,
                            executables=["x86_64-avx2", "x86_64-avx512"])


@pytest.fixture(scope="session")
def scalars_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``jxe_scalars`` (a ``float32[]`` argument) baked with this machine's executables."""
    return export_into_copy(tmp_path_factory.mktemp("scalars-site"), "jxe_scalars",
                            executables=True)


@pytest.fixture(scope="session")
def demo(demo_site: Path):
    """``jxe_demo.funcs`` imported in this process from ``demo_site``."""
    sys.path.insert(0, str(demo_site))
    try:
        yield import_from(demo_site, "jxe_demo.funcs")
    finally:
        sys.path.remove(str(demo_site))


def import_from(site: Path, name: str) -> Any:
    """Module ``name`` imported from ``site`` (already on ``sys.path``), never a copy of the
    same package an earlier test of this process imported from elsewhere (its source under
    ``tests/fixtures``, say: a session fixture must not depend on which tests ran first)."""
    import importlib

    top = name.partition(".")[0]
    for loaded in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        origin = getattr(sys.modules[loaded], "__file__", None) or ""
        if not Path(origin).resolve().is_relative_to(site.resolve()):
            del sys.modules[loaded]
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().is_relative_to(site.resolve()), module.__file__
    return module


def call_baked_fresh(site: Path, script: str, *args: str) -> dict[str, Any]:
    """Run ``tests/<script>`` in a fresh process in strict mode with ``site`` (a baked fixture)
    and this checkout first on ``sys.path``; its last stdout line, read as JSON."""
    import json

    path = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "HATCH_JAXEXPORT_STRICT": "1", "PYTHONPATH": path}
    done = subprocess.run([sys.executable, str(TESTS / script), *args], env=env, text=True,
                          capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
