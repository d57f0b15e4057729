"""Runtime room 3, artifacts: what a wheel bakes and how jax runs it.

``_artifacts`` (reading a package's manifest and blobs, verified), ``_family`` and
``_primitive`` (a function's members under ``grad``/``jvp``/``vmap``, one primitive with named
rules), ``_native_vjp`` (jax's serialized VJP), ``_placement`` (sharded calls), ``_pytrees``
and ``_aux_keys`` (node types and their stable keys). It may import ``disk`` and the runtime's
shared modules, never ``call`` or ``executables``.
"""
