"""What a resolved call runs: an artifact's call or the source's, with the reason for the source.

The loader resolves each (structure, static values, platform[, mesh], jax config) of a call to
one ``Target`` and keeps it in the function's ``ResolvedCalls``; the fail-safe line
(``failsafe``) replaces a key's target by the source's (``source_target``) when its artifact
side fails. Both build targets here, so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hatch_jaxexport.runtime.call._function_record import FunctionRecord

# Imported in functions: the source's calls and the refusals, only where a key runs the source.


class Target:
    """What a (structure, static values, platform) resolves to: an artifact or the source;
    ``reason``: why the source runs instead of an artifact (``from_artifact`` false). A slotted
    class, as ``choice.Choice`` says why."""

    __slots__ = ("call", "from_artifact", "reason", "static_in_call")

    def __init__(self, call: Callable[..., Any], static_in_call: bool, from_artifact: bool,
                 reason: str = "") -> None:
        self.call, self.static_in_call = call, static_in_call
        self.from_artifact, self.reason = from_artifact, reason


class Attempt:
    """How far a call's artifact side got: the resolution key it reached (``None`` before
    one is known), so that a failure settles that key, or the whole function without one."""

    __slots__ = ("key",)

    def __init__(self) -> None:
        self.key: Any = None


def source_target(fn: FunctionRecord, reason: str) -> Target:
    """The source as a call's target, for ``reason`` (strict mode refuses here)."""
    from hatch_jaxexport.runtime.call._source_calls import source_calls
    from hatch_jaxexport.runtime.call.refusals import no_artifact

    return Target(source_calls(fn), static_in_call=True, from_artifact=False,
                  reason=no_artifact(fn, reason))


__all__ = ["Attempt", "Target", "source_target"]
