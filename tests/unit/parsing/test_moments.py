"""``--since``/``--until`` moments: ISO times, UTC clock times and durations ago, refused when in the future."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from forensics.parsing.durations import parse_duration_s
from forensics.parsing.timestamps import parse_moment

NOW = datetime(2026, 3, 4, 15, 30, 0, tzinfo=UTC)


def test_clock_time_is_today_or_yesterday_when_still_to_come() -> None:
    assert parse_moment("14:00", NOW) == datetime(2026, 3, 4, 14, 0, tzinfo=UTC)
    assert parse_moment("15:29:30", NOW) == datetime(2026, 3, 4, 15, 29, 30, tzinfo=UTC)
    assert parse_moment("23:00", NOW) == datetime(2026, 3, 3, 23, 0, tzinfo=UTC)


def test_durations_ago_and_iso_times() -> None:
    assert parse_moment("2h", NOW) == datetime(2026, 3, 4, 13, 30, tzinfo=UTC)
    assert parse_moment("1.5m", NOW) == datetime(2026, 3, 4, 15, 28, 30, tzinfo=UTC)
    assert parse_moment("2026-03-04T12:00:00", NOW) == datetime(2026, 3, 4, 12, 0, tzinfo=UTC)  # no zone: UTC
    assert parse_moment("2026-03-04T13:00:00+01:00", NOW) == datetime(2026, 3, 4, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("value,reason", [
    ("yesterday", "not an ISO 8601 time, a clock time like 14:00"),
    ("24:00", "not an ISO 8601 time"),
    ("99999999999d", "duration too long"),
    ("2026-03-05T00:00:00Z", "is in the future"),
])
def test_anything_else_says_why(value: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_moment(value, NOW)


def test_durations() -> None:
    assert parse_duration_s("15s") == 15 and parse_duration_s("1m") == 60 and parse_duration_s("500ms") == 0.5
    for bad in ("fast", "0s", "8d", "-1m"):
        with pytest.raises(ValueError):
            parse_duration_s(bad)
