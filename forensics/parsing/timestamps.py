"""The one ISO 8601 / RFC 3339 reader and writer every layer uses.

Sources write times in several shapes: Docker with nanoseconds (``...14.123456789Z``) and a zero
time (``0001-01-01T00:00:00Z``), Kubernetes ``metav1.Time``/``MicroTime`` (``Z`` or an offset),
our own bundles with microseconds and ``Z``. Python's ``datetime.fromisoformat`` takes at most six
fraction digits, so the fraction is cut to microseconds before parsing. A time without a zone is
read as UTC unless the caller asks for a zone (``require_zone``).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

__all__ = ["format_iso", "parse_iso", "parse_iso_unix", "is_zero_time", "parse_moment"]

_FRACTION = re.compile(r"\.(\d+)")


def is_zero_time(text: str) -> bool:
    """Docker's "never" (``0001-01-01T00:00:00Z``) and Go's zero ``time.Time``."""
    return text.startswith("0001-01-01")


def parse_iso(value: object, *, require_zone: bool = False) -> datetime | None:
    """An ISO 8601 string (``Z``, ``z`` or an offset; up to nanoseconds) -> aware UTC datetime.

    None for anything that is not such a string, and (with ``require_zone``) for a naive time.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    text = _FRACTION.sub(lambda m: "." + m.group(1)[:6], text, count=1)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        if require_zone:
            return None
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


_CLOCK = re.compile(r"^([01]?[0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))?$")
_AGO_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_moment(value: str, now: datetime) -> datetime:
    """A moment as ``--since``/``--until`` take it: an ISO 8601 time (UTC without a zone), a UTC
    clock time (``14:00``, ``14:00:30``: today, or yesterday when that is still to come) or a
    duration before ``now`` (``30m``, ``2h``, ``1d``). :class:`ValueError` with the reason for
    anything else, and for a moment after ``now``."""
    text = value.strip()
    clock = _CLOCK.match(text)
    if clock:
        dt = now.astimezone(UTC).replace(hour=int(clock[1]), minute=int(clock[2]), second=int(clock[3] or 0),
                                         microsecond=0)
        return dt - timedelta(days=1) if dt > now else dt
    if text[-1:] in _AGO_UNITS and text[:-1].replace(".", "", 1).isdigit():
        try:
            return now - timedelta(seconds=float(text[:-1]) * _AGO_UNITS[text[-1]])
        except (OverflowError, ValueError):  # 99999999999d: before year 1
            raise ValueError(f"duration too long: {value!r}") from None
    try:
        moment = parse_iso(text)
    except OverflowError:  # 0001-01-01T00:00:00+05:00 is before year 1 in UTC
        moment = None
    if moment is None:
        raise ValueError(f"not an ISO 8601 time, a clock time like 14:00 or a duration like 30m: {value!r}")
    if moment > now:
        raise ValueError(f"{value!r} is in the future (now {now:%Y-%m-%dT%H:%M:%SZ}); nothing would be kept")
    return moment


def parse_iso_unix(value: object) -> float | None:
    """An ISO 8601 string -> unix seconds (None when unparsable or Docker's zero time)."""
    if isinstance(value, str) and is_zero_time(value.strip()):
        return None
    dt = parse_iso(value)
    return None if dt is None else dt.timestamp()


def format_iso(value: datetime | float | None, *, precision: str = "micro") -> str | None:
    """UTC with ``Z``: ``precision`` "micro" (bundles: always six digits), "milli" (analysis
    documents: three digits, only when the time has a fraction) or "seconds"."""
    if value is None:
        return None
    if isinstance(value, datetime):
        dt = value.astimezone(UTC)
    else:
        if not math.isfinite(value):
            return None
        dt = datetime.fromtimestamp(value, UTC)
    if precision == "micro":
        return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if precision == "milli" and dt.microsecond:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")
