"""The accelerator check: example_pkg's baked artifacts on one platform (tpu, cuda, rocm or cpu)
against the plain library on the same device, in fresh processes, one at a time.

    bash scripts/accelerator_check.sh WHEEL... -- --platform tpu   # installs the wheels, runs this
    python scripts/accelerator_check.py --platform cpu --runs 1 --workloads tiny,grad

One program holds an accelerator, so every process runs alone, one after the other. Each
process starts its backend (``jax.devices()``: about 7 s on a TPU) before anything is timed,
on both sides, so the ratios compare the work after it. Per workload of
``example_pkg.benchmarks`` (tiny, mlp, solve, deep, trace_heavy) and ``grad`` (``jax.grad`` of
the ``vjp_order`` loss ``example_pkg.nn.mlp_loss``), ``--runs`` times.

Every row's first run comes before any second run (so ``--budget-seconds`` cuts second runs
first). In each run of a row, in this order:

1. **source, cold**: the source's ``jax.jit(f)`` first call (for ``grad``: the plain library
   user's ``jax.grad(jax.jit(f))``), no compilation cache. The first such process then, after
   its timed call, saves the reference results (and the transformations' for ``grad``),
   serializes the compiled program for the floor, and only then turns on jax's persistent
   cache (``jax_compilation_cache_dir``, ``jax_persistent_cache_min_compile_time_secs=0``),
   clears jax's in-memory caches and calls again: the cache the second processes read;
2. **baked, cold**: the installed wheel's first call in strict mode
   (``HATCH_JAXEXPORT_STRICT=1``: a fallback to the source raises), an empty executable cache
   folder of its own and no jax cache (for ``grad``: ``jax.grad(f_baked)``); the first such
   process then compares its result, and ``jax.jit(jax.grad)``, ``jax.grad`` through
   ``ad_order``, ``jax.jacfwd`` and ``jax.vmap`` for ``grad``, with the references (max abs
   diff) and records which tier served (``call_report``); all after the timed call;
3. **source, second process**: the same first call with jax's persistent cache warm; each
   such process then times hot calls (median per call, each call blocked on, the two sides
   in turn; the table gives the median over the runs): baked
   against ``jax.jit`` (for ``grad``: eager ``jax.grad(f_baked)`` against
   ``jax.grad(jax.jit(f))``, and both under ``jax.jit(jax.grad)``);
4. **baked, second process**: strict, with the executable cache the cold process of that run
   left;
5. **baked, second process, its call path imported first**: step 4 again, the modules of
   ours its first call imported (step 4's process lists them) imported before the clock
   (their time printed beside it): what the call costs beyond loading its code, against the
   floor, which loads no library;
6. **baked, second process, jax's cache on too**, only where step 4 still made jax compiles
   (the loader's cache holds the artifacts' executables, not what jax compiles around them:
   ``jax.grad``'s cotangent of ones): a user who turned jax's persistent cache on, as the
   source's step 3 did, with that cache (its own folder: jax's keys hold the folder's path,
   ``xla_gpu_per_fusion_autotune_cache_dir``, so a copy would miss) and the loader's;
7. **the floor** (``--floor-runs`` times, 1 by default): the program step 1 compiled and
   serialized with ``jax.experimental.serialize_executable``, read, ``deserialize_and_load``-ed
   and called in a fresh process.

``--steps`` runs some of them only (``source_cold,baked_cold``: the first calls of a wheel with
shipped executables).

It prints one Markdown table (medians, with min-max where there are several runs; beside the
cold calls, the XLA compile's own time on each side, the floor neither leaves out), writes
every number to ``--json`` (and ``--out``/accelerator_check.json with the table beside it,
after every process, so a run that is stopped leaves what it measured), and exits 1 when the
backend is not the platform asked for, a process fails, or a result differs. ``--budget-seconds``
skips the processes that would end after it and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The rows, in the order they run: example_pkg's five workloads, then the gradient.
WORKLOADS = ("tiny", "mlp", "solve", "deep", "trace_heavy", "grad")
#: jax's name of each platform's backend.
BACKENDS = {"cpu": "cpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}
#: The transformations checked with the ``grad`` workload (names in the JSON and the table).
TRANSFORMS = {"jit_grad": "grad: `jax.jit(jax.grad(mlp_loss))`",
              "grad_ad_order": "`jax.grad` of `sum(mlp_apply)` (ad_order)",
              "jacfwd": "`jax.jacfwd(mlp_apply)`", "vmap": "`jax.vmap(mlp_apply)`"}
#: What starts a child's result line on stdout (anything else a library prints is ignored).
MARK = "accelerator-check-result: "
#: How far a baked result may lie from the source's (absolute, times max(1, |reference|)).
TOLERANCE = 1e-3


# -- the child: one fresh process, one timed first call -----------------------------------------

@dataclass
class Workload:
    """One row's callables: ``baked`` (the installed wheel's), ``source`` (the plain library's
    first call), ``floor`` (the ``jax.jit`` whose compiled program is the floor), the
    arguments (``dynamic``: without the static ones, what a compiled program takes) and the
    decorated functions whose ``call_report`` says how a call was served."""

    baked: Any
    source: Any
    floor: Any
    args: tuple[Any, ...]
    dynamic: tuple[Any, ...]
    reported: tuple[Any, ...]


def workload(name: str) -> Workload:
    """The callables of one row (imports jax and example_pkg: after the backend started)."""
    import jax
    import numpy as np

    from example_pkg import benchmarks, nn

    if name == "grad":
        args = (nn.init_mlp(0), np.ones((32, 8), np.float32), np.zeros((32, 4), np.float32))
        source = nn.mlp_loss.__wrapped__
        return Workload(jax.grad(nn.mlp_loss), jax.grad(jax.jit(source)),
                        jax.jit(jax.grad(source)), args, args, (nn.mlp_loss,))
    fn, args = benchmarks.WORKLOADS[name]()
    static = tuple(fn.export_spec.static)
    jitted = jax.jit(fn.__wrapped__, static_argnames=static)
    names = list(fn.signature.parameters)
    dynamic = tuple(a for i, a in enumerate(args) if names[i] not in static)
    return Workload(fn, jitted, jitted, tuple(args), dynamic, (fn,))


def transformations(loss: Any, apply: Any, args: tuple[Any, ...], *, jit_all: bool
                    ) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """``TRANSFORMS`` of ``loss`` and ``apply`` (the baked functions, or their sources with
    ``jit_all``: each under ``jax.jit``, the reference): name -> (callable, arguments)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    params, x, y = args
    found = {"jit_grad": (jax.jit(jax.grad(loss)), (params, x, y)),
             "grad_ad_order": (jax.grad(lambda p, v: jnp.sum(apply(p, v))), (params, x)),
             "jacfwd": (jax.jacfwd(apply, argnums=1), (params, x)),
             "vmap": (jax.vmap(apply, in_axes=(None, 0)),
                      (params, np.stack([x, x * 0.5, x * 2])))}
    if jit_all:
        found = {name: (jax.jit(f), a) for name, (f, a) in found.items()}
    return found


