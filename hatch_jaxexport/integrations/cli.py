"""The ``jaxexport`` / ``python -m hatch_jaxexport`` command line."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from hatch_jaxexport.formats import __version__
from hatch_jaxexport.formats.cpu_targets import TARGET_ALIASES, TARGETS
from hatch_jaxexport.formats.inventory import inventory, summarize
from hatch_jaxexport.formats.manifest import (
    ARTIFACT_DIR,
    ArtifactRecord,
    member_name,
    signature_text,
)
from hatch_jaxexport.formats.options import DEFAULT_PLATFORMS, KNOWN_PLATFORMS
from hatch_jaxexport.formats.settings import FULL_STRUCTURES_ENV, TRACEBACK_ENV, full_structures
from hatch_jaxexport.formats.structure_text import abbreviate_structure
from hatch_jaxexport.integrations._cache_command import add_command as add_cache_command
from hatch_jaxexport.integrations._cache_command import run_command as run_cache_command
from hatch_jaxexport.integrations._portable_command import add_command as add_portable_command
from hatch_jaxexport.integrations._portable_command import run_command as run_portable_command
from hatch_jaxexport.integrations._stderr_reporter import StderrReporter

# Imported in functions: each command's layers, only when that command runs: `--help` and every
# other command load none of them.

#: How wide ``inspect`` prints a structure (its other columns take about 60 characters).
_INSPECT_STRUCTURE_WIDTH = 60


def _parser() -> argparse.ArgumentParser:
    return _parsers()[0]


def _parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``jaxexport`` parser, and each command's parser by name."""
    parser = argparse.ArgumentParser(
        prog="jaxexport",
        description="Bake jax.export artifacts for a package, and inspect what a package carries.",
    )
    parser.add_argument("--version", action="version", version=f"hatch-jaxexport {__version__}")
    parser.add_argument("-v", "--verbose", dest="debug", action="store_true",
                        help=f"show whole errors with tracebacks (also {TRACEBACK_ENV}=1)")
    parser.add_argument("--debug", dest="debug", action="store_true", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    export = sub.add_parser("export", help="export every @exportable of a package into a folder",
                            description="Import PACKAGE in worker processes, export each "
                            "@exportable for each structure, static value and platform, and "
                            "write manifest.json and the blobs into --out.")
    export.add_argument("package", metavar="PACKAGE",
                        help="import name of the package, e.g. example_pkg")
    export.add_argument("--out", required=True, metavar="DIR", help="folder to write (replaced "
                        "if it holds a previous export)")
    export.add_argument("--platform", action="append", choices=KNOWN_PLATFORMS,
                        dest="platforms", help="default platform(s) for functions that name "
                        "none (repeatable; default: cpu)")
    export.add_argument("--jobs", type=int, default=1, metavar="N", help="parallel export workers")
    export.add_argument("--on-error", choices=("fail", "skip"), default="fail",
                        help="fail the export, or leave failed artifacts out (recorded)")
    export.add_argument("--path", action="append", default=None, metavar="FOLDER",
                        help="folder to import PACKAGE from (repeatable; default: the current "
                        "folder)")
    export.add_argument("--executables", nargs="*", default=None, metavar="TARGET",
                        choices=[*TARGETS, *TARGET_ALIASES],
                        help="also compile precompiled executables, for these targets (none "
                        "named: this machine's); see docs/executables.md")
    export.add_argument("--tpu-target", action="append", default=None, metavar="TPU",
                        dest="tpu_targets", help="also compile executables for this TPU host, "
                        "without a TPU (repeatable: v5e, v5e:2x2, v6e:8...; needs --platform "
                        "tpu); see docs/executables.md")

    inspect = sub.add_parser("inspect", help="list the artifacts an installed package carries",
                             description="Read PACKAGE's manifest (through importlib.resources) "
                             "and print one row per artifact.")
    inspect.add_argument("package", metavar="PACKAGE", help="import name of an installed package")
    inspect.add_argument("--json", action="store_true", help="print the manifest as JSON")
    inspect.add_argument("--full", action="store_true", help="print each structure whole "
                         "(default: long ones abbreviated to fit a row; "
                         f"{FULL_STRUCTURES_ENV}=1 does the same as --full)")
    verify = sub.add_parser("verify", help="check an installed package's artifacts against its "
                            "manifest", description="Check that PACKAGE's manifest is valid, "
                            "that every blob it lists is present with its recorded size and "
                            "SHA-256, and that the folder holds nothing else. Exit 0 with one "
                            "OK line, or 1 with one line per problem.")
    verify.add_argument("package", metavar="PACKAGE", help="import name of an installed package")
    warm = sub.add_parser("warmup", help="compile a package's artifacts into the executable "
                          "cache of this machine",
                          description="Call every @exportable of PACKAGE on zeros of the given "
                          "sizes, so later processes load compiled executables from the cache.")
    warm.add_argument("package", metavar="PACKAGE", help="import name of an installed package")
    warm.add_argument("--dims", action="append", default=[], metavar="SYMBOL=SIZE[,SIZE...]",
                      help="sizes for a symbolic dimension (repeatable), e.g. --dims n=64,1024; "
                      "default: the sizes each function names (executable_sizes=, concrete=)")
    _add_wheel_commands(sub)
    device = sub.add_parser(
        "compile-executables", help="compile a baked wheel's executables for this machine's "
        "accelerator", description="On a machine with a TPU or GPU: compile WHEEL's artifacts "
        "of that platform (jax's default backend) at the sizes its functions name "
        "(executable_sizes=, concrete=, recorded calls) and write WHEEL with those "
        "executables into --out, for `jaxexport merge` or the hook's executables-from. Users "
        "whose device, backend version, jax, jaxlib and LIBTPU_INIT_ARGS match use them.")
    device.add_argument("wheel", metavar="WHEEL", help="a wheel built with artifacts for the "
                        "device's platform (platforms = [..., \"tpu\"])")
    device.add_argument("--out", required=True, metavar="DIR", help="folder for the wheel with "
                        "the executables (not WHEEL's own folder)")
    device.add_argument("--platform", choices=KNOWN_PLATFORMS, default="",
                        help="the platform to compile for, which must be jax's default backend "
                        "here (default: that backend; cpu only when named)")
    add_portable_command(sub)
    nested = add_cache_command(sub)
    return parser, {**sub.choices, **nested}


def _add_wheel_commands(sub: Any) -> None:
    """``jaxexport merge`` and ``bake-wheel`` (the wrapping build backend's bake, for a wheel
    already built): the commands that write a wheel again."""
    merge = sub.add_parser("merge", help="merge the executables several builders compiled into "
                           "one wheel", description="WHEEL... are one wheel built from the same "
                           "source by several builders (each compiling the executables of its "
                           "machine kind); write one wheel with every executable into --out. "
                           "Refuses wheels whose other files or artifacts differ.")
    merge.add_argument("wheels", nargs="+", metavar="WHEEL", help="the builds of one wheel")
    merge.add_argument("--out", required=True, metavar="DIR", help="folder for the merged wheel")
    merge.add_argument("--companion-wheels", choices=("none", "accelerators", "all"),
                       default="none", help="then split the merged wheel's executables into "
                       "companion wheels, as `jaxexport companions` does (default: none)")
    split = sub.add_parser(
        "companions", help="split a wheel's executables into companion wheels, one per target",
        description="Write WHEEL into --out without the executables --split names, and one "
        "companion wheel per target that holds them (example-pkg-jaxexport-tpu-v5e), each "
        "installed by an extra the package's wheel gets (pip install 'example-pkg[tpu-v5e]', "
        "[tpu] for every TPU target). Reproducible; everything is read back before it is kept.")
    split.add_argument("wheel", metavar="WHEEL", help="a baked wheel with its executables")
    split.add_argument("--out", required=True, metavar="DIR", help="folder for the wheels "
                       "(WHEEL's own folder replaces WHEEL)")
    split.add_argument("--split", choices=("accelerators", "all"), default="accelerators",
                       help="the TPU and GPU executables (default), or the CPU's too")
    baker = sub.add_parser(
        "bake-wheel", help="bake a wheel another build backend built (flit, poetry-core, ...)",
        description="Export every @exportable of the top-level packages WHEEL ships, as the "
        "Hatch hook does, and write WHEEL with the artifacts as package data into --out "
        "(RECORD computed again, reproducible). Options come from --project's "
        "[tool.jaxexport] table, where one is found.")
    baker.add_argument("wheel", metavar="WHEEL", help="a wheel built by any backend")
    baker.add_argument("--out", required=True, metavar="DIR", help="folder for the baked wheel "
                       "(not WHEEL's own folder)")
    baker.add_argument("--project", default=".", metavar="DIR", help="the project's folder: its "
                       "pyproject.toml's [tool.jaxexport] options and recorded calls (default: "
                       "the current folder)")


def help_pages(width: int = 80) -> dict[str, str]:
    """``jaxexport --help`` and each ``jaxexport COMMAND --help``, keyed by the command line,
    formatted ``width`` columns wide whatever the terminal (argparse otherwise reads
    ``COLUMNS``), without colour: the text docs/cli.md carries, so that a test can compare the
    page with the parser (``scripts/cli_reference.py`` writes it there)."""
    if width < 40:
        raise ValueError(f"help_pages: width must be at least 40 columns, got {width!r}")
    top, commands = _parsers()
    pages = {}
    for command, parser in [("jaxexport", top)] + [(f"jaxexport {name}", p)
                                                    for name, p in commands.items()]:
        parser.formatter_class = functools.partial(argparse.HelpFormatter, width=width)
        if hasattr(parser, "color"):  # Python 3.14+ colours help on terminals
            parser.color = False
        pages[command] = parser.format_help()
    return pages


def _warmup(args: argparse.Namespace) -> int:
    """Warm the caches; exit 1, saying how to give every missing size, if nothing was warmed."""
    from hatch_jaxexport.bake.warmup import warmup_package
    from hatch_jaxexport.runtime.disk.cache_folders import active_cache_dir

    dims: dict[str, list[int]] = {}
    for item in args.dims:
        name, sep, sizes = item.partition("=")
        try:
            dims[name.strip()] = [int(v) for v in sizes.split(",")]
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError(f"--dims takes SYMBOL=SIZE[,SIZE...], got {item!r}")
    result = warmup_package(args.package, dims,
                            log=lambda line: print(line, file=sys.stderr))
    for line in result.skipped:
        print(f"skipped: {line}", file=sys.stderr)
    example = _warmup_command(args.package, dims, result.missing)
    if result.warmed == 0:
        if result.functions == 0:
            reason = f"{args.package} has no @exportable functions"
        elif result.missing:
            reason = (f"no size for the symbols "
                      f"{', '.join(result.missing)}. Give them all, e.g.\n  {example}")
        else:
            reason = "every call was skipped (the reasons are above)"
        print(f"jaxexport: error: warmed nothing: {reason}", file=sys.stderr)
        return 1
    print(f"warmed {result.warmed} call signature(s) into {active_cache_dir()}")
    if result.missing:
        print(f"to warm the skipped structures too, give every symbol a size: {example}",
              file=sys.stderr)
    return 0


def _warmup_command(package: str, dims: dict[str, list[int]], missing: Sequence[str]) -> str:
    """A ``warmup`` command line that gives every symbol: the sizes given, SIZE for the rest."""
    given = {name: ",".join(map(str, sizes)) for name, sizes in dims.items()}
    sizes = {**given, **dict.fromkeys(missing, "SIZE")}
    return " ".join(["jaxexport", "warmup", package,
                     *(f"--dims {name}={sizes[name]}" for name in sorted(sizes))])


class CliReporter(StderrReporter):
    """The bake's messages on stderr (stdout keeps the result); a failed export's error is
    printed by ``main``, every failure in it."""


def _targets(named: list[str] | None) -> tuple[str, ...]:
    """``--executables``: none given (no executables), empty (this machine's targets), names."""
    if named is None:
        return ()
    from hatch_jaxexport.bake.executables.compiling import resolve_targets

    return tuple(resolve_targets(list(dict.fromkeys(named)) or True))


def _export(args: argparse.Namespace) -> int:
    from hatch_jaxexport.bake.config import ExportOptions, parse_options
    from hatch_jaxexport.bake.flow import export_one

    tpu = parse_options({"platforms": args.platforms or list(DEFAULT_PLATFORMS),
                         "tpu-targets": args.tpu_targets}, "--tpu-target").executables \
        if args.tpu_targets else ()
    options = ExportOptions(platforms=tuple(args.platforms or DEFAULT_PLATFORMS),
                            jobs=args.jobs, on_error=args.on_error,
                            executables=(*_targets(args.executables), *tpu))
    out = Path(args.out)
    in_source_tree = out.name == ARTIFACT_DIR and (out.parent / "__init__.py").is_file()
    result = export_one(args.package, out, options, CliReporter(), args.path or [os.getcwd()],
                        (out.parent.resolve(), "export") if in_source_tree else None)
    concrete = len(result.manifest.concrete)
    print(f"wrote {len(result.manifest.artifacts)} artifact(s)"
          + (f" and {concrete} concrete-size artifact(s)" if concrete else "")
          + f" to {result.out_dir}")
    return 0


def _print_captured(artifacts: Sequence[ArtifactRecord], file: TextIO = sys.stdout) -> None:
    """Each function's captured constants (values frozen into its artifacts at build time)."""
    from hatch_jaxexport.bake.export.captured import captured_lines

    for function, lines in captured_lines(artifacts, indent="  ").items():
        print(f"{function}:", file=file)
        for line in lines:
            print(line, file=file)


def _inspect(args: argparse.Namespace) -> int:
    from hatch_jaxexport.errors import ArtifactError
    from hatch_jaxexport.runtime.artifacts.package_artifacts import read_package_artifacts

    package = read_package_artifacts(args.package)
    if package is None:
        raise ArtifactError(f"package {args.package!r} carries no baked artifacts")
    manifest = package.manifest
    if args.json:
        sys.stdout.write(manifest.to_bytes().decode())
        return 0
    counts = inventory(manifest)  # as the build summary and verify count them
    print(f"{manifest.package}: {counts.text()}, built by "
          f"{manifest.generator} with jax {manifest.jax_version} (jaxlib "
          f"{manifest.jaxlib_version}), schema {manifest.schema_version}")
    full = args.full or full_structures()
    rows = [("function", "structure", "static", "platform", "member", "vjp", "bytes")]
    for record in sorted(manifest.artifacts, key=lambda r: r.id):
        structure = record.structure if full else \
            abbreviate_structure(record.structure, _INSPECT_STRUCTURE_WIDTH)
        rows.append((record.function, f"[{record.structure_index}] {structure}",
                     json.dumps(record.static, sort_keys=True) if record.static else "-",
                     record.platform, member_name(record.kind, record.batched),
                     str(record.vjp_order), f"{record.size:,}"))
    if any(record.mesh for record in manifest.artifacts):  # sharded variants: a mesh column
        from hatch_jaxexport.formats.manifest_reader import mesh_from_record

        meshes = ["mesh"] + [" x ".join(f"{a}={s}" for a, s in mesh_from_record(r.mesh) or ())
                             or "-" for r in sorted(manifest.artifacts, key=lambda r: r.id)]
        rows = [(*row[:4], mesh, *row[4:]) for row, mesh in zip(rows, meshes, strict=True)]
    rows += [row if len(row) == len(rows[0]) else (*row[:4], "-", *row[4:])
             for row in _concrete_rows(manifest)]
    _print_table(rows)
    if not full and any(len(r.structure) > _INSPECT_STRUCTURE_WIDTH for r in manifest.artifacts):
        print(f"(long structures abbreviated: --full or {FULL_STRUCTURES_ENV}=1 shows them "
              "whole)")
    print(summarize(manifest.artifacts))
    if package.sets:
        _print_sets(package.sets)
    elif manifest.jax_released:
        from hatch_jaxexport.formats.jax_window import window_text

        print(f"compatibility: {window_text(manifest.jax_version, manifest.jax_released)}")
    if manifest.sources:
        print(f"sources: {package.stale}" if package.stale else
              f"sources: current (exported into the source tree from "
              f"{len(manifest.sources['files'])} module(s), none changed since)")
    _print_captured(manifest.artifacts)
    for skipped in manifest.skipped:
        print(f"skipped: {skipped.function} [{skipped.structure_index}] on {skipped.platform}: "
              f"{skipped.reason}")
    _print_coverage(manifest)
    _print_executables(manifest)
    return 0


def _print_sets(sets: Sequence[Any]) -> None:
    """A wheel baked with several jax releases (``jax-releases``): each set's window, and the
    one this jax loads (the table above is that set's)."""
    from hatch_jaxexport.formats.jax_window import sets_lines
    from hatch_jaxexport.runtime.artifacts.package_artifacts import running_jax_version

    print(f"jax releases: {len(sets)} artifact sets (the table is the set this jax loads)")
    for line in sets_lines([(s.jax_version, s.jax_released) for s in sets],
                           running_jax_version()):
        print(f"  {line}")


def _concrete_rows(manifest: Any) -> list[tuple[str, ...]]:
    """One ``inspect`` row per concrete-size artifact (member ``concrete``: its structure's
    sizes) and per recorded call (member ``recorded``: the call's arrays and static values),
    so that every artifact the wheel serves has its row."""
    from hatch_jaxexport.formats.coverage import call_text

    rows = []
    for record in sorted(manifest.concrete, key=lambda r: r.id):
        if record.structure_index >= 0:
            sizes = ",".join(f"{k}={v}" for k, v in sorted(record.sizes.items()))
            what, member = f"[{record.structure_index}] at {sizes}", "concrete"
        else:
            what, member = f"[-1] {call_text(record.call)}", "recorded"
        rows.append((record.function, what,
                     json.dumps(record.static, sort_keys=True) if record.static else "-",
                     record.platform, member, "-", f"{record.size:,}"))
    return rows


def _print_coverage(manifest: Any) -> None:
    """What the wheel serves of each function: symbolically, only at concrete sizes (which),
    not at all; with the concrete-size artifacts' count and bytes when there are any."""
    from hatch_jaxexport.formats.coverage import coverage

    if manifest.concrete:
        print(f"concrete-size artifacts: {len(manifest.concrete)}, "
              f"{sum(c.size for c in manifest.concrete):,} bytes (calls of exactly those "
              "sizes load them; other sizes trace the source)")
    for function, text in coverage(manifest).items():
        print(f"serves: {function}: {text}")


def _print_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows of cells in left-aligned columns (the first row is the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip())


def _print_companions(manifest: Any) -> list[Any]:
    """Each companion wheel the manifest lists, as installed here; the executables of those
    the loader would use (their rows join the wheel's own)."""
    from hatch_jaxexport.bake.verify import installed_companions
    from hatch_jaxexport.runtime.artifacts.installed_companions import find_companion

    found = []
    for record, state, problems in installed_companions(manifest):
        print(f"companion wheel: {record.distribution}=={record.version} [{record.extra}], "
              f"{record.executables} executable(s) for {record.platform}, {record.size:,} "
              f"bytes: {state}" + "".join(f"; {p}" for p in problems if p != state))
        if state == "installed":
            index = find_companion(record, manifest.package).index
            found += list(index.full().executables) if index is not None else []
    return found


def _print_executables(manifest: Any) -> None:
    """The precompiled executables (the wheel's and its installed companions'), one row each,
    with whether this process would use it; the count also when there are none, so a wheel
    without them says so."""
    if manifest.companions:
        manifest = manifest._replace(executables=(*manifest.executables,
                                                  *_print_companions(manifest)))
    if not manifest.executables:
        print("precompiled executables: 0 (the first call of each signature compiles the "
              "StableHLO; see executables = true and executable_sizes= in docs/executables.md)")
        return
    from hatch_jaxexport.formats.device_targets import target_text
    from hatch_jaxexport.runtime.executables.shipped import mismatch, this_host

    host = this_host()
    rows = [("artifact", "target", "arguments", "jaxlib", "bytes", "on this machine")]
    usable = 0
    for record in sorted(manifest.executables, key=lambda r: r.id):
        why = mismatch(record, this_host(record.backend))  # a device's: that backend's
        usable += why is None
        rows.append((record.artifact, target_text(record), signature_text(record.inputs),
                     record.jaxlib_version, f"{record.size:,}", "usable" if why is None else
                     f"not used: {why}"))
    total = sum(r.size for r in manifest.executables)
    print(f"precompiled executables: {len(manifest.executables)}, {total:,} bytes; this machine "
          f"({host.machine}, jaxlib {host.jaxlib_version}) can use {usable}")
    _print_table(rows)


def _merge(args: argparse.Namespace) -> int:
    from hatch_jaxexport.bake.executables.merge import merge_wheels
    from hatch_jaxexport.formats.manifest_reader import parse_manifest

    out = merge_wheels(args.wheels, args.out)
    import zipfile

    with zipfile.ZipFile(out) as archive:
        counts = [len(parse_manifest(archive.read(n)).executables) for n in archive.namelist()
                  if n.endswith("/_jaxexport/manifest.json")]
    print(f"wrote {out} with {sum(counts)} precompiled executable(s) from {len(args.wheels)} "
          "wheels")
    if args.companion_wheels != "none":
        _print_split(out, args.out, args.companion_wheels)
    return 0


def _companions(args: argparse.Namespace) -> int:
    """Split a wheel into companion wheels; a line per wheel written."""
    _print_split(Path(args.wheel), args.out, args.split)
    return 0


def _print_split(wheel: Path, out: str, split: str) -> None:
    from hatch_jaxexport.bake.executables.companion_split import split_wheel

    result = split_wheel(wheel, out, split)
    print(f"wrote {result.wheel} ({result.wheel.stat().st_size:,} bytes)")
    for extra, path in result.companions.items():
        print(f"wrote {path} ({path.stat().st_size:,} bytes), installed by the extra [{extra}]")
    if not result.companions:
        print(f"(no {split} executables to split: no companion wheel)")


def _bake_wheel(args: argparse.Namespace) -> int:
    """Bake a built wheel; one summary line on stdout, the bake's messages on stderr."""
    from hatch_jaxexport.bake.wheel_bake import bake_wheel
    from hatch_jaxexport.integrations.pep517 import StreamReporter, project_sources, read_config

    _, options = read_config(args.project)
    out = bake_wheel(args.wheel, args.out, options, StreamReporter(),
                     sources=project_sources(options, Path(args.project)))
    import zipfile

    with zipfile.ZipFile(out) as archive:
        count = sum(1 for n in archive.namelist() if f"/{ARTIFACT_DIR}/" in n)
    print(f"wrote {out} with {count} artifact file(s)")
    return 0


def _compile_executables(args: argparse.Namespace) -> int:
    """Compile a wheel's executables for this machine's device; one summary line on stdout."""
    from hatch_jaxexport.bake.executables.device_compile import compile_wheel

    done = compile_wheel(args.wheel, args.out, args.platform,
                         log=lambda line: print(line, file=sys.stderr, flush=True))
    device = done.device
    added = sum(r.size for r in done.records)
    print(f"wrote {done.wheel} with {len(done.records)} executable(s) for "
          f"{device.get('platform', '?')} {device.get('device_kind', '?')!r} "
          f"({added:,} bytes, compiled in {done.seconds:.1f} s); backend version "
          f"{' '.join(str(device.get('platform_version', '')).split())!r}, jax "
          f"{device.get('jax_version', '?')}, jaxlib {device.get('jaxlib_version', '?')}"
          + (f", backend options {device['backend_flags']!r}" if device.get("backend_flags")
             else ""))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from hatch_jaxexport.bake.verify import verify_report

    report = verify_report(args.package)
    if report.ok:
        print(report.summary())
        return 0
    print(f"{args.package}: {len(report.problems)} problem(s):")
    for problem in report.problems:
        print(f"  - {problem}")
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; errors print one line (a traceback only with ``-v``/``--debug``)."""
    args = _parser().parse_args(argv)
    if args.debug:  # the export workers show whole errors too
        os.environ[TRACEBACK_ENV] = "1"
    try:
        return {"export": _export, "inspect": _inspect, "warmup": _warmup,
                "verify": _verify, "merge": _merge, "bake-wheel": _bake_wheel,
                "companions": _companions,
                "compile-executables": _compile_executables,
                "portable": run_portable_command, "cache": run_cache_command}[args.command](args)
    except KeyboardInterrupt as err:
        if args.debug:
            raise
        print("jaxexport: interrupted" + (f": {err}" if str(err) else ""), file=sys.stderr)
        return 130
    except Exception as err:
        if args.debug:
            raise
        print(f"jaxexport: error: {err}", file=sys.stderr)
        return 1


__all__ = ["help_pages", "main"]
