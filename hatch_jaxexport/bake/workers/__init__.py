"""Bake room 4, workers: a package's exports run in subprocess workers, and the folder they
fill.

``orchestrate`` (start the workers, collect their results, write the manifest and blobs),
``_worker`` (``python -m hatch_jaxexport.bake.workers._worker``: one worker process),
``jax_sets`` (another jax release's export added as a set),
``progress`` (which functions are finished while workers run) and ``_dedupe`` (identical
modules stored once); the files a worker reads and writes are ``bake.protocol``'s. It may
import ``export``, ``concrete`` and ``executables`` of the build, and the layers below.
"""

__all__ = ["jax_sets", "orchestrate", "progress"]
