"""What a failed export tells its author: one line per cause, the user's line, and what to try.

An export that fails inside jax raises an error whose text is written for jax's developers: long,
without the line of the user's function that caused it, and repeated for the primal, the jvp and
the vjp artifact of the same function. The worker reduces each failure to its first line and the
frame of the package's own code where it was raised (:func:`describe_exception`); the
orchestrator folds the failures of one function that share that cause into one line
(:func:`fold_failures`) and adds the hints of :func:`hints_for` under it. The whole error text
and traceback stay available for ``-v``/``--debug`` and ``HATCH_JAXEXPORT_TRACEBACK=1``.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from types import TracebackType
from typing import Any

from hatch_jaxexport.formats.manifest import KNOWN_KINDS
from hatch_jaxexport.formats.statics import static_values_text
from hatch_jaxexport.formats.structure_text import abbreviate_structure

#: Longest structure text a failure line shows; longer ones are abbreviated as in ``inspect``.
STRUCTURE_CHARS = 60

_BROADCAST = re.compile(r"incompatible shapes for broadcasting: (.+?)\.?$")
_DIMS = re.compile(r"\(([^()]*)\)")
_INCONCLUSIVE = re.compile(r"Symbolic dimension comparison '(.+?)' (\S+) '(.+?)' is inconclusive")
_SYMBOL = re.compile(r"[A-Za-z_]\w*")
_NOT_AN_INT = re.compile(r"'_DimExpr' object cannot be interpreted as an integer|"
                         r"Symbolic dimension '(.+?)' used in a context that requires a constant")
#: ``min(n, 2)`` / ``min(2, n)`` / ``max(0, n - 2)``: a slice of a symbolic size, whose
#: length jax.export can only state for every size with a constraint.
_SLICE_BOUNDS = (re.compile(r"min\(([A-Za-z_]\w*), (\d+)\)"),
                 re.compile(r"min\((\d+), ([A-Za-z_]\w*)\)"),
                 re.compile(r"max\(0, ([A-Za-z_]\w*) - (\d+)\)"))
#: The second way out of code that is not shape-polymorphic: concrete sizes.
BAKE_FIXED = ("or bake concrete sizes: record them with HATCH_JAXEXPORT_RECORD=1 while your tests "
              "run, or list them in concrete=/executable_sizes= (the build then serves those "
              "sizes from concrete-size artifacts, other sizes trace the source)")
_CALLBACK = re.compile(r"calls back into Python|host callback|callback", re.IGNORECASE)


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and the errors it was raised from (``__cause__``, ``__context__``), outermost
    first."""
    seen: list[BaseException] = []
    while err is not None and err not in seen:
        seen.append(err)
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return seen


def _frames(tb: TracebackType | None) -> list[tuple[str, str, int]]:
    """(module name, file name, line) of each frame of a traceback, outermost first."""
    frames = []
    while tb is not None:
        frame = tb.tb_frame
        frames.append((str(frame.f_globals.get("__name__", "")), frame.f_code.co_filename,
                       tb.tb_lineno))
        tb = tb.tb_next
    return frames


def _shown_path(module: str, filename: str) -> str:
    """A frame's file as a path inside its package (``mypkg/model.py``): no build folder."""
    path = PurePath(filename)
    keep = len(module.split(".")) + (1 if path.stem == "__init__" else 0)
    return "/".join(path.parts[-keep:])


def user_location(err: BaseException, package: str) -> str | None:
    """``file:line`` of the innermost frame of ``package``'s own code in ``err``'s traceback
    (or in the errors it was raised from); ``None`` when no frame of the package is there."""
    for error in _chain(err):
        own = [(m, f, n) for m, f, n in _frames(error.__traceback__)
               if m == package or m.startswith(package + ".")]
        if own:
            module, filename, line = own[-1]
            return f"{_shown_path(module, filename)}:{line}"
    return None


def first_line(text: str, limit: int = 300) -> str:
    """An error's first line, with the next one when it ends in a colon (``Examples are:``)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else lines[0]
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"


def located(err: BaseException, package: str) -> str:
    """`` (at mypkg/model.py:12)`` for an error raised in ``package``'s code, else ``""``."""
    location = user_location(err, package)
    return f" (at {location})" if location else ""


def describe_exception(err: BaseException, package: str) -> dict[str, Any]:
    """What a worker records of a failed export: the error's first line (``error``), its whole
    text (``message``, the manifest's reason for a skipped artifact), where in the package it
    was raised (``location``) and the traceback (``detail``, shown only when asked for)."""
    text = f"{type(err).__name__}: {err}".strip()
    return {"error": first_line(text), "message": text,
            "location": user_location(err, package),
            "detail": "".join(traceback.format_exception(err)).strip()}


