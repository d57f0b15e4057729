"""Running a bundled artifact and its fresh export side by side and comparing the numbers.

- :func:`solve_shapes` finds a few concrete values of a structure's symbols that satisfy its
  constraints;
- :func:`make_inputs` draws inputs of those shapes, and :func:`compare_numerics` runs both
  exports on them, comparing outputs (and the pullback of a random cotangent where
  ``vjp_order >= 1``) with :func:`compare_arrays`, within the dtype-aware :func:`tolerance`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from typing import Any

from hatch_jaxexport.bake.check._outcome import first_line
from hatch_jaxexport.formats.dimensions import (
    check_constraint,
    constraint_symbols,
    dim_symbols,
    evaluate_dim,
)
from hatch_jaxexport.formats.dtype_names import key_data_words
from hatch_jaxexport.formats.options import DEFAULT_CHECK_SHAPES
from hatch_jaxexport.formats.spec import X64_DTYPES
from hatch_jaxexport.runtime.artifacts.family import on_inexact
from hatch_jaxexport.runtime.jax_dtypes import is_key, leaf_value, plain
from hatch_jaxexport.runtime.jaxcompat import x64_context

# --------------------------------------------------------------------------------------------
# Concrete shapes satisfying a structure's constraints


def _lone_symbol(side: str) -> str | None:
    side = side.strip()
    return side if side.isidentifier() else None


def solve_shapes(dims: Sequence[str], constraints: Sequence[str], count: int = DEFAULT_CHECK_SHAPES,
                 *, max_steps: int = 20000) -> list[dict[str, int]]:
    """Up to ``count`` distinct symbol assignments making every dim >= 1 and every constraint hold.

    ``dims`` and ``constraints`` are canonical texts (``"2*n"``, ``"a >= 2"``). Equality
    constraints with a lone symbol on one side are solved directly; the other symbols are
    searched with backtracking, preferring small, distinct values (a different preference per
    assignment). Returns ``[{}]`` when there are no symbols, ``[]`` when nothing satisfies them.
    """
    symbols = sorted(set().union(*(dim_symbols(d) for d in dims),
                                 *(constraint_symbols(c) for c in constraints)))
    if not symbols:
        return [{}]
    dims = list(dict.fromkeys(dims))

    def consistent(env: dict[str, int]) -> bool:
        for dim in dims:
            if dim_symbols(dim) <= env.keys() and evaluate_dim(dim, env) < 1:
                return False
        for constraint in constraints:
            if constraint_symbols(constraint) <= env.keys():
                try:
                    if not check_constraint(constraint, env):
                        return False
                except ZeroDivisionError:
                    return False
        return True

    equalities = []
    for constraint in constraints:
        if " == " in constraint:
            left, right = constraint.split(" == ", 1)
            for lone, other in ((left, right), (right, left)):
                if _lone_symbol(lone):
                    equalities.append((lone.strip(), other))

    results: list[dict[str, int]] = []
    for attempt in range(count * 3):
        rng = random.Random(f"jaxexport-shapes-{attempt}")
        preferences = {s: [*rng.sample(range(2, 10), 8), 1, *range(10, 65)] for s in symbols}
        steps = [0]

        def search(env: dict[str, int], preferences: dict[str, list[int]] = preferences,
                   steps: list[int] = steps) -> dict[str, int] | None:
            steps[0] += 1
            if steps[0] > max_steps:
                return None
            if len(env) == len(symbols):
                return dict(env)
            for lone, other in equalities:
                if lone not in env and constraint_symbols(other) <= env.keys():
                    try:
                        value = evaluate_dim(other, env)
                    except ZeroDivisionError:
                        return None
                    env[lone] = value
                    found = search(env) if consistent(env) else None
                    del env[lone]
                    return found
            symbol = next(s for s in symbols if s not in env)
            for value in preferences[symbol]:
                env[symbol] = value
                found = search(env) if consistent(env) else None
                del env[symbol]
                if found is not None:
                    return found
            return None

        found = search({})
        if found is not None and found not in results:
            results.append(found)
        if len(results) == count:
            break
    return results


# --------------------------------------------------------------------------------------------
# Numerics


def _x64(avals: Sequence[Any]) -> bool:
    return any(str(a.dtype) in X64_DTYPES for a in avals)


def tolerance(dtype: Any) -> tuple[float, float] | None:
    """``(rtol, atol)`` for an inexact dtype by its precision; ``None``: compare exactly."""
    import jax.numpy as jnp

    if not jnp.issubdtype(dtype, jnp.inexact):
        return None
    bits = jnp.finfo(dtype).bits
    if bits <= 8:
        return 0.25, 0.25
    if bits <= 16:
        return 2e-2, 2e-2
    if bits <= 32:
        return 1e-4, 1e-5
    return 1e-10, 1e-12


def make_inputs(avals: Sequence[Any], env: Mapping[str, int], seed: int) -> list[Any]:
    """Arrays for ``avals`` with the symbols bound by ``env``: normal floats, small ints."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for aval in avals:
        shape = tuple(d if isinstance(d, int) else evaluate_dim(str(d), env)
                      for d in aval.shape)
        dtype = aval.dtype
        if is_key(dtype):  # typed PRNG keys: random key data of the key's words
            words = rng.integers(0, 2**32, (*shape, key_data_words(str(dtype))), dtype=np.uint64)
            out.append(leaf_value(shape, str(dtype), words))
            continue
        if jnp.issubdtype(dtype, jnp.complexfloating):
            value = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        elif jnp.issubdtype(dtype, jnp.floating):
            value = rng.standard_normal(shape)
        elif jnp.issubdtype(dtype, jnp.bool_):
            value = rng.random(shape) < 0.5
        elif jnp.issubdtype(dtype, jnp.unsignedinteger):
            value = rng.integers(0, 5, shape)
        else:
            value = rng.integers(-3, 5, shape)
        out.append(np.asarray(value).astype(dtype))
    return out