def leaves(tree: Any) -> list[Any]:
    """The arrays of a result, as NumPy arrays in their tree's order."""
    import jax
    import numpy as np

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def max_diff(got: list[Any], want: list[Any]) -> float:
    """The largest absolute difference, scaled by the reference where it exceeds 1; an
    ``AssertionError`` when the results do not have the same arrays."""
    import numpy as np

    assert len(got) == len(want), f"{len(got)} arrays, the source gives {len(want)}"
    worst = 0.0
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape, f"shape {a.shape}, the source gives {b.shape}"
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        scale = max(1.0, float(np.max(np.abs(b64), initial=0.0)))
        worst = max(worst, float(np.max(np.abs(a64 - b64), initial=0.0)) / scale)
    return worst


def served(functions: tuple[Any, ...], since: tuple[int, ...] = ()) -> list[str]:
    """How the calls of ``functions`` were served: the tiers of their ``call_report``
    entries, each function's from its count in ``since`` on."""
    since = since or (0,) * len(functions)
    return sorted({str(entry.tier) for fn, start in zip(functions, since, strict=True)
                   for entry in fn.call_report()[start:]})


class Events:
    """Counts of jax's compiles and persistent-cache hits in this process (monitoring)."""

    def __init__(self) -> None:
        import jax

        self.reset()
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        jax.monitoring.register_event_listener(self._event)

    def reset(self) -> None:
        self.compiles = 0
        self.compile_s = 0.0  # the compiles' own time: XLA's part of a first call
        self.cache_hits = 0

    def _duration(self, event: str, secs: float, **kwargs: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.compiles += 1
            self.compile_s += secs

    def _event(self, event: str, **kwargs: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.cache_hits += 1


def first_call_ms(fn: Any, args: tuple[Any, ...]) -> tuple[float, Any]:
    """One call, blocked on, its time in ms and its result."""
    import jax

    start = time.perf_counter()
    result = jax.block_until_ready(fn(*args))
    return (time.perf_counter() - start) * 1e3, result


def floor_ms(path: str, row: Workload) -> float:
    """Read the serialized program, load it and call it once: the floor of a first call."""
    import pickle  # measured only, never shipped: the floor is jax's own pickle-based format

    import jax
    from jax.experimental import serialize_executable

    start = time.perf_counter()
    with open(path, "rb") as f:
        payload, in_tree, out_tree, lapack = pickle.load(f)
    if lapack:  # a CPU program with LAPACK calls needs them registered: part of its floor
        from hatch_jaxexport.runtime.jaxcompat import initialize_lapack

        initialize_lapack()
    compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    jax.block_until_ready(compiled(*row.dynamic))
    return (time.perf_counter() - start) * 1e3


def import_call_path(listing: str) -> float:
    """Import the modules ``listing`` (a JSON list) names; the milliseconds it took."""
    import importlib

    names = json.loads(Path(listing).read_text())
    start = time.perf_counter()
    for name in names:
        importlib.import_module(name)
    return (time.perf_counter() - start) * 1e3


def cotangent_ms() -> float:
    """The cotangent of ones an eager ``jax.grad`` makes of the (scalar float32) loss (jax's
    ``_one``, where this jax has it), as the first compile of a process: part of every eager
    gradient's first call that jax itself makes, shipped executables or not."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    try:
        from jax._src.lax.lax import _one as one  # what jax.grad calls
    except ImportError:  # another jax: the same op in public terms
        one = jnp.ones_like
    loss = np.zeros((), np.float32)  # only its type matters; made before the clock starts
    start = time.perf_counter()
    jax.block_until_ready(one(loss))
    return (time.perf_counter() - start) * 1e3


def write_floor(path: str, row: Workload) -> int:
    """Compile the floor's program (the source's own, from jax's in-memory cache where the
    timed call compiled it) and serialize it to ``path``; its size in bytes."""
    import pickle

    import jax
    from jax.experimental import serialize_executable

    compiled = row.floor.lower(*row.args).compile()
    payload, in_tree, out_tree = serialize_executable.serialize(compiled)
    lapack = jax.default_backend() == "cpu" and "lapack" in compiled.as_text().lower()
    with open(path, "wb") as f:
        pickle.dump((payload, in_tree, out_tree, lapack), f)
    return len(payload)


def warm_jax_cache(folder: str, row: Workload) -> int:
    """Turn jax's persistent cache on in ``folder``, forget every compile of this process and
    call the source again, so that it is compiled and written there; files written."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    compilation_cache.reset_cache()
    jax.clear_caches()
    jax.block_until_ready(row.source(*row.args))
    return sum(len(files) for _, _, files in os.walk(folder))


def save_references(path: str, row: Workload, result: Any, name: str) -> None:
    """The source's results on this device: the row's, and the transformations' for grad."""
    import numpy as np

    arrays = {f"forward/{i}": a for i, a in enumerate(leaves(result))}
    if name == "grad":
        from example_pkg import nn

        for key, (fn, args) in transformations(nn.mlp_loss.__wrapped__, nn.mlp_apply.__wrapped__,
                                               row.args, jit_all=True).items():
            arrays |= {f"{key}/{i}": a for i, a in enumerate(leaves(fn(*args)))}
    np.savez(path, **arrays)


def compare(path: str, name: str, row: Workload, result: Any) -> dict[str, Any]:
    """The baked results against the saved references: the row's, and for ``grad`` each
    transformation's (a failed one records its error), with the tiers that served each."""
    import numpy as np

    with np.load(path) as saved:
        refs = {key: saved[key] for key in saved.files}

    def want(key: str) -> list[Any]:
        return [refs[f"{key}/{i}"] for i in range(sum(k.startswith(f"{key}/") for k in refs))]

    out: dict[str, Any] = {"max_diff": max_diff(leaves(result), want("forward"))}
    if name != "grad":
        return out
    from example_pkg import nn

    checks: dict[str, Any] = {}
    for key, (fn, args) in transformations(nn.mlp_loss, nn.mlp_apply, row.args,
                                           jit_all=False).items():
        before = tuple(len(f.call_report()) for f in (nn.mlp_loss, nn.mlp_apply))
        try:
            got = leaves(fn(*args))
            # no new entry: the artifact ran inside jax's transformation, not as an eager
            # first call (strict mode: it was the artifact, or the call raised)
            checks[key] = {"max_diff": max_diff(got, want(key)),
                           "served": served((nn.mlp_loss, nn.mlp_apply), before)
                           or ["artifact in the transformation"]}
        except Exception as err:
            checks[key] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    out["transforms"] = checks
    return out


def per_call_us(baked: Any, source: Any, args: tuple[Any, ...], rounds: int = 9
                ) -> dict[str, float]:
    """The median time of one call of each, once compiled (each call blocked on), in
    microseconds: ``rounds`` rounds of as many calls as fit in about 30 ms (3 to 200), the two
    sides in turn and in alternating order, so that a drift of the machine (a clock, another
    tenant) falls on both."""
    import jax

    calls = 3
    for fn in (baked, source):
        jax.block_until_ready(fn(*args))
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        calls = max(calls, min(200, int(0.03 / max(time.perf_counter() - start, 1e-6))))
    samples: dict[str, list[float]] = {"baked_us": [], "source_us": []}
    for index in range(rounds):
        sides = [("baked_us", baked), ("source_us", source)]
        for key, fn in sides if index % 2 else sides[::-1]:
            start = time.perf_counter()
            for _ in range(calls):
                jax.block_until_ready(fn(*args))
            samples[key].append((time.perf_counter() - start) / calls * 1e6)
    return {key: statistics.median(values) for key, values in samples.items()}


def hot_calls(name: str, row: Workload) -> dict[str, dict[str, float]]:
    """Per-call times, baked against the source, on arguments already on the device."""
    import jax
    import numpy as np

    args = jax.tree_util.tree_map(
        lambda a: jax.device_put(a) if isinstance(a, np.ndarray) else a, row.args)
    pairs = {"forward": (row.baked, row.source)}
    if name == "grad":
        from example_pkg import nn

        pairs["jit_grad"] = (jax.jit(jax.grad(nn.mlp_loss)),
                             jax.jit(jax.grad(nn.mlp_loss.__wrapped__)))
    return {key: per_call_us(baked, source, args) for key, (baked, source) in pairs.items()}


def environment(jax: Any, devices: list[Any]) -> dict[str, Any]:
    """What the process ran on and with: for the table's header."""
    import example_pkg
    import hatch_jaxexport

    client = devices[0].client
    return {"jax": jax.__version__, "backend": jax.default_backend(),
            "devices": sorted({d.device_kind for d in devices}), "device_count": len(devices),
            "platform_version": str(getattr(client, "platform_version", "")),
            "hatch_jaxexport": os.path.dirname(hatch_jaxexport.__file__),
            "example_pkg": os.path.dirname(example_pkg.__file__)}


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One fresh process's measurement (``spec``: mode, workload, backend, paths, first)."""
    start = time.perf_counter()
    import jax

    events = Events()
    if spec.get("jax_cache"):  # a second process of the source: jax's cache, warm
        jax.config.update("jax_compilation_cache_dir", spec["jax_cache"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    started = time.perf_counter()
    try:
        devices = jax.devices()  # the backend's start: never timed
    except RuntimeError as err:  # JAX_PLATFORMS names a platform this machine lacks
        return {"wrong_backend": True, "error": f"no {spec['backend']} backend here: "
                f"{(str(err).splitlines() or [''])[0][:300]}"}
    out: dict[str, Any] = {"import_jax_s": started - start,
                           "backend_s": time.perf_counter() - started}
    if jax.default_backend() != spec["backend"]:
        return {**out, "wrong_backend": True, "error": f"jax's backend is "
                f"{jax.default_backend()!r} ({devices}), not {spec['backend']!r}"}
    name, mode, first = spec["workload"], spec["mode"], spec.get("first", False)
    row = workload(name)
    if spec.get("describe"):
        out["environment"] = environment(jax, devices)
    if mode == "baked-warm-imported":  # the call path's modules first (step 4 listed them)
        out["imports_ms"] = import_call_path(spec["modules"])
    events.reset()  # what the backend's start and the imports compiled is not the call's
    before = set(sys.modules)
    if mode == "floor":
        out["first_ms"] = floor_ms(spec["floor"], row)  # first, as every row's: one column
        if name == "grad":  # loading the floor compiles nothing: still the first compile
            out["cotangent_ms"] = cotangent_ms()
    else:
        out["first_ms"], result = first_call_ms(
            row.baked if mode.startswith("baked") else row.source, row.args)
    # jax times a load from its persistent cache as a compile too: those are not compiles
    out["compiles"] = max(0, events.compiles - events.cache_hits)
    out["jax_cache_hits"] = events.cache_hits
    out["compile_ms"] = events.compile_s * 1e3
    if mode.startswith("baked"):
        out["served"] = served(row.reported)
    if mode == "baked-warm" and spec.get("modules"):  # what step 5 imports before its clock
        Path(spec["modules"]).write_text(json.dumps(sorted(
            name for name in set(sys.modules) - before if name.startswith("hatch_jaxexport."))))
    if first and mode == "source-cold":  # everything below runs after the timed call
        save_references(spec["refs"], row, result, name)
        out["floor_bytes"] = write_floor(spec["floor"], row)
        out["jax_cache_files"] = warm_jax_cache(spec["jax_cache_dir"], row)
    elif first and mode == "baked-cold":
        out |= compare(spec["refs"], name, row, result)
    elif mode == "source-warm":  # every run: the hot rows are medians over the runs too
        out["hot"] = hot_calls(name, row)
    return out


# -- the driver: one process at a time ----------------------------------------------------------

#: The steps of one run of a row, in order: (step, mode of the child).
STEPS = (("source_cold", "source-cold"), ("baked_cold", "baked-cold"),
         ("source_warm", "source-warm"), ("baked_warm", "baked-warm"),
         ("baked_warm_imported", "baked-warm-imported"), ("baked_warm_jax", "baked-warm"),
         ("floor", "floor"))


@dataclass
class Budget:
    """Wall-time left for processes: one that would end after ``seconds`` (judged by the
    longest process of its row so far, else of the run) is skipped."""

    seconds: float | None
    start: float = field(default_factory=time.monotonic)
    longest: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def allows(self, row: str, what: str) -> bool:
        if self.seconds is None:
            return True
        guess = self.longest.get(row, max(self.longest.values(), default=0.0))
        if time.monotonic() - self.start + guess <= self.seconds:
            return True
        self.skipped.append(f"{row} {what}")
        return False

    def took(self, row: str, seconds: float) -> None:
        self.longest[row] = max(self.longest.get(row, 0.0), seconds)


@dataclass
class Check:
    """A run of the check: its options, its folder and what it found so far."""

    platform: str
    runs: int
    floor_runs: int
    work: Path
    budget: Budget
    timeout: float
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    wrong_backend: str | None = None
    outputs: list[Path] = field(default_factory=list)
    logs: Path | None = None  # where a failed process's output goes (``--out``)
    steps: tuple[str, ...] = tuple(step for step, _ in STEPS)

    def process(self, name: str, mode: str, **spec: Any) -> dict[str, Any]:
        """One fresh process of ``mode`` for row ``name``; its JSON, or ``{"error": ...}``."""
        spec = {"workload": name, "mode": mode, "backend": BACKENDS[self.platform], **spec,
                "describe": not self.meta}
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                    "HATCH_JAXEXPORT_"))}
        env |= {"JAX_PLATFORMS": self.platform, "HATCH_JAXEXPORT_STRICT": "1",
                "HATCH_JAXEXPORT_CACHE": spec.pop("loader_cache", "0")}
        start = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                   json.dumps(spec)], env=env, cwd=self.work, text=True,
                                  capture_output=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"{mode}: no answer in {self.timeout:.0f} s"}
        finally:
            self.budget.took(name, time.monotonic() - start)
        lines = [line[len(MARK):] for line in proc.stdout.splitlines() if line.startswith(MARK)]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            if self.logs is not None:  # the whole story, beside the JSON
                self.logs.mkdir(parents=True, exist_ok=True)
                (self.logs / f"failed-{name}-{mode}-{int(start)}.txt").write_text(
                    f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n"
                    f"{proc.stderr}")
            return {"error": f"{mode}: {tail[:400]}"}
        out = json.loads(lines[-1])
        self.meta = self.meta or out.get("environment", {})
        return out

    def run(self, name: str, run: int) -> None:
        """One run of one row: its processes in ``STEPS`` order (the first run also warms
        jax's cache, writes the floor and the references, compares and times hot calls)."""
        folder = self.work / name
        folder.mkdir(exist_ok=True)
        result = self.results.setdefault(name, {"errors": [], "skipped": []})
        paths = {"refs": str(folder / "refs.npz"), "floor": str(folder / "floor.pkl"),
                 "jax_cache_dir": str(folder / "jax-cache")}
        for step, mode in STEPS:
            if step not in self.steps or self.wrong_backend or \
                    (step == "floor" and run >= self.floor_runs) or \
                    (step == "baked_warm_jax" and not self.jax_compiled(result, run)) or \
                    (step == "baked_warm_imported" and
                     not (folder / f"call-path-modules-{run}.json").exists()):
                continue
            spec: dict[str, Any] = dict(paths, first=run == 0)
            if step.startswith("baked"):
                spec["loader_cache"] = str(folder / f"loader-cache-{run}")
            if step in ("baked_warm", "baked_warm_imported"):  # step 4 lists, 5 imports
                spec["modules"] = str(folder / f"call-path-modules-{run}.json")
            if step == "source_warm":
                spec["jax_cache"] = paths["jax_cache_dir"]
                spec["loader_cache"] = str(folder / "loader-cache-0")  # its hot calls
            if step == "baked_warm_jax":  # the folder itself: jax's keys name its path
                spec["jax_cache"] = paths["jax_cache_dir"]
                spec["first"] = False
            if not self.budget.allows(name, f"{step} run {run + 1}"):
                result["skipped"].append(f"{step} run {run + 1}")
                continue
            began = time.monotonic()
            out = self.process(name, mode, **spec)
            print(f"  {step} run {run + 1}: " + (out["error"] if "error" in out else
                  f"{out['first_ms']:,.1f} ms") + f" (process {time.monotonic() - began:.1f} s)",
                  flush=True)
            self.record(name, step, out)
            self.save()

    @staticmethod
    def jax_compiled(result: dict[str, Any], run: int) -> bool:
        """Whether this run's baked second process made jax compiles (step 6's condition)."""
        compiles = result.get("baked_warm_compiles", [])
        return len(compiles) > run and compiles[run] > 0 and bool(result.get("source_warm"))

    def record(self, name: str, step: str, out: dict[str, Any]) -> None:
        """Keep one process's numbers in its row."""
        result = self.results[name]
        if "error" in out:
            result["errors"].append(out["error"])
            if out.get("wrong_backend"):
                self.wrong_backend = out["error"]
            return
        result.setdefault(step, []).append(out["first_ms"])
        result.setdefault("backend_s", []).append(out["backend_s"])
        result.setdefault(f"{step}_compiles", []).append(out["compiles"])
        result.setdefault(f"{step}_jax_cache_hits", []).append(out["jax_cache_hits"])
        result.setdefault(f"{step}_compile_ms", []).append(out.get("compile_ms", 0.0))
        if "served" in out:
            result.setdefault(f"{step}_served", []).append(out["served"])
        for key in ("max_diff", "transforms", "floor_bytes", "jax_cache_files"):
            if key in out:
                result[key] = out[key]
        for key in ("cotangent_ms", "imports_ms"):
            if key in out:
                result.setdefault(key, []).append(out[key])
        if "hot" in out:  # each run's, and their medians per pair and side
            runs = result.setdefault("hot_runs", [])
            runs.append(out["hot"])
            result["hot"] = {pair: {side: statistics.median(run[pair][side] for run in runs)
                                    for side in sides} for pair, sides in out["hot"].items()}

    def save(self) -> None:
        """Write the JSON and the table now: a run stopped later keeps what it measured."""
        doc = {"platform": self.platform, "runs": self.runs, "floor_runs": self.floor_runs,
               "environment": self.meta, "rows": self.results,
               "skipped": self.budget.skipped, "wrong_backend": self.wrong_backend,
               "table": report(self)}
        for path in self.outputs:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(".tmp")
            if path.suffix == ".md":
                temporary.write_text(doc["table"] + "\n")
            else:
                temporary.write_text(json.dumps(doc, indent=1) + "\n")
            temporary.replace(path)


