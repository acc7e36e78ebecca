"""Findings, evidence, subjects and the verdict of the document, as view records.

Evidence references are resolved to the member's SHA-256 from ``bundles[].members`` (and the
member is recorded as cited, for the report's appendix); metrics are named and formatted by
their unit suffix. :class:`ViewContext` builds these once per document and carries the display
names (container id -> name, GPU UUID -> ``GPU n``) every section builder reads.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from forensics.document_format import SEVERITIES, severity_rank
from forensics.report.access import (
    get_bool,
    get_dict,
    get_dicts,
    get_int,
    get_num,
    get_str,
    get_strs,
    unix,
)
from forensics.report.formatting import fmt_bytes, fmt_duration, fmt_pct, fmt_ratio, fmt_time_short
from forensics.report.records import (
    EVIDENCE_CAP,
    EXCERPT_CHARS,
    DerivedView,
    EvidenceView,
    FindingView,
    IncidentView,
    SubjectView,
    VerdictView,
)

#: Where the flight recorder's members and the segments they are rebuilt from lie in a bundle.
RING, SEGMENTS = "ring/", "ring/segments/"

__all__ = [
    "Members",
    "ViewContext",
    "evidence_views",
    "finding_view",
    "incident_views",
    "involves",
    "metric_text",
    "sorted_findings",
    "subject_views",
    "verdict_view",
]


def subject_view(d: Mapping[str, Any]) -> SubjectView:
    return SubjectView(
        get_str(d, "role"), get_str(d, "type"), get_str(d, "id"), get_str(d, "name"), get_str(d, "node")
    )


def subject_views(d: Mapping[str, Any], key: str) -> tuple[SubjectView, ...]:
    return tuple(subject_view(s) for s in get_dicts(d, key))


_UNIT_SUFFIXES = ("_bytes", "_pct", "_ratio", "_s")


def metric_name(key: str) -> str:
    """``gpu_memory_used_bytes`` -> ``gpu memory used`` (the unit shows in the value)."""
    for suffix in _UNIT_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    return key.replace("_", " ")


def metric_text(key: str, value: object) -> str:
    if key.endswith("_bytes"):
        return fmt_bytes(value)
    if key.endswith("_pct"):
        return fmt_pct(value, 1)
    if key.endswith("_ratio"):
        return fmt_ratio(value, 1)
    if key.endswith("_s"):
        return fmt_duration(value)
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "—"


class Members:
    """bundle basename -> member -> sha256, from ``bundles[].members``."""

    def __init__(self, bundles: Sequence[Mapping[str, Any]]) -> None:
        self._by_bundle: dict[str, dict[str, str]] = {}
        self.cited: dict[str, set[str]] = {}
        for bundle in bundles:
            members = {k: v for k, v in get_dict(bundle, "members").items() if isinstance(v, str)}
            self._by_bundle[posixpath.basename(get_str(bundle, "path"))] = members

    def _key(self, bundle: str) -> str:
        key = posixpath.basename(bundle)
        if key not in self._by_bundle and len(self._by_bundle) == 1:
            key = next(iter(self._by_bundle))
        return key

    def sha(self, bundle: str, member: str) -> str | None:
        """The member's SHA-256, recording the member as cited by the report."""
        key = self._key(bundle)
        self.cited.setdefault(key, set()).add(member)
        return self._by_bundle.get(key, {}).get(member)

    def rebuilt(self, bundle: str, member: str) -> bool:
        """A ``ring/`` member not in the manifest of a bundle carrying the flight recorder's segments:
        the analysis rebuilt it from them (docs/bundle-format/ring.md), it is not missing."""
        members = self._by_bundle.get(self._key(bundle), {})
        return member.startswith(RING) and member not in members and any(m.startswith(SEGMENTS) for m in members)


def evidence_views(items: list[dict[str, Any]], members: Members) -> tuple[EvidenceView, ...]:
    out = []
    for item in items:
        bundle, member = get_str(item, "bundle"), get_str(item, "member")
        excerpt = get_str(item, "excerpt")
        if len(excerpt) > EXCERPT_CHARS:
            excerpt = excerpt[: EXCERPT_CHARS - 3] + "..."
        out.append(
            EvidenceView(
                bundle, member, get_str(item, "locator"), excerpt, members.sha(bundle, member),
                derived_view(item, bundle, members), members.rebuilt(bundle, member),
            )
        )
    return tuple(out)


def derived_view(item: Mapping[str, Any], bundle: str, members: Members) -> DerivedView | None:
    """``derived_from`` of an evidence item (docs/analysis-format.md), the segment cited too. Its
    ``verified`` is absent where the segment was checked; anything but absent or ``true`` is not a check."""
    origin = get_dict(item, "derived_from")
    segment, line = get_str(origin, "member"), get_int(origin, "line")
    if not segment or line is None:
        return None
    return DerivedView(segment, line, members.sha(bundle, segment), origin.get("verified", True) is True)


