"""``jaxexport warmup``: compile a package's artifacts into the loader's executable cache.

For container images and deploy steps: run once on the target machine, and the first call of
every warmed (function, structure, static values, shapes) in later processes loads a compiled
executable instead of compiling. JAX's persistent compilation cache is filled too exactly when
later processes would read it: the user configured it (``JAX_COMPILATION_CACHE_DIR``) or turned
the loader's on (``HATCH_JAXEXPORT_JAX_CACHE=1``); warmup follows the same settings as the
loader, so it never fills a cache that no later process reads.

Symbolic dimensions take the sizes the function names at build
(``executable_sizes=``, else ``concrete=``) and those given on the command line
(``--dims n=1024``, which win); a structure whose symbols are not all sized is skipped and
reported, and the result names every
symbol that lacked a size, so the command line can say how to give them all at once. A function
with gradients baked is also run through one ``jax.vjp`` and its pullback, which warms the
executables an eager ``jax.grad`` loads.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hatch_jaxexport.formats.dimensions import evaluate_dim
from hatch_jaxexport.formats.settings import TIERED_ENV
from hatch_jaxexport.formats.spec import tree_map_leaves
from hatch_jaxexport.runtime.jax_dtypes import leaf_value
from hatch_jaxexport.runtime.jaxcompat import x64_context

# Imported in functions: the package, the loader and the cache folders, only when a warmup runs
# (the CLI imports this module for its help).


@dataclass(frozen=True)
class WarmupResult:
    """What a warmup did: how many call signatures it compiled, what it skipped and why, and
    every symbolic dimension that a skipped structure needed a size for (sorted).

    Unpacks as ``(warmed, skipped)``, as the tuple returned before it did, so code written
    against 0.1 (``count, skipped = warmup_package(...)``) keeps working.
    """

    warmed: int
    skipped: list[str]
    missing: tuple[str, ...] = ()
    functions: int = 0

    def __iter__(self) -> Iterator[Any]:
        return iter((self.warmed, self.skipped))


def warmup_package(package: str, dims: Mapping[str, Sequence[int]],
                   log: Callable[[str], None] = print) -> WarmupResult:
    """Call every exportable of ``package`` on zeros of the given sizes; return what was
    warmed, what was skipped, and the symbols that skipped structures lacked sizes for."""
    previous = os.environ.get(TIERED_ENV)
    os.environ[TIERED_ENV] = "0"  # compile the optimized executable, once
    try:
        return _warmup(package, dims, log)
    finally:
        if previous is None:
            os.environ.pop(TIERED_ENV, None)
        else:
            os.environ[TIERED_ENV] = previous


def _warmup(package: str, dims: Mapping[str, Sequence[int]], log: Callable[[str], None]
            ) -> WarmupResult:
    from hatch_jaxexport.bake.export.discovery import discover
    from hatch_jaxexport.runtime.call.loader import loaded_from_artifact
    from hatch_jaxexport.runtime.disk.cache_folders import (
        ensure_compilation_cache,
        executable_cache_dir,
    )

    ensure_compilation_cache()  # JAX's cache too, where later processes would use it
    if executable_cache_dir() is None:
        raise RuntimeError("the caches are off (HATCH_JAXEXPORT_CACHE=0): there is nothing to "
                           "warm")
    plans: list[tuple[Any, int, dict[str, Any], dict[str, int]]] = []
    skipped = []
    all_missing: set[str] = set()
    functions = discover(package)
    for fn in functions:
        # the sizes named at build (executable_sizes=, else concrete=), the command line's first
        named = {**(fn.export_spec.executable_sizes or fn.export_spec.concrete or {}), **dims}
        for index, structure in enumerate(fn.export_spec.structures):
            missing = sorted(structure.symbols - set(named))
            if missing:
                all_missing.update(missing)
                give = " ".join(f"--dims {symbol}=SIZE" for symbol in missing)
                skipped.append(f"{fn.name} structure {index} ({structure.key}): no value for "
                               f"{', '.join(missing)} (give {give})")
                continue
            names = sorted(structure.symbols)
            for sizes in itertools.product(*(named[n] for n in names)):
                env = dict(zip(names, sizes, strict=True))
                for static in fn.export_spec.static_combinations(index):
                    plans.append((fn, index, static, env))
    warmed = 0
    for number, (fn, index, static, env) in enumerate(plans, 1):
        structure = fn.export_spec.structures[index]
        values = {name: tree_map_leaves(
            lambda leaf, env=env: leaf_value(tuple(evaluate_dim(d, env) for d in leaf.shape),
                                             leaf.dtype), tree)
                  for name, tree in structure.args.items()}
        args, kwargs = fn.layouts[index].split({**values, **static})
        started = time.perf_counter()
        x64 = x64_context(structure.uses_x64)
        try:
            with x64:
                fn(*args, **kwargs)
                _warm_gradient(fn, args, kwargs)
        except Exception as err:
            skipped.append(f"{fn.name} structure {index} at {env}: {type(err).__name__}: {err}")
            continue
        if not all(loaded_from_artifact(fn).values()):
            skipped.append(f"{fn.name} structure {index} at {env}: no baked artifact for this "
                           "platform (it traced the source)")
            continue
        warmed += 1
        log(f"[{number}/{len(plans)}] {fn.name} [{index}] {env or ''}"
            f"{' ' + str(static) if static else ''}: {time.perf_counter() - started:.2f} s")
    return WarmupResult(warmed, skipped, tuple(sorted(all_missing)), len(functions))


def _warm_gradient(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """For a function with gradients baked (``vjp_order``, ``ad_order``): one ``jax.vjp`` and
    its pullback, so that a later eager ``jax.grad`` loads the forward and backward
    executables from the cache too."""
    spec = fn.export_spec
    if not (spec.vjp_order or spec.ad_order):
        return
    import jax
    import numpy as np

    def is_static(value: Any) -> bool:  # static values are JSON scalars, arguments arrays
        return value is None or isinstance(value, str | int | float | bool)

    arrays = [i for i, value in enumerate(args) if not is_static(value)]

    def call(*values: Any) -> Any:
        full = list(args)
        for position, value in zip(arrays, values, strict=True):
            full[position] = value
        return fn(*full, **kwargs)  # keyword arrays: held constant

    out, pullback = jax.vjp(call, *(args[i] for i in arrays))
    jax.block_until_ready(pullback(jax.tree_util.tree_map(
        lambda leaf: np.ones(leaf.shape, leaf.dtype)
        if jax.numpy.issubdtype(leaf.dtype, jax.numpy.inexact)
        else np.zeros(leaf.shape, jax.dtypes.float0), out)))


__all__ = ["WarmupResult", "warmup_package"]
