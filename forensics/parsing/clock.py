"""How far this host's clock is from another's, from the HTTP ``Date`` headers of answered calls.

A server writes ``Date`` (RFC 7231, whole seconds, truncated) at some instant between the moment
the request left this host (``sent``) and the answer came back (``received``), both on this
host's wall clock. So the offset ``server - local`` lies in ``[date - received, date + 1 - sent]``
for every call; the calls' intervals intersect to a tighter one. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

__all__ = ["ClockEstimate", "estimate_offset", "http_date_unix"]


@dataclass(frozen=True)
class ClockEstimate:
    """``offset_s``: add it to this host's times to get the server's; ``uncertainty_s``: half the
    width of the interval the offset is known to lie in; ``samples``: the calls used;
    ``consistent``: False when the calls' intervals did not overlap (a clock stepped during the
    capture) and the single call with the shortest round trip was used."""

    offset_s: float
    uncertainty_s: float
    samples: int
    consistent: bool
    best_round_trip_s: float


def http_date_unix(value: object) -> float | None:
    """``Tue, 03 Mar 2026 14:03:07 GMT`` -> unix seconds; anything else -> None."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        dt = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if dt.tzinfo is None:
        return None
    return dt.timestamp()


def estimate_offset(calls: Iterable[tuple[object, object, object]]) -> ClockEstimate | None:
    """``calls``: (Date header, sent unix, received unix) per answered call; None without one usable."""
    bounds: list[tuple[float, float, float]] = []  # (low, high, round trip)
    for date, sent, received in calls:
        d = http_date_unix(date)
        if d is None or not isinstance(sent, int | float) or not isinstance(received, int | float):
            continue
        if received < sent or received - sent > 60:
            continue
        bounds.append((d - float(received), d + 1.0 - float(sent), float(received) - float(sent)))
    if not bounds:
        return None
    low = max(b[0] for b in bounds)
    high = min(b[1] for b in bounds)
    best = min(bounds, key=lambda b: b[2])
    consistent = low <= high
    if not consistent:
        low, high = best[0], best[1]
    return ClockEstimate(round((low + high) / 2, 6), round((high - low) / 2, 6), len(bounds), consistent,
                         round(best[2], 6))
