"""Build faults: a broken module, a failing export, Ctrl-C and a killed worker, during a parallel
export from the command line. Each must fail with a message naming the module or function,
leave no temporary files (``TMPDIR`` points at a folder that must stay empty), write no output
folder (or keep the previous one intact), and leave no worker process behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES

SLOW = '''
"""Two exports that hang while tracing (after saying which worker process traces them)."""
import os
import time
from pathlib import Path

from hatch_jaxexport import exportable


def _hang(x):
    Path(os.environ["JXE_MARKERS"], str(os.getpid())).touch()
    time.sleep(120)
    return x


@exportable({"x": ("n", "float32")})
def a_slow(x):
    return _hang(x)


@exportable({"x": ("n", "float32")})
def b_slow(x):
    return _hang(x)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


#: ``python -m hatch_jaxexport`` with Ctrl-C as a terminal delivers it. A suite started in the
#: background of a non-interactive shell (``cmd &``, as some CI runners do) ignores SIGINT, an
#: ignored signal stays ignored across exec, and the build would never see the Ctrl-C these
#: tests send; Python's own handler is what an interactive start installs (and exec resets a
#: handled signal to its default, so the workers get theirs too).
INTERRUPTIBLE = ("import runpy, signal\n"
                 "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                 "runpy.run_module('hatch_jaxexport', run_name='__main__', alter_sys=True)\n")


class Build:
    """One ``python -m hatch_jaxexport export`` run with its own TMPDIR and marker folder."""

    def __init__(self, tmp: Path, package: str) -> None:
        self.site = tmp / "site"
        self.tmpdir = tmp / "tmpdir"
        self.markers = tmp / "markers"
        for folder in (self.site, self.tmpdir, self.markers):
            folder.mkdir(exist_ok=True)
        self.package = package
        self.out = self.site / package / "_jaxexport"
        self.proc: subprocess.Popen[str] | None = None

    def start(self, *options: str, group: bool = False) -> subprocess.Popen[str]:
        env = {**os.environ, "TMPDIR": str(self.tmpdir), "JXE_MARKERS": str(self.markers),
               "JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_CACHE": "0"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", INTERRUPTIBLE, "export", self.package, "--out",
             str(self.out), "--path", str(self.site), *options],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=group)
        return self.proc

    def finish(self, timeout: float = 240) -> tuple[int, str, str]:
        assert self.proc is not None
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def worker_pids(self) -> list[int]:
        return [int(p.name) for p in self.markers.iterdir()]

    def wait_for_workers(self, count: int, timeout: float = 120) -> list[int]:
        deadline = time.monotonic() + timeout
        while len(self.worker_pids()) < count:
            assert self.proc is not None and self.proc.poll() is None, self.finish()
            assert time.monotonic() < deadline, "workers never started tracing"
            time.sleep(0.05)
        return self.worker_pids()

    def assert_clean(self) -> None:
        leftovers = sorted(str(p.relative_to(self.tmpdir)) for p in self.tmpdir.rglob("*"))
        assert leftovers == [], f"temporary files left behind: {leftovers}"
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in self.worker_pids()) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = [pid for pid in self.worker_pids() if _alive(pid)]
        assert not alive, f"worker processes left running: {alive}"

    def kill_leftovers(self) -> None:
        for pid in self.worker_pids():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def build(tmp_path: Path) -> Iterator[Build]:
    made: list[Build] = []

    def make(package: str, source: str | None = None) -> Build:
        b = Build(tmp_path, package)
        if source is None:
            shutil.copytree(FIXTURES / package, b.site / package,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (b.site / package).mkdir()
            (b.site / package / "__init__.py").write_text(textwrap.dedent(source))
        made.append(b)
        return b

    yield make  # type: ignore[misc]
    for b in made:
        b.kill_leftovers()


def test_import_error_in_one_module_names_it(build) -> None:
    b = build("jxe_broken")
    b.start("--jobs", "2")
    code, out, err = b.finish()
    assert code == 1 and out == ""
    assert "cannot import module 'jxe_broken.bad_module': ModuleNotFoundError: No module named " \
           "'this_module_does_not_exist'" in err
    assert not b.out.exists()
    b.assert_clean()


def test_export_error_in_one_function_names_it_and_writes_nothing(build) -> None:
    b = build("jxe_failing")
    b.start("--jobs", "2")
    code, out, err = b.finish()
    assert code == 1 and out == ""
    error = err[err.index("jaxexport: error: "):]  # after the progress lines
    assert error.startswith("jaxexport: error: 3 exports of jxe_failing failed, for 3 "
                            "reasons:\n"), err
    for name in ("with_callback", "eigenvalues", "dynamic_loop"):
        assert f"  - jxe_failing:{name}, structure 0 " in error
        assert re.search(rf"^  jxe_failing:{name}: .*, 1 failed \[\d+/\d+, ", err, re.M), err
    assert "jxe_failing:fine" not in error
    assert not b.out.exists()
    b.assert_clean()


def test_on_error_skip_names_each_skipped_function(build) -> None:
    b = build("jxe_failing")
    b.start("--jobs", "2", "--on-error", "skip")
    code, out, err = b.finish()
    assert code == 0, err
    assert out.startswith("wrote 2 artifact(s)")
    skipped = [line for line in err.splitlines()
               if line.startswith("jaxexport: warning: skipped ")]
    assert len(skipped) == 3
    manifest = json.loads((b.out / "manifest.json").read_text())
    assert sorted(s["function"] for s in manifest["skipped"]) == [
        "jxe_failing:dynamic_loop", "jxe_failing:eigenvalues", "jxe_failing:with_callback"]
    b.assert_clean()


def _previous_export(b: Build) -> dict[str, bytes]:
    """A folder that looks like a previous export, to check a failed build keeps it."""
    b.out.mkdir(parents=True)
    (b.out / "manifest.json").write_text('{"previous": true}')
    (b.out / "old.jaxexport").write_bytes(b"old blob")
    return {p.name: p.read_bytes() for p in b.out.iterdir()}


@pytest.mark.parametrize("group", [False, True], ids=["kill-INT-orchestrator", "ctrl-c-group"])
def test_ctrl_c_during_a_parallel_export_stops_workers_and_cleans_up(build, group) -> None:
    b = build("jxe_slow", SLOW)
    previous = _previous_export(b)
    b.start("--jobs", "2", group=group)
    pids = b.wait_for_workers(2)
    assert b.proc is not None
    if group:  # a terminal's Ctrl-C: the whole foreground process group, workers included
        os.killpg(b.proc.pid, signal.SIGINT)
    else:  # `kill -INT <pid>`: the orchestrator alone
        b.proc.send_signal(signal.SIGINT)
    code, _, err = b.finish(timeout=60)
    assert code == 130, (code, err[-3000:])
    assert re.fullmatch(
        r"jaxexport: interrupted: export of 'jxe_slow' stopped \([012] worker\(s\) "
        r"terminated\); nothing was written", err.strip().splitlines()[-1]), err[-3000:]
    assert "Traceback" not in err
    assert {p.name: p.read_bytes() for p in b.out.iterdir()} == previous
    assert len(pids) == 2
    b.assert_clean()


def test_a_killed_worker_fails_the_build_and_stops_the_others(build) -> None:
    b = build("jxe_slow", SLOW)
    previous = _previous_export(b)
    b.start("--jobs", "2")
    first, *_ = sorted(b.wait_for_workers(2))
    os.kill(first, signal.SIGKILL)
    code, _, err = b.finish(timeout=60)
    assert code == 1
    assert "export worker for 'jxe_slow' died (exit -9)" in err, err[-3000:]
    assert {p.name: p.read_bytes() for p in b.out.iterdir()} == previous
    b.assert_clean()
