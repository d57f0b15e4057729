"""One of several processes writing and reading the executable cache at once, under a limit.

Run as ``python cache_limit_worker.py FOLDER DONE WORKER WRITES`` with
``HATCH_JAXEXPORT_CACHE`` set to FOLDER's parent and ``HATCH_JAXEXPORT_CACHE_MAX_BYTES`` small,
so that every store trims. It compiles ``x * k`` for ``WRITES`` values of ``k`` and stores each
with the cache's own ``store`` (which trims), then names the key in ``DONE`` (a file per key
holding ``k``). After each write it reads every key any process has finished, with the cache's
own ``load``: a hit must be a whole entry whose executable computes ``x * k``; a miss must be an
entry that eviction removed (gone from the folder: a key is written once, so it never comes
back). Prints ``{"hits": ..., "misses": ...}`` as its last line.
``tests/unit/runtime/disk/test_footprint.py`` starts eight of these.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from hatch_jaxexport.runtime.executables._executable_cache import (
    compile_fresh,
    entry_key,
    entry_path,
    load,
    store,
)

SIGNATURE = ("PyTreeDef(((*,), {}))", (((64,), "float32", False),))


def key_of(folder: Path, k: int) -> str:
    sha = hashlib.sha256(f"artifact {k}".encode()).hexdigest()
    return entry_key(folder, sha, SIGNATURE, "cpu", package="jxe_limit")


def main(folder: Path, done: Path, worker: int, writes: int) -> dict[str, int]:
    x = np.arange(64, dtype=np.float32)
    hits = misses = 0
    for i in range(writes):
        k = worker * 100 + i + 1
        compiled, fresh = compile_fresh(jax.jit(lambda v, k=k: v * jnp.float32(k)).lower(x))
        key = key_of(folder, k)
        assert fresh and store(folder, key, compiled) is None, "the entry was not written"
        # named whole or not at all: another worker lists DONE at any moment (a plain write
        # showed it an empty file once, in CI)
        pending = done.parent / f".{key}.{worker}.tmp"
        pending.write_text(str(k))
        os.replace(pending, done / key)
        for marker in sorted(done.iterdir()):
            found = load(folder, marker.name)
            if found is None:  # evicted: then gone for good
                assert not entry_path(folder, marker.name).exists(), f"{marker.name} unreadable"
                misses += 1
                continue
            expected = x * np.float32(int(marker.read_text()))
            np.testing.assert_array_equal(np.asarray(found(x)), expected)
            hits += 1
    return {"hits": hits, "misses": misses}


if __name__ == "__main__":
    folder_arg, done_arg, worker_arg, writes_arg = sys.argv[1:]
    print(json.dumps(main(Path(folder_arg), Path(done_arg), int(worker_arg), int(writes_arg))))
