"""Runtime room 1, the call: ``@exportable``, the function it returns, the path a call takes.

``decorator`` (the record and the facade) -> ``loader`` (a first call's walk, step by step:)
``matching`` (which structure accepts a call) -> ``choice`` (what serves it, pure) -> the
executables room builds the call -> ``_source_calls`` / ``recorded_calls`` (calls no symbolic
artifact serves) and ``refusals`` (refusing, telling, reporting) -> ``fast_path`` (handing the
executable to ``_resolved_calls``, which later calls run) -> ``_recorder``
(``HATCH_JAXEXPORT_RECORD``). It may import the rooms after it (``executables``,
``artifacts``, ``disk``) and the runtime's shared modules.
"""

__all__ = ["choice", "decorator", "fast_path", "inlining", "loader", "matching", "recorded_calls",
           "refusals"]
