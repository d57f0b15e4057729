"""Warnings attributed to the user's line, whatever called the runtime.

A call of an ``@exportable`` function reaches the code that warns through a varying depth of
frames: the call path directly, or jax's transformation machinery (``jax.jvp``, ``jax.vmap``,
``jax.jit`` tracing) and the family's primitive rules. A fixed ``stacklevel`` then points into
this package or into jax. ``warn_at_user_frame`` walks the stack instead and issues the warning
for the first frame outside hatch-jaxexport, jax and jaxlib (and the standard library's
``functools``/``contextlib`` plumbing), as ``warnings.warn`` would with the right stacklevel:
that module's ``__warningregistry__`` and the warning filters apply as usual.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

#: Top-level modules whose frames are never the user's line.
INTERNAL_MODULES = frozenset({"hatch_jaxexport", "jax", "jaxlib", "functools", "contextlib"})
#: This package's folder: the decorated function's frame runs in the *source's* globals (its
#: ``__name__`` is the user's module), so it is known by its code's file instead.
_PACKAGE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _is_internal(frame: FrameType) -> bool:
    if frame.f_code.co_filename.startswith(_PACKAGE_FOLDER):
        return True
    name = frame.f_globals.get("__name__")
    return isinstance(name, str) and name.partition(".")[0] in INTERNAL_MODULES


def user_frame(start: FrameType | None = None) -> FrameType | None:
    """The first frame from ``start`` (default: the caller's) outward that is not internal;
    the outermost frame when every frame is (a callback run by jax itself)."""
    frame = start if start is not None else sys._getframe(1)
    outermost = frame
    while frame is not None and _is_internal(frame):
        outermost = frame
        frame = frame.f_back
    return frame if frame is not None else outermost


def warn_at_user_frame(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` for the user's line (``user_frame``)."""
    frame = user_frame(sys._getframe(1))
    if frame is None:  # no Python frame at all: let warnings say where
        warnings.warn(message, category, stacklevel=1)
        return
    module_globals = frame.f_globals
    registry = module_globals.setdefault("__warningregistry__", {})
    # no module_globals, as warnings.warn passes none: the line's source is read on display
    # (a loader's get_source may refuse, e.g. for ``python -c``'s __main__)
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=module_globals.get("__name__", "<string>"), registry=registry)


__all__ = ["INTERNAL_MODULES", "user_frame", "warn_at_user_frame"]
