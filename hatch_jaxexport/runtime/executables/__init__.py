"""Runtime room 2, executables: where a resolved call's compiled executable comes from.

``artifact_calls`` builds a chosen artifact's call (an ``EagerCall``, ``eager_call``). In the
order a first call tries them: ``shipped`` (precompiled in the wheel for this exact
machine), then ``_compile_path``'s: ``_executable_cache`` (the per-user cache), ``tiers``
(the quick tier or a compile, and ``_background``'s optimized compile that replaces a quick
one). It may import
``artifacts``, ``disk`` and the runtime's shared modules, never ``call``. ``direct_module``
compiles a module of exactly a call's types from its bytes: the call room's concrete-size
artifacts use it too.
"""

__all__ = ["artifact_calls", "direct_module", "eager_call", "entries", "shipped", "tiers"]
