"""Concrete-size artifacts: what the build bakes where a symbolic export is impossible.

Build layer. Real library code is often not shape-polymorphic: ``len(x)``, ``x[2:] - x[:-2]``
without a constraint, ``jnp.diag_indices(n)``, a Python ``if n < 100``. Its symbolic export
fails. For each primal
export that failed (no mesh), the worker exports the same structure with every symbol bound,
once per size it knows: ``concrete=``, ``executable_sizes=`` and the sizes recorded from real
calls (``HATCH_JAXEXPORT_RECORD``). A spec-less ``@exportable`` gets exactly its recorded
calls (the signatures file's ``calls``), and so do the calls no structure of a function
accepted, where the loader's fallback path recorded them (``recorder.note_call``). Each
becomes a ``ConcreteRecord``; the loader serves a call of exactly those types from it
(``runtime.call.recorded_calls``), other sizes fall back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.bake.executables.compiling import signatures_file, structure_size_envs
from hatch_jaxexport.bake.export.body_warnings import traced_warnings
from hatch_jaxexport.bake.export.diagnose import first_line
from hatch_jaxexport.bake.export.exporter import ExportTask, recorded_config, task_config
from hatch_jaxexport.formats.dimensions import evaluate_dim
from hatch_jaxexport.formats.manifest import BLOB_SUFFIX, sha256_hex
from hatch_jaxexport.formats.signatures import (
    FUNCTION_RUNS_SOURCE,
    SIGNATURES_NAME,
    Calls,
    CallSignature,
    Recorded,
    Unrecorded,
    call_key,
    parse_calls,
    parse_unrecorded,
    rebuild,
)
from hatch_jaxexport.formats.spec import static_key, tree_map_leaves
from hatch_jaxexport.runtime.jax_dtypes import jax_dtype
from hatch_jaxexport.runtime.jaxcompat import lowering_config, lowering_context, no_locations

if TYPE_CHECKING:
    from hatch_jaxexport.bake.protocol import WorkerRequest

# Imported in functions: the runtime's artifacts and recorded calls, only for a build that bakes
# concrete sizes.

_X64 = re.compile(r"64|complex128")


def recorded_calls(package: str, source: str | None = None) -> Calls:
    """The call signatures ``HATCH_JAXEXPORT_RECORD`` noted for ``package`` (``{}`` without a
    signatures file; a bad file was already refused by ``recorded_sizes``). ``source``: the
    signatures file of the package's source tree, read first (``signatures_file``)."""
    path = signatures_file(package, source)
    if not path.is_file():
        return {}
    return parse_calls(path.read_text(encoding="utf-8"), f"{package}/{SIGNATURES_NAME}")


def unrecorded_calls(package: str, source: str | None = None) -> Unrecorded:
    """The calls ``HATCH_JAXEXPORT_RECORD`` could not keep, by function and reason (an argument
    holding a function), from the same file as ``recorded_calls``."""
    path = signatures_file(package, source)
    if not path.is_file():
        return {}
    return parse_unrecorded(path.read_text(encoding="utf-8"), f"{package}/{SIGNATURES_NAME}")


def unrecorded_note(name: str, unrecorded: Mapping[str, int]) -> str:
    """What the build log says of a function's calls the recording could not keep: counted,
    each reason named, and that such calls run the source (recording again changes nothing)."""
    told = "; ".join(f"{count} call(s): {reason}{FUNCTION_RUNS_SOURCE}"
                     for reason, count in sorted(unrecorded.items()))
    return f"{name}: recorded calls not kept by the recording run: {told}"


def failed_primals(failures: Sequence[Mapping[str, Any]]) -> list[ExportTask]:
    """The unsharded primal tasks among a worker's failures, each once: those whose structure
    may still be served at concrete sizes (their family members failed with them). A family
    is one worker's (``workers._worker.share_of``), so each is planned once in a build."""
    tasks = {}
    for failure in failures:
        task = ExportTask(**failure["task"])
        if not task.mesh:
            tasks[task.primal.id] = task.primal
    return list(tasks.values())


