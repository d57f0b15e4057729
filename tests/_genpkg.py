"""Generated packages, end to end (issue 58): a hypothesis strategy that writes small packages
of ``@exportable`` functions, and the pipeline that builds, installs, calls and checks each.

A package mixes the kinds of function real adoptions brought (``docs/adopting.md``):

- ``vec``, ``mat``: shape-polymorphic bodies, one or two structures, a static list, sizes of
  ``concrete=`` and ``executable_sizes=`` that overlap what is recorded;
- ``lengthy``: ``float(len(x))``, a size used as a Python number: its symbolic export fails, so
  with ``on-error = "skip"`` it is served only at the sizes the build knows (``concrete=``,
  ``executable_sizes=``, the recording);
- ``specless``: ``@exportable`` with no structure, baked from the recorded calls alone.

Each package is recorded (one or two recording runs that repeat each other and the explicit
sizes), built by the real Hatch hook (hatchling's wheel builder in this process, the exports in
its worker processes), installed with ``pip install --target``, then called in fresh processes
under ``python -W error`` with 1 and with 4 forced host devices (``tests/generated_calls.py``):
every result must equal the source's (``jax.jit`` of ``fn.__wrapped__``), no call may raise,
and a call that an artifact covers must not trace the source. ``jaxexport inspect``,
``jaxexport verify`` and the release check (``pytest --jaxexport-check``) must accept the
wheel. ``tests/integration/test_generated_packages.py`` runs a short derandomized slice;
``scripts/generated_packages.py --examples N`` the long one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _buildkit import hatch_pyproject, inprocess_build, write_project
from conftest import TESTS, run
from hypothesis import strategies as st

PACKAGE = "jxe_gen"
#: Sizes the recording and the explicit options draw from (so that they overlap), and sizes
#: none of them uses (calls no concrete-size artifact covers).
KNOWN_SIZES = (2, 3, 4)
NEW_SIZES = (5, 6)
DEVICE_COUNTS = (1, 4)

#: Bodies per kind; ``p`` is the static argument (``1`` where the function has none).
BODIES = {
    "vec": ("jnp.sin(x) * p + 1.0", "jnp.cumsum(x, axis=0) * p - x",
            "x / (1.0 + jnp.abs(x)) + p"),
    "mat": ("(x @ y) * p", "jnp.tanh(x + y).sum(axis=0) * p"),
    "lengthy": ("x * float(len(x)) + p",
                "jnp.stack([x[i] * (i + p) for i in range(len(x))])"),
    "specless": ("y = x[1:] - x[:-1]\n    return y * scale if mode == 'mul' else y + scale",
                 "y = jnp.sort(x, axis=0) * scale\n    return y if mode == 'mul' else y - scale"),
}
#: The structures of each kind: one dict of argument -> (shape, dtype) per structure.
STRUCTURES = {
    "vec": ({"x": "n"}, {"x": "a, b"}),
    "mat": ({"x": "n, m", "y": "m"},),
    "lengthy": ({"x": "n"},),
}
SPECLESS_STATICS = {"scale": (0.5, 2.0), "mode": ("add", "mul")}
TRANSFORMS = ("", "vjp_order=1", "ad_order=1", "vmap=True")


@dataclasses.dataclass(frozen=True)
class Call:
    """One call: its arrays' shapes (float32, in argument order), its static keyword values,
    and whether an artifact of the build covers it (then it must not trace the source)."""

    arrays: tuple[tuple[str, tuple[int, ...]], ...]
    static: tuple[tuple[str, Any], ...] = ()
    structure: int = -1  # the structure whose sizes it records (-1: spec-less)

    def describe(self) -> str:
        shapes = ", ".join(f"{n}=float32{list(s)}" for n, s in self.arrays)
        return shapes + "".join(f", {k}={v!r}" for k, v in self.static)


@dataclasses.dataclass(frozen=True)
class Function:
    """One generated ``@exportable`` and the calls made of it."""

    name: str
    kind: str
    body: int
    statics: tuple[int, ...] = ()  # the baked values of ``p``; () = no static argument
    structures: int = 1
    concrete: tuple[tuple[str, tuple[int, ...]], ...] = ()
    executable_sizes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    platforms: tuple[str, ...] = ()
    transforms: str = ""  # "", "vjp_order=1", "ad_order=1" or "vmap=True": family members
    recorded: tuple[Call, ...] = ()
    unrecorded: tuple[Call, ...] = ()

    def explicit_sizes(self) -> list[dict[str, int]]:
        """Every combination of ``concrete=`` and of ``executable_sizes=`` sizes (structure 0)."""
        out = []
        for option in (self.concrete, self.executable_sizes):
            if option:
                names = [n for n, _ in option]
                out += [dict(zip(names, combo, strict=True))
                        for combo in itertools.product(*(s for _, s in option))]
        return out

    def covers(self, call: Call) -> bool:
        """Whether the build bakes an artifact that serves ``call``."""
        if self.kind in ("vec", "mat"):
            return True  # symbolic: every size, every baked static value
        if self.kind == "specless":
            return call in self.recorded
        known = {tuple(sorted(s.items())) for s in self.explicit_sizes()}
        known |= {_sizes(c) for c in self.recorded}
        return _sizes(call) in known

    def source(self) -> str:
        """The function's Python source."""
        if self.kind == "specless":
            head = "@exportable" + (f"(platforms={list(self.platforms)!r})"
                                    if self.platforms else "")
            return (f"{head}\ndef {self.name}(x, scale=2.0, mode='add'):\n"
                    f"    TRACES['count'] += 1\n    {BODIES['specless'][self.body]}\n")
        specs = [{arg: (shape, "float32") for arg, shape in s.items()}
                 for s in STRUCTURES[self.kind][:self.structures]]
        options = [repr(s) for s in specs]
        if self.statics:
            options.append(f"static={{'p': {list(self.statics)!r}}}")
        for key, value in (("concrete", self.concrete),
                           ("executable_sizes", self.executable_sizes)):
            if value:
                options.append(f"{key}={ {n: list(s) for n, s in value}!r}")
        if self.platforms:
            options.append(f"platforms={list(self.platforms)!r}")
        if self.transforms:
            options.append(self.transforms)
        args = ", ".join(STRUCTURES[self.kind][0]) + (", p=1" if self.statics else "")
        default = "" if self.statics else "    p = 1\n"
        return (f"@exportable({', '.join(options)})\ndef {self.name}({args}):\n"
                f"    TRACES['count'] += 1\n{default}"
                f"    return {BODIES[self.kind][self.body]}\n")


