"""A bake's messages on stderr: what a command and the wrapping build backend both show.

``bake.flow.Reporter`` is the protocol every integration's messages follow; the Hatch hook
speaks through hatchling's ``app``, the setuptools command through its log. A command
(``jaxexport export``, ``bake-wheel``) and the PEP 517 backend have no such channel: they print
each message to stderr as it comes, flushed (a command's stdout keeps its result; a front end
shows a backend's stderr, pip with ``-v``). They differ only in their notes and their advice on
a failed export, which each sets on its own subclass.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


class StderrReporter:
    """``bake.flow.Reporter`` on stderr, each message flushed as it is printed."""

    skip_note = ""
    trace_note = ""

    def debug(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    info = waiting = success = warning = debug

    def workers(self, jobs: int) -> str:
        return f"{jobs} worker(s)"

    def export_failed(self, package: str, failures: Sequence[str], *, lacks_module: bool,
                      on_error: str | None) -> None:
        """Nothing here: the caller prints the raised error, every failure in it."""


__all__ = ["StderrReporter"]