def failed_exports(failures: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Per primal task id, the first failed export of its family (as a record's ``origin``
    names it)."""
    found: dict[str, str] = {}
    for failure in failures:
        task = ExportTask(**failure["task"])
        found.setdefault(task.primal.id, task.id)
    return found


def structure_exported(fn: Any, task: ExportTask, env: Mapping[str, int]
                       ) -> tuple[Any, bytes, dict[str, Any], list[dict[str, Any]]]:
    """Export ``task``'s structure with its symbols bound to ``env``: the ``Exported``, its
    bytes, the jax config it records and what the package's code warned while it was traced
    (``traced_warnings``)."""
    import jax
    from jax import export

    spec = fn.export_spec
    structure = spec.structures[task.structure_index]

    def leaf(leaf_spec: Any) -> Any:
        shape = tuple(evaluate_dim(d, env) for d in leaf_spec.shape)
        return jax.ShapeDtypeStruct(shape, jax_dtype(leaf_spec.dtype))

    config = task_config(fn, task)
    traced = (task.traced, json.dumps(env, sort_keys=True))
    with no_locations(), lowering_context(config), \
            traced_warnings(fn.package, traced) as warned:
        values = {**{n: tree_map_leaves(leaf, t) for n, t in structure.args.items()},
                  **task.static}
        args, kwargs = fn.layouts[task.structure_index].split(values)
        target = fn.__wrapped__ if spec.skip_jitting else jax.jit(
            fn.__wrapped__, static_argnames=tuple(spec.static))
        exported = export.export(target, platforms=[task.platform])(*args, **kwargs)
        data = _serialized(exported)
    return exported, data, recorded_config(config, exported.mlir_module()), warned


def call_exported(fn: Any, signature: CallSignature, platform: str
                  ) -> tuple[Any, bytes, dict[str, Any], list[dict[str, Any]]]:
    """Export a spec-less function for one recorded call: its arrays flat (canonical order),
    its other values baked in. The ``Exported``, its bytes, the jax config it records and what
    the package's code warned while it was traced (``traced_warnings``)."""
    import jax
    from jax import export

    from hatch_jaxexport.runtime.call.recorded_calls import flat_source

    avals: list[Any] = []
    rebuild(signature, lambda dims, dtype: avals.append(
        jax.ShapeDtypeStruct(dims, jax_dtype(dtype))))
    config = {**lowering_config(), **(fn.export_spec.jax_config or {})}
    if any(_X64.search(str(a.dtype)) for a in avals):
        config["jax_enable_x64"] = True
    with no_locations(), lowering_context(config), \
            traced_warnings(fn.package, (fn.name, call_key(signature))) as warned:
        exported = export.export(jax.jit(flat_source(fn, signature)),
                                 platforms=[platform])(*avals)
        data = _serialized(exported)
    return exported, data, recorded_config(config, exported.mlir_module()), warned


def _serialized(exported: Any) -> bytes:
    """The artifact's bytes, with its first-order VJP where jax can export one, so that
    ``jax.grad`` of a served call runs baked code as it would through the source."""
    try:
        return bytes(exported.serialize(vjp_order=1))
    except Exception:  # no VJP of this computation (jax says why when grad is asked for)
        return bytes(exported.serialize())


def _entry(fn: Any, made: tuple[Any, bytes, dict[str, Any], list[dict[str, Any]]],
           out_dir: Path, *,
           structure_index: int, static: dict[str, Any], platform: str, sizes: dict[str, int],
           call: str, variant: dict[str, Any]) -> dict[str, Any]:
    """Write one concrete export (``made``: the ``Exported``, its bytes, its config, its
    trace's warnings) into ``out_dir``; its manifest record (as a dict)."""
    from hatch_jaxexport.runtime.artifacts import pytrees

    exported, data, config, warned = made
    if pytrees.register_all([exported.in_tree, exported.out_tree], fn.name):
        raise ValueError("its inputs or outputs hold pytree classes of the package, which "
                         "concrete-size artifacts do not name")
    inputs = [[list(a.shape), str(a.dtype)] for a in exported.in_avals]
    key = [fn.name, structure_index, static, platform, variant, inputs, call]
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", fn.name).strip("_")[:80] or "fn"
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    file = f"{slug}-{digest}.concrete{BLOB_SUFFIX}"
    (out_dir / file).write_bytes(data)
    return {"function": fn.name, "structure_index": structure_index, "static": static,
            "platform": platform, "sizes": sizes, "inputs": inputs, "call": call,
            "file": file, "sha256": sha256_hex(data), "size": len(data),
            "jax_config": config, "variant": variant, "warnings": warned}


def size_origins(fn: Any, structure_index: int, recorded: Recorded
                 ) -> dict[tuple[tuple[str, int], ...], list[str]]:
    """Where each concrete size of a structure comes from, by its sorted items: ``concrete=``,
    ``executable_sizes=``, the recording (``HATCH_JAXEXPORT_RECORD``), any of them at once.
    A size named by several is one size, planned once; the names go into a record's
    ``origin``, so that a build refusing two records of one key can say where each came from."""
    spec = fn.export_spec
    sources = {"concrete=": ({}, (spec.concrete or {},)),
               "executable_sizes=": ({}, (spec.executable_sizes or {},)),
               "the recording": (recorded, ())}
    found: dict[tuple[tuple[str, int], ...], list[str]] = {}
    for name, (calls, options) in sources.items():
        for env in structure_size_envs(fn, structure_index, calls, options):
            found.setdefault(tuple(sorted(env.items())), []).append(name)
    return found


def bake_structures(fn: Any, tasks: Sequence[ExportTask], recorded: Recorded, out_dir: Path,
                    note: Callable[[str], None],
                    failed: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The concrete-size artifacts of ``fn``'s failed primal ``tasks``: one per size known,
    each size once however many sources name it (``size_origins``), each entry with its
    ``origin``. ``failed``: per primal task id, the failed export that brought it here."""
    spec = fn.export_spec
    entries = []
    for task in tasks:
        envs = structure_size_envs(fn, task.structure_index, recorded,
                                   (spec.concrete or {}, spec.executable_sizes or {}))
        origins = size_origins(fn, task.structure_index, recorded)
        because = (failed or {}).get(task.id, task.id)
        for env in (e for e in envs if e):
            named = " and ".join(origins.get(tuple(sorted(env.items())), ["?"]))
            try:
                entry = _entry(fn, structure_exported(fn, task, env), out_dir,
                               structure_index=task.structure_index, static=task.static,
                               platform=task.platform, sizes=env, call="",
                               variant=task.variant)
            except Exception as err:  # noted; the other sizes still serve
                note(f"{fn.name}: no concrete-size artifact of structure {task.structure_index} "
                     f"for {env} on {task.platform}: {type(err).__name__}: {str(err)[:200]}")
                continue
            entries.append({**entry, "origin": f"sizes {env} from {named}, where the symbolic "
                                               f"export {because} failed"})
    return entries


def bake_calls(fn: Any, calls: Sequence[CallSignature], platforms: Sequence[str],
               out_dir: Path, note: Callable[[str], None],
               failed: list[dict[str, Any]] | None = None,
               unrecorded: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """The artifacts of a spec-less function: one per recorded call and platform; each call
    whose export fails is noted and, with its reason, appended to ``failed`` (the manifest's
    ``failed_calls``: the loader gives that reason when the call comes). ``unrecorded``: the
    calls the recording could not keep (``unrecorded_calls``), noted as such: asking for a
    recording would change nothing."""
    if unrecorded:
        note(unrecorded_note(fn.name, unrecorded))
    if not calls and not fn.export_spec.structures and unrecorded:
        note(f"{fn.name} has no structure and no recorded call it can bake: nothing is baked "
             "for it (the calls recorded held functions; give it a structure, or leave the "
             "function at its default, which bakes)")
    elif not calls and not fn.export_spec.structures:
        note(f"{fn.name} has no structure and no recorded call: nothing is baked for it (run "
             "your tests with HATCH_JAXEXPORT_RECORD=1 to record its calls, or give it a "
             "structure)")
    entries = []
    unique = {call_key(signature): signature for signature in calls}  # a repeated call: once
    for key, signature in unique.items():
        for platform in dict.fromkeys(fn.export_spec.platforms or platforms):
            try:
                entries.append({**_entry(fn, call_exported(fn, signature, platform), out_dir,
                                         structure_index=-1, static={}, platform=platform,
                                         sizes={}, call=key, variant={}),
                                "origin": f"the recorded call {key[:160]}"})
            except Exception as err:  # noted; its other calls still serve
                why = f"{type(err).__name__}: {first_line(str(err), 300)}"
                note(f"{fn.name}: no artifact for the recorded call {call_key(signature)[:160]} "
                     f"on {platform}: {why}")
                if failed is not None:
                    failed.append({"function": fn.name, "call": call_key(signature),
                                   "platform": platform, "reason": why})
    return entries


def worker_concrete(functions: Mapping[str, Any], request: WorkerRequest,
                    failures: Sequence[Mapping[str, Any]], recorded: Recorded,
                    note: Callable[[str], None],
                    failed_calls: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One worker's concrete-size artifacts: those of the primal exports it saw fail, and its
    share (every ``workers``-th, from its own index) of the functions with recorded calls
    that no structure accepted (every spec-less function: one without any is noted)."""
    out_dir = Path(request.out_dir)
    entries = []
    by_function: dict[str, list[ExportTask]] = {}
    for task in failed_primals(failures):
        by_function.setdefault(task.function, []).append(task)
    for name, tasks in by_function.items():
        entries += bake_structures(functions[name], tasks, recorded, out_dir, note,
                                   failed_exports(failures))
    calls = recorded_calls(request.package, request.signatures)
    unrecorded = unrecorded_calls(request.package, request.signatures)
    wanted = [fn for fn in functions.values()
              if not fn.export_spec.structures or calls.get(fn.name) or unrecorded.get(fn.name)]
    for fn in wanted[request.worker::request.workers]:
        entries += bake_calls(fn, calls.get(fn.name, []), request.default_platforms,
                              out_dir, note, failed_calls, unrecorded.get(fn.name))
    return entries


def concrete_covered(failures: Sequence[Mapping[str, Any]], concrete: Sequence[Any]
                     ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Split failed exports into those whose structure (static values, platform, config
    variant) got concrete-size artifacts, and the rest: the first are served at those sizes
    and fail no build; the rest are failures as before."""
    served = {(c.function, c.structure_index, static_key(c.static), c.platform,
               json.dumps(c.variant, sort_keys=True)) for c in concrete}
    covered, rest = [], []
    for failure in failures:
        task = failure["task"]
        key = (task["function"], task["structure_index"], static_key(task["static"]),
               task["platform"], json.dumps(task.get("variant", {}), sort_keys=True))
        (covered if not task.get("mesh") and key in served else rest).append(failure)
    return covered, rest


__all__ = ["bake_calls", "bake_structures", "call_exported", "concrete_covered", "failed_exports",
           "failed_primals", "recorded_calls", "size_origins", "structure_exported",
           "unrecorded_calls", "unrecorded_note", "worker_concrete"]
