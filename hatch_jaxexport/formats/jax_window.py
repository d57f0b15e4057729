"""How long a jax.export artifact loads: its exporting jax's release date, plus jax's window.

jax documents that a newer jax reads an export for about six months after the exporting jax's
release, and refuses older ones. A wheel's artifacts therefore expire, whatever the wheel says
about its jax requirement. The build records the exporting jax's release date in the manifest
(``jax_released``), from ``jax_releases.json``, which ``scripts/jax_releases.py`` regenerates
from PyPI. ``inspect``, the release check and the loader's fallback reasons read the window
from here. A jax newer than the table counts as released on the table's newest date, so its
window ends early rather than late.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import Callable, Sequence

#: jax reads an export about this long after the exporting jax's release (its docs: 6 months).
WINDOW_DAYS = 182
#: An older jax reads an export by a jax released up to about this long after it (its docs:
#: 3 weeks of forward compatibility).
FORWARD_DAYS = 21
#: What a message says about the window.
WINDOW_TEXT = "jax reads an export for about 6 months after the exporting jax's release"


@functools.cache
def _releases() -> dict[str, str]:
    import importlib.resources

    text = importlib.resources.files(__package__).joinpath("jax_releases.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:4])


def jax_release_date(version: str) -> str:
    """The release date (ISO) of jax ``version``: from the table; for a version it lacks, the
    date of the newest release not newer than it (a newer jax: the table's newest)."""
    table = _releases()
    if version in table:
        return table[version]
    known = [v for v in table if _numbers(v) <= _numbers(version)]
    newest = max(known, key=_numbers) if known else min(table, key=_numbers)
    return table[newest]


def loads_until(released: str) -> datetime.date:
    """About the last day a newer jax reads an export by a jax released on ``released``."""
    return datetime.date.fromisoformat(released) + datetime.timedelta(days=WINDOW_DAYS)


def window_text(version: str, released: str, today: datetime.date | None = None) -> str:
    """``loads on jax released until about 2026-12-16 (exported with jax 0.10.2, released
    2026-06-17; jax reads ...), 12 days from today``."""
    until = loads_until(released)
    days = (until - (today or datetime.date.today())).days
    left = f"{days} days from today" if days >= 0 else f"EXPIRED {-days} days ago"
    return (f"loads on jax released until about {until.isoformat()}, {left} (exported with "
            f"jax {version}, released {released}; {WINDOW_TEXT})")


def reads(running_released: str, exported_released: str) -> bool:
    """Whether a jax released on ``running_released`` reads an export by a jax released on
    ``exported_released``: at most ``FORWARD_DAYS`` older, at most ``WINDOW_DAYS`` newer."""
    exported = datetime.date.fromisoformat(exported_released)
    running = datetime.date.fromisoformat(running_released)
    return (exported - datetime.timedelta(days=FORWARD_DAYS) <= running
            <= exported + datetime.timedelta(days=WINDOW_DAYS))


def set_for(running: str, sets: Sequence[tuple[str, str]]) -> int:
    """Which of a wheel's artifact sets (``(exporting jax version, its release date)`` each)
    the running jax ``running`` loads: the one it exported itself; else the newest whose
    window holds it; else (none reads it: its calls run the source) the newest set not newer
    than it, or the oldest. Release dates, not version numbers, order them: jax's window is
    in time (a patch release of an old line can come after a newer minor)."""
    if not sets:
        raise ValueError("set_for: no artifact sets to choose from")
    exact = [i for i, (version, _) in enumerate(sets) if version == running]
    if exact:
        return exact[0]
    released = jax_release_date(running)
    newest_first = sorted(range(len(sets)), key=lambda i: sets[i][1], reverse=True)
    for i in newest_first:
        if reads(released, sets[i][1]):
            return i
    older = [i for i in newest_first if sets[i][1] <= released]
    return older[0] if older else newest_first[-1]


def window_dates(released: str) -> tuple[datetime.date, datetime.date]:
    """The first and last release dates of a jax that reads an export by a jax released on
    ``released``."""
    day = datetime.date.fromisoformat(released)
    return day - datetime.timedelta(days=FORWARD_DAYS), loads_until(released)


def sets_lines(sets: Sequence[tuple[str, str]], running: str,
               today: datetime.date | None = None) -> list[str]:
    """What ``inspect`` and the release check say of a wheel's artifact sets (``(exporting
    jax, its release date)`` each, ``jax-releases``): newest first, the jax releases each
    loads on and until when, and which one serves the running jax (or that none does)."""
    chosen = set_for(running, sets)
    released = jax_release_date(running) if running else ""
    lines = []
    newest_first = sorted(range(len(sets)), key=lambda i: sets[i][1], reverse=True)
    for i in newest_first:
        version, date = sets[i]
        first, last = window_dates(date)
        days = (last - (today or datetime.date.today())).days
        left = "" if i != newest_first[0] else f", {days} days from today" if days >= 0 else \
            f", which was {-days} days ago: a jax released since reads no set (EXPIRED)"
        serves = i == chosen and released and reads(released, date)
        lines.append(f"jax {version} (released {date}): loads on jax released {first} to "
                     f"{last}{left}" + (f"; serves this jax {running}" if serves else ""))
    if running and not any(reads(released, date) for _, date in sets):
        lines.append(f"this jax {running} (released {released}) is outside every set's "
                     "window: its calls run the source")
    return lines


def uncovered_releases(sets: Sequence[tuple[str, str]], declared: Callable[[str], bool]
                       ) -> list[str]:
    """The jax releases (of the table) the package declares (``declared``: its requirement's
    test) that no set's window holds: their users' calls run the source."""
    table = _releases()
    return sorted((v for v in table if declared(v)
                   and not any(reads(table[v], date) for _, date in sets)), key=_numbers)


def releases_text(versions: Sequence[str]) -> str:
    """Releases as runs of the table's consecutive ones: ``0.5.0 to 0.6.1 (6), 0.10.1``."""
    table = sorted(_releases(), key=_numbers)
    runs: list[list[str]] = []
    for version in sorted(versions, key=_numbers):
        if runs and version in table and runs[-1][-1] in table and \
                table.index(version) == table.index(runs[-1][-1]) + 1:
            runs[-1].append(version)
        else:
            runs.append([version])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]} to {run[-1]} ({len(run)})"
                     for run in runs)


def days_left(released: str, today: datetime.date | None = None) -> int:
    """Days until an export by a jax released on ``released`` expires (negative: expired)."""
    return (loads_until(released) - (today or datetime.date.today())).days


__all__ = ["FORWARD_DAYS", "WINDOW_DAYS", "WINDOW_TEXT", "days_left", "jax_release_date",
           "loads_until", "reads", "releases_text", "set_for", "sets_lines", "uncovered_releases",
           "window_dates", "window_text"]
