"""What hatch-jaxexport keeps in the user's cache folder: its size, a limit, eviction and prune.

Without a bound the caches only grow: every release of a package (new artifact SHA-256), every
jaxlib upgrade and every new argument shape adds entries. The executable cache's file names say
which package, artifact and jaxlib each belongs to (``entry_names``), and from that:

- ``trim``: least-recently-used eviction down to ``HATCH_JAXEXPORT_CACHE_MAX_BYTES``, run after
  a new entry is written (in the store thread or the background compile, never on a call's
  path). A cache hit sets the entry's modification time (``touch``: ``atime`` is often not kept,
  ``noatime``), so "least recently used" is the oldest time. Several processes may trim at once:
  a lock file (``flock`` / ``msvcrt.locking``, released by the OS when a process dies) makes
  them take turns, and trimming only unlinks whole files and ignores those already gone. A
  reader reads an entry in one go, and on POSIX a file unlinked while open stays readable, so
  no reader sees half an entry; entries are written to a temporary file and renamed.
- ``prune_plan``: the entries of artifacts no installed package ships any more (found without
  importing the package: its ``_jaxexport/manifest.json`` next to its ``__init__``), of another
  jaxlib than the installed one, of an older file-name format, and files processes left behind.
- ``clear_plan``: everything of ours.

JAX's own cache folder counts only when hatch-jaxexport chose it (the default folder, or the
one ``HATCH_JAXEXPORT_CACHE`` names); a folder the user configured for jax is theirs, and jax's
``jax_compilation_cache_max_size`` bounds it. Its entries (``<key>-cache`` with ``<key>-atime``)
say nothing of their package, so they are only trimmed and cleared, never pruned.
"""

import contextlib
import importlib.util
import json
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from hatch_jaxexport.formats.settings import DEFAULT_CACHE_MAX_BYTES, cache_choice, cache_max_bytes
from hatch_jaxexport.runtime.disk.cache_folders import default_cache_dir
from hatch_jaxexport.runtime.disk.entry_names import LEGACY_NAME, NAME, version_label
from hatch_jaxexport.runtime.disk.file_lock import try_lock

#: A lock or temporary file older than this is from a process that stopped (seconds).
LEFT_BEHIND_S = 3600.0
#: How long ``trim`` waits for another process's trim before giving up (seconds).
TRIM_LOCK_WAIT_S = 10.0
TRIM_LOCK = ".trim-lock"
_JAX_SUFFIXES = ("-cache", "-atime")


class CacheFolders(NamedTuple):
    """The folders whose files are ours: the executable cache, and JAX's cache when we chose it.

    ``jax_user`` is a JAX cache folder the user configured (``JAX_COMPILATION_CACHE_DIR``): it
    is not ours, only named by ``jaxexport cache info``.
    """

    executables: Path
    jax: Path | None
    jax_user: str | None = None


def cache_folders(environ: Mapping[str, str] = os.environ) -> CacheFolders:
    """Where the loader puts its files under this environment (as ``cache_folders`` does),
    found without importing jax. ``HATCH_JAXEXPORT_CACHE=0`` stops the writing, not what an
    earlier process wrote: the default folders are named then."""
    user_jax = environ.get("JAX_COMPILATION_CACHE_DIR", "").strip()
    if user_jax and "://" not in user_jax:
        return CacheFolders(Path(user_jax) / "hatch-jaxexport-executables", None, user_jax)
    choice = cache_choice(environ)
    if isinstance(choice, str):
        return CacheFolders(Path(choice) / "executables", Path(choice), user_jax or None)
    return CacheFolders(default_cache_dir().parent / "executables", default_cache_dir(),
                        user_jax or None)


class CacheItem(NamedTuple):
    """One thing in the cache: an entry (with its ``.lock``/``.log``) or a JAX entry's files.

    ``kind``: ``executable``, ``quick``, ``log``, ``lock``, ``temp``, ``memo`` (the CPU hash
    of a boot), ``legacy`` (an older name format), ``jax`` or ``other``.
    """

    paths: tuple[Path, ...]
    size: int
    used: float
    kind: str
    package: str | None = None
    artifact: str | None = None
    jaxlib: str | None = None


