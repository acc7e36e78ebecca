"""Human formatting of the analysis document's values (docs/analysis-format.md conventions).

Sizes arrive as bytes, ratios as 0..1, percentages as 0..100, times as ISO 8601 UTC strings;
``None`` means unknown and is shown as an em dash, never as 0. Every function returns plain
text: escaping is the template's job (HTML) or :mod:`forensics.report.markdown`'s.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from forensics.humanize import format_bytes, format_clock
from forensics.parsing.timestamps import parse_iso

__all__ = [
    "UNKNOWN",
    "fmt_bytes",
    "fmt_confidence",
    "fmt_date",
    "fmt_duration",
    "fmt_pct",
    "fmt_ratio",
    "fmt_time",
    "fmt_time_short",
    "fmt_unix_clock",
    "parse_time",
    "short_id",
]

UNKNOWN = "—"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def fmt_bytes(value: object) -> str:
    """``66571993088`` -> ``"62.0 GiB"`` (binary units)."""
    return format_bytes(value, UNKNOWN)


def fmt_pct(value: object, digits: int = 0) -> str:
    """A 0..100 percentage: ``88.04`` -> ``"88%"``."""
    number = _number(value)
    return UNKNOWN if number is None else f"{number:.{digits}f}%"


def fmt_ratio(value: object, digits: int = 0) -> str:
    """A 0..1 ratio as a percentage: ``0.12`` -> ``"12%"``."""
    number = _number(value)
    return UNKNOWN if number is None else f"{number * 100:.{digits}f}%"


def fmt_confidence(value: object) -> str:
    """Confidence 0..1 -> ``"95%"``."""
    return fmt_ratio(value)


def fmt_duration(value: object) -> str:
    """Seconds -> ``"1.2 s"``, ``"3 min 05 s"``, ``"1 h 02 min"``."""
    number = _number(value)
    if number is None:
        return UNKNOWN
    if number < 60:
        return f"{number:.1f} s" if number < 10 else f"{number:.0f} s"
    minutes, seconds = divmod(int(round(number)), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def parse_time(value: object) -> datetime | None:
    """An ISO 8601 string (``Z`` or offset) or unix seconds -> aware UTC datetime, else None."""
    if isinstance(value, str):
        return parse_iso(value)
    number = _number(value)
    if number is None:
        return None
    try:
        return datetime.fromtimestamp(number, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def fmt_time(value: object) -> str:
    """``"2026-11-29T14:02:10Z"`` -> ``"2026-11-29 14:02:10 UTC"``; unparsable text is kept."""
    parsed = parse_time(value)
    if parsed is None:
        return value if isinstance(value, str) and value else UNKNOWN
    text = parsed.strftime("%Y-%m-%d %H:%M:%S")
    if parsed.microsecond:
        text += f".{parsed.microsecond // 1000:03d}"
    return text + " UTC"


def fmt_date(value: object) -> str:
    """``"2026-11-29T14:02:10Z"`` -> ``"2026-11-29"`` (UTC)."""
    parsed = parse_time(value)
    return UNKNOWN if parsed is None else parsed.strftime("%Y-%m-%d")


def fmt_time_short(value: object) -> str:
    """``"2026-11-29T14:02:10Z"`` -> ``"14:02:10"`` (timeline rows, within one day)."""
    parsed = parse_time(value)
    if parsed is None:
        return value if isinstance(value, str) and value else UNKNOWN
    return format_clock(parsed, UNKNOWN)


def fmt_unix_clock(value: object) -> str:
    """Unix seconds -> ``"14:02:10"`` (UTC), for chart captions."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value != value:
        return UNKNOWN
    try:
        return format_clock(datetime.fromtimestamp(float(value), UTC), UNKNOWN)
    except (OverflowError, OSError, ValueError):
        return UNKNOWN


def short_id(value: object, length: int = 12) -> str:
    """A container id or digest shortened the way ``docker ps`` does."""
    if not isinstance(value, str) or not value:
        return UNKNOWN
    return value if len(value) <= length else value[:length]
