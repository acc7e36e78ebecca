"""Chart data from the document's series: time axes, values, statistics, markers and bands.

A series arrives as parallel lists (``t`` in unix seconds, values with ``null`` for unknown);
everything here reads them with exact types (a ``bool`` is not a number) and never trusts a
length. Pure: :mod:`forensics.report.charts` draws what this prepares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from forensics.document_format import severity_rank
from forensics.report.access import get_list, unix
from forensics.report.charts import Line, Marker, Panel
from forensics.report.formatting import fmt_bytes
from forensics.report.records import MARKER_CAP, FindingView, VerdictView

__all__ = ["finding_markers", "incident_band", "memory_panel", "series_axis", "series_stats", "series_values"]


def series_axis(series: Mapping[str, Any]) -> tuple[float, ...]:
    """A series' ``t`` axis (unix seconds); empty when any entry is not a number."""
    raw = get_list(series, "t")
    t = tuple(float(x) for x in raw if type(x) is float or type(x) is int)
    return t if len(t) == len(raw) else ()


def _known(raw: object) -> list[float]:
    """The known (finite, numeric) values of a series, for statistics."""
    if not isinstance(raw, list):
        return []
    return [
        v for v in raw if (type(v) is float and v == v and v not in (_INF, -_INF)) or type(v) is int
    ]


def series_values(raw: object, n: int) -> tuple[float | None, ...]:
    """A series' values as floats (``None`` for unknown or non-numeric), at most ``n`` of them."""
    if not isinstance(raw, list):
        return ()
    out: list[float | None] = []
    append = out.append
    for value in raw[:n]:
        kind = type(value)  # exact types: bool is not a number here, and this loop is hot
        if kind is float:
            append(value if value == value and value not in (_INF, -_INF) else None)
        elif kind is int:
            append(float(value))
        else:
            append(None)
    return tuple(out)


_INF = float("inf")


_MEMORY_UNITS = (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0), ("B", 1.0))


def memory_panel(
    title: str,
    t: tuple[float, ...],
    lines: Sequence[tuple[str, tuple[float | None, ...], bool]],
    reference: float | None,
    reference_name: str,
) -> Panel:
    """A memory panel in the unit that suits its largest value (GiB for GPUs, KiB for busybox)."""
    peak = max([v for _, values, _ in lines for v in values if v is not None] + [reference or 0.0])
    unit, size = next(((u, n) for u, n in _MEMORY_UNITS if peak >= n), _MEMORY_UNITS[-1])
    return Panel(
        title,
        unit,
        tuple(
            Line(label, t, tuple(None if v is None else v / size for v in values), emphasis)
            for label, values, emphasis in lines
        ),
        reference=reference / size if reference else None,
        reference_label=f"{reference_name} {fmt_bytes(reference)}" if reference else "",
    )


def series_stats(raw: object) -> tuple[float | None, float | None]:
    """(mean, max) of a series' known values, ``(None, None)`` when none is known."""
    known = _known(raw)
    return (sum(known) / len(known), float(max(known))) if known else (None, None)


def finding_markers(findings: Sequence[FindingView], t: Sequence[float]) -> tuple[Marker, ...]:
    if not t:
        return ()
    lo, hi = min(t), max(t)
    ranked = sorted(findings, key=lambda f: (severity_rank(f.severity), f.start))[:MARKER_CAP]
    out = []
    for finding in sorted(ranked, key=lambda f: f.start):
        at = unix(finding.start)
        if at is not None and lo <= at <= hi:
            out.append(Marker(at, finding.id, finding.severity))
    return tuple(out)


def incident_band(verdict: VerdictView, t: Sequence[float]) -> tuple[float, float] | None:
    start, end = unix(verdict.start), unix(verdict.end)
    if start is None or not t:
        return None
    end = end if end is not None and end >= start else start
    lo, hi = min(t), max(t)
    if end < lo or start > hi:
        return None
    if end - start < (hi - lo) / 120:
        end = start + (hi - lo) / 120  # a one-instant incident still gets a visible band
    return max(start, lo), min(end, hi)