def occurrences_text(d: Mapping[str, Any]) -> str:
    """``findings[].occurrences`` as the analysis words it (``6 occurrences, first 14:01:00Z, last
    14:51:00Z, worst 14:01:00Z``); "" for a finding found once."""
    occ = get_dict(d, "occurrences")
    count = get_int(occ, "count")
    if not count:
        return ""

    def at(which: str) -> str:
        return fmt_time_short(get_str(get_dict(occ, which), "start")) + "Z"

    return f"{count} occurrences, first {at('first')}, last {at('last')}, worst {at('worst')}"


def finding_view(d: Mapping[str, Any], members: Members) -> FindingView:
    evidence = evidence_views(get_dicts(d, "evidence"), members)
    metrics = tuple(
        (metric_name(str(k)), metric_text(str(k), v))
        for k, v in sorted(get_dict(d, "metrics").items())
    )
    severity = get_str(d, "severity", "info").lower()
    return FindingView(
        id=get_str(d, "id"),
        kind=get_str(d, "kind"),
        severity=severity if severity in SEVERITIES else "info",
        confidence=get_num(d, "confidence"),
        summary=get_str(d, "summary"),
        start=get_str(d, "start"),
        end=get_str(d, "end"),
        node=get_str(d, "node"),
        subjects=subject_views(d, "subjects"),
        metrics=metrics,
        evidence=evidence[:EVIDENCE_CAP],
        evidence_omitted=max(0, len(evidence) - EVIDENCE_CAP),
        causes=get_strs(d, "causes"),
        next_step=get_str(d, "next_step"),
        before_capture_s=get_num(d, "before_capture_s"),
        occurrences=occurrences_text(d),
        raw_metrics=tuple(
            (str(k), float(v))
            for k, v in sorted(get_dict(d, "metrics").items())
            if isinstance(v, int | float) and not isinstance(v, bool)
        ),
    )


def incident_views(doc: Mapping[str, Any]) -> tuple[IncidentView, ...]:
    """``incidents[]`` in the document's order (most relevant first); empty when it has none."""
    out = []
    for d in get_dicts(doc, "incidents"):
        severity = get_str(d, "severity").lower()
        out.append(
            IncidentView(
                id=get_str(d, "id"),
                relevance=get_str(d, "relevance"),
                severity=severity if severity in SEVERITIES else "info",
                headline=get_str(d, "headline"),
                culprits=subject_views(d, "culprits"),
                victims=subject_views(d, "victims"),
                parties=subject_views(d, "parties"),
                impact=get_str(d, "impact"),
                start=get_str(d, "start"),
                end=get_str(d, "end"),
                before_capture_s=get_num(d, "before_capture_s"),
                finding_ids=get_strs(d, "findings"),
                next_step=get_str(d, "next_step"),
            )
        )
    return tuple(out)


def verdict_view(d: Mapping[str, Any], findings: Sequence[FindingView]) -> VerdictView:
    start, end = get_str(d, "start"), get_str(d, "end")
    t0, t1 = unix(start), unix(end)
    severity = get_str(d, "severity").lower()
    if severity not in SEVERITIES:
        ranked = sorted(findings, key=lambda f: severity_rank(f.severity))
        severity = ranked[0].severity if ranked else ""
    clean = get_bool(d, "clean")
    return VerdictView(
        headline=get_str(d, "headline")
        or ("no incident found" if clean else "no verdict in the analysis"),
        clean=bool(clean) if clean is not None else not findings,
        severity=severity,
        culprits=subject_views(d, "culprits"),
        victims=subject_views(d, "victims"),
        impact=get_str(d, "impact"),
        start=start,
        end=end,
        duration=fmt_duration(t1 - t0) if t0 is not None and t1 is not None and t1 >= t0 else "",
    )


def sorted_findings(findings: Iterable[FindingView]) -> list[FindingView]:
    return sorted(findings, key=lambda f: (severity_rank(f.severity), unix(f.start) or 0.0, f.id))


def involves(finding: FindingView, ids: set[str]) -> bool:
    return any(s.id in ids for s in finding.subjects if s.id)


class ViewContext:
    """The document with its findings, verdict and display names resolved once, for the builders."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc
        bundles = get_dicts(doc, "bundles")
        if not bundles and isinstance(doc.get("bundle"), dict):
            bundles = [doc["bundle"]]
        self.bundles = bundles
        self.members = Members(bundles)
        findings = [finding_view(f, self.members) for f in get_dicts(doc, "findings")]
        self.findings = findings
        self.by_id = {f.id: f for f in findings if f.id}
        self.verdict = verdict_view(get_dict(doc, "verdict"), findings)
        self.incidents = incident_views(doc)
        self.container_names: dict[str, str] = {}
        for c in get_dicts(doc, "containers"):
            if get_str(c, "id"):
                self.container_names[get_str(c, "id")] = get_str(c, "name") or get_str(c, "id")[:12]
        self.gpu_names: dict[str, str] = {}
        for g in get_dicts(doc, "gpus"):
            if get_str(g, "uuid"):
                index = get_str(g, "index")
                self.gpu_names[get_str(g, "uuid")] = f"GPU {index}" if index else get_str(g, "uuid")
