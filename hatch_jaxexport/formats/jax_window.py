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

#: jax reads an export about this long after the exporting jax's release (its docs: 6 months).
WINDOW_DAYS = 182
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


def days_left(released: str, today: datetime.date | None = None) -> int:
    """Days until an export by a jax released on ``released`` expires (negative: expired)."""
    return (loads_until(released) - (today or datetime.date.today())).days


__all__ = ["WINDOW_DAYS", "WINDOW_TEXT", "days_left", "jax_release_date", "loads_until",
           "window_text"]
