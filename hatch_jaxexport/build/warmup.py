"""``jaxexport warmup``: compile a package's artifacts into the persistent compilation cache.

For container images and deploy steps: run once on the target machine, and the first call of
every warmed (function, structure, static values, shapes) in later processes loads a compiled
executable instead of compiling. Symbolic dimensions need values (``--dims n=1024``); a
structure whose symbols are not all given is skipped and reported.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hatch_jaxexport.formats._settings import TIERED_ENV


def warmup_package(package: str, dims: Mapping[str, Sequence[int]],
                   log: Callable[[str], None] = print) -> tuple[int, list[str]]:
    """Call every exportable of ``package`` on zeros of the given sizes; return (count, skipped)."""
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
            ) -> tuple[int, list[str]]:
    import contextlib

    import jax
    import numpy as np

    from hatch_jaxexport.build._discover import discover
    from hatch_jaxexport.formats.spec import evaluate_dim, tree_map_leaves
    from hatch_jaxexport.runtime._compile_cache import ensure_compilation_cache
    from hatch_jaxexport.runtime.loader import loaded_from_artifact

    folder = ensure_compilation_cache()
    if folder is None:
        raise RuntimeError("the persistent compilation cache is off (HATCH_JAXEXPORT_CACHE=0): "
                           "there is nothing to warm")
    plans: list[tuple[Any, int, dict[str, Any], dict[str, int]]] = []
    skipped = []
    for fn in discover(package):
        for index, structure in enumerate(fn.export_spec.structures):
            missing = sorted(structure.symbols - set(dims))
            if missing:
                skipped.append(f"{fn.name} structure {index} ({structure.key}): no value for "
                               f"{', '.join(missing)} (give --dims {missing[0]}=SIZE)")
                continue
            names = sorted(structure.symbols)
            for sizes in itertools.product(*(dims[n] for n in names)):
                env = dict(zip(names, sizes, strict=True))
                for static in fn.export_spec.static_combinations():
                    plans.append((fn, index, static, env))
    warmed = 0
    for number, (fn, index, static, env) in enumerate(plans, 1):
        structure = fn.export_spec.structures[index]
        values = {name: tree_map_leaves(
            lambda leaf, env=env: np.zeros([evaluate_dim(d, env) for d in leaf.shape],
                                           dtype=leaf.dtype), tree)
                  for name, tree in structure.args.items()}
        args, kwargs = fn.layouts[index].split({**values, **static})
        started = time.perf_counter()
        x64 = jax.enable_x64(True) if structure.uses_x64 else contextlib.nullcontext()
        try:
            with x64:
                fn(*args, **kwargs)
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
    return warmed, skipped


__all__ = ["warmup_package"]