def _sizes(call: Call) -> tuple[tuple[str, int], ...]:
    """The symbol sizes of a structured call (structure 0 of ``vec``/``lengthy``/``mat``)."""
    shapes = dict(call.arrays)
    if "y" in shapes:
        return (("m", shapes["y"][0]), ("n", shapes["x"][0]))
    return (("n", shapes["x"][0]),) if len(shapes["x"]) == 1 else (
        ("a", shapes["x"][0]), ("b", shapes["x"][1]))


@dataclasses.dataclass(frozen=True)
class Package:
    """A generated package: its functions, the build's platforms, and how it is recorded."""

    functions: tuple[Function, ...]
    platforms: tuple[str, ...] = ("cpu",)
    recording_runs: int = 1
    jobs: int = 1  # export workers: a function's tasks may go to two of them

    @property
    def executables(self) -> bool:
        return any(f.executable_sizes for f in self.functions)

    def source(self) -> str:
        head = ('"""A generated package (tests/_genpkg.py)."""\nimport jax.numpy as jnp\n\n'
                "from hatch_jaxexport import exportable\n\nTRACES = {'count': 0}\n")
        return head + "".join(f"\n\n{f.source()}" for f in self.functions)

    def pyproject(self) -> str:
        table = (f'on-error = "skip"\nplatforms = {json.dumps(list(self.platforms))}\n'
                 f"jobs = {self.jobs}\n")
        if self.executables:
            table += "executables = true\n"
        return hatch_pyproject(PACKAGE.replace("_", "-"), table)

    def recordings(self) -> list[list[dict[str, Any]]]:
        """The calls of each recording run: with two runs, the second repeats the first's last
        call, so that the signatures file merges a recording into one holding it already."""
        calls = [_plan_call(f, c) for f in self.functions for c in f.recorded]
        if self.recording_runs == 1 or len(calls) < 2:
            return [calls]
        half = len(calls) // 2
        return [calls[:half + 1], calls[half:]]

    def calls(self) -> list[dict[str, Any]]:
        """What the served processes call: every recorded call, once per distinct signature,
        then the explicit sizes and the calls no recording made."""
        out: dict[str, dict[str, Any]] = {}
        for fn in self.functions:
            explicit = [_structured_call(fn, sizes, static)
                        for sizes in fn.explicit_sizes() for static in _static_values(fn)]
            for call in (*fn.recorded, *explicit, *fn.unrecorded):
                out.setdefault(f"{fn.name}({call.describe()})", _plan_call(fn, call))
                if fn.transforms and fn.kind != "specless":
                    out.setdefault(f"grad {fn.name}({call.describe()})",
                                   _plan_call(fn, call, grad=True))
        return list(out.values())

    def describe(self) -> str:
        """The package for a failing example's report: its pyproject table and its source."""
        recorded = {f.name: [c.describe() for c in f.recorded] for f in self.functions}
        return (f"platforms={list(self.platforms)}, executables={self.executables}, "
                f"jobs={self.jobs}, recording runs={self.recording_runs}, "
                f"recorded={recorded}\n{self.source()}")


