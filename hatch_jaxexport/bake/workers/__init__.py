"""Bake room 4, workers: a package's exports run in subprocess workers, and the folder they
fill.

``orchestrate`` (start the workers, collect their results, write the manifest and blobs),
``_worker`` (``python -m hatch_jaxexport.bake.workers._worker``: one worker process),
``progress`` (which functions are finished while workers run) and ``_dedupe`` (identical
modules stored once); the files a worker reads and writes are ``bake.protocol``'s. It may
import ``export``, ``sized`` and ``executables`` of the build, and the layers below.
"""

__all__ = ["orchestrate", "progress"]
