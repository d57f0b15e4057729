"""The background process of tiered compilation: one artifact, one signature, optimized.

``python -m hatch_jaxexport.runtime.executables._optimizer JOB`` (started by ``tiers``,
bounded by ``_background``) compiles the artifact for the signature in ``JOB`` into the
executable cache, within its time limit. Nothing of the parent's process state is shared:
it finds the artifact again by package, file and SHA-256.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hatch_jaxexport.formats.settings import background_timeout
from hatch_jaxexport.runtime.executables import _executable_cache as executables
from hatch_jaxexport.runtime.executables._background import end_after, scratch_folder

# Imported in functions: the package's artifacts, only in the background compile's own process.


def optimize(job: dict[str, Any]) -> int:
    """The background process: compile one artifact for one signature into the cache, within
    its time limit (``end_after``). The entry is written in a scratch folder of its own and
    renamed into place, so that ending the process early leaves no partial file of ours."""
    try:
        os.nice(5)
    except (AttributeError, OSError):
        pass
    folder = Path(job["folder"])
    scratch = scratch_folder(folder)
    end_after(float(job.get("timeout", background_timeout())), Path(job["lock"]), scratch)
    sys.path[:0] = [p for p in job["sys_path"] if p not in sys.path]
    try:
        import jax

        jax.config.update("jax_enable_compilation_cache", False)  # compile, never load
        if job["x64"]:
            jax.config.update("jax_enable_x64", True)
        from hatch_jaxexport.runtime.artifacts.package_artifacts import (
            load_package_artifacts,
            load_record,
        )

        package = load_package_artifacts(job["package"])
        if package is None:
            raise RuntimeError(f"package {job['package']!r} has no baked artifacts")
        record = next(r for r in package.records(job["function"]).manifest.artifacts
                      if r.file == job["file"])
        exported = load_record(package, record)
        leaves = [jax.ShapeDtypeStruct(tuple(shape), dtype, weak_type=weak)
                  for shape, dtype, weak in job["leaves"]]
        args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, leaves)
        compiled, fresh = executables.compile_fresh(jax.jit(exported.call).lower(*args, **kwargs))
        if not fresh or executables.store(scratch, job["key"], compiled) is not None:
            print("the executable could not be written to the cache", file=sys.stderr)
            return 3
        os.replace(executables.entry_path(scratch, job["key"]),
                   executables.entry_path(folder, job["key"]))
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            os.unlink(job["lock"])
        except OSError:
            pass


__all__ = ["optimize"]

if __name__ == "__main__":
    sys.exit(optimize(json.loads(sys.argv[1])))