# -- the table ----------------------------------------------------------------------------------

def cell(values: list[float] | None, digits: int = 0) -> str:
    """A median, with the range where there are several values; ``-`` for none."""
    if not values:
        return "-"
    text = f"{statistics.median(values):,.{digits}f}"
    if len(values) > 1:
        text += f" ({min(values):,.{digits}f}-{max(values):,.{digits}f})"
    return text


def ratio(top: list[float] | None, bottom: list[float] | None) -> str:
    """The ratio of two medians, ``-`` where either is missing."""
    if not top or not bottom or not statistics.median(bottom):
        return "-"
    return f"{statistics.median(top) / statistics.median(bottom):.2f}x"


def tiers(result: dict[str, Any], step: str) -> str:
    """The tiers that served a step's calls, over its runs."""
    found = sorted({tier for run in result.get(f"{step}_served", []) for tier in run})
    return ",".join(found) or "-"


#: The table's columns: (name a row's cells are given by, header). A row names the cells it
#: has (``table_row``); every other cell is ``-``.
COLUMNS = (("row", "row"), ("served", "served (cold; 2nd)"), ("diff", "max abs diff"),
           ("cold_source", "cold: source (ms)"), ("cold_baked", "cold: baked (ms)"),
           ("cold_ratio", "cold baked/source"),
           ("cold_compile", "cold: XLA compile, source / baked (ms)"),
           ("warm_source", "2nd: jax cache (ms)"), ("warm_baked", "2nd: baked (ms)"),
           ("warm_ratio", "2nd baked/jax cache"), ("floor", "floor (ms)"),
           ("floor_ratio", "2nd baked/floor"), ("hot_source", "hot: source (us)"),
           ("hot_baked", "hot: baked (us)"), ("hot_ratio", "hot baked/source"))
