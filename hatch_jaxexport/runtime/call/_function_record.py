"""What the call room reads of a decorated function: the ``FunctionRecord`` protocol.

``decorator.ExportableFunction`` is the one class that has these attributes. The modules a call
walks after the decorator (the loader, matching, the source and recorded calls) are typed with
this protocol instead of that class, so that no import, ``TYPE_CHECKING`` ones included, runs
back up to the decorator: the call room's import graph is a chain.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hatch_jaxexport.formats.export_spec import CallLayout, ExportSpec
    from hatch_jaxexport.runtime.call._resolved_calls import ResolvedCalls


class FunctionRecord(Protocol):
    """A decorated function's record: what it was told, and what the loader resolved."""

    #: What ``@exportable`` was told (structures, platforms, options).
    export_spec: ExportSpec
    #: The source function's signature, used to bind calls.
    signature: inspect.Signature
    #: How each structure's values are passed (by position or keyword).
    layouts: tuple[CallLayout, ...]
    #: The top-level package whose ``_jaxexport/`` folder holds the artifacts.
    package: str
    #: What the loader resolved for this function's calls.
    calls: ResolvedCalls
    #: The source function.
    __wrapped__: Callable[..., Any]

    @property
    def name(self) -> str:
        """The function's name in the manifest."""
        ...


__all__ = ["FunctionRecord"]
