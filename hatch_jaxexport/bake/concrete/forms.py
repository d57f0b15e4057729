"""Concrete-size StableHLO of artifacts, for the sizes a function names or was called with.

Build layer. A symbolic artifact serves every size, but compiling it costs the user's process a
shape refinement first: ``call_exported``'s lowering parses the module into a second MLIR
context and runs the refinement passes, a share of a small function's first call
(``benchmarks/executables.py``, the ``stablehlo`` column). For each size of
``executable_sizes=`` (else ``concrete=``) and each recorded call, the export worker also
writes the artifact's call for those concrete types, refined here (``jaxcompat.
static_shape_export``), on the artifact's platform. The loader compiles it for a first call of
exactly those types that no shipped or cached executable serves. It is made from the artifact
alone, never by tracing the user's code again, so it computes what the artifact computes.

For every other size, a symbolic artifact whose module is small (``TEXT_MAX_BYTES``) also gets
its module as MLIR text (the ``text`` form), which a loader running the build's jaxlib refines
at a call's sizes in C++ (``runtime.executables.direct_module.refined``): jax's lowering of
``call_exported`` costs a small function's first call about 20 ms, most of it jax's first MLIR
context in Python, which text needs none of (``benchmarks/first_call_parts.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.executables.compiling import size_envs
from hatch_jaxexport.formats.manifest import TEXT_FORMS, ArtifactRecord, sha256_hex
from hatch_jaxexport.formats.signatures import Recorded
from hatch_jaxexport.runtime.executables.direct_module import MAIN, exact_types, runs_as_is
from hatch_jaxexport.runtime.jax_dtypes import has_keys
from hatch_jaxexport.runtime.jaxcompat import (
    MLIR_ELEMENT_TYPES,
    concrete_shape,
    module_text,
    static_shape_export,
    x64_context,
)

#: The suffix of a concrete-size module's file (a ``jax.export`` serialization, like artifacts).
SIZED_SUFFIX = ".sized.jaxexport"
#: The suffix of an artifact's module as MLIR text (the ``text`` form).
TEXT_SUFFIX = ".stablehlo.mlir"
#: The largest text form written: on a larger module the compile dwarfs what the text saves
#: (jax's first MLIR context, a fixed cost), and text is about 3x the module's bytecode.
TEXT_MAX_BYTES = 64 * 1024


def wants_sized(record: ArtifactRecord) -> bool:
    """Whether ``record`` may get forms of its module (``sized_entries``): an unsharded
    artifact, the primal or an unbatched member of its transformation family (``ad_order``:
    the ``jvp`` and ``vjp`` an eager ``jax.grad`` evaluates), on any platform. A batched
    member's batch size is any size. One with pytree classes of the user's gets text forms
    only: a concrete-size form is a second serialization, which would have to name their nodes.

    Every platform: on an accelerator the compile dwarfs the refinement, but jax's lowering of
    ``call_exported`` (its first MLIR context in Python, the wrapper, the refinement: 40-90 ms
    of a TPU's first call, ``benchmarks/first_call_parts.py --platform tpu``) is what put a
    baked first call above the source's there; each form costs the build one export of the
    artifact's call, made on any machine."""
    return not record.batched and not record.mesh


def sized_entries(fn: Any, record: ArtifactRecord, blob: bytes, out_dir: Path,
                  recorded: Recorded | None, note: Callable[[str], None]) -> list[dict[str, Any]]:
    """Write the concrete-size forms of ``record`` (its ``blob``) into ``out_dir``, and its
    text forms; their manifest entries. A size that fails to export is noted (``note``) and
    left out: the symbolic artifact still serves it. An artifact serialized with its VJP
    (``vjp_order``) gets the forms an eager ``jax.grad`` runs too (``sized_forms``)."""
    from jax import export

    entries: list[dict[str, Any]] = []
    all_sizes = [] if record.pytree_types else [  # see ``wants_sized``
        sizes for sizes in size_envs(fn, record, recorded) if sizes]
    try:
        exported = export.deserialize(bytearray(blob))
    except Exception as err:  # the artifact still serves every size, compiled as usual
        what = "concrete-size module" if all_sizes else "text form"
        note(f"{record.id}: no {what}: {type(err).__name__}: {str(err)[:200]}")
        return entries
    if has_keys([*exported.in_avals, *exported.out_avals]):
        if all_sizes:
            note(f"{record.id}: no concrete-size modules: typed PRNG keys in its inputs or "
                 "outputs (a first call compiles the symbolic artifact)")
        return entries
    for sizes in all_sizes:
        for form in sized_forms(record, exported):
            entry = _sized_entry(record, exported, sizes, form, out_dir, note)
            entries += [entry] if entry is not None else []
    for form in sized_forms(record, exported):  # the call's module, and its VJP's
        text = _text_entry(record, exported, form, out_dir, note)
        entries += [text] if text is not None else []
    return entries


def _text_entry(record: ArtifactRecord, exported: Any, form: str, out_dir: Path,
                note: Callable[[str], None]) -> dict[str, Any] | None:
    """Write the text form of ``record``'s module ``form`` (the call's, or its VJP's, of
    ``exported``) into ``out_dir`` where a loader can refine it (symbolic, its module taking
    the call's arrays as they are, every dtype with an MLIR spelling, at most
    ``TEXT_MAX_BYTES``); its manifest entry, else ``None``."""
    try:
        program = exported.vjp() if form == "vjp" else exported
        avals = [*program.in_avals, *program.out_avals]
        if exact_types(program) is not None or not runs_as_is(program) or \
                any(a.dtype.name not in MLIR_ELEMENT_TYPES for a in avals):
            return None
        data = module_text(program).encode("utf-8")
    except Exception as err:  # a loader lowers it as usual
        note(f"{record.id}: no text form ({form}): {type(err).__name__}: {str(err)[:200]}")
        return None
    if len(data) > TEXT_MAX_BYTES or data.count(MAIN.encode()) != 1:
        return None
    file = f"{Path(record.file).stem}{'' if form == 'call' else '.' + form}{TEXT_SUFFIX}"
    (out_dir / file).write_bytes(data)
    return {"inputs": [], "file": file, "sha256": sha256_hex(data), "size": len(data),
            "form": TEXT_FORMS[form]}


def sized_forms(record: ArtifactRecord, exported: Any) -> tuple[str, ...]:
    """The forms (``formats.manifest.SIZED_FORMS``) to write per size of ``record``: its
    call; and, with its VJP (``vjp_order``) and only inexact inputs and outputs (an integer's
    ``float0`` cotangent takes jax's own backward pass, ``runtime.artifacts.native_vjp``), the
    VJP, which an eager backward pass runs."""
    import jax.numpy as jnp

    avals = [*exported.in_avals, *exported.out_avals]
    if record.vjp_order < 1 or not all(jnp.issubdtype(a.dtype, jnp.inexact) for a in avals):
        return ("call",)
    return ("call", "vjp")


def _sized_entry(record: ArtifactRecord, exported: Any, sizes: dict[str, int], form: str,
                 out_dir: Path, note: Callable[[str], None]) -> dict[str, Any] | None:
    """Write one concrete-size form of ``record`` into ``out_dir``; its manifest entry,
    ``None`` where it fails (noted)."""
    import jax

    try:
        program = exported.vjp() if form == "vjp" else exported
        avals = [jax.ShapeDtypeStruct(concrete_shape(a.shape, sizes), a.dtype)
                 for a in program.in_avals]
        args, kwargs = program.in_tree.unflatten(avals)
        with x64_context(bool(record.jax_config.get("jax_enable_x64"))):
            fixed = static_shape_export(program, args, kwargs, record.platform)
        if fixed is None:
            return None
        data = bytes(fixed.serialize())
    except Exception as err:  # the artifact still serves the size, compiled as usual
        note(f"{record.id}: no concrete-size module ({form}) for {sizes}: "
             f"{type(err).__name__}: {str(err)[:200]}")
        return None
    inputs = [[list(a.shape), a.dtype.name] for a in avals]
    named = [record.sha256, inputs] + ([] if form == "call" else [form])
    digest = hashlib.sha256(json.dumps(named).encode()).hexdigest()
    file = f"{Path(record.file).stem}.{digest[:16]}{SIZED_SUFFIX}"
    (out_dir / file).write_bytes(data)
    entry = {"inputs": inputs, "file": file, "sha256": sha256_hex(data), "size": len(data)}
    return entry if form == "call" else {**entry, "form": form}


__all__ = ["SIZED_SUFFIX", "TEXT_MAX_BYTES", "TEXT_SUFFIX", "sized_entries", "sized_forms",
           "wants_sized"]
