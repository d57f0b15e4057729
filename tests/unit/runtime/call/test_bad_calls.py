"""Bad calls beyond ``test_loader.BAD_CALLS``: keywords vs positions, huge dimensions, tracers of
an outer transformation, non-array inputs, and the float64-into-float32 rule.

Each refused call must raise ``TypeError``/``ValueError`` whose message names the function, the
argument, and what is accepted; the class is the ``CallMismatch`` subclass of its kind (``KINDS``
below), and every dtype refusal says what was given and the fix (``DTYPES``). Rows marked
``xfail(strict=True)`` are known gaps (reported); they start failing, as they should, once the
gap is closed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hatch_jaxexport.errors import (
    CallMismatch,
    DtypeMismatch,
    PytreeMismatch,
    ShapeMismatch,
    SignatureMismatch,
    StaticValueMismatch,
)

S = jax.ShapeDtypeStruct
F32 = jnp.float32
SCALE = "x: float32[a, b]"
POLY = "x: float32[n]"


@dataclasses.dataclass(frozen=True)
class Bad:
    id: str
    call: Callable[[Any], Any]
    error: type[Exception]
    function: str
    argument: str
    accepted: str
    gap: str = ""


HUGE_GAP = ("dispatch checks the int32 dimension limit only for structures with constraints: "
            "without them, a dimension >= 2**31 passes and compiling fails inside jax ('Error "
            "refining shapes', no function name)")

ROWS = [
    # keywords vs positions
    Bad("keyword-only given by position", lambda d: d.combine(jnp.ones(2), jnp.ones(2)),
        TypeError, "jxe_demo.funcs:combine", "y", "*, y"),
    Bad("unknown keyword", lambda d: d.scale(jnp.ones((2, 2)), y=jnp.ones(2)), TypeError,
        "jxe_demo.funcs:scale", "y", "(x)"),
    Bad("static value by position", lambda d: d.poly(jnp.ones(3), "slow"), ValueError,
        "jxe_demo.funcs:poly", "mode", "the baked values are 'fast', 'exact'"),
    Bad("static value of another type", lambda d: d.poly(jnp.ones(3), mode=1), ValueError,
        "jxe_demo.funcs:poly", "mode", "the baked values are 'fast', 'exact'"),
    Bad("keyword argument of the wrong shape", lambda d: d.combine(jnp.ones(2), y=jnp.ones(3)),
        ValueError, "jxe_demo.funcs:combine", "y", "Accepted: [0] x: float32[n]; y: float32[n]"),
    # huge dimensions (abstract only: nothing is ever allocated)
    Bad("dimension beyond int32 with a constraint",
        lambda d: jax.eval_shape(d.constrained, S((2**31, 2), F32), S((2,), F32)),
        ValueError, "jxe_demo.funcs:constrained", "x", "2147483647"),
    Bad("dimension beyond int32, compiled",
        lambda d: jax.jit(d.poly).lower(S((2**31,), F32)).compile(), ValueError,
        "jxe_demo.funcs:poly", "x", "2147483647", HUGE_GAP),
    # tracers of an outer transformation
    Bad("wrong rank inside jit", lambda d: jax.jit(lambda x: d.scale(x))(jnp.ones(3)), TypeError,
        "jxe_demo.funcs:scale", "x", f"Accepted: [0] {SCALE}"),
    Bad("wrong dtype inside jit",
        lambda d: jax.jit(lambda x: d.scale(x))(jnp.ones((2, 2), jnp.int32)), TypeError,
        "jxe_demo.funcs:scale", "x", "expects dtype float32"),
    Bad("wrong per-example rank inside vmap", lambda d: jax.vmap(d.scale)(jnp.ones((4, 3))),
        TypeError, "jxe_demo.funcs:scale", "x", f"Accepted: [0] {SCALE}"),
    Bad("inconsistent sizes inside vmap",
        lambda d: jax.vmap(lambda x, y: d.combine(x, y=y))(jnp.ones((3, 2)), jnp.ones((3, 4))),
        ValueError, "jxe_demo.funcs:combine", "y", "but n = 2 from argument 'x'"),
    Bad("wrong pytree under grad",
        lambda d: jax.grad(lambda p: d.dense(p, jnp.ones((2, 4))).sum())({"w": jnp.ones((4, 2))}),
        TypeError, "jxe_demo.funcs:dense", "params", "expects a dict with keys ['b', 'w']"),
    Bad("traced value for a static argument",
        lambda d: jax.jit(lambda x, k: d.power(x, k=k))(jnp.ones(3), 2), ValueError,
        "jxe_demo.funcs:power", "k", "the baked values are 1, 2"),
    Bad("unbaked static value inside jit",
        lambda d: jax.jit(lambda x: d.poly(x, mode="slow"))(jnp.ones(3)), ValueError,
        "jxe_demo.funcs:poly", "mode", "the baked values are 'fast', 'exact'"),
    Bad("wrong rank under eval_shape", lambda d: jax.eval_shape(d.scale, S((3,), F32)),
        TypeError, "jxe_demo.funcs:scale", "x", f"Accepted: [0] {SCALE}"),
    # non-array inputs
    Bad("None for an array", lambda d: d.scale(None), TypeError, "jxe_demo.funcs:scale", "x",
        f"expects an array float32[a, b], got None. Accepted: [0] {SCALE}"),
    Bad("dict for an array", lambda d: d.scale({"a": 1}), TypeError, "jxe_demo.funcs:scale",
        "x", f"Accepted: [0] {SCALE}"),
    Bad("object for an array", lambda d: d.scale(object()), TypeError, "jxe_demo.funcs:scale",
        "x", f"Accepted: [0] {SCALE}"),
    Bad("bytes for an array", lambda d: d.scale(b"ab"), TypeError, "jxe_demo.funcs:scale", "x",
        f"Accepted: [0] {SCALE}"),
    Bad("list of strings", lambda d: d.poly(["a", "b"]), TypeError, "jxe_demo.funcs:poly", "x",
        f"Accepted: [0] {POLY}"),
    Bad("Python int for a vector", lambda d: d.poly(3), TypeError, "jxe_demo.funcs:poly", "x",
        f"expects float32[n], got a Python int. Accepted: [0] {POLY}"),
    Bad("Python complex for a float32 scalar", lambda d: d.listy([jnp.ones(2)] * 2, 1j),
        TypeError, "jxe_demo.funcs:listy", "scale", "expects float32[], got a Python complex"),
    Bad("bool array", lambda d: d.scale(jnp.ones((2, 2), bool)), TypeError,
        "jxe_demo.funcs:scale", "x", "expects dtype float32 (float32[a, b]), got bool"),
    Bad("float16 array", lambda d: d.scale(jnp.ones((2, 2), jnp.float16)), TypeError,
        "jxe_demo.funcs:scale", "x", "expects dtype float32 (float32[a, b]), got float16"),
    Bad("0-d array for a matrix", lambda d: d.scale(jnp.float32(1)), TypeError,
        "jxe_demo.funcs:scale", "x", "expects rank 2 (float32[a, b]), got shape ()"),
    Bad("tuple for a dict", lambda d: d.dense((jnp.ones((4, 2)), jnp.ones(2)), jnp.ones((2, 4))),
        TypeError, "jxe_demo.funcs:dense", "params", "expects a dict with keys ['b', 'w']"),
    Bad("dict with an extra key",
        lambda d: d.dense({"w": jnp.ones((4, 2)), "b": jnp.ones(2), "c": 1}, jnp.ones((2, 4))),
        TypeError, "jxe_demo.funcs:dense", "params", "expects a dict with keys ['b', 'w']"),
    Bad("namedtuple for a dataclass", lambda d: d.swap(d.Stats(jnp.ones(2), jnp.ones(2))),
        TypeError, "jxe_demo.funcs:swap", "pair", "expects a Pair, got Stats("),
    Bad("empty list", lambda d: d.listy([], 1.0), TypeError, "jxe_demo.funcs:listy", "t",
        "expects a list of 2, got []"),
]


def _param(row: Bad) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=row.gap)] if row.gap else []
    return pytest.param(row, id=row.id, marks=marks)


@pytest.fixture(autouse=True)
def _strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """These are strict mode's refusals; by default the same calls run the source
    (``test_dropin_calls``)."""
    monkeypatch.setenv("HATCH_JAXEXPORT_STRICT", "1")


@pytest.fixture(scope="module")
def d(demo: Any) -> Any:
    demo.scale(np.ones((2, 2), np.float32))  # an eager first call (see the fresh-process test)
    return demo


@pytest.mark.parametrize("row", [_param(row) for row in ROWS])
def test_bad_call_names_function_argument_and_what_is_accepted(d: Any, row: Bad) -> None:
    with pytest.raises(row.error) as info:
        row.call(d)
    message = str(info.value)
    assert message.startswith(row.function + ":"), message
    assert f"'{row.argument}'" in message, message
    assert row.accepted in message, message


GOOD = [
    ("all keywords", lambda d: d.combine(x=jnp.ones(2), y=jnp.ones(2)), (2,)),
    ("array argument by keyword", lambda d: d.scale(x=jnp.ones((2, 3))), (2, 3)),
    ("static value by position", lambda d: d.poly(jnp.ones(3), "exact"), (3,)),
    ("huge dimensions, abstractly", lambda d: jax.eval_shape(d.poly, S((2**33,), F32)),
     (2**33,)),
    ("huge dimensions, two axes", lambda d: jax.eval_shape(d.scale, S((2**20, 2**20), F32)),
     (2**20, 2**20)),
    ("under jit", lambda d: jax.jit(d.scale)(jnp.ones((2, 3))), (2, 3)),
    ("float64 numpy with x64 off (cast as jit would)", lambda d: d.scale(np.ones((2, 3))),
     (2, 3)),
    ("Python float for a float32 scalar", lambda d: d.listy([jnp.ones(2)] * 2, 2.0)[0], (2,)),
]


@pytest.mark.parametrize("call, shape", [pytest.param(c, s, id=i) for i, c, s in GOOD])
def test_calls_that_are_accepted(d: Any, call: Callable[[Any], Any], shape: tuple) -> None:
    out = call(d)
    assert out.shape == shape and out.dtype == jnp.float32


X64 = r"""
import jax, jax.numpy as jnp, numpy as np
from jxe_demo import funcs
assert jax.config.jax_enable_x64
for name, call in [("numpy float64", lambda: funcs.scale(np.ones((2, 2)))),
                   ("jax float64", lambda: funcs.scale(jnp.ones((2, 2)))),
                   ("float64 inside jit", lambda: jax.jit(funcs.scale)(jnp.ones((2, 2))))]:
    try:
        call()
        print(name, "ACCEPTED")
    except TypeError as err:
        print(name, "REFUSED", err)
