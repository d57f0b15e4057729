"""Workloads for hatch-jaxexport's cold-start benchmark (``benchmarks/cold_start.py``).

Each entry builds ``(function, arguments)`` for one first call: the function is this package's
``@exportable`` (its baked artifact when installed from the wheel; ``function.__wrapped__`` is
the Python body the benchmark traces for comparison).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .chain import elementwise_chain
from .deep import deep_stack
from .linalg import solve
from .nn import activate, init_mlp, mlp_apply


def _tiny() -> tuple[Any, tuple[Any, ...]]:
    return activate, (np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8), "relu")


def _mlp() -> tuple[Any, tuple[Any, ...]]:
    return mlp_apply, (init_mlp(0), np.ones((32, 8), np.float32))


def _solve() -> tuple[Any, tuple[Any, ...]]:
    a = np.eye(16, dtype=np.float32) * 3 + np.ones((16, 16), np.float32) * 0.1
    return solve, (a, np.ones(16, np.float32))


def _deep() -> tuple[Any, tuple[Any, ...]]:
    return deep_stack, (np.ones((8, 16), np.float32),)


def _trace_heavy() -> tuple[Any, tuple[Any, ...]]:
    return elementwise_chain, (np.linspace(-1, 1, 128, dtype=np.float32).reshape(8, 16),)


WORKLOADS: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "tiny": _tiny, "mlp": _mlp, "solve": _solve, "deep": _deep, "trace_heavy": _trace_heavy,
}
