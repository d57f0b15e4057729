"""Layer 2, runtime: what an end user's process runs.

The ``@exportable`` decorator and ``ExportableFunction``, matching a call to a baked structure,
reading and verifying artifacts, the call path and its fast path, the transformation family (one
primitive whose rules are module-level functions), sharded placement, tiers, the executable and
compilation caches, pytree registration, and ``_jaxcompat``, the one module that touches
``jax._src``. It may import ``formats`` and ``errors``, never ``bake`` or ``integrations``, and
never hatchling, setuptools or pytest.
"""