from hatch_jaxexport import ArtifactError
for name, call in [("float32", lambda: funcs.scale(np.ones((2, 2), np.float32))),
                   ("python float", lambda: funcs.listy([np.ones(2, np.float32)] * 2, 2.0)[0])]:
    try:
        print(name, call().dtype)
    except ArtifactError as err:  # baked with x64 off: another config than this process's
        print(name, "CONFIG", "jax_enable_x64=False at export, True in this process" in str(err))
"""


def test_float64_into_float32_is_refused_with_x64_on(demo_site, run_python) -> None:
    """The rule: a float64 array fits a float32 structure only when jax itself would see it as
    float32 (x64 off: jax canonicalizes it, as ``jax.jit`` would). With x64 on it is refused,
    never silently cast, before anything else. Calls that fit (float32 arrays, weakly typed
    Python floats) then meet the config rule: jxe_demo was baked with x64 off, so in strict mode
    they raise the config mismatch naming ``jax_enable_x64`` (a variant baked with
    ``x64="both"`` would serve them; tests/unit/bake/export/test_export_config.py)."""
    proc = run_python(X64, env={"PYTHONPATH": str(demo_site), "JAX_PLATFORMS": "cpu",
                                "JAX_ENABLE_X64": "1", "HATCH_JAXEXPORT_STRICT": "1"})
    lines = proc.stdout.splitlines()
    for line, name in zip(lines, ("numpy float64", "jax float64", "float64 inside jit"),
                          strict=False):
        assert line.startswith(f"{name} REFUSED jxe_demo.funcs:scale: "), line
        assert "argument 'x' expects dtype float32 (float32[a, b]), got float64; cast it first " \
               "(.astype('float32')). Accepted: [0] x: float32[a, b]" in line
    assert lines[3:] == ["float32 CONFIG True", "python float CONFIG True"]


def test_first_call_of_a_process_inside_jit(demo_site, run_python) -> None:
    proc = run_python(
        "import jax, jax.numpy as jnp\nfrom jxe_demo import funcs\n"
        "print(jax.jit(lambda x: funcs.scale(x) + 1)(jnp.zeros((2, 2))).tolist())\n"
        "print(funcs.scale(jnp.zeros((2, 2))).tolist())",
        env={"PYTHONPATH": str(demo_site), "JAX_PLATFORMS": "cpu",
             "HATCH_JAXEXPORT_STRICT": "1"}, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["[[1.0, 1.0], [1.0, 1.0]]", "[[0.0, 0.0], [0.0, 0.0]]"]


# One exception class per kind of mismatch (hatch_jaxexport.errors), each also the builtin that
# kind raised before, so that existing ``except TypeError`` / ``except ValueError`` still work.
KINDS = [
    ("rank", lambda d: d.scale(jnp.ones(3)), ShapeMismatch, (TypeError, ValueError)),
    ("rank inside jit", lambda d: jax.jit(lambda x: d.scale(x))(jnp.ones(3)), ShapeMismatch,
     (TypeError, ValueError)),
    ("Python scalar for a vector", lambda d: d.poly(3), ShapeMismatch, (TypeError, ValueError)),
    ("fixed size", lambda d: d.lookup(jnp.ones((2, 5))), ShapeMismatch, (TypeError, ValueError)),
    ("symbol with two sizes", lambda d: d.combine(jnp.ones(2), y=jnp.ones(3)), ShapeMismatch,
     (TypeError, ValueError)),
    ("symbol below 1", lambda d: d.scale(jnp.ones((0, 3))), ShapeMismatch,
     (TypeError, ValueError)),
    ("constraint", lambda d: d.constrained(jnp.ones((1, 3)), jnp.ones(3)), ShapeMismatch,
     (TypeError, ValueError)),
    ("beyond int32", lambda d: jax.eval_shape(d.constrained, S((2**31, 2), F32), S((2,), F32)),
     ShapeMismatch, (TypeError, ValueError)),
    ("dtype", lambda d: d.scale(jnp.ones((2, 2), jnp.int32)), DtypeMismatch, (TypeError,)),
    ("64-bit dtype with x64 off", lambda d: d.precise(jnp.ones(3)), DtypeMismatch, (TypeError,)),
    ("Python scalar of another kind", lambda d: d.listy([jnp.ones(2)] * 2, 1j), DtypeMismatch,
     (TypeError,)),
    ("dict keys", lambda d: d.dense({"w": jnp.ones((4, 2))}, jnp.ones((2, 4))), PytreeMismatch,
     (TypeError,)),
    ("tuple for a list", lambda d: d.listy((jnp.ones(2), jnp.ones(2)), 1.0), PytreeMismatch,
     (TypeError,)),
    ("class", lambda d: d.swap((jnp.ones(2), jnp.ones(2))), PytreeMismatch, (TypeError,)),
    ("None for an array", lambda d: d.scale(None), PytreeMismatch, (TypeError,)),
    ("array for None", lambda d: d.pytree_in(d.Stats(jnp.ones(2), jnp.ones(2)), jnp.ones(2), {}),
     PytreeMismatch, (TypeError,)),
    ("missing argument", lambda d: d.scale(), SignatureMismatch, (TypeError,)),
    ("too many positional", lambda d: d.scale(jnp.ones((2, 2)), jnp.ones(2)), SignatureMismatch,
     (TypeError,)),
    ("unknown keyword", lambda d: d.scale(jnp.ones((2, 2)), y=jnp.ones(2)), SignatureMismatch,
     (TypeError,)),
    ("static value", lambda d: d.poly(jnp.ones(3), mode="slow"), StaticValueMismatch,
     (ValueError,)),
]


@pytest.mark.parametrize("call, error, builtins", [pytest.param(c, e, b, id=i)
                                                   for i, c, e, b in KINDS])
def test_each_kind_of_mismatch_raises_its_own_class(d: Any, call: Callable[[Any], Any],
                                                    error: type[Exception],
                                                    builtins: tuple[type[Exception], ...]) -> None:
    with pytest.raises(CallMismatch) as info:
        call(d)
    assert type(info.value) is error, (type(info.value), str(info.value))
    assert all(isinstance(info.value, builtin) for builtin in builtins)
    assert str(info.value).startswith("jxe_demo.funcs:"), str(info.value)


def test_the_classes_are_what_they_say() -> None:
    assert issubclass(ShapeMismatch, TypeError) and issubclass(ShapeMismatch, ValueError)
    for cls in (DtypeMismatch, PytreeMismatch, SignatureMismatch):
        assert issubclass(cls, TypeError) and not issubclass(cls, ValueError)
    assert issubclass(StaticValueMismatch, ValueError)
    assert not issubclass(StaticValueMismatch, TypeError)
    assert not issubclass(CallMismatch, TypeError | ValueError)


# Every dtype refusal: the function, the argument's path, the expected and the given dtype, the fix
DTYPES = [
    ("float32 for float64, x64 off", lambda d: d.precise(jnp.ones(3, jnp.float32)),
     "jxe_demo.funcs:precise: ",
     "argument 'x' expects float64[n], a 64-bit dtype, got float32, but jax_enable_x64 is off; "
     "turn it on before the call (jax.config.update('jax_enable_x64', True), or "
     "JAX_ENABLE_X64=1 in the environment) and pass float64 (.astype('float64'))"),
    ("float64 numpy for float64, x64 off", lambda d: d.precise(np.ones(3)),
     "jxe_demo.funcs:precise: ",
     "argument 'x' expects float64[n], a 64-bit dtype, got float64, but jax_enable_x64 is off; "
     "turn it on before the call (jax.config.update('jax_enable_x64', True), or "
     "JAX_ENABLE_X64=1 in the environment). Accepted"),
    ("int32 for float32", lambda d: d.scale(jnp.ones((2, 2), jnp.int32)),
     "jxe_demo.funcs:scale: ",
     "argument 'x' expects dtype float32 (float32[a, b]), got int32; cast it first "
     "(.astype('float32'))"),
    ("int32 in a dict", lambda d: d.dense({"w": jnp.ones((4, 2), jnp.int32), "b": jnp.ones(2)},
                                          jnp.ones((3, 4))),
     "jxe_demo.funcs:dense: ",
     "argument \"params['w']\" expects dtype float32 (float32[i, o]), got int32; cast it first "
     "(.astype('float32'))"),
    ("int64 numpy, canonicalized", lambda d: d.scale(np.ones((2, 2), np.int64)),
     "jxe_demo.funcs:scale: ",
     "argument 'x' expects dtype float32 (float32[a, b]), got int64 (jax sees int64 as int32 "
     "with x64 off); cast it first (.astype('float32'))"),
    ("Python complex for float32", lambda d: d.listy([jnp.ones(2)] * 2, 1j),
     "jxe_demo.funcs:listy: ",
     "argument 'scale' expects float32[], got a Python complex; pass a Python int or float, or "
     "an array of dtype float32"),
]


@pytest.mark.parametrize("call, head, reason", [pytest.param(c, h, r, id=i)
                                                for i, c, h, r in DTYPES])
def test_dtype_refusals_say_what_was_given_and_the_fix(d: Any, call: Callable[[Any], Any],
                                                        head: str, reason: str) -> None:
    with pytest.raises(DtypeMismatch) as info:
        call(d)
    message = str(info.value)
    assert message.startswith(head + "no exported structure accepts this call: structure 0: "
                              + reason), message
