"""Durations written the way Prometheus and people write them: ``15s``, ``1m``, ``2h``, ``500ms``, ``30``."""

from __future__ import annotations

import re

__all__ = ["MAX_DURATION_S", "parse_duration_s"]

MAX_DURATION_S = 86400.0 * 7
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_s(text: str) -> float:
    """``15s``, ``1m``, ``2h``, ``30`` (seconds) -> seconds; :class:`ValueError` otherwise (or if not
    more than 0 and at most 7 days)."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration like 15s, 1m or 30: {text!r}")
    value = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not 0 < value <= MAX_DURATION_S:
        raise ValueError(f"a duration must be more than 0 and at most 7 days: {text!r}")
    return value
