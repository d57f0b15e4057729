"""Calls a generated package's functions (``tests/_genpkg.py``) in a fresh process and prints,
as JSON on its last line, how many calls it made and every mismatch, exception and covered call
that traced the source.

``python -W error generated_calls.py PLAN.json`` with the installed wheel on ``PYTHONPATH``:
each call of the plan runs the decorated function, then the source (``jax.jit`` of
``fn.__wrapped__``, its static arguments static) on the same arguments; the two must agree in
shape, dtype and value. ``--record`` (the recording run, ``HATCH_JAXEXPORT_RECORD=1``) only makes
the calls. A call the build covers must not run the function's body (``TRACES``).
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any

import jax
import numpy as np

PACKAGE = "jxe_gen"


def array(shape: list[int], seed: int) -> np.ndarray:
    """A deterministic float32 array of ``shape``, different for each call."""
    size = int(np.prod(shape))
    values = np.linspace(-1.5, 1.5, size, dtype=np.float32) * np.float32(1 + 0.25 * seed)
    return values.reshape(shape)


def gradient(fn: Any, static: dict[str, Any]) -> Any:
    """``jax.grad`` of ``fn``'s sum with respect to its first argument."""
    def summed(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs).sum()
    return jax.grad(summed)


def one_call(pkg: Any, index: int, call: dict[str, Any], record: bool) -> tuple[str, str]:
    """Run one call; ``(kind, text)`` of what went wrong, ``("", "")`` if nothing did."""
    fn = getattr(pkg, call["function"])
    args = [array(shape, index) for _, shape in call["arrays"]]
    static = call["static"]
    before = pkg.TRACES["count"]
    try:
        got = (gradient(fn, static) if call["grad"] else fn)(*args, **static)
    except Exception:
        return "exceptions", f"{call['describe']}: {traceback.format_exc(limit=-6)}"
    if record:
        return "", ""
    traced = pkg.TRACES["count"] - before
    source = gradient(fn.__wrapped__, static) if call["grad"] else fn.__wrapped__
    want = jax.jit(source, static_argnames=tuple(static))(*args, **static)
    got_np, want_np = np.asarray(got), np.asarray(want)
    if got_np.shape != want_np.shape or got_np.dtype != want_np.dtype or not np.allclose(
            got_np, want_np, rtol=1e-5, atol=1e-5):
        return "mismatches", (f"{call['describe']}: got {got_np.dtype}{list(got_np.shape)} "
                              f"{got_np.tolist()}, the source {want_np.dtype}"
                              f"{list(want_np.shape)} {want_np.tolist()}")
    if call["covered"] and traced:
        report = [f"{r.signature} {r.tier}" for r in fn.call_report()]
        return "unserved", f"{call['describe']}: covered, yet traced; call_report: {report}"
    return "", ""


def main() -> None:
    record = "--record" in sys.argv
    with open(sys.argv[1]) as plan_file:
        plan = json.load(plan_file)
    pkg = importlib.import_module(PACKAGE)
    out: dict[str, Any] = {"calls": 0, "mismatches": [], "exceptions": [], "unserved": []}
    for index, call in enumerate(plan):
        kind, text = one_call(pkg, index, call, record)
        out["calls"] += 1
        if kind:
            out[kind].append(text)
    out["devices"] = jax.local_device_count()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
