"""The object ``@exportable`` returns: a real Python function over the function's record.

Library code tells functions from other callables with ``inspect.isfunction`` (dm-pix's API
test lists a module's public functions that way, and a callable object vanished from it), so
a drop-in must be a ``types.FunctionType``. The function's body is ``fast_path``'s, over
closure cells: the record's hot executable, its keyed cache, then its full path (so a hot call
costs one Python frame over jax's dispatch); it is built with the *source's* globals,
so that decorators stacked above it (``@jaxtyped(typechecker=beartype)``) resolve string
annotations where the source does, and its ``__dict__`` is the record's, so that
``fn.export_spec``, ``fn.calls``, ``fn.call_report()`` read the one state the loader writes.

``isinstance(fn, ExportableFunction)`` still holds: the record's class asks ``record_of``,
which recognises the function by its code object (a ``functools.wraps`` copy of its
``__dict__`` does not make another function one).
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

from hatch_jaxexport.runtime.call._resolved_calls import ResolvedCalls, fast_path

#: The code object every facade shares; ``record_of`` recognises a facade by it.
FACADE_CODE = fast_path(ResolvedCalls(), print).__code__


def function_facade(record: Any, body: types.FunctionType,
                    source: Any = None) -> types.FunctionType:
    """A function named, documented and annotated like ``source`` (the user's function:
    ``record.__wrapped__`` unwrapped unless given, the function inside a jax
    ``custom_gradient`` wrapper), whose calls run ``body`` (``fast_path``) and whose
    attributes are ``record``'s."""
    named_by = record.__wrapped__ if source is None else source
    source = inspect.unwrap(record.__wrapped__) if source is None else source
    namespace = getattr(source, "__globals__", None)
    if not isinstance(namespace, dict):  # a callable object: no module namespace of its own
        namespace = {"__name__": getattr(record, "__module__", None) or "__main__"}
    facade = types.FunctionType(body.__code__, namespace, body.__name__, None, body.__closure__)
    functools.update_wrapper(facade, named_by, updated=())
    facade.__dict__ = record.__dict__  # one state: what the loader writes, the user reads
    return facade


def record_of(value: Any) -> Any | None:
    """The record behind ``value`` when it is a function ``function_facade`` made, else None."""
    if type(value) is types.FunctionType and value.__code__ is FACADE_CODE:
        return value.__dict__.get("__exportable__")
    return None


class FunctionLike(type):
    """Metaclass of ``ExportableFunction``: its facades are instances too."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return type.__instancecheck__(cls, instance) or \
            type.__instancecheck__(cls, record_of(instance))


__all__ = ["FACADE_CODE", "FunctionLike", "function_facade", "record_of"]