def _static_values(fn: Function) -> list[tuple[tuple[str, Any], ...]]:
    return [(("p", p),) for p in fn.statics] or [()]


def _structured_call(fn: Function, sizes: dict[str, int],
                     static: tuple[tuple[str, Any], ...], structure: int = 0) -> Call:
    shapes = STRUCTURES[fn.kind][structure]
    arrays = tuple((arg, tuple(sizes[d.strip()] for d in shape.split(",")))
                   for arg, shape in shapes.items())
    return Call(arrays, static, structure)


def _plan_call(fn: Function, call: Call, grad: bool = False) -> dict[str, Any]:
    """A call for ``tests/generated_calls.py``; ``grad``: ``jax.grad`` of its sum with respect
    to its first array, which a concrete-size artifact serves with its VJP and a symbolic one
    with its ``vjp_order``/``ad_order`` members."""
    covered = fn.covers(call) and (not grad or fn.kind == "lengthy" or fn.transforms in (
        "vjp_order=1", "ad_order=1"))
    return {"function": fn.name, "arrays": [[n, list(s)] for n, s in call.arrays],
            "static": dict(call.static), "covered": covered, "grad": grad,
            "describe": f"{'grad ' if grad else ''}{fn.name}({call.describe()})"}


# ---------------------------------------------------------------- the hypothesis strategies

def _size_options(symbols: Sequence[str]) -> st.SearchStrategy[tuple[tuple[str, tuple[int, ...]],
                                                                     ...]]:
    """``concrete=`` or ``executable_sizes=``: nothing, or sizes for every symbol."""
    sizes = st.lists(st.sampled_from(KNOWN_SIZES), min_size=1, max_size=2, unique=True)
    return st.one_of(st.just(()), st.tuples(*(st.tuples(st.just(s), sizes.map(tuple))
                                              for s in symbols)))


@st.composite
def _structured_calls(draw: st.DrawFn, fn: Function, pool: Sequence[int], most: int
                      ) -> tuple[Call, ...]:
    calls = []
    for _ in range(draw(st.integers(0 if pool == KNOWN_SIZES else 1, most))):
        structure = draw(st.integers(0, fn.structures - 1))
        symbols = ("a", "b") if structure == 1 else ("n", "m") if fn.kind == "mat" else ("n",)
        sizes = {s: draw(st.sampled_from(pool)) for s in symbols}
        static = draw(st.sampled_from(_static_values(fn)))
        calls.append(_structured_call(fn, sizes, static, structure))
    return tuple(calls)


@st.composite
def _specless_calls(draw: st.DrawFn, most: int, least: int = 0,
                    sizes: Sequence[int] = KNOWN_SIZES) -> tuple[Call, ...]:
    calls = []
    for _ in range(draw(st.integers(least, most))):
        shape = draw(st.sampled_from([(n,) for n in sizes] + [(n, 2) for n in sizes]))
        static = tuple((k, draw(st.sampled_from(v))) for k, v in SPECLESS_STATICS.items())
        calls.append(Call((("x", shape),), static))
    return tuple(calls)


@st.composite
def functions(draw: st.DrawFn, name: str) -> Function:
    """One generated function, with the calls its recording makes and the ones it does not."""
    kind = draw(st.sampled_from(sorted(BODIES)))
    body = draw(st.integers(0, len(BODIES[kind]) - 1))
    platforms = draw(st.sampled_from([(), ("cpu", "tpu")]))
    if kind == "specless":
        recorded = draw(_specless_calls(3))
        new = draw(_specless_calls(2, 1, NEW_SIZES))
        return Function(name, kind, body, platforms=platforms, recorded=recorded + recorded[:1],
                        unrecorded=new)
    symbols = ("n", "m") if kind == "mat" else ("n",)
    fn = Function(name, kind, body,
                  statics=draw(st.sampled_from([(), (1,), (1, 2)])),
                  structures=draw(st.integers(1, 2)) if kind == "vec" else 1,
                  concrete=draw(_size_options(symbols)),
                  executable_sizes=draw(_size_options(symbols)), platforms=platforms,
                  transforms=draw(st.sampled_from(TRANSFORMS)))
    recorded = draw(_structured_calls(fn, KNOWN_SIZES, 3))
    return dataclasses.replace(fn, recorded=recorded,
                               unrecorded=draw(_structured_calls(fn, NEW_SIZES, 2)))


