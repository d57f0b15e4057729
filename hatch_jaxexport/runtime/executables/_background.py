"""Tiered compilation's background compiles, bounded: a few at once per machine, queued, timed.

Each first call of a tiered signature wants its optimized executable compiled by a separate
process (``tiers``). Unbounded, a model with dozens of signatures started dozens of them at
once (measured: 8 processes, 605 MB resident, for 10 signatures of one package), all outliving
the program. Here:

- **Slots, machine-wide.** A compile runs only while it holds one of ``slot_count()`` slot
  files in ``<executable cache>/background``, locked with ``fcntl.flock`` (``msvcrt.locking``
  on Windows). Every process that shares the cache folder (by default, every process of one
  user) shares its slots, and the kernel releases a lock when its holder dies, so a crash never
  leaks a slot. On POSIX the parent locks the slot and the child inherits the locked file
  (``pass_fds``): the slot is held exactly as long as the compile runs, even after the parent
  exits. Windows locks do not pass to a child, so there the parent holds the slot until its
  child ends (a compile still running when its program exits stops counting).
- **A queue per process, in order of first use.** A job whose compile cannot start (all slots
  taken) waits in this process's queue; one daemon thread starts the head of the queue when a
  slot frees. The thread only locks files and starts processes, never compiles, so tearing it
  down at exit is harmless: queued jobs are dropped (the next process's first call of such a
  signature queues it again), started ones finish on their own.
- **A time limit.** The child ends itself after ``background_timeout()`` seconds
  (``end_after``): a watchdog thread removes its lock and partial files and exits, and
  ``SIGALRM``'s default action ends the process a little later should the thread not get to
  run.

Which signature compiles is ``tiers``' business; this module only knows jobs: a command line,
an environment, a key lock and a log.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from hatch_jaxexport.formats.settings import (
    BACKGROUND_COMPILES_ENV,
    BACKGROUND_TIMEOUT_ENV,
    background_compiles,
    background_timeout,
)
from hatch_jaxexport.runtime.disk.file_lock import try_lock

#: The folder of the slot files, inside the executable cache folder.
SLOT_FOLDER = "background"
#: Exit status of a background compile that ran past its time limit (as ``timeout(1)``'s).
EXPIRED_EXIT = 124
#: How often the queue's thread looks for a free slot (seconds).
SLOT_POLL_S = 0.1
#: Seconds between the watchdog's exit and ``SIGALRM`` ending the process anyway.
ALARM_GRACE_S = 30
#: Every background process this process started, referenced until exit (never reaped mid-run:
#: ``subprocess`` would warn about a child still running when its object is collected).
CHILDREN: list[subprocess.Popen[bytes]] = []


def default_slots(cpus: int | None) -> int:
    """Background compiles at once when ``HATCH_JAXEXPORT_BACKGROUND_COMPILES`` is unset: a
    quarter of the cores, at least 1 and at most 4.

    The quick tier is already serving the program: the optimized compile is a bonus that
    should not take the cores from it (each compile keeps about one core busy, at a lower
    priority) nor its memory (``docs/footprint.md`` has the figures).
    """
    return max(1, min(4, (cpus or 1) // 4))


def slot_count() -> int:
    """Background compiles allowed at once on this machine (``0``: none, tiering is off)."""
    chosen = background_compiles()
    return default_slots(os.cpu_count()) if chosen is None else chosen


def lock_stale_s() -> float:
    """Age after which a signature's lock file is from a compile that died unnoticed (killed):
    the time limit, plus a minute for the process to start and write its entry."""
    return background_timeout() + 60.0


class Slot:
    """One locked slot file (its descriptor); ``release`` unlocks it by closing the file."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    def release(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def take_slot(folder: Path, count: int) -> Slot | None:
    """A free slot of ``folder``'s ``count`` slots, locked; ``None`` while all are taken."""
    slots = folder / SLOT_FOLDER
    slots.mkdir(parents=True, exist_ok=True, mode=0o700)
    for index in range(count):
        path = slots / f"slot-{index}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if try_lock(fd):
            return Slot(fd, path)
        os.close(fd)
    return None


def busy_slots(folder: Path, count: int) -> int:
    """How many of ``folder``'s first ``count`` slots are held now (tests, diagnostics)."""
    held = 0
    for index in range(count):
        path = folder / SLOT_FOLDER / f"slot-{index}"
        if not path.exists():
            continue
        fd = os.open(path, os.O_RDWR)
        try:
            if not try_lock(fd):
                held += 1
        finally:
            os.close(fd)  # closing releases the probe's own lock
    return held


def key_lock_held(lock: Path) -> bool:
    """Whether another process compiles the signature of ``lock`` (a fresh lock file)."""
    try:
        return time.time() - lock.stat().st_mtime < lock_stale_s()
    except OSError:
        return False


def take_key_lock(lock: Path) -> bool:
    """Create ``lock`` (``O_EXCL``), replacing a stale one; ``False`` if another process has it.

    One compile per signature across processes. A plain file rather than a ``flock``: a lock
    file of any origin blocks, and an age limit clears one whose compile was killed.
    """
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            if key_lock_held(lock):
                return False
            try:
                lock.unlink()
            except OSError:
                return False
            continue
        with os.fdopen(fd, "w") as out:
            out.write(str(os.getpid()))
        return True
    return False