def _call(exported: Any) -> Any:
    import jax

    def call(*flat: Any) -> list[Any]:
        args, kwargs = jax.tree_util.tree_unflatten(exported.in_tree, flat)
        return jax.tree_util.tree_leaves(exported.call(*args, **kwargs))
    return jax.jit(call)


def _pullback(exported: Any, flat: Sequence[Any], cotangent_seed: int) -> list[Any]:
    """``J^T c`` of the differentiable outputs w.r.t. the differentiable inputs (random ``c``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    din = [i for i, a in enumerate(exported.in_avals) if jnp.issubdtype(a.dtype, jnp.inexact)]
    dout = [j for j, a in enumerate(exported.out_avals) if jnp.issubdtype(a.dtype, jnp.inexact)]
    if not din or not dout:
        return []
    call = _call(exported)

    restricted = on_inexact(call, flat, din, dout)
    outs, pull = jax.vjp(restricted, *(flat[i] for i in din))
    rng = np.random.default_rng(cotangent_seed)
    cot = tuple(np.asarray(rng.standard_normal(np.shape(o))).astype(o.dtype) for o in outs)
    return list(pull(cot))


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def compare_arrays(label: str, bundled: Any, fresh: Any) -> str | None:
    """A one-line problem if two arrays differ beyond the dtype's tolerance, else ``None``."""
    import numpy as np

    a, b = np.asarray(plain(bundled)), np.asarray(plain(fresh))
    if a.shape != b.shape or a.dtype != b.dtype:
        return (f"{label}: wheel gives {a.dtype}{list(a.shape)}, source gives "
                f"{b.dtype}{list(b.shape)}")
    tol = tolerance(a.dtype)
    if tol is None:
        if np.array_equal(a, b):
            return None
        bad = np.argwhere(a != b)
        return (f"{label}: {len(bad)} of {a.size} values differ (exact dtype {a.dtype}); "
                f"first at {tuple(int(i) for i in bad[0])}: wheel {a[tuple(bad[0])]!r}, "
                f"source {b[tuple(bad[0])]!r}")
    rtol, atol = tol
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    a64, b64 = a.astype(wide), b.astype(wide)
    if np.allclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True):
        return None
    err = np.abs(a64 - b64)
    err = np.where(np.isnan(err), np.inf, err)
    where = np.unravel_index(int(np.argmax(err)), err.shape) if err.shape else ()
    index = tuple(int(i) for i in where)
    return (f"{label}: max abs difference {float(err[where]):.3g} at {index or '()'} "
            f"(wheel {a64[where]:.6g}, source {b64[where]:.6g}; {a.dtype} tolerance rtol={rtol}, "
            f"atol={atol})")