@st.composite
def packages(draw: st.DrawFn) -> Package:
    """A package of two to four generated functions."""
    count = draw(st.integers(2, 4))
    return Package(tuple(draw(functions(f"f{i}")) for i in range(count)),
                   platforms=draw(st.sampled_from([("cpu",), ("cpu", "tpu")])),
                   recording_runs=draw(st.integers(1, 2)), jobs=draw(st.integers(1, 2)))


# ---------------------------------------------------------------- build, install, call, check

@dataclasses.dataclass
class Tally:
    """What the generated packages covered, and every failure found, across examples."""

    packages: int = 0
    calls: int = 0
    mismatches: list[str] = dataclasses.field(default_factory=list)
    exceptions: list[str] = dataclasses.field(default_factory=list)
    unserved: list[str] = dataclasses.field(default_factory=list)
    rejected: list[str] = dataclasses.field(default_factory=list)

    def line(self) -> str:
        return (f"{self.packages} packages, {self.calls} calls, {len(self.mismatches)} "
                f"mismatches, {len(self.exceptions)} exceptions, {len(self.unserved)} "
                f"covered calls traced, {len(self.rejected)} checks refused the wheel")

    def failures(self) -> list[str]:
        return [*self.mismatches, *self.exceptions, *self.unserved, *self.rejected]


def _env(site: Path, cache: Path, **extra: str) -> dict[str, str]:
    """A user's process: the installed wheel first on the path, default mode, no notices."""
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    env = {"PYTHONPATH": path, "HATCH_JAXEXPORT_CACHE": str(cache), "JAX_PLATFORMS": "cpu",
           **extra}
    for name in ("HATCH_JAXEXPORT_STRICT", "HATCH_JAXEXPORT_WARNINGS", "HATCH_JAXEXPORT_RECORD",
                 "XLA_FLAGS"):
        env.setdefault(name, "")
    return env


def build(package: Package, tmp: Path) -> tuple[Path, Path]:
    """Record, build and install ``package``: the project folder and the install folder."""
    project = write_project(tmp / "proj", {"pyproject.toml": package.pyproject(),
                                           f"{PACKAGE}/__init__.py": package.source()})
    for index, calls in enumerate(package.recordings()):
        plan = tmp / f"record-{index}.json"
        plan.write_text(json.dumps(calls))
        run([sys.executable, "-W", "error", TESTS / "generated_calls.py", plan, "--record"],
            env=_env(project, tmp / "cache-record", HATCH_JAXEXPORT_RECORD="1"))
    with open(tmp / "build.log", "w") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        (wheel,) = inprocess_build(project, tmp / "dist")
    site = tmp / "site"
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
         site, wheel])
    return project, site


def call_fresh(package: Package, tmp: Path, site: Path, tally: Tally) -> None:
    """The calls, in one fresh process per device count, all sharing one executable cache
    (what the first process compiles, the next reads back)."""
    plan = tmp / "calls.json"
    plan.write_text(json.dumps(package.calls()))
    for devices in DEVICE_COUNTS:
        env = _env(site, tmp / "cache", XLA_FLAGS=f"--xla_force_host_platform_device_count="
                                                  f"{devices}")
        done = run([sys.executable, "-W", "error", TESTS / "generated_calls.py", plan], env=env,
                   check=False)
        where = f"[{devices} device(s)]"
        try:
            out = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            tally.exceptions.append(f"{where} the process failed ({done.returncode}): "
                                    f"{done.stderr[-3000:]}")
            continue
        tally.calls += out["calls"]
        for key in ("mismatches", "exceptions", "unserved"):
            getattr(tally, key).extend(f"{where} {text}" for text in out[key])
        if done.returncode != 0 or done.stderr.strip():
            tally.exceptions.append(f"{where} exit {done.returncode}, stderr: "
                                    f"{done.stderr[-3000:]}")


def check_wheel(project: Path, site: Path, tmp: Path, tally: Tally) -> None:
    """``jaxexport inspect``, ``jaxexport verify`` and the release check on the install."""
    env = _env(site, tmp / "cache-check")
    for command in ("inspect", "verify"):
        done = run([sys.executable, "-m", "hatch_jaxexport", command, PACKAGE], env=env,
                   check=False, cwd=tmp)
        if done.returncode != 0 or (command == "verify" and f"{PACKAGE}: OK" not in done.stdout):
            tally.rejected.append(f"jaxexport {command} ({done.returncode}): "
                                  f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    checked = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   "--jaxexport-check", PACKAGE, "--jaxexport-source", project,
                   "--jaxexport-only", "--jaxexport-shapes", "1"], env=env, check=False,
                  cwd=tmp)
    if checked.returncode != 0:
        tally.rejected.append(f"release check ({checked.returncode}): "
                              f"{checked.stdout[-3000:]}{checked.stderr[-1000:]}")


