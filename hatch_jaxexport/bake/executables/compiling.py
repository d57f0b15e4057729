"""Precompiled executables: which a build compiles, and compiling them, one process per target.

Build layer. An executable is compiled from a primal CPU artifact for concrete argument types:
a function without dimension symbols has one signature, a function with ``concrete=`` sizes has
one per combination (the shapes its users really call with), others get none. Each target
(``formats.cpu_targets.TARGETS``) compiles in a fresh process whose ``XLA_FLAGS`` cap the
instruction set (XLA reads them once, at backend start), from the blobs the export workers
wrote, so an executable is exactly the artifact's module compiled. The bytes are
``PjRtClient.serialize_executable``'s, never a pickle; the manifest records what the loader
must match (``formats.manifest.ExecutableRecord``).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import platform as platform_module
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.jax_envs import jax_python
from hatch_jaxexport.bake.protocol import CompileRequest, CompileResult
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.concrete_sizes import size_combinations, size_problem
from hatch_jaxexport.formats.cpu_targets import (
    TARGETS,
    canonical_target,
    default_targets,
    describe_targets,
    machine_name,
)
from hatch_jaxexport.formats.manifest import ArtifactRecord, ExecutableRecord
from hatch_jaxexport.formats.signatures import SIGNATURES_NAME, Recorded, parse_signatures

#: The suffix of an executable's file in the artifact folder.
EXECUTABLE_SUFFIX = ".xla"


def builder_machine() -> str:
    """This machine in ``TARGETS``' spelling (``x86_64``, ``aarch64``)."""
    return machine_name(platform_module.machine())


def resolve_targets(requested: bool | Sequence[str]) -> list[str]:
    """The targets a build compiles: ``True`` means those of this machine; names are checked
    and recorded under their ``TARGETS`` name (``x86-64-v3`` is ``x86_64-avx2``)."""
    if requested is True:
        return default_targets(builder_machine())
    if not requested:
        return []
    unknown = [name for name in requested
               if not isinstance(name, str) or canonical_target(name) is None]
    if unknown:
        raise ValueError(f"unknown executable target(s) {unknown}; known: {describe_targets()}")
    return list(dict.fromkeys(canonical_target(name) or name for name in requested))


def function_targets(spec: Any, build_targets: Sequence[str]) -> list[str]:
    """The targets of a function: its ``executables=`` option, else the build's."""
    choice = getattr(spec, "executables", None)
    if choice is None:
        return list(build_targets)
    if choice is False:
        return []
    return resolve_targets(True if choice is True else list(choice))


def named_sizes(spec: Any) -> Mapping[str, Any]:
    """The sizes a function names for its executables: ``executable_sizes=``, else
    ``concrete=`` (``{}`` for neither)."""
    return getattr(spec, "executable_sizes", None) or getattr(spec, "concrete", None) or {}


def signatures_file(package: str, source: str | os.PathLike[str] | None = None) -> Path:
    """Where the build reads ``package``'s recorded calls: ``source`` (the signatures file in
    the package's source folder, which the build backend hands in) where that file exists,
    else the ``jaxexport-signatures.json`` beside the imported package's ``__init__.py``.

    The source tree comes first: setuptools imports the package from ``build/lib``, where a
    committed signatures file is only copied when declared package data."""
    if source is not None and Path(source).is_file():
        return Path(source)
    return Path(importlib.import_module(package).__file__ or "").parent / SIGNATURES_NAME


def recorded_sizes(package: str, source: str | os.PathLike[str] | None = None) -> Recorded:
    """The sizes ``HATCH_JAXEXPORT_RECORD`` noted for ``package``'s calls: its signatures file
    (``signatures_file``; ``{}`` without one; a file that does not parse is an
    ``ExportError`` naming it)."""
    path = signatures_file(package, source)
    if not path.is_file():
        return {}
    try:
        return parse_signatures(path.read_text(encoding="utf-8"), f"{package}/{SIGNATURES_NAME}")
    except ValueError as err:
        raise ExportError([f"{err}; record it again (HATCH_JAXEXPORT_RECORD=1) or delete it"]) \
            from None


