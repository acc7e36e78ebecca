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
from datetime import UTC, datetime

__all__ = ["format_iso", "parse_iso", "parse_iso_unix", "is_zero_time"]

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