def _outputs(call: Any, flat: Sequence[Any], failing: str, problems: list[str]) -> Any:
    """``call(*flat)``, or ``None`` with ``failing: <error>`` added to ``problems``."""
    try:
        return call(*flat)
    except Exception as err:
        problems.append(f"{failing}: {type(err).__name__}: {first_line(err)}")
        return None


def compare_numerics(bundled: Any, fresh: Any, constraints: Sequence[str], *, vjp_order: int,
                     shapes: int = DEFAULT_CHECK_SHAPES, seed: str = ""
                     ) -> tuple[list[str], list[str]]:
    """Run both exports on inputs of a few concrete shapes; ``(problems, notes)``.

    Outputs are compared within :func:`tolerance`; with ``vjp_order >= 1`` also the pullback of
    a random cotangent. ``notes`` says why nothing ran (no shapes satisfy the constraints).
    """
    import jax

    dims = [str(d) for a in bundled.in_avals for d in a.shape if not isinstance(d, int)]
    envs = solve_shapes(dims, constraints, shapes)
    if not envs:
        return [], [f"numerics not run: found no symbol values satisfying the constraints "
                    f"{', '.join(constraints) or '(none)'}"]
    out_paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(bundled.out_tree, list(range(len(bundled.out_avals)))))[0]]
    problems: list[str] = []
    with x64_context(_x64(bundled.in_avals) or _x64(bundled.out_avals)):
        call_bundled, call_fresh = _call(bundled), _call(fresh)
        for env in envs:
            where = ", ".join(f"{k}={v}" for k, v in env.items()) or "static shapes"
            flat = make_inputs(bundled.in_avals, env, _seed(f"{seed}/{where}"))
            outs_b = _outputs(call_bundled, flat, f"with {where}: the wheel's artifact fails",
                              problems)
            outs_f = None if outs_b is None else \
                _outputs(call_fresh, flat, f"with {where}: the fresh export fails", problems)
            if outs_f is None:
                continue
            for i, (a, b) in enumerate(zip(outs_b, outs_f, strict=True)):
                label = f"output {out_paths[i] if i < len(out_paths) else i}".rstrip()
                problem = compare_arrays(f"with {where}, {label}", a, b)
                if problem:
                    problems.append(problem)
            if vjp_order >= 1:
                try:
                    grads_b = _pullback(bundled, flat, _seed(f"{seed}/{where}/cot"))
                    grads_f = _pullback(fresh, flat, _seed(f"{seed}/{where}/cot"))
                except Exception as err:
                    problems.append(f"with {where}: the gradient fails: "
                                    f"{type(err).__name__}: {first_line(err)}")
                    continue
                for i, (a, b) in enumerate(zip(grads_b, grads_f, strict=True)):
                    problem = compare_arrays(f"with {where}, gradient {i}", a, b)
                    if problem:
                        problems.append(problem)
    return problems, []


__all__ = ["compare_arrays", "compare_numerics", "make_inputs", "solve_shapes", "tolerance"]