def plan_for(fn: Any, record: ArtifactRecord, recorded: Recorded | None = None,
             platform: str = "cpu") -> list[dict[str, int]]:
    """The concrete sizes to compile ``record`` (an artifact of ``fn`` for ``platform``: the
    primal or an unbatched transformation member) for: ``[{}]`` without symbols, one per
    combination of ``executable_sizes=`` (else ``concrete=``) and one per recorded call of the
    structure (``recorded``, from ``recorded_sizes``); ``[]`` when no sizes are named or
    recorded. A build compiles ``cpu``'s; a device's are compiled where the device is
    (``device_compile``)."""
    if record.batched or record.platform != platform or record.mesh:
        return []  # a batched member's batch size is any: no concrete signature
    return size_envs(fn, record, recorded)


def size_envs(fn: Any, record: ArtifactRecord, recorded: Recorded | None = None
              ) -> list[dict[str, int]]:
    """The concrete sizes ``fn`` names or was recorded with for ``record``'s structure (any
    platform): ``[{}]`` without symbols, ``[]`` when none are named or recorded."""
    return structure_size_envs(fn, record.structure_index, recorded)


def structure_size_envs(fn: Any, structure_index: int, recorded: Recorded | None = None,
                        options: Sequence[Mapping[str, Any]] | None = None
                        ) -> list[dict[str, int]]:
    """The concrete sizes ``fn`` names or was recorded with for one structure: ``[{}]``
    without symbols, ``[]`` when none are named or recorded; each once, and only those its
    constraints allow. ``options``: the size mappings to combine (default: ``named_sizes``;
    concrete-size artifacts take ``concrete=`` and ``executable_sizes=`` both)."""
    structure = fn.export_spec.structures[structure_index]
    if not structure.symbols:
        return [{}]
    chosen = (named_sizes(fn.export_spec),) if options is None else options
    named = [env for sizes in chosen if sizes and structure.symbols <= set(sizes)
             for env in size_combinations(structure, sizes)]
    seen = (recorded or {}).get(fn.name, {}).get(structure_index, [])
    calls = [env for env in seen if set(env) == structure.symbols]
    unique = {tuple(sorted(env.items())): env for env in [*named, *calls]}
    return [env for env in unique.values() if size_problem(structure, env) is None]


def missing_sizes(fn: Any, record: ArtifactRecord, platform: str = "cpu") -> list[str]:
    """The symbols of a primal artifact's structure (of ``platform``) that no
    ``executable_sizes=`` (else ``concrete=``) names, where no call was recorded either: why it
    gets no executable (``[]`` when that is not the reason)."""
    if (record.kind, record.batched, record.platform, bool(record.mesh)) != \
            ("primal", False, platform, False):
        return []
    structure = fn.export_spec.structures[record.structure_index]
    return sorted(structure.symbols - set(named_sizes(fn.export_spec)))


def plans_for_worker(functions: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                     build_targets: Sequence[str], signatures: str | None = None,
                     platform: str = "cpu") -> list[dict[str, Any]]:
    """What an export worker hands on for its records: each artifact to compile, with its sizes
    and targets (``build_targets`` unless the function's ``executables=`` says otherwise), and
    for each primal CPU artifact that gets none for want of sizes, a plan without ``sizes``
    that names the symbols (``missing``), so the build says so. ``signatures``: the source
    tree's signatures file (``signatures_file``). ``platform``: whose artifacts (``cpu`` in a
    build; a device's where ``device_compile`` compiles them, for its one device target,
    which every function gets unless its ``executables=False``)."""
    plans = []
    recorded: dict[str, Recorded] = {}
    for raw in records:
        record = ArtifactRecord(**raw)
        fn = functions[record.function]
        targets = function_targets(fn.export_spec, build_targets) if platform == "cpu" else \
            [] if getattr(fn.export_spec, "executables", None) is False else list(build_targets)
        if targets and fn.package not in recorded:
            recorded[fn.package] = recorded_sizes(fn.package, signatures)
        sizes = plan_for(fn, record, recorded.get(fn.package), platform) if targets else []
        missing = missing_sizes(fn, record, platform) if targets and not sizes else []
        if missing:
            named = getattr(fn.export_spec, "executable_sizes", None) or {}
            plans.append({"artifact": record.id, "function": record.function,
                          "structure_index": record.structure_index,
                          "structure": record.structure, "missing": missing, "sizes": [],
                          "named": {k: list(v) for k, v in named.items()}})
        if sizes:
            plans.append({"artifact": record.id, "file": record.file, "sha256": record.sha256,
                          "sizes": sizes, "pytree_types": record.pytree_types,
                          "x64": bool(record.jax_config.get("jax_enable_x64", False)),
                          "function": record.function, "targets": targets,
                          "native_vjp": record.vjp_order > 0})
    return plans


