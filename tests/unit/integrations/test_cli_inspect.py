"""``jaxexport inspect`` rows stay readable with long (flax-like) structures: abbreviated by
default, whole with ``--full`` or ``HATCH_JAXEXPORT_FULL_STRUCTURES=1``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run

from hatch_jaxexport.formats.settings import FULL_STRUCTURES_ENV

PACKAGE = "jxe_inspect_long"
SOURCE = '''
import jax.numpy as jnp
from hatch_jaxexport import exportable

LAYERS = {f"Dense_{i}": {"bias": ("h,", "float32"), "kernel": ("h, h", "float32")}
          for i in range(4)}


@exportable({"params": {"params": LAYERS}, "x": ("n, h", "float32")})
def mlp(params, x):
    for layer in params["params"].values():
        x = jnp.tanh(x @ layer["kernel"] + layer["bias"])
    return x


@exportable({"x": ("n", "float32")})
def short(x):
    return x + 1
'''
FULL = ("params: {params: {Dense_0: {bias: float32[h], kernel: float32[h, h]}, Dense_1: {bias: "
        "float32[h], kernel: float32[h, h]}, Dense_2: {bias: float32[h], kernel: float32[h, h]}, "
        "Dense_3: {bias: float32[h], kernel: float32[h, h]}}}; x: float32[n, h]")
SHORT = "params: {params: {Dense_0: {\u2026}, \u2026}}; x: float32[n, h]"
NOTE = f"(long structures abbreviated: --full or {FULL_STRUCTURES_ENV}=1 shows them whole)"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hatch_jaxexport.bake import export_package

    tmp = tmp_path_factory.mktemp("inspect-site")
    (tmp / PACKAGE).mkdir()
    (tmp / PACKAGE / "__init__.py").write_text(SOURCE)
    export_package(PACKAGE, tmp / PACKAGE / "_jaxexport", search_path=[tmp])
    return tmp


def _inspect(site: Path, *options: str, env: dict[str, str] | None = None) -> list[str]:
    proc = run([sys.executable, "-m", "hatch_jaxexport", "inspect", PACKAGE, *options],
               env={"PYTHONPATH": str(site), FULL_STRUCTURES_ENV: "", **(env or {})})
    return proc.stdout.splitlines()


def _row(lines: list[str], function: str) -> str:
    (row,) = [line for line in lines if line.startswith(f"{PACKAGE}:{function} ")]
    return row


def test_long_structures_are_abbreviated_in_each_row(site):
    lines = _inspect(site)
    row = _row(lines, "mlp")
    assert f"  [0] {SHORT}  " in row and FULL not in row
    assert "  [0] x: float32[n]  " in _row(lines, "short")
    assert NOTE in lines


@pytest.mark.parametrize("how", ["--full", "environment"])
def test_the_switch_prints_structures_whole(site, how):
    lines = _inspect(site, "--full") if how == "--full" else \
        _inspect(site, env={FULL_STRUCTURES_ENV: "1"})
    assert f"  [0] {FULL}  " in _row(lines, "mlp")
    assert NOTE not in lines