HEADER = "| " + " | ".join(header for _, header in COLUMNS) + " |"


def table_row(**cells: str) -> str:
    """One line of the table: the cells named (``COLUMNS``' names), ``-`` for the others."""
    unknown = set(cells) - {name for name, _ in COLUMNS}
    if unknown:
        raise ValueError(f"no such columns: {sorted(unknown)}")
    return "| " + " | ".join(cells.get(name, "-") for name, _ in COLUMNS) + " |"


def hot_cells(hot: dict[str, float] | None) -> dict[str, str]:
    """The hot columns of a pair's per-call times (none where it was not timed)."""
    if not hot:
        return {}
    return {"hot_source": cell([hot["source_us"]]), "hot_baked": cell([hot["baked_us"]]),
            "hot_ratio": ratio([hot["baked_us"]], [hot["source_us"]])}


def workload_line(name: str, result: dict[str, Any]) -> str:
    """One workload's row of the table."""
    diff = result.get("max_diff")
    label = "grad: `jax.grad(mlp_loss)` vs `jax.grad(jax.jit(f))`" if name == "grad" else name
    compiles = result.get("baked_warm_compiles")
    extra = (f" (+{statistics.median(compiles):.0f} jax compile(s))"
             if compiles and statistics.median(compiles) else "")
    return table_row(
        row=label, served=f"{tiers(result, 'baked_cold')}; {tiers(result, 'baked_warm')}{extra}",
        diff="-" if diff is None else f"{diff:.1e}",
        cold_source=cell(result.get("source_cold")), cold_baked=cell(result.get("baked_cold")),
        cold_ratio=ratio(result.get("baked_cold"), result.get("source_cold")),
        cold_compile=f"{cell(result.get('source_cold_compile_ms'))} / "
                     f"{cell(result.get('baked_cold_compile_ms'))}",
        warm_source=cell(result.get("source_warm")), warm_baked=cell(result.get("baked_warm")),
        warm_ratio=ratio(result.get("baked_warm"), result.get("source_warm")),
        floor=cell(result.get("floor"), 1),
        floor_ratio=ratio(result.get("baked_warm"), result.get("floor")),
        **hot_cells(result.get("hot", {}).get("forward")))


