"""Concrete-size StableHLO of primal artifacts, for the sizes a function names or was called with.

Build layer. A symbolic artifact serves every size, but compiling it costs the user's process a
shape refinement first: ``call_exported``'s lowering parses the module into a second MLIR
context and runs the refinement passes, a share of a small function's first call
(``benchmarks/executables.py``, the ``stablehlo`` column). For each size of
``executable_sizes=`` (else ``concrete=``) and each recorded call, the export worker also
writes the artifact's call for those concrete types, refined here (``jaxcompat.
static_shape_export``), on the artifact's platform. The loader compiles it for a first call of
exactly those types that no shipped or cached executable serves. It is made from the artifact
alone, never by tracing the user's code again, so it computes what the artifact computes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.executables.compiling import size_envs
from hatch_jaxexport.formats.manifest import ArtifactRecord, sha256_hex
from hatch_jaxexport.formats.signatures import Recorded
from hatch_jaxexport.runtime.jax_dtypes import has_keys
from hatch_jaxexport.runtime.jaxcompat import concrete_shape, static_shape_export, x64_context

#: The suffix of a concrete-size module's file (a ``jax.export`` serialization, like artifacts).
SIZED_SUFFIX = ".sized.jaxexport"


def wants_sized(record: ArtifactRecord) -> bool:
    """Whether ``record`` may get concrete-size forms: an unsharded ``cpu`` primal without
    pytree classes of the user's (whose nodes a second serialization would have to name).

    Only ``cpu``: there the refinement is a share of a first call worth a file (XLA:CPU
    compiles a small function quickly); on an accelerator the compile dwarfs it, and each form
    costs the build an export of the artifact's call and a refinement."""
    return (record.kind, record.batched, record.platform) == ("primal", False, "cpu") and \
        not record.mesh and not record.pytree_types


def sized_entries(fn: Any, record: ArtifactRecord, blob: bytes, out_dir: Path,
                  recorded: Recorded | None, note: Callable[[str], None]) -> list[dict[str, Any]]:
    """Write the concrete-size forms of ``record`` (its ``blob``) into ``out_dir``; their
    manifest entries. A size that fails to export is noted (``note``) and left out: the
    symbolic artifact still serves it."""
    import jax
    from jax import export

    entries = []
    exported = None
    for sizes in size_envs(fn, record, recorded):
        if not sizes:
            continue
        try:
            exported = exported or export.deserialize(bytearray(blob))
            if has_keys([*exported.in_avals, *exported.out_avals]):
                note(f"{record.id}: no concrete-size modules: typed PRNG keys in its inputs or "
                     "outputs (a first call compiles the symbolic artifact)")
                return entries
            avals = [jax.ShapeDtypeStruct(concrete_shape(a.shape, sizes), a.dtype)
                     for a in exported.in_avals]
            args, kwargs = exported.in_tree.unflatten(avals)
            with x64_context(bool(record.jax_config.get("jax_enable_x64"))):
                fixed = static_shape_export(exported, args, kwargs, record.platform)
            if fixed is None:
                return entries
            data = bytes(fixed.serialize())
        except Exception as err:  # the artifact still serves the size, compiled as usual
            note(f"{record.id}: no concrete-size module for {sizes}: "
                 f"{type(err).__name__}: {str(err)[:200]}")
            continue
        inputs = [[list(a.shape), a.dtype.name] for a in avals]
        digest = hashlib.sha256(json.dumps([record.sha256, inputs]).encode()).hexdigest()
        file = f"{Path(record.file).stem}.{digest[:16]}{SIZED_SUFFIX}"
        (out_dir / file).write_bytes(data)
        entries.append({"inputs": inputs, "file": file, "sha256": sha256_hex(data),
                        "size": len(data)})
    return entries


__all__ = ["SIZED_SUFFIX", "sized_entries", "wants_sized"]
