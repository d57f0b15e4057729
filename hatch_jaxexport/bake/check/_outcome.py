"""The verdict on one case of the release check, and how it is worded.

The statuses, the :class:`Outcome` of a case, and :func:`failure`, which words a failed case
the same way everywhere: the case id and headline, the details, the jax versions where they
matter, the wheel and the source, and what to do about it (:data:`REBUILD_HINT` or
:data:`JAX_HINT`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hatch_jaxexport.bake.check._plan import Case, Plan

REBUILD_HINT = ("rebuild the wheel from this source and install it again (e.g. `python -m build "
                "--wheel` then `pip install --force-reinstall dist/*.whl`), then rerun the check")

JAX_HINT = ("check with the jax that built the wheel, or build the wheel with the oldest jax "
            "you support: a jax.export artifact runs on a jax up to about 6 months newer, and "
            "only about 3 weeks older, than the jax that exported it")

MATCH, STALE, MISSING, ORPHAN, SKIPPED = "match", "stale", "missing", "orphan", "skipped"
UNUSABLE = "unusable"
#: A structure whose symbolic export fails now as at build time, served by the wheel at
#: concrete sizes (each of which is a case of its own): not skipped, nothing left unchecked.
CONCRETE = "concrete"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The verdict on one case: ``match``, ``concrete``, ``stale``, ``unusable``, ``missing``,
    ``orphan`` or ``skipped``."""

    status: str
    message: str = ""
    notes: tuple[str, ...] = ()
    ran: bool = False  # numerics ran on this platform

    @property
    def ok(self) -> bool:
        return self.status in (MATCH, CONCRETE, SKIPPED)


def _versions(plan: Plan, status: str = STALE) -> str:
    import jax

    built = plan.bundle.manifest.jax_version
    if built == jax.__version__:
        return f"built and checked with jax {built}"
    text = f"built with jax {built}, checked with jax {jax.__version__}"
    if status == STALE:
        text += (": part of the difference may come from jax itself; check with the jax the "
                 "wheel was built with")
    return text


def failure(plan: Plan, case: Case, status: str, headline: str, details: Sequence[str],
            notes: Sequence[str] = (), ran: bool = False, fix: str = REBUILD_HINT) -> Outcome:
    """A failed case's outcome, its message worded as every failure of the check is."""
    lines = [f"{case.id}: {headline}", *(f"  {d}" for d in details)]
    if status in (STALE, UNUSABLE):
        lines.append(f"  {_versions(plan, status)}")
    lines.append(f"  wheel: {plan.bundle.distribution} {plan.bundle.version}; "
                 f"{plan.source.describe()}")
    lines.append(f"To fix: {fix}.")
    return Outcome(status, "\n".join(lines), tuple(notes), ran)


def first_line(err: BaseException) -> str:
    """The first line of an error's message, cut to 300 characters, for a one-line detail."""
    text = str(err).strip().splitlines()
    return text[0][:300] if text else ""


__all__ = ["CONCRETE", "JAX_HINT", "MATCH", "MISSING", "ORPHAN", "REBUILD_HINT", "SKIPPED", "STALE",
           "UNUSABLE", "Outcome", "failure", "first_line"]
