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
from forensics.report.formatting import fmt_bytes, fmt_time_short
from forensics.report.records import MARKER_CAP, FindingView, IncidentView, VerdictView

__all__ = [
    "finding_markers",
    "incident_band",
    "memory_panel",
    "off_chart_note",
    "series_axis",
    "series_stats",
    "series_values",
]


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
    points: Sequence[tuple[float, float, str]] = (),
) -> Panel:
    """A memory panel in the unit that suits its largest value (GiB for GPUs, KiB for busybox);
    ``points`` (unix seconds, bytes, label) are single events such as an OOM kill's usage."""
    peak = max([v for _, values, _ in lines for v in values if v is not None] + [reference or 0.0]
               + [p[1] for p in points])
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
        points=tuple((at, value / size, f"{label} at {fmt_bytes(value)}") for at, value, label in points),
    )


def series_stats(raw: object) -> tuple[float | None, float | None]:
    """(mean, max) of a series' known values, ``(None, None)`` when none is known."""
    known = _known(raw)
    return (sum(known) / len(known), float(max(known))) if known else (None, None)


def _reach(t: Sequence[float]) -> tuple[float, float]:
    """How far beyond its samples a chart's axis stretches to mark a finding: half the samples'
    span (at least 30 s) each side, so a finding just after the last sample (an OOM kill between
    two ticks) is on the chart and one from an hour earlier does not squash it."""
    lo, hi = min(t), max(t)
    reach = max((hi - lo) / 2, 30.0)
    return lo - reach, hi + reach


def finding_markers(
    findings: Sequence[FindingView], t: Sequence[float]
) -> tuple[tuple[Marker, ...], tuple[FindingView, ...]]:
    """The markers of ``findings`` on a chart over ``t``, and the findings too far off to mark."""
    if not t:
        return (), ()
    lo, hi = _reach(t)
    ranked = sorted(findings, key=lambda f: (severity_rank(f.severity), f.start))[:MARKER_CAP]
    out = []
    off = []
    for finding in sorted(ranked, key=lambda f: f.start):
        at = unix(finding.start)
        if at is not None and lo <= at <= hi:
            out.append(Marker(at, finding.id, finding.severity))
        elif at is not None:
            off.append(finding)
    return tuple(out), tuple(off)


def off_chart_note(off: Sequence[FindingView]) -> str:
    """The caption's words for findings a chart could not mark."""
    if not off:
        return ""
    parts = [f"{f.id} at {fmt_time_short(f.start)}" + (f", {f.before_capture}" if f.before_capture else "")
             for f in off]
    return "Not on this chart's time axis: " + "; ".join(parts) + "."


def incident_band(
    ctx_incidents: Sequence[IncidentView],
    verdict: VerdictView,
    related: Sequence[FindingView],
    t: Sequence[float],
) -> tuple[float, float] | None:
    """The band of the incident this chart's findings belong to (the first such, most relevant
    first), covering that incident's span only; none when no finding of the chart is in one."""
    if not t or not related:
        return None
    ids = {f.id for f in related}
    if ctx_incidents:
        incident = next((i for i in ctx_incidents if ids & set(i.finding_ids)), None)
        if incident is None:
            return None
        start, end = unix(incident.start), unix(incident.end)
    else:  # a document without incidents: the verdict's span is the one incident
        start, end = unix(verdict.start), unix(verdict.end)
    if start is None:
        return None
    end = end if end is not None and end >= start else start
    lo, hi = _reach(t)
    if end < lo or start > hi:
        return None
    width = (max(t) - min(t)) or 10.0
    if end - start < width / 120:
        end = start + width / 120  # a one-instant incident still gets a visible band
    return max(start, lo), min(end, hi)
