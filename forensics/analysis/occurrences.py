"""Repeated findings as one: the same kind, node, parties and cause found again and again across a
long span (a flapping link, a throttled container every few minutes of an hour) become one finding
with its occurrences (how many, the first, the last, the worst), at the scale a person reads.

A pass after the rules, before history and before-capture marking and the chain. Two findings are
occurrences of one when they have the same kind, node, subjects (type, id and role; a subject's own
record ``time`` aside) and the same cause: the same text-valued metrics (an Xid's code name, the
stalled resource, the throttled device). Numbers (shares, durations, counts) may differ: they are
the occurrence's magnitude, and the worst occurrence's stand for the finding. The merged finding is
the worst occurrence (highest severity, then confidence, then earliest) spanning the first's start
to the last's end, citing the first's, the worst's and the last's evidence; its summary and
headline begin ``N occurrences, first HH:MM:SSZ, last HH:MM:SSZ, worst HH:MM:SSZ: ``, so every
format shows it, and ``occurrences`` carries the figures (docs/analysis-format.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from forensics.analysis.findings import Evidence, Finding, Occurrences, severity_rank
from forensics.analysis.naming import fmt_time

__all__ = ["merge_repeats"]

#: at most this many pieces of evidence on a merged finding (the first's, the worst's, the last's)
EVIDENCE_PER_OCCURRENCE = 4

_Key = tuple[str, str, tuple[tuple[str, str, str], ...], tuple[tuple[str, str], ...]]


def _key(f: Finding) -> _Key:
    subjects = tuple(sorted((s.type, s.id, s.role) for s in f.subjects))
    cause = tuple(sorted((k, v) for k, v in f.metrics if isinstance(v, str)))
    return (f.node, f.kind, subjects, cause)


def _worst_first(f: Finding) -> tuple[int, float, float]:
    return (severity_rank(f.severity), -f.confidence, f.start if f.start is not None else float("inf"))


def _by_time(f: Finding) -> float:
    return f.start if f.start is not None else (f.end if f.end is not None else float("inf"))


def merge_repeats(findings: Sequence[Finding]) -> list[Finding]:
    """``findings`` with each group of repeats (see the module) as one finding; the others as they
    are, in their order (a merged finding where its first occurrence was)."""
    groups: dict[_Key, list[Finding]] = {}
    for f in findings:
        groups.setdefault(_key(f), []).append(f)
    out: list[Finding] = []
    for f in findings:
        group = groups.get(_key(f))
        if group is None:
            continue  # already merged
        if len(group) == 1:
            out.append(f)
        else:
            out.append(_merged(group))
        del groups[_key(f)]
    return out


def _merged(group: list[Finding]) -> Finding:
    ordered = sorted(group, key=_by_time)
    first, last = ordered[0], ordered[-1]
    worst = min(group, key=_worst_first)
    starts = [f.start for f in group if f.start is not None]
    ends = [f.end if f.end is not None else f.start for f in group]
    known_ends = [e for e in ends if e is not None]
    evidence: list[Evidence] = []
    for f in (first, worst, last):
        for e in f.evidence[:EVIDENCE_PER_OCCURRENCE]:
            if e not in evidence:
                evidence.append(e)
    occ = Occurrences(count=len(group), first_start=first.start, first_end=first.end, last_start=last.start,
                      last_end=last.end, worst_start=worst.start, worst_end=worst.end,
                      worst_summary=worst.summary)
    phrase = occurrence_phrase(occ)
    return replace(worst, start=min(starts) if starts else None, end=max(known_ends) if known_ends else None,
                   evidence=tuple(evidence), occurrences=occ,
                   summary=f"{phrase}: {worst.summary}",
                   headline=f"{phrase}: {worst.headline}" if worst.headline else "",
                   lead=f"{phrase}: {worst.lead}" if worst.lead else "")


def occurrence_phrase(occ: Occurrences) -> str:
    """``12 occurrences, first 14:02:10Z, last 14:58:40Z, worst 14:31:02Z``."""
    return (f"{occ.count} occurrences, first {fmt_time(occ.first_start)}, last {fmt_time(occ.last_start)}, "
            f"worst {fmt_time(occ.worst_start)}")
