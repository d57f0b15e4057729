"""The names of the executable cache's files, and marking an entry used: the part of the cache's
bookkeeping on a call's path, kept apart from ``footprint`` (scanning, trimming, pruning), which
only a write or ``jaxexport cache`` imports.

A name says which package, artifact and jaxlib an entry belongs to, so that ``jaxexport cache
prune`` can tell the entries no installed package needs:
``<package>-<first 16 digits of the artifact's SHA-256>-jaxlib<version>-<key>.xla``, with
``quick-`` before a quick tier and ``.log``/``.lock`` for a background compile's files.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

#: The executable cache's entry suffix.
ENTRY_SUFFIX = ".xla"
#: The name of an executable cache file: which package, artifact and jaxlib it belongs to.
NAME = (r"(?P<quick>quick-)?(?P<package>[A-Za-z0-9_.]+)-(?P<sha>[0-9a-f]{16})"
        r"-jaxlib(?P<jaxlib>[A-Za-z0-9_.+]+)-(?P<digest>[0-9a-f]{64})(?P<suffix>\.xla|\.log|\.lock)")
#: The names of hatch-jaxexport 0.1's entries, which recorded no package.
LEGACY_NAME = r"(quick-)?[0-9a-f]{64}(\.xla|\.log|\.lock)"


def version_label(version: str) -> str:
    """A jaxlib version as entry names spell it (no ``-``, the names' separator)."""
    return re.sub(r"[^A-Za-z0-9_.+]", "_", version)


def entry_label(package: str, artifact_sha256: str, jaxlib: str) -> str:
    """The readable head of an entry's name: ``<package>-<sha16>-jaxlib<version>``."""
    package = re.sub(r"[^A-Za-z0-9_.]", "_", package) or "_"
    return f"{package[:100]}-{artifact_sha256[:16]}-jaxlib{version_label(jaxlib)}"


def touch(path: Path) -> None:
    """Mark an entry as just used (its modification time: ``atime`` is often not kept)."""
    with contextlib.suppress(OSError):  # a read-only cache still serves
        os.utime(path)


__all__ = ["ENTRY_SUFFIX", "LEGACY_NAME", "NAME", "entry_label", "touch", "version_label"]
