"""Layer 2, runtime: what an end user's process runs.

It may import ``formats`` and ``errors``, never ``bake`` or ``integrations``, and never
hatchling, setuptools or pytest. Its rooms, in the order a call walks them (a room may import
the rooms after it, never one before it):

1. ``call/``: the ``@exportable`` decorator and the function it returns, matching a call to a
   baked structure, the fast path, and the calls no artifact serves (traced source, recorded
   sizes, recording).
2. ``executables/``: where a resolved call's executable comes from, in the order a first call
   tries them: shipped in the wheel, the per-user cache, the quick tier, a compile, and the
   background compile that replaces a quick one.
3. ``artifacts/``: what a wheel bakes and how jax runs it: reading and verifying artifacts,
   the transformation family and its primitive, jax's serialized VJP, sharded placement,
   pytree registration and aux-data keys.
4. ``disk/``: what lives on the user's disk: the cache folders, the footprint and its
   trimming, entry names, file locks.

Beside them, imported by all: ``jaxcompat`` (the one module that touches ``jax._src``),
``_user_frame`` (warnings for the user's line) and ``jax_dtypes``.
"""

__all__ = ["artifacts", "call", "disk", "executables", "jax_dtypes", "jaxcompat", "notices",
           "source_errors"]