def _stat(entry: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return entry.stat(follow_symlinks=False) if entry.is_file(follow_symlinks=False) \
            else None
    except OSError:
        return None


def _executable_item(path: Path, stat: os.stat_result) -> CacheItem:
    name = path.name
    found = re.fullmatch(NAME, name)  # compiled on first use: not at the loader's import
    if found:
        suffix = found["suffix"]
        kind = {".log": "log", ".lock": "lock"}.get(suffix) or \
            ("quick" if found["quick"] else "executable")
        return CacheItem((path,), stat.st_size, stat.st_mtime, kind, found["package"],
                         found["sha"], found["jaxlib"])
    if name.startswith(".tmp-"):
        kind = "temp"
    elif name.startswith("cpu-") or name == TRIM_LOCK:
        kind = "memo"
    else:
        kind = "legacy" if re.fullmatch(LEGACY_NAME, name) else "other"
    return CacheItem((path,), stat.st_size, stat.st_mtime, kind)


def scan(folders: CacheFolders) -> list[CacheItem]:
    """Every item in our folders (files only; a folder that is not there holds nothing)."""
    items: list[CacheItem] = []
    with contextlib.suppress(OSError), os.scandir(folders.executables) as entries:
        for entry in entries:
            stat = _stat(entry)
            if stat is not None:
                items.append(_executable_item(Path(entry.path), stat))
    if folders.jax is not None:
        items.extend(_scan_jax(folders.jax))
    return items


def _scan_jax(folder: Path) -> list[CacheItem]:
    """JAX's entries: ``<key>-cache`` and ``<key>-atime`` are one item, used when either last
    changed (jax rewrites ``-atime`` on a hit). Other files are left alone, whatever they are:
    the folder may be one the user named with ``HATCH_JAXEXPORT_CACHE``."""
    groups: dict[str, list[tuple[Path, os.stat_result]]] = {}
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            stat = _stat(entry)
            if stat is None or not entry.name.endswith(_JAX_SUFFIXES):  # .lockfile, others'
                continue
            key = entry.name.removesuffix("-cache").removesuffix("-atime")
            groups.setdefault(key, []).append((Path(entry.path), stat))
    return [CacheItem(tuple(p for p, _ in files), sum(s.st_size for _, s in files),
                      max(s.st_mtime for _, s in files), "jax") for files in groups.values()]


def total_size(items: Sequence[CacheItem]) -> int:
    return sum(item.size for item in items)


def remove(items: Sequence[CacheItem]) -> int:
    """Unlink each item's files (whole files only; one already gone is fine, another process
    removed it); return the bytes freed."""
    freed = 0
    for item in items:
        for path in item.paths:
            try:
                size = path.stat().st_size
                path.unlink()
            except OSError:  # gone already, or open elsewhere on Windows: the next trim
                continue
            freed += size
    return freed


def _evictable(item: CacheItem, now: float) -> bool:
    """What a trim may remove: entries, logs, JAX entries and older-format files; locks and
    temporary files only once left behind (a live compile or write holds them)."""
    if item.kind in ("executable", "quick", "log", "jax", "legacy"):
        return True
    return item.kind in ("lock", "temp") and now - item.used > LEFT_BEHIND_S


def over_limit(items: Sequence[CacheItem], limit: int | None) -> list[CacheItem]:
    """The least recently used items to remove so that the rest fit in ``limit`` bytes."""
    if limit is None:
        return []
    excess = total_size(items) - limit
    now = time.time()
    chosen = []
    for item in sorted((i for i in items if _evictable(i, now)), key=lambda i: i.used):
        if excess <= 0:
            break
        chosen.append(item)
        excess -= item.size
    return chosen


@contextlib.contextmanager
def _turn(folder: Path) -> Iterator[bool]:
    """Hold the folder's trim lock (``True``), waiting up to ``TRIM_LOCK_WAIT_S``; ``False``
    when it cannot be had (another trim is slow: this one is skipped, the next write trims)."""
    try:
        fd = os.open(folder / TRIM_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield False
        return
    try:
        yield _lock(fd)
    finally:
        os.close(fd)  # closing releases the lock


def _lock(fd: int) -> bool:
    """Lock ``fd``, waiting up to ``TRIM_LOCK_WAIT_S`` for the process trimming now."""
    deadline = time.monotonic() + TRIM_LOCK_WAIT_S
    while not try_lock(fd):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def trim(folders: CacheFolders, limit: int | None) -> list[CacheItem]:
    """Remove the least recently used items until ours fit in ``limit``; what was removed."""
    if limit is None:
        return []
    with _turn(folders.executables) as mine:
        if not mine:
            return []
        chosen = over_limit(scan(folders), limit)
        remove(chosen)
        return chosen


def after_store(folder: Path) -> None:
    """Trim after the loader wrote an entry into ``folder``: the one time the cache grows.

    Runs where the entry was written (the store thread, or the background compile), never on a
    call's path. A scan reads the folder's listing, cheap next to serializing the entry. JAX's
    folder counts when the entry went to the folder this environment names (the loader's own
    choice).
    """
    try:
        limit = cache_max_bytes()
    except ValueError:  # a bad value: the default, as the loader never fails a call for it
        limit = DEFAULT_CACHE_MAX_BYTES
    if limit is None:
        return
    named = cache_folders()
    folders = named if folder == named.executables else CacheFolders(folder, None)
    with contextlib.suppress(OSError):
        trim(folders, limit)


class Installed:
    """What this environment has installed: each package's shipped artifacts (by SHA-256
    prefix), read once from its manifest without importing it, and the jaxlib version."""

    def __init__(self) -> None:
        import importlib.metadata  # here: its import (email, zipfile...) is not for the loader

        self._shipped: dict[str, frozenset[str] | None] = {}
        try:
            self.jaxlib: str | None = version_label(importlib.metadata.version("jaxlib"))
        except importlib.metadata.PackageNotFoundError:
            self.jaxlib = None

    def shipped(self, package: str) -> frozenset[str] | None:
        """The 16-digit SHA-256 prefixes of ``package``'s artifacts; ``None`` if not installed."""
        if package not in self._shipped:
            self._shipped[package] = _read_shipped(package)
        return self._shipped[package]


def _package_dirs(package: str) -> list[Path]:
    """The folders of an importable package, found without importing it (nor its parents)."""
    top, *rest = package.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(location, *rest) for location in spec.submodule_search_locations]


def _read_shipped(package: str) -> frozenset[str] | None:
    """A package's artifact SHA-256 prefixes from ``_jaxexport/manifest.json`` (read as plain
    JSON, whatever its schema: any artifact it lists keeps its entries)."""
    for folder in _package_dirs(package):
        manifest = folder / "_jaxexport" / "manifest.json"
        try:
            raw = json.loads(manifest.read_bytes())
        except (OSError, ValueError):
            continue
        artifacts = raw.get("artifacts") if isinstance(raw, dict) else None
        return frozenset(a["sha256"][:16] for a in artifacts or []
                         if isinstance(a, dict) and isinstance(a.get("sha256"), str))
    return None


def stale_reason(item: CacheItem, installed: Installed, now: float, boot: str | None) -> str:
    """Why ``prune`` removes ``item`` (``""``: it stays, subject to the limit only)."""
    if item.kind == "legacy":
        return "written by an older hatch-jaxexport (no package recorded)"
    if item.kind in ("lock", "temp") and now - item.used > LEFT_BEHIND_S:
        return "left behind by a process that stopped"
    if item.kind == "memo" and item.paths[0].name.startswith("cpu-") and boot is not None \
            and item.paths[0].name != f"cpu-{boot}":
        return "CPU hash of an earlier boot"
    if item.package is None or item.kind in ("lock", "temp"):
        return ""
    if item.jaxlib != installed.jaxlib:
        return f"jaxlib {item.jaxlib} (installed: {installed.jaxlib or 'none'})"
    shipped = installed.shipped(item.package)
    if shipped is None:
        return f"package {item.package} is not installed"
    if item.artifact not in shipped:
        return f"{item.package} no longer ships artifact {item.artifact}..."
    return ""


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot_file:
            return boot_file.read().strip()
    except OSError:
        return None


class Removal(NamedTuple):
    """An item ``prune`` or ``clear`` removes, and why."""

    item: CacheItem
    reason: str


def prune_plan(folders: CacheFolders, limit: int | None,
               installed: Installed | None = None) -> list[Removal]:
    """What ``jaxexport cache prune`` removes: stale items, then the least recently used of the
    rest until they fit in ``limit``."""
    installed = installed or Installed()
    items = scan(folders)
    now, boot = time.time(), _boot_id()
    plan = [Removal(item, why) for item in items
            if (why := stale_reason(item, installed, now, boot))]
    gone = {id(r.item) for r in plan}
    kept = [item for item in items if id(item) not in gone]
    plan.extend(Removal(item, "least recently used, over the limit")
                for item in over_limit(kept, limit))
    return plan


def clear_plan(folders: CacheFolders) -> list[Removal]:
    """What ``jaxexport cache clear`` removes: every file of ours (a file whose name is none
    of ours stays: it is not known to be ours)."""
    return [Removal(item, "clear") for item in scan(folders) if item.kind != "other"]


def apply(plan: Sequence[Removal], folders: CacheFolders) -> int:
    """Remove the planned items, taking turns with trims; the bytes freed."""
    with _turn(folders.executables):  # without the lock too: removal is idempotent
        return remove([r.item for r in plan])


__all__ = ["LEFT_BEHIND_S", "CacheFolders", "CacheItem", "Installed", "Removal", "after_store",
           "apply", "cache_folders", "clear_plan", "over_limit", "prune_plan", "remove", "scan",
           "stale_reason", "total_size", "trim"]
