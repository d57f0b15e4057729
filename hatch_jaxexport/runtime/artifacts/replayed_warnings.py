"""What a function's body warned while it was traced for export, issued again where it is served.

A library's body may warn while jax traces it (its own ``PendingDeprecationWarning``); on the
plain library its users see that on the calls that trace. A baked call never traces, so the
build keeps those warnings with the artifact's record (``bake.export.body_warnings``: the
package's own, no path) and ``replay`` issues them again when an artifact's call is built for a
resolved key (``executables.artifact_calls.build_artifact_call``, the concrete-size calls of
``call.recorded_calls``): once per kind of call, as jax's tracing warns once per trace.

Each goes through ``warnings.warn_explicit`` with the category, message and line the build
recorded, and the installed module's own file, name, globals and ``__warningregistry__``:
the user's filters (``-W``, ``filterwarnings``, ``pytest.warns``) and the "once per location"
registry behave as with the plain library. One the package's code issued with a
``stacklevel`` above the body (recorded at ``CALLER_LINE``) is issued at the caller of the baked
function instead, as ``stacklevel`` does: the first frame up the stack that is not
hatch-jaxexport's (the user's line, the package's function that called it, or jax's tracing
under a transformation), with that frame's file, line, module and registry.

Under ``filterwarnings = error`` the replay raises the warning as an exception, as the plain
library's trace does: that exception is the library's, so it is marked
(``source_errors.mark_source_error``) and the fail-safe line lets it through. Anything else
that goes wrong replaying one (a module or category not found) is the artifact side's: that
warning is left out, logged at ``DEBUG``. Our own notices never come here (``notices``).

Only the package's own modules are imported to find a warning's module or category (a
category of another library must already be imported, as the package's code that used it
imported it): a manifest cannot make a call import anything else.
"""

from __future__ import annotations

import builtins
import importlib
import linecache
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from hatch_jaxexport.formats.manifest import CALLER_LINE
from hatch_jaxexport.runtime.source_errors import mark_source_error

# Imported in functions: the notices' logger, only to say why a warning is left out (a first
# call that replays nothing, or a shipped one, imports none of the notices).


def _debug(message: str, *args: object) -> None:
    """``message`` on the ``hatch_jaxexport`` logger at ``DEBUG``."""
    from hatch_jaxexport.runtime.notices import LOGGER

    LOGGER.debug(message, *args)


def replay(package: str, entries: Iterable[Mapping[str, Any]]) -> None:
    """Issue again the traced warnings ``entries`` of an artifact of ``package`` (its
    record's ``warnings``), in the order the manifest lists them; a warning the user's filters
    turn into an error raises it, marked as the source's."""
    for entry in entries:
        found = _target(package, entry)
        if found is None:
            continue
        module, category = found
        filename, lineno, origin = _origin(module, entry["lineno"])
        source = origin if _has_line(filename, lineno, origin) else None
        try:
            warnings.warn_explicit(
                entry["message"], category, filename, lineno,
                module=str(origin.get("__name__", module.__name__)),
                registry=origin.setdefault("__warningregistry__", {}), module_globals=source)
        except Warning as err:  # the user's filters made the library's warning an error
            mark_source_error(err)
            raise
        except Exception as err:  # a category that cannot be made from its message
            _debug("hatch-jaxexport: a traced warning of %s left out: %s: %s",
                         package, type(err).__name__, err)


def _has_line(filename: str, lineno: int, origin: dict[str, Any]) -> bool:
    """Whether the source of ``filename`` (read through ``origin``'s loader) has ``lineno``:
    then the warning shows it. CPython raises IndexError for a line past a module's source
    read through module_globals (an edited install), and a caller's loader may raise
    anything: either is a "no", the warning is issued without its line."""
    try:
        return bool(linecache.getline(filename, lineno, origin))
    except Exception:
        return False


#: hatch-jaxexport's folder: frames of code in it are not a warning's caller.
_OURS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _origin(module: ModuleType, lineno: int) -> tuple[str, int, dict[str, Any]]:
    """Where a traced warning is issued: its module's file and recorded line, or for one
    recorded at ``CALLER_LINE`` the caller of the baked function (the first frame that is not
    hatch-jaxexport's): file, line and the globals that hold its registry."""
    if lineno != CALLER_LINE:
        return getattr(module, "__file__", None) or module.__name__, lineno, module.__dict__
    frame = sys._getframe(1)
    # by the code's file, not its globals: the call's entry runs with the source function's
    # globals (``decorator``: what jaxtyping and others read of a function)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_OURS):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno, frame.f_globals


def _target(package: str, entry: Mapping[str, Any]) -> tuple[ModuleType, type[Warning]] | None:
    """The installed module a traced warning is attributed to and its category, or ``None``
    (logged at ``DEBUG``) where either cannot be found without importing outside ``package``."""
    name = entry["module"]
    module = _module(package, name) if name == package or name.startswith(package + ".") \
        else None
    owner, _, qualname = entry["category"].partition(":")
    found: Any = builtins if owner == "builtins" else _module(package, owner)
    for part in qualname.split(".") if found is not None else ():
        found = getattr(found, part, None)
    if module is None or not (isinstance(found, type) and issubclass(found, Warning)):
        _debug("hatch-jaxexport: the traced warning %r of %s is left out: its module %s "
                     "or its category %s is not found", entry["message"][:80], package,
                     entry["module"], entry["category"])
        return None
    return module, found


def _module(package: str, name: str) -> ModuleType | None:
    """Module ``name``: one already imported, or one of ``package``'s, imported; ``None``
    otherwise, or where importing it fails."""
    found = sys.modules.get(name)
    if found is not None or not (name == package or name.startswith(package + ".")):
        return found
    try:
        return importlib.import_module(name)
    except Exception as err:  # the package's own module fails to import: not ours to raise
        _debug("hatch-jaxexport: %s does not import: %s: %s", name,
                     type(err).__name__, err)
        return None


__all__ = ["replay"]
