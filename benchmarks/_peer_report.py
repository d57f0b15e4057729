"""pytest plugin loaded by ``peer_suites.py`` (``-p _peer_report``): at the end of a suite, how
each decorated function's first eager calls were served, written as JSON.

It reads ``call_report()`` of every ``ExportableFunction`` alive in the process, so it counts
what the suite really called, without touching the suite. In a venv without hatch-jaxexport
(the plain library) it writes an empty list.
"""

from __future__ import annotations

import gc
import json
import os
from typing import Any


def served_calls() -> list[dict[str, Any]]:
    """One row per (function, signature, tier) of this process's first eager calls."""
    try:
        from hatch_jaxexport.runtime.call.decorator import ExportableFunction
    except ImportError:
        return []
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for obj in gc.get_objects():
        if isinstance(obj, ExportableFunction):
            for served in obj.call_report():
                row = dict(served._asdict())
                rows[(row["function"], row["signature"], row["tier"])] = row
    return sorted(rows.values(), key=lambda r: (r["function"], r["signature"]))


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """Write the served calls where ``PEER_SUITES_REPORT`` says."""
    out = os.environ.get("PEER_SUITES_REPORT")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump(served_calls(), handle, indent=1)
