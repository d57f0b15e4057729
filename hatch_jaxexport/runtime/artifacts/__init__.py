"""Runtime room 3, artifacts: what a wheel bakes and how jax runs it.

``package_artifacts`` (reading a package's manifest and blobs, verified), ``program`` (one
chosen artifact: its checked blob, deserialized once), ``family`` and
``primitive`` (a function's members under ``grad``/``jvp``/``vmap``, one primitive with named
rules), ``native_vjp`` (jax's serialized VJP), ``replayed_warnings`` (what the source's body
warned while it was traced, issued again), ``placement`` (sharded calls), ``pytrees``
and ``aux_keys`` (node types and their stable keys). It may import ``disk`` and the runtime's
shared modules, never ``call`` or ``executables``.
"""

__all__ = ["aux_keys", "concrete_rules", "family", "installed_companions", "native_vjp",
           "package_artifacts", "placement", "primitive", "program", "pytrees",
           "replayed_warnings"]
