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
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hatch_jaxexport.bake.jax_envs import jax_python
from hatch_jaxexport.bake.protocol import CompileRequest, CompileResult
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.concrete_sizes import size_combinations, size_problem
from hatch_jaxexport.formats.cpu_targets import (
    TARGETS,
    default_targets,
    describe_targets,
    machine_name,
)
from hatch_jaxexport.formats.dimensions import BATCH_SYMBOL
from hatch_jaxexport.formats.manifest import ArtifactRecord, ConcreteRecord, ExecutableRecord
from hatch_jaxexport.formats.signatures import SIGNATURES_NAME, Recorded, parse_signatures
from hatch_jaxexport.formats.tpu_targets import (
    KEY_PREFIX,
    describe_tpu_targets,
    executable_target,
    is_tpu_key,
)

#: The suffix of an executable's file in the artifact folder.
EXECUTABLE_SUFFIX = ".xla"


def builder_machine() -> str:
    """This machine in ``TARGETS``' spelling (``x86_64``, ``aarch64``)."""
    return machine_name(platform_module.machine())


def resolve_targets(requested: bool | Sequence[str]) -> list[str]:
    """The targets a build compiles: ``True`` means those of this machine; names are checked
    and recorded under their ``TARGETS`` name (``x86-64-v3`` is ``x86_64-avx2``), TPU targets
    under their key (``v5e`` is ``tpu:v5e:1x1``, ``formats.tpu_targets``)."""
    if requested is True:
        return default_targets(builder_machine())
    if not requested:
        return []
    named = {name: executable_target(name) for name in requested}
    unknown = [name for name, known in named.items() if known is None]
    if unknown:
        raise ValueError(f"unknown executable target(s) {unknown}; known: {describe_targets()}"
                         f"; TPU targets: {describe_tpu_targets()}")
    return list(dict.fromkeys(known for known in named.values() if known))


def function_targets(spec: Any, build_targets: Sequence[str]) -> list[str]:
    """The targets of a function: its ``executables=`` option, else the build's (``True``:
    the builder's CPU targets and the build's TPU targets)."""
    choice = getattr(spec, "executables", None)
    if choice is None:
        return list(build_targets)
    if choice is False:
        return []
    if choice is True:
        return [*resolve_targets(True), *(t for t in build_targets if is_tpu_key(t))]
    return resolve_targets(list(choice))