def jax_cache_line(name: str, result: dict[str, Any]) -> list[str]:
    """Step 6's row, where it ran: the baked second process with jax's cache on too."""
    if not result.get("baked_warm_jax"):
        return []
    compiles = result.get("baked_warm_jax_compiles", [])
    return [table_row(
        row=f"{name}, jax's cache on in both (the user's config)",
        served=f"{tiers(result, 'baked_warm_jax')} (+{statistics.median(compiles):.0f} jax "
               "compile(s))",
        warm_source=cell(result.get("source_warm")),
        warm_baked=cell(result.get("baked_warm_jax")),
        warm_ratio=ratio(result.get("baked_warm_jax"), result.get("source_warm")),
        floor=cell(result.get("floor"), 1),
        floor_ratio=ratio(result.get("baked_warm_jax"), result.get("floor")))]


def imported_line(name: str, result: dict[str, Any]) -> list[str]:
    """Step 5's row: the baked second process with its call path's modules imported before
    the clock, against the floor (which imports no library)."""
    if not result.get("baked_warm_imported"):
        return []
    return [table_row(
        row=f"{name}, 2nd process with the call path's modules imported first "
            f"({cell(result.get('imports_ms'), 1)} ms to import them)",
        served=tiers(result, "baked_warm_imported"),
        warm_baked=cell(result.get("baked_warm_imported"), 1),
        floor=cell(result.get("floor"), 1),
        floor_ratio=ratio(result.get("baked_warm_imported"), result.get("floor")))]