def _symbol_pairs(shapes_text: str) -> list[tuple[str, str]]:
    """Pairs of different symbols that meet at the same axis of the broadcast shapes."""
    shapes = [[d.strip() for d in group.split(",") if d.strip()]
              for group in _DIMS.findall(shapes_text)]
    pairs: list[tuple[str, str]] = []
    width = max((len(s) for s in shapes), default=0)
    for axis in range(1, width + 1):  # broadcasting aligns shapes at their ends
        symbols = sorted({s[-axis] for s in shapes if len(s) >= axis
                          and _SYMBOL.fullmatch(s[-axis])})
        pairs += [(a, b) for i, a in enumerate(symbols) for b in symbols[i + 1:]]
    return pairs


def _as_constraint(left: str, op: str, right: str) -> str:
    """A comparison as jax.export states constraints (``>=``, ``<=``, ``==`` only)."""
    if op in (">", "<") and right.lstrip("-").isdigit():
        return f"{left} {op}= {int(right) + (1 if op == '>' else -1)}"
    return f"{left} {op if op in ('>=', '<=', '==') else op[0] + '='} {right}"


def hints_for(error: str) -> list[str]:
    """Hints for the common causes of a failed export, recognised from the error's first line."""
    hints = []
    broadcast = _BROADCAST.search(error)
    for a, b in _symbol_pairs(broadcast.group(1)) if broadcast else []:
        hints.append(f"'{a}' and '{b}' are independent symbols: jax.export cannot prove they are "
                     f"equal. If they are the same size, write one name in both specs, or add "
                     f"constraints=[\"{b} == {a}\"] to @exportable; otherwise the computation "
                     f"mixes sizes that differ")
    inconclusive = _INCONCLUSIVE.search(error)
    if inconclusive:
        left, op, right = inconclusive.groups()
        hints.append(f"a Python `if` or comparison on a symbolic size ({left} {op} {right}) has "
                     f"no single answer for every size: use jnp.where / jax.lax.cond, add "
                     f"constraints=[\"{_as_constraint(left, op, right)}\"] to @exportable if "
                     f"it always holds, {BAKE_FIXED}")
    hints += _shape_hints(error)
    if "no compatibility guarantees" in error:
        hints.append("this operation lowers, on that platform, to a custom call that jax.export "
                     "cannot keep stable: leave the platform out of this function's "
                     "@exportable(platforms=...), or use another operation there")
    if "returned a value of type <class 'function'>" in error:
        hints.append("the function returns a Python function among its results, as a body under "
                     "@jax.custom_gradient does (its value and its gradient function): put "
                     "@exportable above @jax.custom_gradient, not below it, so that the "
                     "function with its custom gradient is what is exported")
    if _CALLBACK.search(error) and "remove the callback" not in error:
        hints.append("host callbacks (jax.debug.print, jax.pure_callback, io_callback) cannot be "
                     "serialized: remove them from the exported function, or keep them behind a "
                     "flag that is off at build")
    return hints


def slice_constraints(error: str) -> list[str]:
    """The constraints a slice of a symbolic size needs (``x[2:]``: ``n >= 2``), read from
    the ``min(n, 2)`` / ``max(0, n - 2)`` that jax writes into its shapes."""
    found: dict[str, int] = {}
    for pattern in _SLICE_BOUNDS:
        for a, b in pattern.findall(error):
            symbol, bound = (a, int(b)) if not a.isdigit() else (b, int(a))
            found[symbol] = max(found.get(symbol, 0), bound)
    return [f"{symbol} >= {bound}" for symbol, bound in sorted(found.items())]


def _shape_hints(error: str) -> list[str]:
    """Hints for code that is not shape-polymorphic: ``len()``/``int()`` of a size, a slice
    that needs a constraint."""
    hints = []
    not_an_int = _NOT_AN_INT.search(error)
    if not_an_int:
        size = f" ({not_an_int.group(1)})" if not_an_int.group(1) else ""
        hints.append(f"the code needs a symbolic size{size} as a Python int (len(x), int(...), "
                     "range(...), a shape passed to NumPy): use x.shape[i] in jnp operations "
                     f"instead (jnp.arange(x.shape[0]) is symbolic), {BAKE_FIXED}")
    constraints = slice_constraints(error)
    if constraints:
        listed = ", ".join(f"'{c}'" for c in constraints)
        hints.append(f"a slice of a symbolic size (x[2:], x[:-2]) has a length jax.export can "
                     f"only state with a lower bound: add constraints=[{listed}] to "
                     f"@exportable if that always holds, {BAKE_FIXED}")
    return hints