def target_platform(target: str) -> str:
    """The platform whose artifacts a build's target compiles: ``tpu`` for a TPU target's
    key, ``cpu`` for the rest."""
    return "tpu" if is_tpu_key(target) else "cpu"


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
    recorded. The batched primal (``vmap=True``): one per recorded eager ``vmap`` call
    (``batched_size_envs``). A build compiles ``cpu``'s; a device's are compiled where the
    device is (``device_compile``)."""
    if record.platform != platform or record.mesh:
        return []
    if record.batched:  # its batch size is any: those of the eager vmaps recorded
        return batched_size_envs(fn, record, recorded) if record.kind == "primal" else []
    return size_envs(fn, record, recorded)


def batched_size_envs(fn: Any, record: ArtifactRecord, recorded: Recorded | None = None
                      ) -> list[dict[str, int]]:
    """The concrete sizes of a batched member (``vmap=True``) that a recording run saw eager
    ``jax.vmap`` calls with: the structure's symbols and the batch symbol
    (``_recorder.note_batched``), each once, and only those the structure's constraints allow.
    Named sizes give none: ``executable_sizes=`` names no batch size."""
    structure = fn.export_spec.structures[record.structure_index]
    return _allowed_once(structure, _recorded_envs(fn, record.structure_index, recorded,
                                                   structure.symbols | {BATCH_SYMBOL}))


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
    return _allowed_once(structure, [*named, *_recorded_envs(fn, structure_index, recorded,
                                                             structure.symbols)])


def _recorded_envs(fn: Any, structure_index: int, recorded: Recorded | None,
                   symbols: frozenset[str]) -> list[dict[str, int]]:
    """The sizes recorded for one structure of ``fn`` whose symbols are exactly ``symbols``
    (the structure's own; with the batch symbol, an eager ``vmap``'s)."""
    seen = (recorded or {}).get(fn.name, {}).get(structure_index, [])
    return [env for env in seen if set(env) == symbols]


def _allowed_once(structure: Any, envs: Sequence[dict[str, int]]) -> list[dict[str, int]]:
    """``envs``, each once, and only those ``structure``'s constraints allow (a batch size
    has none)."""
    unique = {tuple(sorted(env.items())): env for env in envs}
    return [env for env in unique.values() if size_problem(
        structure, {k: v for k, v in env.items() if k != BATCH_SYMBOL}) is None]


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
        if platform == "cpu":  # a build: each artifact by its platform's targets
            targets = [t for t in function_targets(fn.export_spec, build_targets)
                       if target_platform(t) == record.platform]
        else:
            targets = [] if getattr(fn.export_spec, "executables", None) is False else \
                list(build_targets)
        mine = record.platform if platform == "cpu" else platform
        if targets and fn.package not in recorded:
            recorded[fn.package] = recorded_sizes(fn.package, signatures)
        sizes = plan_for(fn, record, recorded.get(fn.package), mine) if targets else []
        missing = missing_sizes(fn, record, mine) if targets and not sizes else []
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
                          "native_vjp": record.vjp_order > 0 and not record.batched})
    return plans


def concrete_plans(functions: Mapping[str, Any], concrete: Sequence[Mapping[str, Any]],
                   build_targets: Sequence[str]) -> list[dict[str, Any]]:
    """What the executable compilers compile of a worker's concrete-size artifacts (a
    recorded call's, or a structure's ``concrete=`` sizes where its symbolic export failed):
    each at its one signature, for the targets of its platform (``function_targets``), as an
    artifact of fixed sizes is. A user's first call of exactly those arrays then loads it
    instead of compiling (on a TPU, the eager first calls of a library's recorded calls)."""
    plans = []
    for raw in concrete:  # each entry also says where its sizes came from ("origin")
        record = ConcreteRecord(**{k: v for k, v in raw.items() if k in ConcreteRecord._fields})
        fn = functions[record.function]
        targets = [t for t in function_targets(fn.export_spec, build_targets)
                   if target_platform(t) == record.platform]
        if targets:
            plans.append({"artifact": record.id, "file": record.file, "sha256": record.sha256,
                          "sizes": [{}], "pytree_types": [],
                          "x64": bool(record.jax_config.get("jax_enable_x64", False)),
                          "function": record.function, "targets": targets,
                          "native_vjp": False})
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
    """Every plan for each of its targets, with ``python``'s jaxlib: the CPU targets one
    process each, in turn (each caps the instruction set of its own process), then the TPU
    targets, in parallel (``_compile_tpu``)."""
    targets = sorted({target for plan in plans for target in plan["targets"]})
    records: list[ExecutableRecord] = []
    here = builder_machine()
    for name in (t for t in targets if not is_tpu_key(t)):
        target = TARGETS[name]
        if target.machine != here:
            log(f"warning: executables for {name} need a {target.machine} builder; this one "
                f"is {here}: none compiled")
            continue
        # only the target's XLA_FLAGS: the builder's own never leak
        outcome = _run_compiler(staging, package, name, plans, python,
                                {**env, "XLA_FLAGS": " ".join(target.xla_flags)})
        for message in outcome.notes:
            log(f"warning: {message}")
        records += [ExecutableRecord(**raw) for raw in outcome.records]
    tpu = [t for t in targets if is_tpu_key(t)]
    return records + (_compile_tpu(staging, package, plans, tpu, env, python, log) if tpu
                      else [])


def _run_compiler(staging: Path, package: str, name: str, plans: Sequence[Mapping[str, Any]],
                  python: str, env: Mapping[str, str]) -> CompileResult:
    """One target's compiler process (``_compiler``) over the plans that name it."""
    tag = hashlib.sha256(python.encode()).hexdigest()[:12]
    slug = name.replace(":", "-")
    request = staging / f".executables-{slug}-{tag}.json"
    result = staging / f".executables-{slug}-{tag}.result.json"
    mine = [plan for plan in plans if name in plan["targets"]]
    CompileRequest(package=package, target=name, plans=mine, out_dir=str(staging),
                   result=str(result)).write(request)
    proc = subprocess.run(
        [python, "-m", "hatch_jaxexport.bake.executables._compiler", str(request)],
        env=dict(env), cwd=staging, capture_output=True, text=True)
    if not result.exists():
        raise ExportError([f"the executable compiler for {name} died (exit "
                           f"{proc.returncode}): {proc.stderr.strip()[-2000:]}"])
    return CompileResult.read(result)


def _compile_tpu(staging: Path, package: str, plans: Sequence[Mapping[str, Any]],
                 targets: Sequence[str], env: Mapping[str, str], python: str,
                 log: Callable[[str], None]) -> list[ExecutableRecord]:
    """The TPU targets' executables, compiled on this builder without a TPU: one process per
    target, as many at once as the builder has cores, each with the libtpu ``python``'s jax
    pins (``libtpu.libtpu_folder``) and jax's CPU backend (the TPU is only described); a line
    per target says how many, for which host, and how long."""
    from concurrent.futures import ThreadPoolExecutor

    # only a build with TPU targets asks for libtpu
    from hatch_jaxexport.bake.executables.libtpu import libtpu_folder

    hosts = {t: t.removeprefix(KEY_PREFIX) for t in targets}  # tpu:v5e:2x2 -> v5e:2x2
    folder = libtpu_folder(python, env, ", ".join(hosts.values()), log)
    paths = [p for p in (env.get("PYTHONPATH", ""), folder) if p]
    # ALLOW_MULTIPLE_LIBTPU_LOAD: libtpu otherwise holds a lockfile (/tmp/libtpu_lockfile)
    # for the whole process, and a second target's process started meanwhile is refused
    tpu_env = {**env, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
               "PYTHONPATH": os.pathsep.join(paths)}

    def run(target: str) -> tuple[str, CompileResult, float]:
        started = time.perf_counter()
        outcome = _run_compiler(staging, package, target, plans, python, tpu_env)
        return target, outcome, time.perf_counter() - started

    records: list[ExecutableRecord] = []
    with ThreadPoolExecutor(max_workers=max(1, min(len(targets), os.cpu_count() or 1))) as pool:
        for target, outcome, seconds in pool.map(run, targets):
            for message in outcome.notes:
                log(f"warning: {message}")
            found = [ExecutableRecord(**raw) for raw in outcome.records]
            records += found
            named = found[0].target if found else target
            log(f"{package}: {len(found)} executable(s) for {named} "
                f"({hosts[target]}, compiled without a TPU) in "
                f"{seconds:.1f} s, {sum(r.size for r in found):,} bytes")
    return records


__all__ = ["EXECUTABLE_SUFFIX", "builder_machine", "compile_executables", "concrete_plans",
           "function_targets",
           "missing_sizes", "named_sizes", "plan_for", "plans_for_worker",
           "recorded_sizes", "resolve_targets", "size_envs", "size_gap_lines",
           "structure_size_envs"]
