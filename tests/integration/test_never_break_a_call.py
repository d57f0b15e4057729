"""Never break a call: on an installed wheel, nothing on the artifact side fails a call the source
answers (default mode), and strict mode refuses with an error naming the function.

``jxe_demo`` is built once through the real Hatch hook and installed (its wheel unpacked into a
site folder, as pip lays out a pure wheel); each case damages a copy of that install, or injects
an exception into one step of a first call (a function of ours replaced, in the fresh process,
by one that raises), and calls the package in a fresh process under ``-W error``. Each call's
result is compared with ``jax.jit`` of the undecorated source in the same process.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from tests._buildkit import hatch_pyproject, inprocess_build, write_project
from tests.conftest import FIXTURES, run

CALLS = r"""
import importlib, json, os, sys
def inject(fault):  # one step of a first call raises, as a bug of ours would
    module_name, attr = fault.split(":")
    module = importlib.import_module(module_name)
    def injected(*args, **kwargs):
        raise RuntimeError(f"injected fault in {fault}")
    setattr(module, attr, injected)
for fault in filter(None, os.environ.get("FAULT_AT", "").split(",")):
    inject(fault)
import numpy as np, jax, jax.numpy as jnp
from jxe_demo import funcs
x = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)
v = np.linspace(0, 1, 5, dtype=np.float32)
params = {"w": np.ones((3, 2), np.float32) / 3, "b": np.zeros(2, np.float32)}
cases = {
    "scale": (funcs.scale, (x,), {}),
    "scale_again": (funcs.scale, (x + 1,), {}),
    "poly": (funcs.poly, (v,), {"mode": "exact"}),
    "dense": (funcs.dense, (params, x), {}),
    "stats": (funcs.stats, (v,), {}),
}
out = {"equal": {}, "errors": {}}
for name, (fn, args, kwargs) in cases.items():
    want = jax.jit(fn.__wrapped__, static_argnames=tuple(kwargs))(*args, **kwargs)
    try:
        got = fn(*args, **kwargs)
    except Exception as err:
        out["errors"][name] = f"{type(err).__name__}: {err}"
        continue
    out["equal"][name] = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
                             zip(jax.tree.leaves(got), jax.tree.leaves(want)))
try:
    grad = jax.grad(lambda p: funcs.dense(p, x).sum())(params)
    want = jax.grad(lambda p: jax.jit(funcs.dense.__wrapped__)(p, x).sum())(params)
    out["equal"]["grad"] = all(np.allclose(a, b, atol=1e-6) for a, b in
                               zip(jax.tree.leaves(grad), jax.tree.leaves(want)))
    jitted = jax.jit(funcs.scale)(x)
    out["equal"]["jit"] = bool(np.allclose(jitted, jax.jit(funcs.scale.__wrapped__)(x)))
except Exception as err:
    out["errors"]["transformations"] = f"{type(err).__name__}: {err}"
out["traced"] = sorted({r.not_shipped[:80] for r in funcs.scale.call_report()
                        if r.tier == "traced"})
print(json.dumps(out))
"""

#: One step of a first call each, replaced by a function that raises: matching, reading the
#: manifest, choosing, building the artifact's call, reaching the cache folder, making the
#: executable's dispatch, handing it to the fast path.
STEPS = [
    "hatch_jaxexport.runtime.call.loader:plan_call",
    "hatch_jaxexport.runtime.call.choice:load_package_artifacts",
    "hatch_jaxexport.runtime.call.loader:choose_artifact",
    "hatch_jaxexport.runtime.call.loader:build_artifact_call",
    "hatch_jaxexport.runtime.disk.cache_folders:ensure_compilation_cache",
    "hatch_jaxexport.runtime.executables.eager_call:compiled_dispatch",
    "hatch_jaxexport.runtime.call.loader:settle_artifact_call",
    # and the fail-safe line's own bookkeeping failing too: the source still serves
    "hatch_jaxexport.runtime.call.loader:choose_artifact,"
    "hatch_jaxexport.runtime.call.failsafe:fault_reason",
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``jxe_demo``'s wheel, built by the Hatch hook and unpacked like an installed one."""
    tmp = tmp_path_factory.mktemp("never-break")
    project = write_project(tmp / "proj", {"pyproject.toml": hatch_pyproject("jxe-demo")})
    shutil.copytree(FIXTURES / "jxe_demo", project / "jxe_demo",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (wheel,) = inprocess_build(project, tmp / "dist")
    site = tmp / "site"
    zipfile.ZipFile(wheel).extractall(site)
    return site


def _copy(installed: Path, tmp_path: Path) -> Path:
    site = tmp_path / "site"
    shutil.copytree(installed, site)
    return site


def _call(site: Path, cache: Path | str = "0", strict: bool = False, **env: str
          ) -> tuple[dict, str]:
    done = run([sys.executable, "-W", "error", "-c", CALLS], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": str(cache),
        **({"HATCH_JAXEXPORT_STRICT": "1"} if strict else {}), **env})
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def _assert_sources_results(out: dict) -> None:
    assert out["errors"] == {}
    assert set(out["equal"]) == {"scale", "scale_again", "poly", "dense", "stats", "grad", "jit"}
    assert all(out["equal"].values()), out["equal"]