def _task_label(task: Mapping[str, Any], structure: str) -> str:
    """``structure 0 (x: float32[n]), static ..., mesh ...``: what one failure is about."""
    shown = abbreviate_structure(structure, STRUCTURE_CHARS)
    label = f"structure {task['structure_index']} ({shown})"
    if task["static"]:
        label += f", static {static_values_text(task['static'])}"  # tagged JSON, as Python
    if task.get("mesh"):
        label += ", mesh " + " x ".join(
            f"{a}={s}" for a, s in zip(task["mesh"]["axes"], task["mesh"]["sizes"], strict=True))
    for name, value in sorted(task.get("variant", {}).items()):
        label += f", {name}={value}"
    return label


def _kind(task: Mapping[str, Any]) -> str:
    return f"{'batched ' if task['batched'] else ''}{task['kind']}"


def failures_headline(package: str, failures: Sequence[object], messages: Sequence[str]
                      ) -> str | None:
    """``4 exports of mypkg failed, for 2 reasons``; ``None`` for one message (shown alone)."""
    if len(messages) == 1:
        return None
    return f"{len(failures)} exports of {package} failed, for {len(messages)} reasons"


def fold_failures(failures: Sequence[Mapping[str, Any]], *, detail: bool = False) -> list[str]:
    """One message per function, structure and cause: the platforms and artifact kinds that
    failed for the same reason folded into one line, then the hints (and, with ``detail``, the
    whole error with its traceback), each on a line of its own under it. Messages of one cause
    raised at one place (``_cause``) fold further into one, with their count, the functions
    and one example: a build once printed 156 lines that were nearly all one ``if`` on a size."""
    groups: dict[tuple[str, str, str, str | None], list[Mapping[str, Any]]] = {}
    for failure in sorted(failures, key=_failure_order):
        key = (failure["task"]["function"], _task_label(failure["task"], failure["structure"]),
               failure["error"], failure.get("location"))
        groups.setdefault(key, []).append(failure)
    by_cause: dict[tuple[str, str], list[tuple[tuple[str, str, str, str | None],
                                               list[Mapping[str, Any]]]]] = {}
    for key, members in groups.items():
        by_cause.setdefault(_cause(key[2], key[3]), []).append((key, members))
    messages = []
    for (kind, location), cause_groups in by_cause.items():
        (function, label, error, where), members = cause_groups[0]
        lines = [_group_line(function, label, error, where, members)]
        if len(cause_groups) > 1:
            count = sum(len(m) for _, m in cause_groups)
            functions = sorted({key[0] for key, _ in cause_groups})
            lines = [f"{count} exports failed with {kind} at {location} ({len(cause_groups)} "
                     f"structures of {', '.join(functions)}); for example:",
                     "  " + lines[0]]
        lines += [f"    hint: {hint}" for hint in hints_for(error)]
        if detail and members[0].get("detail"):
            lines += ["    " + line for line in str(members[0]["detail"]).splitlines()]
        messages.append("\n".join(lines))
    return messages


def _failure_order(failure: Mapping[str, Any]) -> tuple[Any, ...]:
    """One order for failures whatever order the workers finished in."""
    task = failure["task"]
    kind = KNOWN_KINDS.index(task["kind"]) if task["kind"] in KNOWN_KINDS else len(KNOWN_KINDS)
    return (failure.get("location") or "", failure["error"], task["function"],
            task["structure_index"], str(task["static"]), task["platform"], kind,
            task["batched"])


def _cause(error: str, location: str | None) -> tuple[str, str]:
    """What makes two failures one cause: the exception type raised at one place in the
    package; without a place, the whole first line."""
    kind = error.split(":", 1)[0]
    return (kind, location) if location else (error, "")


def _group_line(function: str, label: str, error: str, location: str | None,
                members: Sequence[Mapping[str, Any]]) -> str:
    platforms = list(dict.fromkeys(m["task"]["platform"] for m in members))
    kinds = list(dict.fromkeys(_kind(m["task"]) for m in members))
    where = f" at {location}" if location else ""
    return (f"{function}, {label}, platform{'s' * (len(platforms) > 1)} "
            f"{', '.join(platforms)}, {', '.join(kinds)} "
            f"artifact{'s' * (len(members) > 1)}{where}: {error}")


__all__ = ["BAKE_FIXED", "STRUCTURE_CHARS", "describe_exception", "failures_headline", "first_line",
           "fold_failures", "hints_for", "located", "slice_constraints", "user_location"]
