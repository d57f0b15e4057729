"""What the runtime tells about a call, and to whom: the one place that logs, warns and reports.

A decorated function is a drop-in for its source, so a call the artifacts do not cover (another
dtype, size, platform, a stale editable tree, a damaged blob) runs the source and gives the
source's result. The end user of a library did nothing wrong by making it, so by default their
process sees nothing new: no Python warning, which a ``filterwarnings = error`` suite (theirs or
the library's own) would turn into a failure. What happened goes to whoever asks:

- the ``hatch_jaxexport`` logger (``logging``): ``INFO`` for a call served by the source (a
  drop-in call, routine), ``WARNING`` for what someone must fix (a damaged install, sources
  edited since the export, a cache folder that cannot be written);
- ``call_report()`` and ``HATCH_JAXEXPORT_REPORT=1`` (``report``): one entry per first call of a
  signature, served or traced, for every artifact kind;
- warnings, only when the maintainer asks (``HATCH_JAXEXPORT_WARNINGS=1`` in their own test
  runs): each notice then is also a warning of its category (``FallbackWarning``...), so their
  suite under ``filterwarnings = error`` stops at every call the wheel would not serve. A
  recording run (``HATCH_JAXEXPORT_RECORD``) never warns: it must see every call to record it.

Strict mode (``HATCH_JAXEXPORT_STRICT=1``) refuses instead; its errors are raised where the call
is, not here.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from hatch_jaxexport.formats.settings import call_report_wanted, record_choice, warnings_wanted

#: The logger every runtime notice goes to (``logging.getLogger("hatch_jaxexport")``).
LOGGER = logging.getLogger("hatch_jaxexport")
#: A call served by the source: routine for a drop-in, nothing to fix for the caller.
DROP_IN = logging.INFO
#: Something a maintainer or the installer must fix; served all the same.
NEEDS_FIX = logging.WARNING


class NeedsFix(str):
    """A reason the source runs that someone must fix (a blob that fails its check: a damaged
    install), logged at ``NEEDS_FIX``; any other reason is a drop-in's, at ``DROP_IN``."""

    __slots__ = ()


def level_of(reason: str) -> int:
    """The logger level of a notice for ``reason``."""
    return NEEDS_FIX if isinstance(reason, NeedsFix) else DROP_IN


def notify(message: str, category: type[Warning], level: int = DROP_IN) -> None:
    """Log ``message`` on ``hatch_jaxexport`` at ``level``; a warning of ``category`` too,
    for the user's line, when the maintainer asked for warnings and no recording runs."""
    LOGGER.log(level, "%s", message)
    if warnings_wanted() and record_choice() is False:
        from hatch_jaxexport.runtime._user_frame import warn_at_user_frame  # only to warn

        warn_at_user_frame(message, category)


def report(book: list[Any], served: Any) -> None:
    """Add a first call's ``ServedCall`` to a function's report book (what ``call_report()``
    lists) and print its line when ``HATCH_JAXEXPORT_REPORT`` asks."""
    book.append(served)
    if call_report_wanted():
        print(served.line(), file=sys.stderr, flush=True)


__all__ = ["DROP_IN", "LOGGER", "NEEDS_FIX", "NeedsFix", "level_of", "notify", "report"]
