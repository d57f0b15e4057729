"""A real library's own suite on an accelerator: its plain and its baked wheel, through ``device``.

    python benchmarks/peer_device.py bundle WORK OUT --library dm-pix
    bash scripts/peer_device_run.sh OUT/dm-pix          # on the device machine
    python benchmarks/peer_device.py report OUT/dm-pix RESULTS

``bundle`` takes a ``peer_suites.py`` work folder (``--work WORK --keep``, with the hook options
that bake the TPU executables: ``--hook-option 'platforms=["cpu", "tpu"]' --hook-option
'tpu-targets=["v5e"]' --hook-option 'companion-wheels="accelerators"'``), and writes, for a
machine with no network: the baked wheel and its companion wheels, hatch-jaxexport's wheel and
its dependencies (``baked/``), the plain library's wheel (``plain/``), every other wheel the
baked environment holds that such a machine lacks (``deps/``: not jax, jaxlib, numpy, scipy or
pytest, which the device has), the copied suite, the test files the work folder ran
(``files.txt``) and the report plugin.

``scripts/peer_device_run.sh`` installs each side into a folder of its own (``--no-index
--no-deps --target``, with bytecode: the machine sets ``PYTHONDONTWRITEBYTECODE``), after the
machine's own ``PYTHONPATH`` (its jax stays the one imported), and runs the suite once per side
in one pytest process (one program at a time holds the chip), with the report plugin: each
test's outcome (JUnit XML), the decorated functions' first eager calls and how each was served,
the calls staged into a caller's trace, pytest's warnings and jax's compile events.

``report`` reads those files with ``peer_suites.py``'s readers and prints its comparison: tests
passed both ways and the plain passes lost, the first eager calls by tier, the staged calls,
the warnings counted both ways, jax's compile events and seconds both ways, and the suite's
wall time both ways.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer_suites
from _peer_report import BACKEND_COMPILE

#: What the device machine has installed (KINDS.md): never carried, never shadowed.
ON_THE_DEVICE = {"jax", "jaxlib", "numpy", "scipy", "ml-dtypes", "opt-einsum", "pytest",
                 "pluggy", "iniconfig", "packaging", "pip", "setuptools", "wheel", "libtpu"}

#: What the device machine's own package index holds (KINDS.md: ``/opt/pypi/simple``) that is
#: too large to carry (TensorFlow is 600 MB installed; a call carries 64 MiB): the bundle
#: names it in ``index.txt`` and ``peer_device_run.sh`` installs it there, with its
#: dependencies, after everything else on the path. Name here -> name in that index.
FROM_THE_DEVICE_INDEX = {"tensorflow": "tensorflow-cpu"}


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return "-".join(name.lower().replace("_", "-").replace(".", "-").split("-"))


def to_carry(lib: peer_suites.Library, baked: dict[str, str], plain: dict[str, str],
             from_index: frozenset[str] = frozenset()) -> dict[str, str]:
    """The distributions both sides' environments hold that the device machine lacks: every
    one but the library, hatch-jaxexport, what the device has (``ON_THE_DEVICE``) and what its
    index installs there (``from_index``: TensorFlow and what it needs), plus those of the
    device's that the library's test requirements pin (jax-cosmo's plain sdist imports
    ``pkg_resources``: ``setuptools<81``), at the version installed here."""
    from packaging.requirements import Requirement

    ours = {normalize(lib.name), "hatch-jaxexport"}
    carried = {name: version for env in (plain, baked) for name, version in env.items()
               if name not in ON_THE_DEVICE | ours | from_index}
    for text in lib.test_requires:
        wanted = Requirement(text)
        name = normalize(wanted.name)
        if wanted.specifier and name in ON_THE_DEVICE and name in plain:
            carried[name] = plain[name]
    return carried


def needed_by(roots: set[str], sites: list[Path]) -> frozenset[str]:
    """``roots`` and every distribution they need, transitively, as installed in ``sites``
    (their ``Requires-Dist``, extras and markers that do not apply left out): what the device's
    index brings along when it installs ``roots``, so the bundle need not carry it."""
    from importlib.metadata import distributions

    from packaging.requirements import Requirement

    requires = {normalize(d.metadata["Name"]): d.requires or []
                for d in distributions(path=[str(s) for s in sites])}
    found, todo = set(), [normalize(r) for r in roots if normalize(r) in requires]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        for text in requires.get(name, ()):
            wanted = Requirement(text)
            if wanted.marker is None or wanted.marker.evaluate({"extra": ""}):
                todo.append(normalize(wanted.name))
    return frozenset(found)


def _installed(python: Path) -> dict[str, str]:
    """Every distribution of ``python``'s environment (uv's venvs have no pip: ``uv pip``)."""
    command = [str(python), "-m", "pip", "list", "--format", "json"]
    if (found := peer_suites.uv()) is not None:
        command = [found, "pip", "list", "--format", "json", "-p", str(python)]
    listed = subprocess.run(command, text=True, capture_output=True, check=True).stdout
    return {normalize(e["name"]): e["version"] for e in json.loads(listed)}


def decorated(target: Path) -> list[str]:
    """The functions the baked wheel has artifacts of (its manifest's ``module:function``),
    whose first calls the report plugin times on both sides (``PEER_SUITES_TIME``)."""
    names: set[str] = set()
    for wheel in (target / "baked").glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.endswith("_jaxexport/manifest.json"):
                    manifest = json.loads(archive.read(member))
                    names.update(r["function"] for key in ("artifacts", "concrete")
                                 for r in manifest.get(key, ()))
    return sorted(names)


def bundle(work: Path, out: Path, library: str, figures: Path | None = None) -> Path:
    """The device bundle of ``library`` from a ``peer_suites.py`` work folder."""
    folder = work / library
    target = out / library
    shutil.rmtree(target, ignore_errors=True)
    for side in ("baked", "plain", "deps"):
        (target / side).mkdir(parents=True)
    for wheel in (folder / "dist").glob("*.whl"):  # the library's and its companions
        shutil.copy2(wheel, target / "baked")
    for wheel in (work / "wheels").glob("hatch_jaxexport-*.whl"):
        shutil.copy2(wheel, target / "baked")
    for wheel in (folder / "plain-dist").glob("*.whl"):
        shutil.copy2(wheel, target / "plain")
    lib = peer_suites.LIBRARIES[library]
    sites = sorted(folder.glob("venv-*/lib/python*/site-packages"))
    from_index = needed_by(set(FROM_THE_DEVICE_INDEX), sites)
    indexed = sorted(FROM_THE_DEVICE_INDEX[n] for n in FROM_THE_DEVICE_INDEX if n in from_index)
    if indexed:
        (target / "index.txt").write_text("".join(f"{name}\n" for name in indexed))
    carried = to_carry(lib, _installed(folder / "venv-baked" / "bin" / "python"),
                       _installed(folder / "venv-plain" / "bin" / "python"), from_index)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary", ":all:", "--python-version", "3.11",
                    "--platform", "manylinux2014_x86_64", "--platform", "any",
                    "-d", str(target / "deps"),
                    *(f"{n}=={v}" for n, v in sorted(carried.items()))], check=True)
    shutil.copytree(folder / "suite", target / "suite",
                    ignore=shutil.ignore_patterns("jaxexport-cache-*", "__pycache__"))
    ran = json.loads(figures.read_text()).get(library, {}) if figures else {}
    files = ran.get("files") or [str(p.relative_to(folder / "suite"))
                                 for p in (folder / "suite").rglob(lib.pattern)]
    (target / "files.txt").write_text("\n".join(files) + "\n")
    shutil.copy2(peer_suites.PLUGIN, target / peer_suites.PLUGIN.name)
    (target / "timed.txt").write_text("".join(f"{name}\n" for name in decorated(target)))
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(f"{target}: {size:,} bytes; carried dependencies: {', '.join(sorted(carried))}"
          + (f"; from the device's index: {', '.join(indexed)}" if indexed else ""))
    return target


def report(bundle_dir: Path, results: Path) -> dict:
    """The two runs' comparison, from the device's output folder ``results``."""
    lib = peer_suites.LIBRARIES[bundle_dir.name]
    runs = {}
    for side in ("plain", "baked"):
        run = peer_suites.SuiteRun(seconds=float((results / f"seconds-{side}.txt").read_text()))
        run.outcomes, run.messages, run.reports = peer_suites.read_junit(
            results / f"junit-{side}.xml")
        data = json.loads((results / f"served-{side}.json").read_text())
        run.served, run.staged = peer_suites.read_report(data)
        run.warnings = data.get("warnings", [])
        runs[side] = (run, data.get("compiles", {}))
    figures = peer_suites.compare(runs["plain"][0], runs["baked"][0], lib.callables)
    figures["warnings"] = peer_suites.compare_warnings(runs["plain"][0], runs["baked"][0])
    figures["compiles"] = {side: compiles for side, (_, compiles) in runs.items()}
    figures["first_calls"] = {side: first_call_totals(results / f"served-{side}.json")
                              for side in runs}
    figures["both_ran"] = both_ran(results)
    return figures


def both_ran(results: Path) -> dict:
    """What both sides ran: where ``PYTEST_LIMIT`` stopped a side (``stopped``), the sides
    ran different numbers of tests (the same files in the same order, so one ran a prefix of
    the other's): the tests both ran, their outcomes and summed time (JUnit's, per test) on
    each side; and the first eager calls both made (same function, same signature), timed on
    each side (a plain function may call another decorated one that the baked one, served
    from its artifact, never calls: tinygp's ``L2Distance.distance`` calls ``L1Distance``'s)."""
    import xml.etree.ElementTree as ET

    tests, calls = {}, {}
    for side in ("plain", "baked"):
        junit = results / f"junit-{side}.xml"
        times = {f"{c.get('classname')}::{c.get('name')}": float(c.get("time") or 0)
                 for c in ET.parse(junit).getroot().iter("testcase")}  # read_junit's test ids
        tests[side] = {test: (times[test], outcome)
                       for test, outcome in peer_suites.read_junit(junit)[0].items()}
        calls[side] = {(c["function"], c["signature"]): c for c in json.loads(
            (results / f"served-{side}.json").read_text()).get("first_calls", [])}
    common = [test for test in tests["plain"] if test in tests["baked"]]
    matched = [key for key in calls["plain"] if key in calls["baked"]]
    figures: dict = {"tests": len(common), "matched_calls": len(matched),
                     "stopped": tests["plain"].keys() != tests["baked"].keys()}
    for side in ("plain", "baked"):
        ran = [tests[side][test] for test in common]
        figures[side] = {
            "seconds": round(sum(t for t, _ in ran), 1),
            "outcomes": {o: sum(1 for _, x in ran if x == o) for o in sorted({x for _, x in ran})},
            "call_seconds": round(sum(calls[side][k]["seconds"] for k in matched), 3),
            "call_compiles": sum(calls[side][k]["compiles"] for k in matched)}
    return figures


def first_call_totals(served: Path) -> dict:
    """The timed first eager calls of one side (``PEER_SUITES_TIME``): how many, their summed
    seconds, and the backend compiles inside them (count, seconds)."""
    calls = json.loads(served.read_text()).get("first_calls", [])
    return {"calls": len(calls), "seconds": round(sum(c["seconds"] for c in calls), 3),
            "compiles": sum(c["compiles"] for c in calls),
            "compile_seconds": round(sum(c["compile_seconds"] for c in calls), 3)}


def print_report(name: str, figures: dict) -> None:
    print(f"== {name} on the device")
    for side in ("plain", "baked"):
        counts = figures[side]
        print(f"{side}: {counts['passed']} passed, {counts['failed']} failed, "
              f"{counts['error']} errors, {counts['skipped']} skipped; "
              f"{figures[f'{side}_seconds']} s")
    print(f"plain passes lost baked: {figures['lost']}")
    for cause, found in figures["causes"].items():
        print(f"  {found['tests']} {cause}: e.g. {found['example']}: {found['message'][:200]}")
    print(f"first eager calls: {figures['served']} served, {figures['traced']} traced; "
          f"tiers {figures['tiers']}")
    for function, tiers in figures["by_function"].items():
        print(f"  {function}: {tiers}")
    peer_suites.print_staged(figures.get("staged"))
    warned = figures["warnings"]
    print(f"warnings: {warned['plain']} plain, {warned['baked']} baked, "
          f"{len(warned['differ'])} counted differently")
    for side, compiles in figures["compiles"].items():
        backend = compiles.get(BACKEND_COMPILE, {})
        print(f"jax compiles, {side}: {backend.get('count', 0)} backend compiles, "
              f"{backend.get('seconds', 0.0):.1f} s")
        timed = figures["first_calls"][side]
        print(f"decorated functions' first eager calls, {side}: {timed['calls']} calls, "
              f"{timed['seconds']:.2f} s, {timed['compiles']} compiles inside them "
              f"({timed['compile_seconds']:.2f} s): the suite's own programs' compiles "
              f"{backend.get('count', 0) - timed['compiles']} "
              f"({backend.get('seconds', 0.0) - timed['compile_seconds']:.1f} s)")
    common = figures["both_ran"]
    plain, baked = common["plain"], common["baked"]
    if common["stopped"]:
        print(f"a side was stopped (PYTEST_LIMIT): the {common['tests']} tests both ran: "
              f"plain {plain['outcomes']} in {plain['seconds']} s, baked {baked['outcomes']} "
              f"in {baked['seconds']} s ({baked['seconds'] / max(plain['seconds'], 1e-9):.2f}x)")
    print(f"the {common['matched_calls']} timed first eager calls both sides made: plain "
          f"{plain['call_seconds']:.2f} s ({plain['call_compiles']} compiles), baked "
          f"{baked['call_seconds']:.2f} s ({baked['call_compiles']} compiles)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("bundle", help="write the device bundle of a work folder")
    made.add_argument("work", type=Path)
    made.add_argument("out", type=Path)
    made.add_argument("--library", required=True, choices=sorted(peer_suites.LIBRARIES))
    made.add_argument("--figures", type=Path, help="peer_suites.py's --json of that run: "
                      "the test files it ran (default: every test file)")
    read = commands.add_parser("report", help="compare the device's two runs")
    read.add_argument("bundle", type=Path)
    read.add_argument("results", type=Path)
    read.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.command == "bundle":
        bundle(args.work, args.out, args.library, args.figures)
        return 0
    figures = report(args.bundle, args.results)
    print_report(args.bundle.name, figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
