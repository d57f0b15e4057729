"""One non-blocking lock on an open file, the same on every OS: what bounds background compiles
(``_background``'s slots) and lets cache trims take turns (``footprint``).

``fcntl.flock`` on POSIX, ``msvcrt.locking`` on Windows; either is released by the operating
system when the holder closes the file or dies, so a crash never leaves a lock held.
"""

from __future__ import annotations

import sys


def try_lock(fd: int) -> bool:
    """Lock the open file ``fd`` without waiting; ``False`` if another process holds it."""
    try:
        if sys.platform == "win32":
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


__all__ = ["try_lock"]
