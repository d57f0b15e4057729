"""What a first call pays to read its package's manifest, as the package grows.

    python benchmarks/manifest_scale.py [--copies 1,10,100] [--repeat 15]

Exports ``example_pkg`` (with precompiled executables for both x86-64 targets, as its
benchmark wheel has), then makes larger manifests from it: each function's records copied
under ``--copies`` distinct function names (a package of 6, 60, 600 functions), written as the
build writes a manifest (``formats.record_spans.manifest_text``: the records, then where each
function's lie). For each size, in this process, best of ``--repeat``:

- ``first call``: what the loader does on a function's first call: decoding the manifest's
  header and that function's records from their spans, and validating those records
  (``read_manifest_index(...).function(name)``);
- ``read whole``: the same, on the same manifest without its spans (a manifest written before
  them, or edited by hand): the whole JSON decoded, that function's records validated;
- ``full``: decoding and validating every record (``parse_manifest``: ``inspect``, ``verify``).

The ratios ``first call / read whole`` and ``first call / full`` are printed beside them.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def export_example(out: Path) -> dict:
    """``example_pkg``'s manifest, exported here with executables for both x86-64 targets."""
    from hatch_jaxexport.bake import export_package

    folder = out / "_jaxexport"
    export_package("example_pkg", folder, search_path=[ROOT / "example_pkg" / "src"], jobs=2,
                   executables=["x86_64-avx2", "x86_64-avx512"])
    return json.loads((folder / "manifest.json").read_text())


def scaled(manifest: dict, copies: int) -> dict:
    """The manifest with each function's records repeated under ``copies`` names."""
    grown = copy.deepcopy(manifest)
    grown.pop("record_spans", None)  # the copies get spans of their own
    grown["artifacts"], grown["executables"], grown["skipped"] = [], [], []
    for n in range(copies):
        def renamed(text: str, n: int = n) -> str:  # the function name, or an id's first part
            function, slash, rest = text.partition("/")
            return f"{function}_copy{n}{slash}{rest}" if n else text
        for record in manifest["artifacts"]:
            grown["artifacts"].append({
                **record, "function": renamed(record["function"]),
                "file": f"c{n}_{record['file']}",
                "sized": [{**form, "file": f"c{n}_{form['file']}"}
                          for form in record.get("sized", [])]})
        for record in manifest.get("executables", []):
            grown["executables"].append({**record, "artifact": renamed(record["artifact"]),
                                         "file": f"c{n}_{record['file']}"})
    return grown


def best_ms(action, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", default="1,10,100")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    from hatch_jaxexport.formats.manifest_reader import parse_manifest, read_manifest_index
    from hatch_jaxexport.formats.record_spans import manifest_text

    with tempfile.TemporaryDirectory() as tmp:
        print("exporting example_pkg (executables for x86_64-avx2 and x86_64-avx512)",
              flush=True)
        manifest = export_example(Path(tmp))
    name = next(r["function"] for r in manifest["artifacts"]
                if r["function"].endswith(":activate"))
    print("\n| functions | artifacts | executables | manifest bytes | first call, ms | "
          "read whole, ms | full, ms | first call / read whole | first call / full |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for copies in (int(c) for c in args.copies.split(",")):
        grown = scaled(manifest, copies)
        data = manifest_text(grown).encode()
        whole = json.dumps(grown, sort_keys=True, separators=(",", ":")).encode()
        functions = len({r["function"] for r in grown["artifacts"]})
        first = best_ms(lambda d=data: read_manifest_index(d).function(name), args.repeat)
        read_whole = best_ms(lambda d=whole: read_manifest_index(d).function(name),
                             args.repeat)
        full = best_ms(lambda d=data: parse_manifest(d), args.repeat)
        print(f"| {functions} | {len(grown['artifacts'])} | {len(grown['executables'])} | "
              f"{len(data):,} | {first:.2f} | {read_whole:.2f} | {full:.2f} | "
              f"{first / read_whole:.2f} | {first / full:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
