"""Helpers shared by the rules: time spans and de-duplicated subjects and evidence.

Owners, pods and allocations come resolved from ``Model.joins`` (:mod:`forensics.analysis.joins`);
names, sizes and times are worded by :mod:`forensics.analysis.naming`.
"""

from __future__ import annotations

from collections.abc import Iterable

from forensics.analysis.findings import Evidence, Subject

__all__ = ["dedupe_evidence", "dedupe_subjects", "span"]


def span(times: Iterable[float]) -> tuple[float | None, float | None]:
    ts = list(times)
    return (min(ts), max(ts)) if ts else (None, None)


def dedupe_evidence(items: Iterable[Evidence], limit: int = 12) -> tuple[Evidence, ...]:
    seen: dict[tuple[str, str, str], Evidence] = {}
    for e in items:
        seen.setdefault((e.bundle, e.member, e.locator), e)
    return tuple(list(seen.values())[:limit])


def dedupe_subjects(items: Iterable[Subject]) -> tuple[Subject, ...]:
    """Keep the first role seen per entity (culprit/victim listed first by callers)."""
    seen: dict[tuple[str, str, str], Subject] = {}
    for s in items:
        seen.setdefault(s.key(), s)
    return tuple(seen.values())