def _our_lines(stderr: str) -> list[str]:
    """stderr's lines that are not jax's or the platform's (a TPU-less jax says nothing)."""
    return [line for line in stderr.splitlines() if line.strip()]


def _manifest(site: Path) -> Path:
    return site / "jxe_demo" / "_jaxexport" / "manifest.json"


def test_the_undamaged_install_serves_every_call(installed):
    out, stderr = _call(installed, strict=True)
    _assert_sources_results(out)
    assert out["traced"] == [] and _our_lines(stderr) == []


DAMAGES = {
    "not json": lambda data: b"{ not json",
    "hostile": lambda data: json.dumps(
        {"schema": 1000000000, "artifacts": [{"file": "../../../etc/passwd"}]}).encode(),
    "duplicated record": lambda data: _duplicated(data),
    "truncated": lambda data: data[: len(data) // 2],
}


def _duplicated(data: bytes) -> bytes:
    manifest = json.loads(data)
    manifest.pop("record_spans", None)
    (record,) = [record for record in manifest["artifacts"]
                 if record["function"] == "jxe_demo.funcs:scale"]
    manifest["artifacts"].append(dict(record))  # written twice, byte for byte
    return json.dumps(manifest).encode()


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_manifest_runs_the_source_with_one_line_on_stderr(installed, tmp_path,
                                                                     damage):
    site = _copy(installed, tmp_path)
    path = _manifest(site)
    path.write_bytes(DAMAGES[damage](path.read_bytes()))
    out, stderr = _call(site)
    _assert_sources_results(out)
    lines = _our_lines(stderr)
    assert len(lines) == 1 and "damaged" in lines[0] and "jxe_demo" in lines[0], lines
    strict, _ = _call(site, strict=True)
    assert strict["errors"] and all(
        error.startswith("ArtifactError: jxe_demo.funcs:") for error in strict["errors"].values()
        if "transformations" not in error), strict["errors"]


def test_an_unreadable_blob_runs_the_source(installed, tmp_path):
    site = _copy(installed, tmp_path)
    path = _manifest(site)
    manifest = json.loads(path.read_bytes())
    manifest.pop("record_spans", None)
    for record in manifest["artifacts"]:
        if record["function"] == "jxe_demo.funcs:scale":
            data = b"not a jax.export flatbuffer" * 8
            (path.parent / record["file"]).write_bytes(data)
            record["sha256"], record["size"] = hashlib.sha256(data).hexdigest(), len(data)
    path.write_text(json.dumps(manifest))
    out, stderr = _call(site)
    _assert_sources_results(out)
    assert len(_our_lines(stderr)) == 1


@pytest.mark.parametrize("step", STEPS, ids=[step.split(":")[-1] for step in STEPS])
def test_an_exception_in_any_step_of_a_first_call_gives_the_sources_result(installed, step):
    out, stderr = _call(installed, FAULT_AT=step)
    _assert_sources_results(out)
    assert _our_lines(stderr) == []  # a bug of ours is logged at INFO: nothing on stderr
    assert any("injected fault" in reason for reason in out["traced"]), out["traced"]
    strict, _ = _call(installed, strict=True, FAULT_AT=step)
    named = [error for error in strict["errors"].values() if "jxe_demo.funcs:" in error]
    assert named and all("ArtifactError" in error for error in named), strict["errors"]


def test_a_cache_entry_from_another_device_count_never_fails_a_call(installed, tmp_path):
    cache = tmp_path / "cache"
    for devices in (4, 1, 4, 2):
        out, stderr = _call(installed, cache=cache,
                            XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
        _assert_sources_results(out)
        assert _our_lines(stderr) == [], (devices, stderr)
