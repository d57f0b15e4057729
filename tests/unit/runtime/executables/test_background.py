"""The bounds of background compiles: the default slot count, slots shared by processes and
freed when their holder dies, the per-signature lock's staleness (the compiles themselves:
``test_tiers.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hatch_jaxexport.formats import settings
from hatch_jaxexport.runtime.executables import _background as background

HOLD = """
import sys, time
from pathlib import Path
from hatch_jaxexport.runtime.executables._background import take_slot
slot = take_slot(Path(sys.argv[1]), int(sys.argv[2]))
print("held" if slot else "none", flush=True)
time.sleep(120)
"""


def test_the_default_is_a_quarter_of_the_cores_from_one_to_four():
    assert [background.default_slots(n) for n in (None, 1, 2, 4, 7, 8, 16, 64)] == [
        1, 1, 1, 1, 1, 2, 4, 4]


def test_the_setting_overrides_the_default(monkeypatch):
    monkeypatch.setenv(settings.BACKGROUND_COMPILES_ENV, "3")
    assert background.slot_count() == 3
    monkeypatch.setenv(settings.BACKGROUND_COMPILES_ENV, "0")
    assert background.slot_count() == 0
    monkeypatch.delenv(settings.BACKGROUND_COMPILES_ENV)
    assert background.slot_count() == background.default_slots(os.cpu_count())


def _holder(folder: Path, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), str(count)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_slots_are_shared_by_processes_and_freed_when_the_holder_dies(tmp_path):
    first = _holder(tmp_path, 2)
    second = _holder(tmp_path, 2)
    try:
        assert background.busy_slots(tmp_path, 2) == 2
        assert background.take_slot(tmp_path, 2) is None  # both taken, by other processes
        first.kill()
        first.wait()
        slot = background.take_slot(tmp_path, 2)  # the kernel released the dead one's lock
        assert slot is not None and slot.path.name == "slot-0"
        assert background.busy_slots(tmp_path, 2) == 2
        slot.release()
        assert background.busy_slots(tmp_path, 2) == 1
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()


def test_a_signature_lock_is_held_until_it_is_older_than_the_time_limit(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv(settings.BACKGROUND_TIMEOUT_ENV, "30")
    lock = tmp_path / "k.lock"
    assert background.take_key_lock(lock) and not background.take_key_lock(lock)
    assert background.key_lock_held(lock)
    old = time.time() - background.lock_stale_s() - 1  # its compile died unnoticed
    os.utime(lock, (old, old))
    assert not background.key_lock_held(lock)
    assert background.take_key_lock(lock)  # replaced
    assert lock.read_text() == str(os.getpid())


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX descriptor passing")
def test_a_child_started_with_a_slot_keeps_it_after_the_parent_lets_go(tmp_path):
    slot = background.take_slot(tmp_path, 1)
    assert slot is not None
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             pass_fds=(slot.fd,), close_fds=True)
    try:
        slot.release()
        assert background.busy_slots(tmp_path, 1) == 1  # the child's copy holds it
        child.kill()
        child.wait()
        assert background.busy_slots(tmp_path, 1) == 0
    finally:
        child.kill()
        child.wait()


def test_scratch_folders_left_by_killed_compiles_are_removed_once_stale(tmp_path):
    slots = tmp_path / background.SLOT_FOLDER
    stale, recent = slots / "tmp-1", slots / "tmp-2"
    for folder in (stale, recent):
        folder.mkdir(parents=True)
        (folder / "entry.xla").write_bytes(b"partial")
    old = time.time() - background.lock_stale_s() - 1
    os.utime(stale, (old, old))
    mine = background.scratch_folder(tmp_path)
    assert mine == slots / f"tmp-{os.getpid()}" and mine.is_dir()
    assert not stale.exists() and recent.exists()  # a running compile's files stay
