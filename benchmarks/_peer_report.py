"""pytest plugin loaded by ``peer_suites.py`` (``-p _peer_report``): at the end of a suite, how
each decorated function's calls were served, written as JSON: ``{"served": [...], "staged":
[...], "warnings": [...]}``, the first eager calls per signature and the calls staged into a
caller's trace per transformation (``jax.jit``, ``vmap``, ``grad``...), each served or traced,
the warnings of pytest's summary by category and message, with their counts, and jax's compile
events (``jax.monitoring``: how many, and their seconds) over the whole suite.

With ``PEER_SUITES_TIME=FILE`` (one ``module:function`` a line: the decorated functions, which
``peer_device.py bundle`` reads off the baked wheel's manifest), each of those module-level
functions is wrapped, plain and baked alike, so that its first eager call per argument
signature is timed (to the result's readiness) with the compiles jax made inside it:
``"first_calls"``. Only the outermost call is counted (a plain library's functions call each
other eagerly), and a call with a tracer among its arguments passes straight through.

It reads ``call_report()`` and ``staged_report()`` of every ``ExportableFunction`` alive in
the process, so it counts what the suite really called, without touching the suite. In a venv
without hatch-jaxexport (the plain library) both lists are empty; an install older than
``staged_report()`` gives an empty ``staged`` list.
"""

from __future__ import annotations

import collections
import functools
import gc
import importlib
import inspect
import json
import os
import sys
import time
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


#: The timed functions' first eager calls: function, signature, seconds, compiles inside.
FIRST_CALLS: list[dict[str, Any]] = []
_DEPTH = [0]
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def _signature(leaves: list[Any], tree: Any) -> str:
    """The call's key: the tree, each array leaf's shape and dtype, a Python number's type
    (jax traces it as a weakly typed scalar: a new value is no new program), an object
    without a repr of its own (a method's ``self``) its class's name, every other leaf's
    repr."""
    parts = [f"{getattr(x, 'dtype', '')}{list(x.shape)}" if hasattr(x, "shape") else
             type(x).__name__ if isinstance(x, (int, float, complex))
             or type(x).__repr__ is object.__repr__ else repr(x) for x in leaves]
    return f"{tree}|{','.join(parts)}"


def _timed(name: str, function: Any) -> Any:
    """``function``, its first eager call per signature timed (outermost calls only). The
    wrapper keeps the function's signature: a suite that reads it (dm-pix's ``api_test``
    checks ``inspect.getfullargspec``) sees the same on both sides, timed or not."""
    import jax

    seen: set[str] = set()

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
        if _DEPTH[0] or any(isinstance(x, jax.core.Tracer) for x in leaves):
            return function(*args, **kwargs)
        key = _signature(leaves, tree)
        if key in seen:
            return function(*args, **kwargs)
        seen.add(key)
        count, seconds = COMPILES.get(BACKEND_COMPILE, [0, 0.0])
        _DEPTH[0] += 1
        start = time.perf_counter()
        try:
            result = jax.block_until_ready(function(*args, **kwargs))
        finally:
            _DEPTH[0] -= 1
        after = COMPILES.get(BACKEND_COMPILE, [0, 0.0])
        FIRST_CALLS.append({"function": name, "signature": key[-300:],
                            "seconds": round(time.perf_counter() - start, 4),
                            "compiles": int(after[0] - count),
                            "compile_seconds": round(after[1] - seconds, 4)})
        return result

    try:  # introspection sees the function's own parameters, as the suite's would
        timed.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    return timed


def _wrap_timed(listing: str) -> None:
    """Replace each listed function wherever its package's loaded modules hold it, and each
    listed method (``module:Class.method``, tinygp's distances) on its class."""
    with open(listing, encoding="utf-8") as handle:
        names = [line.strip() for line in handle if ":" in line]
    for name in names:
        module_name, qualified = name.split(":")
        module = importlib.import_module(module_name)
        if "." in qualified:
            _wrap_method(name, module, qualified)
            continue
        original = getattr(module, qualified, None)
        if original is None:
            continue
        wrapped = _timed(name, original)
        top = module_name.split(".")[0]
        for loaded_name, loaded in list(sys.modules.items()):
            if (loaded_name == top or loaded_name.startswith(top + ".")) and \
                    getattr(loaded, qualified, None) is original:
                setattr(loaded, qualified, wrapped)


def _wrap_method(name: str, module: Any, qualified: str) -> None:
    """Time a method's first calls: the class's own function, replaced on the class (an
    instance binds the wrapper as it bound the function)."""
    class_name, _, method = qualified.rpartition(".")
    owner: Any = module
    for part in class_name.split("."):
        owner = getattr(owner, part, None)
    original = getattr(owner, "__dict__", {}).get(method)
    if isinstance(original, (staticmethod, classmethod)) or not callable(original):
        return
    try:
        setattr(owner, method, _timed(name, original))
    except (AttributeError, TypeError):  # a class that refuses it: left untimed
        pass


def pytest_configure(config: Any) -> None:
    """Listen to jax's compile events from the start (jax imported here is the suite's), and
    time the listed functions' first calls (``PEER_SUITES_TIME``)."""
    try:
        from jax import monitoring
    except ImportError:
        return
    monitoring.register_event_duration_secs_listener(_compile_event)
    if os.path.isfile(os.environ.get("PEER_SUITES_TIME", "")):
        _wrap_timed(os.environ["PEER_SUITES_TIME"])


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
                                    for e, (n, s) in sorted(COMPILES.items())},
                       "first_calls": FIRST_CALLS},
                      handle, indent=1)
