"""The compatibility window of an export: its jax's release date plus about six months."""

from __future__ import annotations

import datetime

import pytest

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.jax_window import (
    WINDOW_DAYS,
    days_left,
    jax_release_date,
    loads_until,
    reads,
    set_for,
    window_text,
)


def test_release_dates_come_from_the_table_and_unknown_versions_end_early():
    assert jax_release_date("0.10.2") == "2026-06-17"
    assert jax_release_date("0.4.30") == "2024-06-18"
    newest = jax_release_date("0.12.0.1")
    assert jax_release_date("9.0.0") == newest  # newer than the table: its newest date
    assert jax_release_date("0.10.2.dev20260701+abc") == "2026-06-17"  # not newer than 0.10.2


def test_the_window_is_six_months_and_its_text_says_until_when():
    assert loads_until("2026-06-17") == datetime.date(2026, 12, 16)
    assert WINDOW_DAYS == 182
    today = datetime.date(2026, 12, 4)
    assert days_left("2026-06-17", today) == 12
    text = window_text("0.10.2", "2026-06-17", today)
    assert text == ("loads on jax released until about 2026-12-16, 12 days from today "
                    "(exported with jax 0.10.2, released 2026-06-17; jax reads an export for "
                    "about 6 months after the exporting jax's release)")
    assert "EXPIRED 3 days ago" in window_text("0.10.2", "2026-06-17",
                                               datetime.date(2026, 12, 19))


def test_a_refused_artifact_of_an_expired_jax_says_rebuild_with_a_newer_jax():
    from hatch_jaxexport.runtime.artifacts.package_artifacts import deserialize_checked

    with pytest.raises(ArtifactError) as info:
        deserialize_checked(b"not an export", [], "mypkg", built_with="0.4.1")
    message = str(info.value)
    assert message.startswith("jax could not deserialize the artifact")
    assert "the artifact expired for this jax" in message
    assert "exported with jax 0.4.1, released 2022-12-13" in message  # jax_release_date
    assert message.endswith("rebuild with a newer jax")
    with pytest.raises(ArtifactError) as info:  # inside the window: no such words
        import jax

        deserialize_checked(b"not an export", [], "mypkg", built_with=jax.__version__)
    assert "expired" not in str(info.value)


SETS = [("0.10.2", "2026-06-17"), ("0.6.2", "2025-06-17"), ("0.8.1", "2025-11-18")]


@pytest.mark.parametrize(("running", "served_by"), [
    ("0.10.2", "0.10.2"),  # its own export, whatever the dates
    ("0.9.2", "0.8.1"),  # 2026-03-18: inside 0.8.1's window only
    ("0.8.1", "0.8.1"),
    ("0.7.2", "0.6.2"),  # 2025-09-16: inside 0.6.2's window only
    ("0.12.0", "0.10.2"),  # 2026-10-19: inside 0.10.2's window
    ("0.6.1", "0.6.2"),  # 2025-05-21: 27 days before 0.6.2, outside; the oldest set
    ("0.5.0", "0.6.2"),  # outside every window, older than every set: the oldest
])
def test_the_running_jax_gets_the_set_whose_window_holds_it(running, served_by):
    """An exact version first, then the newest set whose window holds the running jax's
    release date; outside every window, the newest set not newer than it, or the oldest (its
    calls then run the source when jax refuses it)."""
    assert SETS[set_for(running, SETS)][0] == served_by


def test_a_window_reaches_three_weeks_back_and_six_months_forward():
    assert reads("2026-05-27", "2026-06-17") and not reads("2026-05-26", "2026-06-17")
    assert reads("2026-12-16", "2026-06-17") and not reads("2026-12-17", "2026-06-17")
    with pytest.raises(ValueError, match="no artifact sets"):
        set_for("0.10.2", [])
