"""The ``jaxexport cache info | prune | clear`` command: see and bound what the loader keeps.

Integration layer: the argument parser and the printing; finding, judging and removing the
files live in ``runtime/disk/footprint.py``, which the loader's own trimming uses too. Imports no
jax, so the command is quick and works where jax is broken.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from hatch_jaxexport.formats.settings import CACHE_MAX_BYTES_ENV, cache_max_bytes
from hatch_jaxexport.runtime.disk.footprint import (
    CacheFolders,
    CacheItem,
    Removal,
    apply,
    cache_folders,
    clear_plan,
    prune_plan,
    scan,
    total_size,
)


def add_command(sub: Any) -> dict[str, argparse.ArgumentParser]:
    """Add ``cache`` and its ``info``, ``prune`` and ``clear`` to the CLI's subparsers; return
    the three by their command line after ``jaxexport`` (``cache info``...), for the help
    pages."""
    cache = sub.add_parser(
        "cache", help="show, prune or clear what the loader keeps in the user's cache folder",
        description="The executables the loader compiled (and JAX's compilation cache, where "
        "hatch-jaxexport chose its folder) in the per-user cache folder. "
        f"{CACHE_MAX_BYTES_ENV} bounds them (default 1G; 0: no limit).")
    actions = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    info = actions.add_parser("info", help="print the folders, their size by package and "
                              "jaxlib, and the limit", description="Print the cache folders, the "
                              "total size, the size per package and per jaxlib version, and the "
                              "limit.")
    nested = {"cache info": info}
    for name, text in (("prune", "remove the entries of packages and artifacts no longer "
                        "installed, of other jaxlib versions, and files processes left behind; "
                        "then the least recently used until the cache fits its limit"),
                       ("clear", "remove everything hatch-jaxexport keeps in the cache")):
        action = actions.add_parser(name, help=text.split(";")[0], description=text[0].upper()
                                    + text[1:] + ".")
        action.add_argument("--dry-run", action="store_true",
                            help="list what would be removed, and remove nothing")
        nested[f"cache {name}"] = action
    return nested


def run_command(args: argparse.Namespace) -> int:
    """``jaxexport cache ACTION``."""
    folders = cache_folders()
    limit = cache_max_bytes()  # a bad value is an error here, not silently the default
    if args.cache_command == "info":
        _info(folders, limit)
        return 0
    plan = prune_plan(folders, limit) if args.cache_command == "prune" else clear_plan(folders)
    _report(plan, folders, limit, args.dry_run)
    return 0


def byte_text(n: int) -> str:
    """A size in binary units (``1.0 GiB``, ``340.2 KiB``), as the limit is given."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _limit_text(limit: int | None) -> str:
    return "no limit" if limit is None else f"limit {byte_text(limit)}"


def _info(folders: CacheFolders, limit: int | None) -> None:
    items = scan(folders)
    print(f"executables: {folders.executables}")
    if folders.jax is not None:
        print(f"jax cache:   {folders.jax} (chosen by hatch-jaxexport: counted)")
    if folders.jax_user:
        print(f"jax cache:   {folders.jax_user} (JAX_COMPILATION_CACHE_DIR: yours, not "
              "counted; jax_compilation_cache_max_size bounds it)")
    print(f"total: {byte_text(total_size(items))} in {len(items)} item(s); "
          f"{_limit_text(limit)}, set by {CACHE_MAX_BYTES_ENV}")
    _print_groups("by package", items, _package_of)
    _print_groups("by jaxlib", items, lambda item: item.jaxlib or _unattributed(item))


def _unattributed(item: CacheItem) -> str:
    return {"jax": "(JAX's cache)", "legacy": "(older format)"}.get(item.kind, "(other files)")


def _package_of(item: CacheItem) -> str:
    return item.package or _unattributed(item)


def _print_groups(title: str, items: Sequence[CacheItem], key: Any) -> None:
    groups: dict[str, list[CacheItem]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    if not groups:
        return
    print(f"{title}:")
    width = max(len(name) for name in groups)
    for name, group in sorted(groups.items(), key=lambda kv: -total_size(kv[1])):
        print(f"  {name:<{width}}  {byte_text(total_size(group)):>9}  {len(group)} item(s)")


def _report(plan: Sequence[Removal], folders: CacheFolders, limit: int | None,
            dry_run: bool) -> None:
    size = sum(removal.item.size for removal in plan)
    if dry_run:
        for removal in plan:
            for path in removal.item.paths:
                print(f"would remove {path} ({removal.reason})")
        print(f"would free {byte_text(size)} in {len(plan)} item(s)")
        return
    freed = apply(plan, folders)
    left = total_size(scan(folders))
    print(f"removed {len(plan)} item(s), {byte_text(freed)}; the cache holds {byte_text(left)} "
          f"({_limit_text(limit)})")


__all__ = ["add_command", "run_command"]

