"""Real libraries, their own test suites: tinygp 0.3.1, dm-pix 0.4.5, quadax 0.3.1 and jax-cosmo
0.1.0 baked with hatch-jaxexport.

    python benchmarks/peer_suites.py [--library tinygp|dm-pix|dm-pix-flit|quadax|jax-cosmo]
                                     [--fast [--record]] [--tests FILE[::NODE] ...]
                                     [--cache DIR] [--json FILE] [--twice] [--keep] [--work DIR]
                                     [--build-only]

For each library: download its sdist from the package index (cached under ``--cache``, default
``~/.cache/hatch-jaxexport/peer-suites``), unpack it twice, apply ``peers/<lib>-<version>.patch``
(``patch -p1``) to one copy, build hatch-jaxexport's wheel and the patched library's baked wheel
through a real isolated build (``python -m build --wheel`` with ``PIP_FIND_LINKS`` pointing at
hatch-jaxexport's wheel), install the baked wheel into one fresh venv and the unpatched library
into another, copy the library's tests out of the source tree (so the installed package is what
they import) and run them, with the library's own pytest configuration, against each copy.
Where an sdist lacks helper modules its tests import (quadax 0.3.1), they are copied beside
the tests from ``peers/<lib>-<version>-tests/`` (upstream's files, unchanged); test files that
still cannot import are left out and named.

Before the build (not with ``--fast``), the suite runs once on the patched source with
``HATCH_JAXEXPORT_RECORD=1``, which writes ``jaxexport-signatures.json`` into the source so that
the build bakes the recorded sizes.

Prints per library: tests passed/failed/skipped both ways, the tests that pass plain but not
baked grouped by the exception that failed them, the decorated functions' first eager calls per
signature by how they were served (``call_report()``: shipped, cached, compiled... or traced),
the calls staged into a caller's ``jax.jit``/``vmap``/``grad`` trace per function and
transformation, served (the artifact staged) or traced (``staged_report()``), each share with
the calls that pass a callable (quadax's integrands: traced by design, the callable held
static) counted apart from the served share, the build time, the wheel size (and its
companion wheels'), pytest's warnings summary both ways (each category and message counted
differently named) and the suite's wall time both ways. A third run, strict
(``HATCH_JAXEXPORT_STRICT=1``), shows that what strict mode refuses is exactly the calls no
artifact covers: each baked pass it fails must fail with a refusal naming a function the
default run traced, or a transformation whose artifact was not baked (``ArtifactError``: set
``ad_order``...), with the fix. ``--json FILE`` writes the same
figures.

dm-pix runs two ways: ``dm-pix`` moves it to hatchling and the Hatch hook
(``peers/dm-pix-0.4.5.patch``); ``dm-pix-flit`` keeps flit, built through the wrapping PEP 517
backend (``peers/dm-pix-0.4.5-flit.patch``: the same decorations, ``build-backend =
"hatch_jaxexport.integrations.pep517"`` with ``[tool.jaxexport] backend =
"flit_core.buildapi"``). The summary says which backend built each wheel (``build-backend``, the
backend it wraps, the wheel's ``WHEEL`` ``Generator``) and the manifests it ships. With
``--twice`` (always for ``dm-pix-flit``) the baked wheel is built a second time from the same
source, and the figures say whether the two are byte-identical (their SHA-256). A run without
``--library`` replays each library once (dm-pix by its hatchling patch).

``--fast`` runs a subset without TensorFlow (tinygp: the distances and ``test_filter`` of the
Kalman solver; dm-pix: the API and interpolation tests; quadax: the sampled-data rules, the
utilities, the cubature rules and one derivative through ``quadgk``: its derivative tests take
20-40 s each on 2 cores) and skips the recording run unless ``--record`` is given. The whole
run installs TensorFlow into both venvs for dm-pix's five files that import it, or skips those
files and says so where pip finds no wheel for this Python.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "peers"
PLUGIN = Path(__file__).resolve().with_name("_peer_report.py")
DEFAULT_CACHE = Path.home() / ".cache" / "hatch-jaxexport" / "peer-suites"
SERVED = ("shipped", "cached", "compiled", "quick", "cached-quick", "optimized")


@dataclass(frozen=True)
class Library:
    """How to fetch, patch, install and test one library."""

    name: str
    version: str
    #: The folder the sdist unpacks to and its file name's stem.
    stem: str
    #: Where the package's import root lies in the source tree ("src" for a src layout).
    import_root: str
    #: The library's runtime dependencies (installed beside hatch-jaxexport for recording).
    requires: tuple[str, ...]
    #: What its tests import beyond the library.
    test_requires: tuple[str, ...]
    #: The folder of its tests in the source tree and the glob of test files under it.
    test_dir: str
    pattern: str
    #: The fast subset and the files that import TensorFlow, relative to ``test_dir``.
    fast: tuple[str, ...]
    tensorflow: tuple[str, ...] = ()
    #: A folder of ``peers/`` whose ``.py`` files the suite imports but the sdist lacks:
    #: copied into the copied suite's test folder (both runs).
    support: str | None = None
    #: Test files that cannot import from the sdist even so, left out: file -> why.
    broken: tuple[tuple[str, str], ...] = ()
    #: Decorated functions whose calls pass a callable (an integrand): traced by design.
    callables: tuple[str, ...] = ()
    #: The adoption patch in ``peers/``, where not ``<name>-<version>.patch``.
    patch: str | None = None
    #: Build the baked wheel twice and compare the bytes (as ``--twice`` does for any library).
    twice: bool = False

    @property
    def patch_path(self) -> Path:
        return PATCHES / (self.patch or f"{self.name}-{self.version}.patch")


#: dm-pix's own layout and suite, whichever adoption patch builds it.
DM_PIX = dict(
    name="dm-pix", version="0.4.5", stem="dm_pix-0.4.5", import_root=".",
    requires=("jax", "chex"), test_requires=("pytest", "absl-py", "scipy"),
    test_dir="dm_pix/_src", pattern="*_test.py", fast=("api_test.py", "interpolation_test.py"),
    tensorflow=tuple(f"{n}_test.py" for n in
                     ("augment", "color_conversion", "depth_and_space", "metrics", "patch")))


LIBRARIES = {
    "tinygp": Library(
        "tinygp", "0.3.1", "tinygp-0.3.1", "src", ("jax", "equinox"), ("pytest", "scipy"),
        "tests", "**/test_*.py",
        fast=("test_kernels/test_distance.py", "test_solvers/test_kalman.py::test_filter")),
    "dm-pix": Library(**DM_PIX),  # hatchling and the Hatch hook
    # flit kept, through the wrapping PEP 517 backend
    "dm-pix-flit": Library(**DM_PIX, patch="dm-pix-0.4.5-flit.patch", twice=True),
    "quadax": Library(
        "quadax", "0.3.1", "quadax-0.3.1", ".", ("jax", "equinox", "numpy"), ("pytest", "scipy"),
        "tests", "test_*.py",
        fast=("test_sampled.py", "test_utils.py", "test_fixed_cubature.py",
              "test_derivatives.py::test_integer_limits[adjoint0-quadgk]"),
        support="quadax-0.3.1-tests",
        broken=(*((f, "imports names upstream's tests/problems.py does not define")
                  for f in ("test_adaptive.py", "test_problems.py", "test_romberg.py")),
                ("test_adaptive_cube.py", "imports tests/problems_nd.py, in no published source")),
        callables=tuple(f"quadax.{m}:{f}" for m, fs in (
            ("_adaptive", ("quadgk", "quadcc", "quadts", "adaptive_quadrature")),
            ("_adaptive_cube", ("cubegm", "adaptive_cubature")),
            ("_romberg", ("romberg", "tanhsinh"))) for f in fs)),
    # 0.1.0 imports pkg_resources, which setuptools 81 dropped (the patch reads importlib.metadata)
    "jax-cosmo": Library(
        "jax-cosmo", "0.1.0", "jax-cosmo-0.1.0", ".", ("jax", "jaxlib"),
        ("pytest", "pyccl", "setuptools<81"), "tests", "test_*.py",
        fast=("test_background.py", "test_power.py::test_eisenstein_hu", "test_sparse.py"),
        broken=(("test_spline.py", "imports jax.config, a module jax 0.4.25 removed (it turns "
                 "x64 on at import, for the whole session)"),)),
}

#: What a run without ``--library`` replays: each library once (dm-pix by its hatchling patch).
DEFAULT = ("tinygp", "quadax", "dm-pix", "jax-cosmo")


@dataclass
class SuiteRun:
    """One run of a suite against one installed copy."""

    outcomes: dict[str, str] = field(default_factory=dict)
    #: Failing tests' first line of the failure message, by test id.
    messages: dict[str, str] = field(default_factory=dict)
    #: Failing tests' whole report (traceback and message), by test id.
    reports: dict[str, str] = field(default_factory=dict)
    served: list[dict[str, Any]] = field(default_factory=list)
    #: Calls staged into a caller's trace (``staged_report()`` rows, with their counts).
    staged: list[dict[str, Any]] = field(default_factory=list)
    #: pytest's warnings summary, by category and message, with counts.
    warnings: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)


def run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command, printing it; on failure show its output's tail before raising."""
    print("+", " ".join(map(str, cmd)), flush=True)
    done = subprocess.run(list(map(str, cmd)), cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and done.returncode:
        print(done.stdout[-4000:])
        raise SystemExit(f"command failed with exit status {done.returncode}: {cmd[:4]}")
    return done


def links_env(wheel_dir: Path) -> dict[str, str]:
    """The environment with a local wheel folder offered to every front end's isolated build
    (as tests/_buildkit.py's ``links_env``, keeping configured find-links)."""
    env = dict(os.environ)
    env["PIP_FIND_LINKS"] = " ".join(filter(None, [str(wheel_dir),
                                                   os.environ.get("PIP_FIND_LINKS", "")]))
    env["UV_FIND_LINKS"] = ",".join(filter(None, [str(wheel_dir),
                                                  os.environ.get("UV_FIND_LINKS", "")]))
    return env


def fetch_sdist(lib: Library, cache: Path) -> Path:
    """The library's sdist from the package index, downloaded once into ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"{lib.stem}.tar.gz"))
    if not found:
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "-d", cache, f"{lib.name}=={lib.version}"])
        found = sorted(cache.glob(f"{lib.stem}.tar.gz"))
    if not found:
        raise SystemExit(f"pip downloaded no {lib.stem}.tar.gz into {cache}")
    return found[0]


def unpack(sdist: Path, dest: Path, patch: Path | None) -> Path:
    """Unpack ``sdist`` under ``dest``; apply ``patch`` with ``patch -p1`` when given."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(dest, filter="data")
    (tree,) = [p for p in dest.iterdir() if p.is_dir()]
    if patch is not None:
        with patch.open() as handle:
            done = subprocess.run(["patch", "-p1", "--no-backup-if-mismatch"], cwd=tree,
                                  stdin=handle, text=True, capture_output=True)
        if done.returncode:
            raise SystemExit(f"{patch.name} does not apply to {sdist.name}:\n{done.stdout}")
    return tree


def project_wheel(out: Path) -> Path:
    """hatch-jaxexport's own wheel, from this checkout."""
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", out, ROOT])
    (wheel,) = out.glob("hatch_jaxexport-*.whl")
    return wheel


def uv() -> str | None:
    """uv, where this interpreter's environment or PATH has it: it makes the venvs and the
    isolated build's environment several times faster than pip (each installs jax)."""
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    return found if Path(found).exists() else None


def pip_install(python: Path, *args: str | os.PathLike[str], check: bool = True
                ) -> subprocess.CompletedProcess[str]:
    """``pip install -q ARGS`` into ``python``'s environment, by uv where there is one
    (``--force-reinstall`` is uv's ``--reinstall``)."""
    if (found := uv()) is not None:
        args = tuple("--reinstall" if a == "--force-reinstall" else a for a in args)
        return run([found, "pip", "install", "-q", "-p", python, *args], check=check)
    return run([python, "-m", "pip", "install", "-q", *args], check=check)


def make_venv(path: Path, requirements: list[str], wheels: Path) -> Path:
    """A fresh virtual environment with ``requirements``; returns its python. One left by an
    earlier run in a ``--work`` folder is reused (the library is reinstalled into it)."""
    python = path / "bin" / "python"
    if python.exists():  # hatch-jaxexport's wheel is rebuilt each run: the new one, installed
        ours = [str(w) for w in wheels.glob("hatch_jaxexport-*.whl")]
        if ours and any("hatch_jaxexport" in str(r) for r in requirements):
            pip_install(python, "--no-deps", "--force-reinstall", *ours)
        return python
    if (found := uv()) is not None:
        run([found, "venv", "-q", "--seed", path, "-p", sys.executable])
    else:
        run([sys.executable, "-m", "venv", path])
    pip_install(python, "--find-links", wheels, *requirements)
    return python


def try_install(python: Path, requirement: str) -> bool:
    """Install ``requirement`` if pip finds a wheel for this Python; ``False`` where not."""
    return pip_install(python, "--only-binary", ":all:", requirement,
                       check=False).returncode == 0


def build_baked(tree: Path, out: Path, wheels: Path) -> tuple[Path, float, list[str]]:
    """The patched library's wheel, through ``python -m build --wheel`` (isolated); its build
    time and the hook's warning lines (artifacts left out with ``on-error = "skip"``)."""
    start = time.perf_counter()
    installer = ["--installer", "uv"] if uv() else []  # the isolated environment, by uv
    done = run([sys.executable, "-m", "build", "--wheel", *installer, "--outdir", out, tree],
               env=links_env(wheels))
    seconds = time.perf_counter() - start
    (wheel,) = [w for w in out.glob("*.whl") if "_jaxexport_" not in w.name]  # not companions
    return wheel, seconds, bake_lines(done.stdout)


def companion_sizes(out: Path) -> dict[str, int]:
    """The companion wheels a build wrote beside the library's (``companion-wheels``)."""
    return {w.name: w.stat().st_size for w in sorted(out.glob("*_jaxexport_*.whl"))}


def add_hook_options(tree: Path, options: list[str]) -> None:
    """Add ``KEY=VALUE`` lines (TOML values: ``tpu-targets=["v5e"]``) to the patched project's
    hook table (``[tool.hatch.build.targets.wheel.hooks.jaxexport]`` or ``[tool.jaxexport]``),
    replacing a key the patch sets: the same library baked with other options
    (``--hook-option``)."""
    path = tree / "pyproject.toml"
    lines = path.read_text(encoding="utf-8").splitlines()
    header = next(i for i, line in enumerate(lines) if line.strip() in (
        "[tool.hatch.build.targets.wheel.hooks.jaxexport]", "[tool.jaxexport]"))
    end = next((i for i in range(header + 1, len(lines)) if lines[i].startswith("[")),
               len(lines))
    for option in options:
        key, _, value = option.partition("=")
        tomllib.loads(f"{key.strip()} = {value}")  # a broken value fails here, named
        kept = [i for i in range(header + 1, end)
                if lines[i].split("=")[0].strip() != key.strip()]
        lines = lines[:header + 1] + [lines[i] for i in kept] + \
            [f"{key.strip()} = {value.strip()}"] + lines[end:]
        end = header + 1 + len(kept) + 1
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def bake_lines(output: str) -> list[str]:
    """The bake's warnings and per-package summaries from a build's output: the Hatch hook's
    (through hatchling) and the wrapping backend's (its stderr, through ``build``) print the
    same ``jaxexport: `` lines; a front end may indent a backend's output."""
    lines = [line.strip() for line in output.splitlines()]
    warnings = [line for line in lines if line.startswith("jaxexport: warning")]
    summary = [line for line in lines if line.startswith("jaxexport: ")
               and "function(s)" in line]
    return warnings + summary


def wheel_origin(tree: Path, wheel: Path) -> dict[str, Any]:
    """Which backend built ``wheel`` from ``tree``: the project's ``build-backend``, the backend
    a wrapping one delegates to (``[tool.jaxexport] backend``), the ``Generator`` of the wheel's
    ``WHEEL`` file (the backend that wrote the wheel: the wrapping backend keeps it), and the
    artifact manifests the wheel ships."""
    project = tomllib.loads((tree / "pyproject.toml").read_text(encoding="utf-8"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (info,) = [n for n in names if n.endswith(".dist-info/WHEEL")]
        fields = dict(line.split(": ", 1) for line in
                      archive.read(info).decode("utf-8").splitlines() if ": " in line)
    return {"build_backend": project.get("build-system", {}).get("build-backend"),
            "wrapped_backend": project.get("tool", {}).get("jaxexport", {}).get("backend"),
            "wheel_generator": fields.get("Generator"),
            "wheel_manifests": sorted(n for n in names if n.endswith("/_jaxexport/manifest.json"))}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rebuild_figures(tree: Path, wheel: Path, out: Path, wheels: Path) -> dict[str, Any]:
    """Build the baked wheel a second time from the same source tree (its recording included)
    and compare: the same source must give the same bytes."""
    again, seconds, _ = build_baked(tree, out, wheels)
    first, second = sha256(wheel), sha256(again)
    return {"wheel_sha256": first, "rebuild_sha256": second,
            "rebuild_identical": first == second, "rebuild_seconds": round(seconds, 1)}


def copy_suite(lib: Library, tree: Path, dest: Path) -> list[str]:
    """Copy the test files (and any conftest.py) out of the source tree into ``dest/tests``,
    with the project's pytest configuration files, so that the tests import the installed
    package and not the source beside them. Returns the copied test files, relative to
    ``dest``."""
    source = tree / lib.test_dir
    tests = sorted(source.glob(lib.pattern))
    for path in [*tests, *source.rglob("conftest.py")]:
        target = dest / "tests" / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    for config in ("pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini"):
        if (tree / config).exists():
            shutil.copy2(tree / config, dest / config)
    if lib.support:
        for helper in sorted((PATCHES / lib.support).glob("*.py")):
            shutil.copy2(helper, dest / "tests" / helper.name)
    return [str(Path("tests") / p.relative_to(source)) for p in tests]


def read_junit(path: Path) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Outcome by test id, the first line of each failure's message and its whole report
    (pytest truncates a long message; the report holds all of it), from pytest's XML."""
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    reports: dict[str, str] = {}
    if not path.exists():
        return outcomes, messages, reports
    for case in ET.parse(path).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        outcomes[test] = "passed"
        for child, outcome in (("failure", "failed"), ("error", "error"),
                               ("skipped", "skipped")):
            found = case.find(child)
            if found is not None:
                outcomes[test] = outcome
                text = found.get("message") or found.text or ""
                messages[test] = (text.strip().splitlines() or [""])[0][:300]
                reports[test] = found.text or ""
                break
    return outcomes, messages, reports


def run_suite(python: Path, suite: Path, files: list[str], tag: str,
              extra_env: dict[str, str] | None = None) -> SuiteRun:
    """Run ``files`` of the copied suite with ``python``, in its own folder (its own pytest
    configuration), with the report plugin; the outcome of each test and the served calls."""
    plugin_dir = suite.parent / f"plugin-{tag}"
    plugin_dir.mkdir(exist_ok=True)
    shutil.copy2(PLUGIN, plugin_dir / PLUGIN.name)
    junit, report = suite.parent / f"junit-{tag}.xml", suite.parent / f"served-{tag}.json"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HATCH_JAXEXPORT_") and k != "PYTHONPATH"}
    env.update({"PYTHONPATH": str(plugin_dir), "PEER_SUITES_REPORT": str(report),
                "HATCH_JAXEXPORT_CACHE": str(suite.parent / f"jaxexport-cache-{tag}")})
    env.update(extra_env or {})
    if "PYTHONPATH" in (extra_env or {}):
        env["PYTHONPATH"] = os.pathsep.join([str(plugin_dir), extra_env["PYTHONPATH"]])
    start = time.perf_counter()
    done = run([python, "-m", "pytest", *files, "-p", "_peer_report", "-p", "no:cacheprovider",
                "-q", f"--junitxml={junit}"], cwd=suite, env=env, check=False)
    result = SuiteRun(seconds=time.perf_counter() - start)
    result.outcomes, result.messages, result.reports = read_junit(junit)
    if not result.outcomes:
        print(done.stdout[-4000:])
        raise SystemExit(f"the {tag} run collected no tests (pytest exit {done.returncode})")
    if report.exists():
        data = json.loads(report.read_text())
        result.served, result.staged = read_report(data)
        result.warnings = list(data.get("warnings", [])) if isinstance(data, dict) else []
    return result


def compare_warnings(plain: SuiteRun, baked: SuiteRun) -> dict[str, Any]:
    """pytest's warnings summary both ways: totals, and each category and message whose
    count differs (a warning the baked library loses or adds)."""
    def counts(run: SuiteRun) -> collections.Counter[tuple[str, str]]:
        return collections.Counter({(w["category"], w["message"]): w["count"]
                                    for w in run.warnings})

    mine, theirs = counts(plain), counts(baked)
    differ = [{"category": c, "message": m, "plain": mine[(c, m)], "baked": theirs[(c, m)]}
              for c, m in sorted(set(mine) | set(theirs)) if mine[(c, m)] != theirs[(c, m)]]
    return {"plain": sum(mine.values()), "baked": sum(theirs.values()), "differ": differ}


def read_report(data: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The report plugin's (first eager calls, staged calls); a list is an older plugin's
    first eager calls alone."""
    if isinstance(data, list):
        return data, []
    return list(data.get("served", [])), list(data.get("staged", []))


def cause(message: str) -> str:
    """The exception a failure message starts with (``ShapeMismatch``, ``TypeError``...)."""
    head = message.split(":", 1)[0].strip()
    if head and " " not in head:
        return head.rsplit(".", 1)[-1]
    return message[:60] or "(no message)"


def first_line(text: str | None) -> str:
    return (text or "").strip().split("\n", 1)[0]


def passes_callable(row: dict[str, Any], callables: tuple[str, ...]) -> bool:
    """Whether a first call passed a callable (an integrand): a function that takes one, or a
    reason that names one. Such a call cannot be baked; it traces by design."""
    reason = (row.get("not_shipped") or row.get("reason") or "").lower()
    return row["function"] in callables or "callable" in reason


def compare(plain: SuiteRun, baked: SuiteRun, callables: tuple[str, ...] = ()
            ) -> dict[str, Any]:
    """What the two runs say together: counts, the plain passes that fail baked grouped by
    cause (one example each), and the served share of first eager calls, the calls that pass
    a callable (``callables``: functions that take one) counted apart."""
    lost = sorted(t for t, o in plain.outcomes.items()
                  if o == "passed" and baked.outcomes.get(t) != "passed")
    causes: dict[str, list[str]] = collections.defaultdict(list)
    for test in lost:
        causes[cause(baked.messages.get(test, "missing from the baked run"))].append(test)
    with_callable = [r for r in baked.served if passes_callable(r, callables)]
    bakeable = [r for r in baked.served if not passes_callable(r, callables)]
    tiers = collections.Counter(row["tier"] for row in bakeable)
    served = sum(n for tier, n in tiers.items() if tier in SERVED)
    by_function: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in baked.served:
        by_function[row["function"]][row["tier"]] += 1
    return {
        "plain": {o: plain.count(o) for o in ("passed", "failed", "error", "skipped")},
        "baked": {o: baked.count(o) for o in ("passed", "failed", "error", "skipped")},
        "plain_seconds": round(plain.seconds, 1), "baked_seconds": round(baked.seconds, 1),
        "lost": len(lost),
        "causes": {c: {"tests": len(ts), "example": ts[0],
                       "message": baked.messages.get(ts[0], "")} for c, ts in causes.items()},
        "tiers": dict(tiers),
        "served": served, "traced": tiers.get("traced", 0),
        "served_share": round(served / max(1, served + tiers.get("traced", 0)), 3),
        "callable_calls": len(with_callable),
        "callable_tiers": dict(collections.Counter(r["tier"] for r in with_callable)),
        "by_function": {f: dict(c) for f, c in sorted(by_function.items())},
        "traced_reasons": sorted({f"{r['function']}: {first_line(r['not_shipped'])}"[:240]
                                  for r in bakeable if r["tier"] == "traced"})[:20],
        "staged": staged_figures(baked.staged, callables),
    }


def staged_figures(staged: list[dict[str, Any]], callables: tuple[str, ...] = ()
                   ) -> dict[str, Any]:
    """The calls staged into a caller's trace (``staged_report()`` rows): how many were served
    (the artifact staged) and traced (the source), their share, per transformation and per
    function; the calls that pass a callable counted apart, as for first eager calls."""
    bakeable = [r for r in staged if not passes_callable(r, callables)]
    with_callable = [r for r in staged if passes_callable(r, callables)]
    totals: collections.Counter[str] = collections.Counter()
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    by_function: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in bakeable:
        totals[row["tier"]] += row["count"]
        by_kind[row["transformation"]][row["tier"]] += row["count"]
        by_function[row["function"]][f"{row['transformation']} {row['tier']}"] += row["count"]
    served, traced = totals.get("served", 0), totals.get("traced", 0)
    return {
        "served": served, "traced": traced,
        "served_share": round(served / max(1, served + traced), 3),
        "callable_calls": sum(r["count"] for r in with_callable),
        "by_transformation": {k: dict(c) for k, c in sorted(by_kind.items())},
        "by_function": {f: dict(c) for f, c in sorted(by_function.items())},
        "traced_reasons": sorted({f"{r['function']} under {r['transformation']}: "
                                  f"{first_line(r['reason'])}"[:240]
                                  for r in bakeable if r["tier"] == "traced"})[:20],
    }


#: The refusals a strict call raises (hatch_jaxexport.errors' CallMismatch subclasses).
REFUSALS = ("CallMismatch", "SignatureMismatch", "StaticValueMismatch", "PytreeMismatch",
            "DtypeMismatch", "ShapeMismatch")


def unbaked_call(message: str, report: str) -> str | None:
    """Why strict mode refused a call that no recorded-call artifact covers, with the fix:
    ``no recorded call`` (record it and rebuild: a spec-less function's call, also one whose
    source raised while recording, or one no structure accepts), ``export failed at build``
    (recorded, but its export failed: the build's reason, and rebuild); ``None`` for any other
    failure."""
    if cause(message) != "ArtifactError" or "HATCH_JAXEXPORT_STRICT is set" not in message:
        return None
    if "failed at build time" in report and "rebuild" in report:
        return "export failed at build"
    return "no recorded call" if "HATCH_JAXEXPORT_RECORD" in report else None


def named_in(message: str, functions: set[str]) -> list[str]:
    """The ``functions`` a message names, the longest name first: one function's name may
    start another's (dm-pix's ``flat_nd_linear_interpolate`` and
    ``flat_nd_linear_interpolate_constant``), and the longer one that appears is the one
    named; a set's order would pick either."""
    return sorted((f for f in functions if f in message), key=lambda f: (-len(f), f))


def compare_strict(baked: SuiteRun, strict: SuiteRun) -> dict[str, Any]:
    """What strict mode (``HATCH_JAXEXPORT_STRICT=1``) refuses of what passes baked: each such
    test should fail with a refusal that names a function whose calls the default run traced
    because no artifact covered them, with the fix: a refusal of a call no structure accepts,
    of a transformation not baked, or of a call no recorded-call artifact covers
    (``unbaked_call``)."""
    lost = sorted(t for t, o in baked.outcomes.items()
                  if o == "passed" and strict.outcomes.get(t) != "passed")
    uncovered = {row["function"] for row in baked.served if row["tier"] == "traced"}
    decorated = {row["function"] for row in (*baked.served, *strict.served)}
    refused: dict[str, int] = collections.Counter()
    other: list[str] = []
    for test in lost:
        message = strict.messages.get(test, "")
        report = strict.reports.get(test, "")
        named = named_in(message, uncovered)
        # a transformation whose artifact was not baked (jvp without ad_order, vmap without
        # vmap=True): the default run traced its source; strict says what to set
        unbaked = [f for f in named_in(message, decorated) if "not baked" in message
                   and "set " in report]
        if cause(message) in REFUSALS and named and "to serve it" in report:
            refused[named[0]] += 1
        elif cause(message) == "ArtifactError" and unbaked:
            refused[f"{unbaked[0]} (a transformation not baked)"] += 1
        elif unbaked_call(message, report) and named_in(message, decorated):
            function = named_in(message, decorated)[0]
            refused[f"{function} ({unbaked_call(message, report)})"] += 1
        else:
            other.append(f"{test}: {message[:200]}")
    return {"strict_lost": len(lost), "strict_refused": dict(refused),
            "strict_other": other[:10], "strict_other_count": len(other),
            "uncovered_functions": sorted(uncovered)}


def print_staged(staged: dict[str, Any] | None) -> None:
    """The calls staged into a caller's trace (``staged_figures``), as lines a person reads."""
    if not staged:
        return
    print(f"calls staged into a caller's trace (jax.jit, vmap, grad...; once per trace): "
          f"{staged['served']} served from artifacts, {staged['traced']} traced "
          f"({100 * staged['served_share']:.0f}% served); by transformation "
          f"{staged['by_transformation']}")
    if staged.get("callable_calls"):
        print(f"staged calls that pass a callable (traced by design, not counted above): "
              f"{staged['callable_calls']}")
    for function, kinds in staged["by_function"].items():
        print(f"  staged {function}: {kinds}")
    for reason in staged["traced_reasons"]:
        print(f"  staged traced: {reason}")


def print_summary(name: str, figures: dict[str, Any]) -> None:
    """The figures of one library, as lines a person reads."""
    p, b = figures["plain"], figures["baked"]
    print(f"\n== {name} ({figures['subset']}) ==")
    for note in figures.get("notes", []):
        print(f"note: {note}")
    print(f"tests plain: {p['passed']} passed, {p['failed']} failed, {p['error']} errors, "
          f"{p['skipped']} skipped ({figures['plain_seconds']} s)")
    print(f"tests baked: {b['passed']} passed, {b['failed']} failed, {b['error']} errors, "
          f"{b['skipped']} skipped ({figures['baked_seconds']} s)")
    print(f"plain passes that fail baked: {figures['lost']}")
    again = figures.get("second_process")
    if again is not None:
        print(f"with {figures['devices']} host devices, a second baked process (on the first's "
              f"executable cache): {again['baked']['passed']} passed, {again['lost']} plain "
              f"passes lost; first eager calls {again['tiers']}")
    for name_, c in sorted(figures["causes"].items(), key=lambda kv: -kv[1]["tests"]):
        print(f"  {c['tests']:4d} {name_}: e.g. {c['example']}\n       {c['message'][:240]}")
    print(f"first eager calls (per signature): {figures['served']} served from artifacts, "
          f"{figures['traced']} traced ({100 * figures['served_share']:.0f}% served); "
          f"tiers {figures['tiers']}")
    if figures.get("callable_calls"):
        print(f"first eager calls that pass a callable (traced by design, not counted above): "
              f"{figures['callable_calls']} {figures['callable_tiers']}")
    for function, tiers in figures["by_function"].items():
        print(f"  {function}: {tiers}")
    for reason in figures["traced_reasons"]:
        print(f"  traced: {reason}")
    print_staged(figures.get("staged"))
    print(f"strict mode: {figures['strict_lost']} baked passes refused, "
          f"{figures['strict_lost'] - figures['strict_other_count']} by a refusal naming a "
          f"function with uncovered calls and the fix {figures['strict_refused']}; "
          f"{figures['strict_other_count']} otherwise")
    for line in figures["strict_other"]:
        print(f"  strict other: {line}")
    for line in figures["build_lines"]:
        print(f"  build: {line[:300]}")
    wrapped = f" wrapping {figures['wrapped_backend']}" if figures.get("wrapped_backend") else ""
    print(f"baked wheel built by {figures.get('build_backend')}{wrapped} (WHEEL Generator: "
          f"{figures.get('wheel_generator')}); manifests {figures.get('wheel_manifests')}")
    if "rebuild_identical" in figures:
        same = "byte-identical" if figures["rebuild_identical"] else "DIFFERENT"
        print(f"built twice from the same source: {same} (sha256 {figures['wheel_sha256'][:16]}"
              f"... and {figures['rebuild_sha256'][:16]}...; second build "
              f"{figures['rebuild_seconds']} s)")
    installer = " --installer uv" if uv() else ""
    print(f"build (python -m build --wheel{installer}): {figures['build_seconds']:.1f} s baked, "
          f"{figures['plain_build_seconds']:.1f} s plain; wheel {figures['wheel_bytes']:,} "
          f"bytes baked, {figures['plain_wheel_bytes']:,} bytes plain")
    warned = figures.get("warnings")
    if warned:
        print(f"warnings (pytest's summary): {warned['plain']} plain, {warned['baked']} baked; "
              f"{len(warned['differ'])} category/message pair(s) counted differently")
        for entry in warned["differ"][:10]:
            print(f"  {entry['category']}: {entry['plain']} plain, {entry['baked']} baked: "
                  f"{entry['message'][:160]}")
    for name_, size in figures.get("companion_bytes", {}).items():
        print(f"companion wheel {name_}: {size:,} bytes")
    if figures.get("hook_options"):
        print(f"hook options added: {'; '.join(figures['hook_options'])}")
    print(f"suite wall time: {figures['plain_seconds']} s plain, {figures['baked_seconds']} s "
          f"baked, {figures['strict_seconds']} s strict"
          + (f", {figures['record_seconds']} s recording" if "record_seconds" in figures
             else ""))


def select(lib: Library, copied: list[str], fast: bool, tensorflow: bool) -> list[str]:
    """The test files to run: the fast subset, or all but TensorFlow's where it is missing,
    never the files that cannot import from the sdist (``broken``)."""
    broken = {name for name, _ in lib.broken}
    names = {f: str(Path(f).relative_to("tests")) for f in copied}
    if fast:  # files, or pytest node ids (file::test) where a file's whole run is too long
        return [str(Path("tests") / e) for e in lib.fast if e.split("::")[0] in names.values()]
    return [f for f, n in names.items()
            if (tensorflow or n not in lib.tensorflow) and n not in broken]


def subset_name(args: argparse.Namespace) -> str:
    """What the run covered, for the summary: the whole suite, the fast subset or the tests
    named with ``--tests``, and whether it was recorded first."""
    name = "named tests" if args.tests else "fast" if args.fast else "whole suite"
    recorded = args.record or not args.fast
    return name if name == "whole suite" else f"{name}{', recorded' if recorded else ''}"


def run_library(lib: Library, args: argparse.Namespace, wheels: Path, work: Path
                ) -> dict[str, Any]:
    """Fetch, patch, build, install and test one library both ways; its figures."""
    sdist = fetch_sdist(lib, args.cache)
    for stale in ("baked-src", "plain-src", "suite", "dist", "dist-again", "plain-dist"):
        shutil.rmtree(work / stale, ignore_errors=True)
    tree = unpack(sdist, work / "baked-src", lib.patch_path)
    if args.hook_option:
        add_hook_options(tree, args.hook_option)
    copied = copy_suite(lib, tree, work / "suite")
    plugin_wheel = next(wheels.glob("hatch_jaxexport-*.whl"))
    baked_py = make_venv(work / "venv-baked",
                         [str(plugin_wheel), *lib.requires, *lib.test_requires], wheels)
    plain_py = make_venv(work / "venv-plain", [str(sdist), *lib.test_requires], wheels)
    notes, tensorflow = [], False
    if lib.tensorflow and not args.fast:
        tensorflow = try_install(plain_py, "tensorflow") and try_install(baked_py, "tensorflow")
        if not tensorflow:
            skipped = ", ".join(lib.tensorflow)
            notes.append(f"no TensorFlow wheel for this Python: skipped {skipped}")
    files = ([str(Path("tests") / e) for e in args.tests] if args.tests
             else select(lib, copied, args.fast, tensorflow))
    if lib.support:
        notes.append(f"test helpers the sdist lacks, from peers/{lib.support}: "
                     + ", ".join(p.name for p in sorted((PATCHES / lib.support).glob("*.py"))))
    for name, why in lib.broken if not args.fast else ():
        notes.append(f"left out {name}: {why}")
    timing: dict[str, float] = {}
    # --devices N: every run sees N local devices (forced host devices), as a multi-device host
    devices = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={args.devices}"} \
        if args.devices else {}
    if args.record or not args.fast:
        recording = run_suite(baked_py, work / "suite", files, "record", {
            **devices, "PYTHONPATH": str(tree / lib.import_root), "HATCH_JAXEXPORT_RECORD": "1"})
        timing["record_seconds"] = round(recording.seconds, 1)
        notes.append("recorded sizes: " + ", ".join(
            str(p.relative_to(tree)) for p in tree.rglob("jaxexport-signatures.json")))
    wheel, build_seconds, build_lines = build_baked(tree, work / "dist", wheels)
    origin = wheel_origin(tree, wheel)
    if lib.twice or args.twice:
        origin.update(rebuild_figures(tree, wheel, work / "dist-again", wheels))
    pip_install(baked_py, "--no-deps", "--force-reinstall", wheel)
    plain_wheel, plain_build, _ = build_baked(unpack(sdist, work / "plain-src", None),
                                              work / "plain-dist", wheels)
    built = dict(subset=subset_name(args), notes=notes, files=files, build_lines=build_lines,
                 build_seconds=round(build_seconds, 1), wheel_bytes=wheel.stat().st_size,
                 companion_bytes=companion_sizes(work / "dist"),
                 hook_options=list(args.hook_option or ()),
                 plain_build_seconds=round(plain_build, 1),
                 plain_wheel_bytes=plain_wheel.stat().st_size, **origin, **timing)
    if args.build_only:  # the wheels for another machine (peer_device.py bundle): no CPU runs
        return built
    plain = run_suite(plain_py, work / "suite", files, "plain", devices)
    baked = run_suite(baked_py, work / "suite", files, "baked", devices)
    strict = run_suite(baked_py, work / "suite", files, "strict",
                       {**devices, "HATCH_JAXEXPORT_STRICT": "1"})
    figures = compare(plain, baked, lib.callables)
    figures.update(compare_strict(baked, strict))
    figures["warnings"] = compare_warnings(plain, baked)
    if devices:  # a second process on the executables the first one cached
        again = run_suite(baked_py, work / "suite", files, "baked-again", {
            **devices, "HATCH_JAXEXPORT_CACHE": str(work / "suite" / "jaxexport-cache-baked")})
        figures["second_process"] = compare(plain, again, lib.callables)
        figures["devices"] = args.devices
    figures.update(built, strict_seconds=round(strict.seconds, 1))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", choices=sorted(LIBRARIES), action="append")
    parser.add_argument("--fast", action="store_true", help="the subset without TensorFlow")
    parser.add_argument("--hook-option", action="append", metavar="KEY=TOML",
                        help='an option of the hook\'s table for the baked build, such as '
                        '\'tpu-targets=["v5e"]\' or \'companion-wheels="accelerators"\'')
    parser.add_argument("--record", action="store_true",
                        help="with --fast: record the subset's calls before the build")
    parser.add_argument("--tests", action="append", metavar="FILE[::NODE]",
                        help="run these test files or node ids (relative to the library's test "
                             "folder) instead of the suite; recorded first unless --fast")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="sdist downloads")
    parser.add_argument("--devices", type=int, default=0, metavar="N",
                        help="run every suite with N forced host devices, and the baked one "
                             "twice (the second on the first's executable cache)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--twice", action="store_true",
                        help="build each baked wheel twice and compare the bytes (always for "
                             "dm-pix-flit)")
    parser.add_argument("--build-only", action="store_true",
                        help="record (whole suite or --record) and build the wheels, run no "
                             "suite here: the wheels for peer_device.py's bundle")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--work", type=Path,
                        help="work in this folder and keep it; venvs already there are reused")
    args = parser.parse_args(argv)
    print(f"sdists cached in {args.cache}")
    if args.work:
        args.keep = True
        args.work.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(args.work / "wheels", ignore_errors=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="peer-suites-"))
    results: dict[str, Any] = {}
    try:
        wheels = work / "wheels"
        project_wheel(wheels)
        for name in args.library or DEFAULT:
            results[name] = run_library(LIBRARIES[name], args, wheels, work / name)
            if args.build_only:
                print(f"{name}: built {results[name]['wheel_bytes']:,} bytes, companions "
                      f"{results[name]['companion_bytes']}; {len(results[name]['files'])} files")
            else:
                print_summary(name, results[name])
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