def exercise(package: Package, tmp: Path, tally: Tally) -> list[str]:
    """Everything for one package; the failures it found (also added to ``tally``)."""
    before = len(tally.failures())
    tmp.mkdir(parents=True, exist_ok=True)
    project, site = build(package, tmp)
    call_fresh(package, tmp, site, tally)
    check_wheel(project, site, tmp, tally)
    tally.packages += 1
    return tally.failures()[before:]


def report(package: Package, failures: list[str]) -> str:
    """A failing example's message: what failed, then the package that made it fail."""
    return textwrap.indent("\n".join(failures), "  ") + "\n--- the package:\n" + \
        package.describe()


def keep_bytecode_out() -> None:
    """The processes the pipeline starts inherit no bytecode setting that writes beside the
    generated sources (``tests/conftest.py`` sets a shared prefix; a script run sets it too)."""
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(os.environ.get("TMPDIR", "/tmp"))
                                                     / f"jaxexport-test-bytecode-{os.getuid()}"))


def _sized(fn: Function, *sizes: dict[str, int], static: tuple[tuple[str, Any], ...] = (),
           structure: int = 0) -> tuple[Call, ...]:
    return tuple(_structured_call(fn, s, static, structure) for s in sizes)


def kitchen_sink() -> Package:
    """Every feature in one package, each overlapping another: the explicit example CI runs
    first. ``lengthy`` records a size its ``concrete=`` and its ``executable_sizes=`` name, with
    each of its static values, in two recording runs; ``vec`` has two structures, a static
    list, overlapping ``concrete=`` and ``executable_sizes=``; ``mat`` two symbols, on cpu and
    tpu; the spec-less function records one call twice and two calls told apart by a static
    value only."""
    lengthy = Function("lengthy", "lengthy", 0, statics=(1, 2), concrete=(("n", (3,)),),
                       executable_sizes=(("n", (3, 4)),), transforms="ad_order=1")
    lengthy = dataclasses.replace(
        lengthy, recorded=_sized(lengthy, {"n": 3}, {"n": 2}, static=(("p", 1),))
        + _sized(lengthy, {"n": 3}, {"n": 4}, static=(("p", 2),)),
        unrecorded=_sized(lengthy, {"n": 5}, static=(("p", 1),)))
    stacked = Function("stacked", "lengthy", 1, platforms=("cpu", "tpu"))
    stacked = dataclasses.replace(stacked, recorded=_sized(stacked, {"n": 2}, {"n": 2}),
                                  unrecorded=_sized(stacked, {"n": 6}))
    vec = Function("vec", "vec", 1, statics=(1, 2), structures=2, concrete=(("n", (2, 3)),),
                   executable_sizes=(("n", (3,)),), transforms="vjp_order=1")
    vec = dataclasses.replace(
        vec, recorded=_sized(vec, {"n": 3}, {"n": 4}, static=(("p", 2),))
        + _sized(vec, {"a": 2, "b": 3}, static=(("p", 1),), structure=1),
        unrecorded=_sized(vec, {"n": 6}, static=(("p", 1),))
        + _sized(vec, {"a": 5, "b": 2}, static=(("p", 2),), structure=1))
    mat = Function("mat", "mat", 0, concrete=(("n", (2,)), ("m", (3,))),
                   executable_sizes=(("n", (2,)), ("m", (3, 4))), platforms=("cpu", "tpu"))
    mat = dataclasses.replace(mat, recorded=_sized(mat, {"n": 2, "m": 3}),
                              unrecorded=_sized(mat, {"n": 5, "m": 6}))
    add = (("scale", 2.0), ("mode", "add"))
    mul = (("scale", 2.0), ("mode", "mul"))
    free = Function("free", "specless", 0, recorded=(
        Call((("x", (4,)),), add), Call((("x", (4,)),), mul), Call((("x", (4,)),), add),
        Call((("x", (3, 2)),), (("scale", 0.5), ("mode", "mul")))),
        unrecorded=(Call((("x", (4,)),), (("scale", 0.5), ("mode", "add"))),
                    Call((("x", (6,)),), add)))
    return Package((lengthy, stacked, vec, mat, free), platforms=("cpu", "tpu"),
                   recording_runs=2, jobs=2)