def eager_floor_line(name: str, result: dict[str, Any]) -> list[str]:
    """The eager gradient's floor for a first call: the floor's program plus the cotangent
    of ones jax compiles in every process (``cotangent_ms``), against the cold baked call."""
    cotangent, floor = result.get("cotangent_ms"), result.get("floor")
    if name != "grad" or not cotangent or not floor:
        return []
    total = [statistics.median(floor) + statistics.median(cotangent)]
    return [table_row(
        row="grad, floor of an eager first call: the floor + jax's cotangent of ones "
            f"({cell(cotangent)} ms, the process's first compile)",
        cold_baked=cell(result.get("baked_cold")), floor=cell(total, 1),
        floor_ratio=f"cold baked/floor {ratio(result.get('baked_cold'), total)}")]


def transform_lines(result: dict[str, Any]) -> list[str]:
    """The transformations' rows (checked with the grad workload)."""
    lines = []
    hot = result.get("hot", {}).get("jit_grad")
    for key, label in TRANSFORMS.items():
        found = result.get("transforms", {}).get(key)
        if found is None:
            continue
        lines.append(table_row(
            row=label, served=",".join(found.get("served", ["-"])),
            diff="ERROR" if "error" in found else f"{found['max_diff']:.1e}",
            **hot_cells(hot if key == "jit_grad" else None)))
    return lines


