"""Sizes and clock times for people: the one implementation the analysis texts and the report share.

Each caller says how it shows an unknown value (the analysis writes ``?`` and "an unknown time"
into findings; the report shows an em dash) and, for sizes, its largest unit. Times are UTC.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

__all__ = ["BINARY_UNITS", "format_bytes", "format_clock"]

BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def format_bytes(value: object, unknown: str, largest: str = "PiB") -> str:
    """``66571993088`` -> ``"62.0 GiB"`` (binary units up to ``largest``; whole bytes below 1 KiB);
    ``unknown`` for anything that is not a finite number."""
    number = _finite(value)
    if number is None:
        return unknown
    units = BINARY_UNITS[: BINARY_UNITS.index(largest) + 1]
    unit = 0
    while abs(number) >= 1024 and unit < len(units) - 1:
        number /= 1024
        unit += 1
    return f"{number:.0f} {units[unit]}" if unit == 0 else f"{number:.1f} {units[unit]}"


def format_clock(value: datetime | float | None, unknown: str, zone: str = "") -> str:
    """A time (aware datetime or unix seconds) -> ``"14:02:10"`` + ``zone`` (``"Z"`` for
    ``"14:02:10Z"``), in UTC; ``unknown`` when there is no time."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%H:%M:%S") + zone
    number = _finite(value)
    if number is None:
        return unknown
    try:
        return datetime.fromtimestamp(number, UTC).strftime("%H:%M:%S") + zone
    except (OverflowError, OSError, ValueError):
        return unknown
