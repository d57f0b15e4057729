"""Which exceptions are the source's: the mark the default mode's fail-safe line reads.

A decorated function is a drop-in, so in default mode only two kinds of exception may reach
its caller: those the source raises itself (a call it refuses, a library's own warning turned
into an error by ``filterwarnings = error``) and those of the caller's own code. Whatever else
a call raises comes from the artifact side (a manifest, a blob, a cache entry, an executable,
our own code) and becomes the source's result at the call path's one line
(``runtime.call.failsafe``). Code in any room that runs the user's code on the caller's
behalf (the source's trace, a transformation's source, a replayed warning) marks what that
code raises with ``mark_source_error``; the line lets a marked exception through unchanged.

The mark is an attribute of the exception object, not a wrapper: the caller gets the very
exception the source raised, with its type, message, traceback and notes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

#: The attribute the mark sets on an exception (never on a class).
_MARK = "__hatch_jaxexport_source__"

Result = TypeVar("Result")


def mark_source_error(err: BaseException) -> BaseException:
    """Mark ``err`` as raised by the source (or the library's own warning), and return it."""
    try:
        setattr(err, _MARK, True)
    except (AttributeError, TypeError):  # an exception type with __slots__: cannot be marked
        pass
    return err


def is_source_error(err: BaseException) -> bool:
    """Whether ``err`` was marked by ``mark_source_error``: the caller's to see."""
    return getattr(err, _MARK, False) is True


def run_as_source(call: Callable[..., Result], *args: Any, **kwargs: Any) -> Result:
    """``call(*args, **kwargs)``, any exception it raises marked as the source's."""
    try:
        return call(*args, **kwargs)
    except Exception as err:
        mark_source_error(err)
        raise


__all__ = ["is_source_error", "mark_source_error", "run_as_source"]
