"""End to end on JAX's multi-controller runtime: 2 processes x 2 CPU devices (gloo collectives,
``jax.distributed.initialize`` on localhost) call a data-parallel training step baked for a
4-device mesh from an installed wheel.

``tests/fixtures/jxe_multiproc`` is built by the Hatch hook through an isolated
``python -m build`` and installed in a fresh venv. Each process runs
``tests/multi_process_worker.py`` with ``HATCH_JAXEXPORT_STRICT=1`` and a trace counter: on the
baked mesh (``data=4``) the artifact serves three steps without tracing, equal to ``jax.jit`` of
the source on the same global arrays and to the source on one device; on a mesh with no baked
variant (``batch=4``) every process raises the same ``ArtifactError``. Every process has a
timeout, so a hang (one process waiting in a collective for a peer that failed) fails the test.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _buildkit import copy_project, links_env, python_m_build
from conftest import FIXTURES, TESTS, make_venv, run

WORKER = TESTS / "multi_process_worker.py"
PROCESSES = 2
TIMEOUT_S = 120  # for both processes together; a hang fails the test instead of blocking it


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, project_wheel: Path) -> Path:
    """The python of a fresh venv with the ``jxe_multiproc`` wheel (built by the hook)."""
    base = tmp_path_factory.mktemp("multi-process")
    source = copy_project(FIXTURES / "jxe_multiproc", base / "src" / "jxe_multiproc")
    env = {**links_env(project_wheel.parent), "HATCH_JAXEXPORT_CACHE": str(base / "cache")}
    run(python_m_build("--wheel", "-o", base / "dist", source), env=env)
    (wheel,) = (base / "dist").glob("jxe_multiproc-*.whl")
    return make_venv(base / "venv", project_wheel, f"jax=={version('jax')}", "flatbuffers",
                     wheel)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_processes(python: Path, mode: str, workdir: Path) -> list[dict[str, Any]]:
    """Start the worker in ``PROCESSES`` processes of one ``jax.distributed`` run; return each
    one's report. Fails the test if any process hangs past ``TIMEOUT_S`` or exits non-zero."""
    port = _free_port()
    procs = []
    for process_id in range(PROCESSES):
        env = {**os.environ, "PYTHONPATH": "", "JAX_PLATFORMS": "cpu",
               "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
               "HATCH_JAXEXPORT_STRICT": "1",
               "HATCH_JAXEXPORT_CACHE": str(workdir / "cache")}  # shared, as on one machine
        procs.append(subprocess.Popen(
            [os.fspath(python), os.fspath(WORKER), str(process_id), str(PROCESSES), str(port),
             mode], cwd=workdir, env=env, text=True, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE))
    outputs, deadline = [], time.monotonic() + TIMEOUT_S
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=max(deadline - time.monotonic(), 0.1)))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        tails = [proc.communicate()[1][-3000:] for proc in procs]
        pytest.fail(f"{mode}: a process hung past {TIMEOUT_S} s; stderr tails: {tails}")
    reports = []
    for proc, (stdout, stderr) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, f"exit {proc.returncode}\n{stdout[-3000:]}\n{stderr[-6000:]}"
        report = json.loads(stdout.strip().splitlines()[-1])
        assert "crash" not in report, report["crash"]
        reports.append(report)
    return reports


def _assert_same_training(got: dict[str, Any], want: dict[str, Any]) -> None:
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=1e-5)
    for name, value in want["params"].items():
        np.testing.assert_allclose(got["params"][name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_two_processes_run_the_baked_step_on_the_global_mesh(installed: Path,
                                                             tmp_path: Path) -> None:
    reports = run_processes(installed, "baked", tmp_path)
    assert [r["process"] for r in reports] == [0, 1]
    for report in reports:
        assert (report["devices"], report["local_devices"]) == (4, 2)
        assert "error" not in report, report["error"]
        assert report["traces_baked"] == 0  # strict mode, and the source never ran
        assert report["traces_total"] == 2  # the counter works: the two source runs traced
        assert report["from_artifact"] == {"(0, '{}', 'cpu', 'data=4')": True}
        replicated = {"mesh": {"data": 4}, "spec": []}
        assert report["baked"]["sharding"] == report["source"]["sharding"] == replicated
        _assert_same_training(report["baked"], report["source"])
        _assert_same_training(report["baked"], report["source_one_device"])
        assert report["baked"]["losses"][2] < report["baked"]["losses"][0]
    _assert_same_training(reports[1]["baked"], reports[0]["baked"])


@pytest.mark.slow
def test_a_mesh_without_a_baked_variant_fails_the_same_way_in_every_process(
        installed: Path, tmp_path: Path) -> None:
    reports = run_processes(installed, "unbaked", tmp_path)
    errors = [r.get("error") for r in reports]
    assert errors[0] == errors[1] == {
        "type": "ArtifactError",
        "message": "jxe_multiproc:train_step: no usable baked artifact (HATCH_JAXEXPORT_STRICT "
                   "is set): its artifacts need mesh data=4 (or a single device, without a "
                   "mesh), but the call runs on mesh batch=4 (the arguments' mesh)"}
    assert [r["traces_baked"] for r in reports] == [0, 0]
