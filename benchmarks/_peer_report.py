"""pytest plugin loaded by ``peer_suites.py`` (``-p _peer_report``): at the end of a suite, how
each decorated function's calls were served, written as JSON: ``{"served": [...], "staged":
[...], "warnings": [...]}``, the first eager calls per signature and the calls staged into a
caller's trace per transformation (``jax.jit``, ``vmap``, ``grad``...), each served or traced,
the warnings of pytest's summary by category and message, with their counts, and jax's compile
events (``jax.monitoring``: how many, and their seconds) over the whole suite.

It reads ``call_report()`` and ``staged_report()`` of every ``ExportableFunction`` alive in
the process, so it counts what the suite really called, without touching the suite. In a venv
without hatch-jaxexport (the plain library) both lists are empty; an install older than
``staged_report()`` gives an empty ``staged`` list.
"""

from __future__ import annotations

import collections
import gc
import json
import os
from typing import Any

#: The warnings pytest recorded (its warnings summary), by category and message.
WARNINGS: collections.Counter[tuple[str, str]] = collections.Counter()
#: jax's compile events (``jax.monitoring`` durations whose name says compile): count, seconds.
COMPILES: dict[str, list[float]] = {}


def _compile_event(event: str, seconds: float, **_: Any) -> None:
    if "compile" in event:
        found = COMPILES.setdefault(event, [0, 0.0])
        found[0] += 1
        found[1] += seconds


def pytest_configure(config: Any) -> None:
    """Listen to jax's compile events from the start (jax imported here is the suite's)."""
    try:
        from jax import monitoring
    except ImportError:
        return
    monitoring.register_event_duration_secs_listener(_compile_event)


def pytest_warning_recorded(warning_message: Any, when: str, nodeid: str,
                            location: Any) -> None:
    """Count each warning of the summary by category and message (a baked library's must be
    the plain library's, as often: issue 68's last point)."""
    WARNINGS[(warning_message.category.__name__, str(warning_message.message)[:200])] += 1


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


def staged_calls() -> list[dict[str, Any]]:
    """One row per (function, transformation, tier, reason) of this process's calls staged
    into a caller's trace, with how many there were."""
    try:
        from hatch_jaxexport.runtime.call.decorator import ExportableFunction
    except ImportError:
        return []
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for obj in gc.get_objects():
        if isinstance(obj, ExportableFunction) and hasattr(obj, "staged_report"):
            for staged in obj.staged_report():
                row = dict(staged._asdict())  # a facade and its record: the same counts
                rows[(row["function"], row["transformation"], row["tier"], row["reason"])] = row
    return sorted(rows.values(), key=lambda r: (r["function"], r["transformation"], r["tier"]))


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """Write the served calls where ``PEER_SUITES_REPORT`` says."""
    out = os.environ.get("PEER_SUITES_REPORT")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump({"served": served_calls(), "staged": staged_calls(),
                       "warnings": [{"category": c, "message": m, "count": n}
                                    for (c, m), n in sorted(WARNINGS.items())],
                       "compiles": {e: {"count": int(n), "seconds": round(s, 3)}
                                    for e, (n, s) in sorted(COMPILES.items())}},
                      handle, indent=1)