def size_gap_lines(plans: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per function that ``executables`` asked for but whose structures (all, or the
    ones named) get no executable for want of sizes: the symbols, and the option to add."""
    by_function: dict[str, dict[int, Mapping[str, Any]]] = {}
    compiled = {p["function"] for p in plans if p["sizes"]}
    for plan in plans:
        if plan.get("missing"):
            by_function.setdefault(plan["function"], {})[plan["structure_index"]] = plan
    lines = []
    for function, gaps in sorted(by_function.items()):
        symbols = sorted({s for gap in gaps.values() for s in gap["missing"]})
        named = next(iter(gaps.values())).get("named", {})
        example = ", ".join([*(f'"{s}": {v}' for s, v in named.items()),
                             *(f'"{s}": [...]' for s in symbols)])
        which = "gets no precompiled executable" if function not in compiled else \
            "gets no precompiled executable for " + ", ".join(
                f"structure {i} ({gaps[i]['structure']})" for i in sorted(gaps))
        lines.append(f"{function} {which}: {'symbol' if len(symbols) == 1 else 'symbols'} "
                     f"{', '.join(symbols)} {'has' if len(symbols) == 1 else 'have'} no size; "
                     f"record the sizes real calls use (HATCH_JAXEXPORT_RECORD=1 while the "
                     f"tests run), or add executable_sizes={{{example}}} to its @exportable")
    return lines


def compile_executables(staging: Path, package: str, plans: Sequence[Mapping[str, Any]],
                        env: Mapping[str, str], python: str, log: Callable[[str], None],
                        jaxlibs: Sequence[str] = ()) -> list[ExecutableRecord]:
    """Compile every plan for each of its targets (one process per target, in turn) into
    ``staging``: with the builder's jaxlib, then with each of ``jaxlibs`` in an environment of
    its own (``bake.jax_envs``)."""
    for line in size_gap_lines(plans):
        log(f"warning: {line}")
    plans = [plan for plan in plans if plan["sizes"]]
    records = _compile_with(staging, package, plans, env, python, log)
    for version in jaxlibs if plans else ():
        with jax_python(version, env, log) as (other, other_env):
            records += _compile_with(staging, package, plans, other_env, other, log)
    return records


def _compile_with(staging: Path, package: str, plans: Sequence[Mapping[str, Any]],
                  env: Mapping[str, str], python: str, log: Callable[[str], None]
                  ) -> list[ExecutableRecord]:
    """Every plan for each of its targets, with ``python``'s jaxlib."""
    targets = sorted({target for plan in plans for target in plan["targets"]})
    records: list[ExecutableRecord] = []
    here = builder_machine()
    for name in targets:
        mine = [plan for plan in plans if name in plan["targets"]]
        if not mine:
            continue
        target = TARGETS[name]
        if target.machine != here:
            log(f"warning: executables for {name} need a {target.machine} builder; this one "
                f"is {here}: none compiled")
            continue
        tag = hashlib.sha256(python.encode()).hexdigest()[:12]
        request = staging / f".executables-{name}-{tag}.json"
        result = staging / f".executables-{name}-{tag}.result.json"
        CompileRequest(package=package, target=name, plans=list(mine), out_dir=str(staging),
                       result=str(result)).write(request)
        flags = " ".join(target.xla_flags)  # only the target's: the builder's own never leak
        proc = subprocess.run(
            [python, "-m", "hatch_jaxexport.bake.executables._compiler", str(request)],
            env={**env, "XLA_FLAGS": flags}, cwd=staging, capture_output=True, text=True)
        if not result.exists():
            raise ExportError([f"the executable compiler for {name} died (exit "
                               f"{proc.returncode}): {proc.stderr.strip()[-2000:]}"])
        outcome = CompileResult.read(result)
        for message in outcome.notes:
            log(f"warning: {message}")
        records += [ExecutableRecord(**raw) for raw in outcome.records]
    return records


__all__ = ["EXECUTABLE_SUFFIX", "builder_machine", "compile_executables", "function_targets",
           "missing_sizes", "named_sizes", "plan_for", "plans_for_worker",
           "recorded_sizes", "resolve_targets", "size_envs", "size_gap_lines",
           "structure_size_envs"]
