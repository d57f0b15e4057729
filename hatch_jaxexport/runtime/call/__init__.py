"""Runtime room 1, the call: ``@exportable``, the function it returns, the path a call takes.

``decorator`` (the record and the facade) -> ``loader`` (match, resolve once, run) ->
``matching`` (which structure accepts a call) -> ``_resolved_calls`` (the fast path of later
calls) -> ``_source_calls`` / ``recorded_calls`` (calls no symbolic artifact serves) ->
``_recorder`` (``HATCH_JAXEXPORT_RECORD``). It may import the rooms after it (``executables``,
``artifacts``, ``disk``) and the runtime's shared modules.
"""

__all__ = ["decorator", "inlining", "loader", "matching", "recorded_calls"]
