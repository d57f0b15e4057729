"""Registers the ``jaxexport`` build hook with Hatch (entry point group ``hatch``).

The entry point names this module; the hook class lives in ``_hatch_hook``, imported only when
Hatch asks for it, so loading the entry point imports nothing heavy.
"""

from __future__ import annotations

from hatchling.plugin import hookimpl


@hookimpl
def hatch_register_build_hook() -> type:
    from hatch_jaxexport.integrations._hatch_hook import JaxExportBuildHook

    return JaxExportBuildHook


__all__ = ["hatch_register_build_hook"]
