"""The ``jaxexport portable`` command: list a package's portable variants, or write a bundle.

Integration layer: the argument parser and the printing; reading the installed files and writing
the bundle live in ``bake/concrete/portable_bundle.py``. Importing this module imports no jax, so
``jaxexport --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.concrete.portable_bundle import (
    load_index,
    read_file,
    select_variants,
    write_bundle,
)
from hatch_jaxexport.formats.portable_index import json_bytes, variant_label


def add_command(sub: Any) -> None:
    """Add ``portable`` to the CLI's subparsers."""
    cmd = sub.add_parser(
        "portable", help="list a package's portable StableHLO variants, or write a bundle",
        description="List the concrete-size StableHLO variants an installed PACKAGE carries "
        "(baked for @exportable functions with concrete= sizes) and what could not be made "
        "portable. With --function and --out, write a ready-to-compile bundle for non-JAX "
        "runtimes: the .mlir/.mlirbc files, the interface JSON and a README with the IREE "
        "compile and run commands. Reads files only: needs no jax.")
    cmd.add_argument("package", metavar="PACKAGE", help="import name of an installed package")
    cmd.add_argument("--function", metavar="NAME", help="the function to bundle: its manifest "
                     "name, or a unique short name (e.g. mlp_apply)")
    cmd.add_argument("--variant", metavar="VARIANT",
                     help="only this variant of the function (default: all)")
    cmd.add_argument("--out", metavar="DIR", help="folder to write the bundle into (created)")
    cmd.add_argument("--json", action="store_true", help="print portable.json")


def run_command(args: argparse.Namespace) -> int:
    """``python -m hatch_jaxexport portable ...``."""
    root, index = load_index(args.package)
    if args.out or args.function:
        if not (args.out and args.function):
            raise ValueError("--function and --out go together: name the function to "
                             "bundle and the folder to write")
        chosen = select_variants(index, args.function, args.variant)
        written = write_bundle(root, index, chosen, Path(args.out))
        print(f"wrote {len(chosen)} variant(s) of {chosen[0]['function']} to {args.out} "
              f"({len(written)} files); see {Path(args.out) / 'README.md'}")
        return 0
    if args.json:
        sys.stdout.write(json_bytes(index).decode())
        return 0
    print(f"{index['package']}: {len(index['variants'])} portable variant(s) (concrete-size "
          f"StableHLO lowered for {index['platform']}), built with jax {index['jax_version']}")
    rows = [("function", "variant", "inputs", "outputs", "bytes (.mlir)")]
    for variant in index["variants"]:
        interface = json.loads(read_file(root, variant["files"]["interface"]))
        rows.append((variant["function"], variant["variant"], _describe(interface["inputs"]),
                     _describe(interface["outputs"]), f"{variant['files']['text']['size']:,}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for entry in index["unsupported"]:
        print(f"refused: {variant_label(entry)}: {entry['reason']}")
    for entry in index["not_requested"]:
        if entry.get("reason"):
            print(f"not portable: {entry['function']}: {entry['reason']}")
    plain = [e["function"] for e in index["not_requested"] if not e.get("reason")]
    if plain:
        print(f"no concrete= sizes (not baked): {', '.join(plain)}")
    if index["variants"]:
        print(f"write a bundle: python -m hatch_jaxexport portable {index['package']} "
              "--function NAME --out DIR")
    return 0


def _describe(items: Sequence[Mapping[str, Any]], limit: int = 2) -> str:
    shown = [f"{i['name']}: {i['dtype']}[{','.join(map(str, i['shape']))}]"
             for i in items[:limit]]
    more = f" +{len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(shown) + more


__all__ = ["add_command", "run_command"]