class BackgroundJob:
    """One background compile: ``queued``, then ``running`` (``proc``), ``elsewhere`` (another
    process compiles it, or did) or ``failed`` (it could not start: ``error``)."""

    def __init__(self, argv: list[str], env: dict[str, str], folder: Path, lock: Path,
                 log: Path, entry: Path) -> None:
        self.argv = argv
        self.env = env
        self.folder = folder
        self.lock = lock
        self.log = log
        #: The file the compile writes: once there, nothing is left to do.
        self.entry = entry
        self.state = "queued"
        self.proc: subprocess.Popen[bytes] | None = None
        self.error = ""
        #: ``time.monotonic()`` of the last change of state.
        self.since = time.monotonic()

    def _mark(self, state: str, error: str = "") -> None:
        self.state, self.error, self.since = state, error, time.monotonic()

    def try_start(self, count: int) -> bool:
        """Start the compile if a slot is free; ``False`` (still queued) if none is."""
        if self.entry.exists() or key_lock_held(self.lock):
            self._mark("elsewhere")
            return True
        try:
            slot = take_slot(self.folder, count)
        except OSError as err:
            self._mark("failed", str(err))
            return True
        if slot is None:
            return False
        if not take_key_lock(self.lock):
            slot.release()
            self._mark("elsewhere")
            return True
        try:
            self._spawn(slot)
        except OSError as err:
            slot.release()
            self.lock.unlink(missing_ok=True)
            self._mark("failed", str(err))
        return True

    def _spawn(self, slot: Slot) -> None:
        """Start the process; on POSIX it inherits the locked slot and the parent lets go."""
        posix = sys.platform != "win32"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env=self.env, close_fds=True, pass_fds=(slot.fd,) if posix else (),
                start_new_session=posix,
                creationflags=0 if posix else subprocess.CREATE_NEW_PROCESS_GROUP)
        CHILDREN.append(self.proc)
        if posix:
            slot.release()  # the child's copy of the descriptor keeps the lock
        else:
            _HELD.append((self.proc, slot))
        self._mark("running")


_QUEUE: deque[tuple[BackgroundJob, int]] = deque()
_WAKE = threading.Condition()
_HELD: list[tuple[subprocess.Popen[bytes], Slot]] = []  # Windows: slots held for children
_THREAD: list[threading.Thread] = []


def submit(job: BackgroundJob, count: int | None = None) -> BackgroundJob:
    """Start ``job`` now if nothing waits before it and a slot is free, else queue it (first
    use first); its ``state`` tells which. ``count``: the slots (default ``slot_count()``)."""
    count = slot_count() if count is None else count
    if count < 1:  # no background compiles at all (tiering is off then: never reached)
        job._mark("failed", f"{BACKGROUND_COMPILES_ENV}=0 allows none")
        return job
    with _WAKE:
        _release_ended()
        if not _QUEUE and job.try_start(count):
            return job
        _QUEUE.append((job, count))
        if not _THREAD or not _THREAD[0].is_alive():
            _THREAD[:] = [threading.Thread(target=_run_queue, name="hatch-jaxexport-background",
                                           daemon=True)]
            _THREAD[0].start()
        _WAKE.notify()
    return job


def queued() -> int:
    """Jobs of this process waiting for a slot."""
    with _WAKE:
        return len(_QUEUE)


def _run_queue() -> None:
    """The queue's thread: start the head of the queue when a slot frees, in order."""
    while True:
        with _WAKE:
            _release_ended()
            while not _QUEUE:
                _WAKE.wait()
            job, count = _QUEUE[0]
            if job.try_start(count):
                _QUEUE.popleft()
                continue
        time.sleep(SLOT_POLL_S)


def _release_ended() -> None:
    """Windows: let go of the slots of children that have ended."""
    for held in [h for h in _HELD if h[0].poll() is not None]:
        held[1].release()
        _HELD.remove(held)


def end_after(seconds: float, lock: Path, scratch: Path) -> None:
    """In a background process: end it after ``seconds``, its lock and partial files removed.

    A watchdog thread does the cleaning (the compile itself runs in XLA, where a Python signal
    handler would wait for it to return); ``SIGALRM``'s default action, not a handler, ends the
    process ``ALARM_GRACE_S`` later should the thread not run. The slot goes with the process.
    """

    def expire() -> None:
        print(f"the background compile ran past its time limit of {seconds:g} s "
              f"({BACKGROUND_TIMEOUT_ENV}) and was ended", file=sys.stderr, flush=True)
        lock.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
        os._exit(EXPIRED_EXIT)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    if hasattr(signal, "alarm"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(math.ceil(seconds) + ALARM_GRACE_S)


def scratch_folder(folder: Path) -> Path:
    """A fresh folder for this background process's partial files, in ``folder``'s slot
    folder; those of processes that ended without cleaning (killed, or ended by ``SIGALRM``
    before their watchdog ran) are removed once older than ``lock_stale_s()``: no compile lives
    that long."""
    slots = folder / SLOT_FOLDER
    for old in slots.glob("tmp-*"):
        try:
            if time.time() - old.stat().st_mtime > lock_stale_s():
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    scratch = slots / f"tmp-{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
    return scratch


def expired(code: int | None) -> bool:
    """Whether a background process's exit status says its time limit ended it."""
    return code == EXPIRED_EXIT or (hasattr(signal, "SIGALRM") and code == -signal.SIGALRM)


__all__ = ["ALARM_GRACE_S", "CHILDREN", "EXPIRED_EXIT", "SLOT_FOLDER", "SLOT_POLL_S",
           "BackgroundJob", "Slot", "busy_slots", "default_slots", "end_after", "expired",
           "key_lock_held", "lock_stale_s", "queued", "scratch_folder", "slot_count", "submit",
           "take_key_lock", "take_slot"]
