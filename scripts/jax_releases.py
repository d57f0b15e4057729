"""Regenerate ``hatch_jaxexport/formats/jax_releases.json``: each jax release and its date.

    python scripts/jax_releases.py

Reads PyPI's JSON API (the first upload of each release's files) and writes the table the
build records a manifest's ``jax_released`` from (``formats.jax_window``). Run it when a jax
newer than the table's newest is released; until then such a jax counts as released on the
newest date the table knows, which makes its window end early rather than late.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path

TABLE = Path(__file__).resolve().parents[1] / "hatch_jaxexport" / "formats" / "jax_releases.json"
FINAL = re.compile(r"^\d+(\.\d+)*$")


def main() -> int:
    with urllib.request.urlopen("https://pypi.org/pypi/jax/json", timeout=60) as response:
        releases = json.load(response)["releases"]
    table = {version: min(f["upload_time"] for f in files)[:10]
             for version, files in releases.items() if files and FINAL.match(version)}
    ordered = dict(sorted(table.items(), key=lambda item: [int(p) for p in item[0].split(".")]))
    TABLE.write_text(json.dumps(ordered, indent=0) + "\n")
    print(f"{len(ordered)} releases, newest {list(ordered)[-1]} on {list(ordered.values())[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