def failures(check: Check) -> list[str]:
    """What makes the check fail: a wrong backend, a process's error, a result that differs."""
    found = [check.wrong_backend] if check.wrong_backend else []
    if not any(step in result for result in check.results.values() for step, _ in STEPS):
        found.append("nothing was measured")
    for name, result in check.results.items():
        found += [f"{name}: {error}" for error in result["errors"]]
        if result.get("max_diff", 0.0) > TOLERANCE:
            found.append(f"{name}: the baked result differs from the source's by "
                         f"{result['max_diff']:.2e}")
        for key, got in result.get("transforms", {}).items():
            if "error" in got or got["max_diff"] > TOLERANCE:
                found.append(f"{name} {key}: {got.get('error') or got['max_diff']}")
    return found


def report(check: Check) -> str:
    """The table, its header lines and its verdict."""
    env = check.meta
    version = env.get("platform_version", "").splitlines()
    lines = [f"accelerator check, platform {check.platform}: jax {env.get('jax', '?')}, "
             f"devices {env.get('devices', '?')}, platform version "
             f"{' / '.join(version[:2]) or '?'}",
             f"hatch_jaxexport from {env.get('hatch_jaxexport', '?')}, example_pkg from "
             f"{env.get('example_pkg', '?')}",
             f"medians (min-max) of {check.runs} fresh process(es) each, the floor of "
             f"{check.floor_runs}; one process at a time; every time taken after jax.devices() "
             "returned (the backend's start is left out on both sides)", "",
             HEADER, "|---" + "|---:" * (len(COLUMNS) - 1) + "|"]
    for name, result in check.results.items():
        lines.append(workload_line(name, result))
        lines += imported_line(name, result) + jax_cache_line(name, result) \
            + eager_floor_line(name, result) + transform_lines(result)
    starts = [s for result in check.results.values() for s in result.get("backend_s", [])]
    if starts:
        lines += ["", f"backend start (left out): median {statistics.median(starts):.1f} s "
                  f"over {len(starts)} processes"]
    lines += ["", f"wall time {time.monotonic() - check.budget.start:.0f} s"]
    skipped = check.budget.skipped
    if skipped:
        per_row = {row.split()[0]: sum(s.split()[0] == row.split()[0] for s in skipped)
                   for row in skipped}
        lines += ["", f"--budget-seconds: {len(skipped)} process(es) skipped ("
                  + ", ".join(f"{row}: {count}" for row, count in per_row.items())
                  + "); their cells are '-'"]
    failed = failures(check)
    verdict = "FAILED" if failed else "OK"
    if skipped and not failed:
        verdict += f", incomplete: {len(skipped)} process(es) skipped"
    lines += ["", *[f"failed: {line}" for line in failed], f"result: {verdict}"]
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", required=True, choices=sorted(BACKENDS))
    parser.add_argument("--runs", type=int, default=2, help="fresh processes per step (2)")
    parser.add_argument("--floor-runs", type=int, default=1,
                        help="fresh processes for the floor (1; it varies least)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"rows to run, comma-separated (default: {','.join(WORKLOADS)})")
    parser.add_argument("--steps", default=",".join(step for step, _ in STEPS),
                        help="steps to run, comma-separated (default: all)")
    parser.add_argument("--budget-seconds", type=float, default=None,
                        help="skip the processes that would end after this many seconds")
    parser.add_argument("--process-timeout", type=float, default=300.0)
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--out", type=Path,
                        help="also write accelerator_check.json and .md into this folder")
    parser.add_argument("--keep", type=Path, help="keep the work folder (caches, floors) here")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.workloads.split(",")) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    names = [step for step, _ in STEPS]
    unknown = sorted(set(args.steps.split(",")) - set(names))
    if unknown:
        parser.error(f"unknown steps {unknown}; choose from {', '.join(names)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(MARK + json.dumps(child(json.loads(argv[1]))), flush=True)
        return 0
    args = parse(argv)
    work = Path(tempfile.mkdtemp(prefix="accelerator-check-"))
    check = Check(args.platform, args.runs, min(args.floor_runs, args.runs), work,
                  Budget(args.budget_seconds), args.process_timeout)
    check.outputs = [p for p in (args.json,) if p] + (
        [args.out / "accelerator_check.json", args.out / "accelerator_check.md"]
        if args.out else [])
    check.logs = args.out
    check.steps = tuple(args.steps.split(","))
    names = args.workloads.split(",")
    per_row = sum(step not in ("floor", "baked_warm_jax") for step in check.steps) * args.runs \
        + ("floor" in check.steps) * check.floor_runs
    print(f"{len(names) * per_row} processes, one at a time (and step 6 where it applies)",
          flush=True)
    try:
        for run in range(args.runs):  # every row's first run first: a budget cuts run 2
            for name in names:
                print(f"[{time.monotonic() - check.budget.start:6.1f} s] run {run + 1}: "
                      f"{name} ...", flush=True)
                check.run(name, run)
    finally:
        check.save()
        if args.keep:
            shutil.copytree(work, args.keep, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    text = report(check)
    print(text)
    return 1 if "result: FAILED" in text else 0


if __name__ == "__main__":
    sys.exit(main())
