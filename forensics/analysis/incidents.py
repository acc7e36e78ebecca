"""Incidents: findings grouped into connected parts of the cause -> effect chain, ranked by their
relevance to the window under investigation.

Two findings belong to one incident when one caused the other (the chain's links), or when they
name the same GPU, container, pod, process or host and their spans lie within
``chain_link_window_s`` of each other. Each incident has its own verdict (the chain's
:func:`~forensics.analysis.chain.verdict_of` over its findings), parties, span and impact.

The window under investigation is the capture window and its lead-up (``capture --since``, else
its look-back), or the one the analyst names (``analyze --window START..END``, :func:`parse_window`).
An incident's ``relevance``: ``window`` (its harm falls inside it), ``lead-up`` (it ended in the
capture's lead-up), ``after`` (a named window: it began after it) or ``history`` (it ended before).
Ranking: incidents with harm (severity medium or worse) first; among them, inside the window first
(a critical hardware fault of the lead-up counts as inside when no window is named), then
lead-up, after, history; then severity, then how many it harmed, then time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from forensics.analysis.chain import is_significant, verdict_of
from forensics.analysis.findings import Finding, Subject, severity_rank
from forensics.analysis.model import Model
from forensics.analysis.naming import cap, collapse_pods
from forensics.analysis.rules import SPECS
from forensics.errors import UsageError
from forensics.parsing.timestamps import format_iso
from forensics.thresholds import AnalysisConfig

__all__ = ["RELEVANCE", "Incident", "Window", "WindowSpec", "build_incidents", "parse_window", "window_for"]

RELEVANCE = ("window", "lead-up", "after", "history")
_HARDWARE_KINDS = frozenset(k.id for k in SPECS if k.hardware)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class WindowSpec:
    """``--window START..END`` as given: each side an absolute time (unix seconds), a duration
    before the end of the capture (``("ago", seconds)``), or None (open)."""

    start: float | tuple[str, float] | None
    end: float | tuple[str, float] | None
    text: str


@dataclass(frozen=True)
class Window:
    """The window under investigation: ``start``/``end`` (unix seconds, None: open); ``named``
    when the analyst gave it; ``lead_up_start`` where the capture's lead-up begins (unnamed)."""

    start: float | None
    end: float | None
    named: bool
    lead_up_start: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"start": format_iso(self.start, precision="milli"), "end": format_iso(self.end, precision="milli"),
                "named": self.named, "lead_up_start": format_iso(self.lead_up_start, precision="milli")}


def _side(text: str, what: str, whole: str) -> float | tuple[str, float] | None:
    text = text.strip()
    if not text:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text)
    if m:
        return ("ago", float(m.group(1)) * _UNITS[m.group(2)])
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--window: {what} {text!r} of {whole!r} is not an ISO 8601 time or a duration "
                         "like 30m (before the end of the capture)") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def parse_window(text: str) -> WindowSpec:
    """``START..END``: ISO 8601 times (UTC without a zone) or durations before the end of the capture
    (``30m..``, ``2h..1h``); either side may be left open. A bad value is a :class:`UsageError`."""
    if ".." not in text:
        raise UsageError(f"--window: {text!r} is not START..END (ISO times or durations such as 2h..30m)")
    a, b = text.split("..", 1)
    start, end = _side(a, "start", text), _side(b, "end", text)
    if start is None and end is None:
        raise UsageError(f"--window: {text!r} names neither a start nor an end")
    if isinstance(start, float) and isinstance(end, float) and end < start:
        raise UsageError(f"--window: {text!r} ends before it starts")
    return WindowSpec(start, end, text)


def window_for(model: Model, spec: WindowSpec | None) -> Window:
    """The window under investigation: the named one (durations counted back from the latest
    capture end), else the capture window (earliest start to latest end) and its lead-up."""
    starts = [n.start for n in model.nodes.values() if n.start is not None]
    ends = [n.end for n in model.nodes.values() if n.end is not None]
    cap_start, cap_end = (min(starts) if starts else None), (max(ends) if ends else None)
    if spec is None:
        leads = [x for n in model.nodes.values() if (x := n.lead_up_start()) is not None]
        return Window(cap_start, cap_end, False, min(leads) if leads else cap_start)

    def resolve(side: float | tuple[str, float] | None) -> float | None:
        if isinstance(side, tuple):
            if cap_end is None:
                raise UsageError(f"--window {spec.text}: a duration needs the capture's end time, "
                                 "which the bundle does not record")
            return cap_end - side[1]
        return side

    start, end = resolve(spec.start), resolve(spec.end)
    if start is not None and end is not None and end < start:
        raise UsageError(f"--window {spec.text}: ends before it starts")
    return Window(start, end, True)


@dataclass(frozen=True)
class Incident:
    """One connected part of the chain: its findings (ids), relevance, verdict and parties."""

    key: str
    relevance: str
    findings: tuple[Finding, ...]
    verdict: dict[str, object]
    parties: tuple[Subject, ...]
    significant: bool
    hardware_fault: bool


def _span(fs: Sequence[Finding]) -> tuple[float | None, float | None]:
    starts = [f.start for f in fs if f.start is not None]
    ends = [f.end if f.end is not None else f.start for f in fs]
    known = [e for e in ends if e is not None]
    return (min(starts) if starts else None), (max(known) if known else None)


def _near(a: Finding, b: Finding, gap_s: float) -> bool:
    if a.start is None or b.start is None:
        return True
    a_end = a.end if a.end is not None else a.start
    b_end = b.end if b.end is not None else b.start
    return a.start <= b_end + gap_s and b.start <= a_end + gap_s


def _groups(findings: Sequence[Finding], cfg: AnalysisConfig) -> list[list[Finding]]:
    """Connected components: causal links, or a shared party close in time."""
    parent = list(range(len(findings)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)

    index = {f.key: i for i, f in enumerate(findings)}
    for i, f in enumerate(findings):
        for effect in f.cause_keys:
            if effect in index:
                union(i, index[effect])
    by_party: dict[tuple[str, str, str], list[int]] = {}
    for i, f in enumerate(findings):
        for s in f.subjects:
            by_party.setdefault(s.key(), []).append(i)
    for members in by_party.values():
        for x, i in enumerate(members):
            for j in members[x + 1:]:
                if _near(findings[i], findings[j], cfg.chain_link_window_s):
                    union(i, j)
    groups: dict[int, list[Finding]] = {}
    for i, f in enumerate(findings):
        groups.setdefault(find(i), []).append(f)
    return list(groups.values())


def _hardware(f: Finding) -> bool:
    return f.severity == "critical" and (f.kind in _HARDWARE_KINDS or f.metric("xid_class") == "device")


def _relevance(start: float | None, end: float | None, w: Window, hardware: bool) -> str:
    if start is None and end is None:
        return "window"
    first = start if start is not None else end
    last = end if end is not None else start
    assert first is not None and last is not None
    if w.named:
        if w.start is not None and last < w.start:
            return "history"
        if w.end is not None and first > w.end:
            return "after"
        return "window"
    if w.start is None or last >= w.start:
        return "window"
    if w.lead_up_start is not None and last >= w.lead_up_start:
        return "lead-up"
    return "history"


def _rank_key(inc: Incident, w: Window) -> tuple[object, ...]:
    tier = RELEVANCE.index(inc.relevance)
    if inc.relevance == "lead-up" and inc.hardware_fault and not w.named:
        tier = 0  # a GPU that failed just before the capture stays on top
    start = inc.verdict.get("start")
    victims = inc.verdict.get("victims")
    return (not inc.significant, tier, severity_rank(str(inc.verdict.get("severity"))),
            -len(victims) if isinstance(victims, list) else 0,
            -sum(1 for f in inc.findings if is_significant(f)),
            start if isinstance(start, float | int) else math.inf)


def _parties(model: Model, fs: Sequence[Finding]) -> tuple[Subject, ...]:
    """Everyone the incident's findings name, culprits first, then victims, then witnesses."""
    order = {"culprit": 0, "victim": 1, "witness": 2}
    subjects = sorted((s for f in fs for s in f.subjects), key=lambda s: order.get(s.role, 3))
    seen: dict[tuple[str, str, str], Subject] = {}
    for s in subjects:
        seen.setdefault(s.key(), s.at(None))
    return tuple(collapse_pods(model, seen.values()))


def build_incidents(findings: Sequence[Finding], model: Model, cfg: AnalysisConfig, window: Window) -> list[Incident]:
    """The incidents of ``findings`` (ids and causes assigned), best first, keyed I1, I2, ..."""
    out: list[Incident] = []
    for group in _groups(findings, cfg):
        group.sort(key=lambda f: int(f.key[1:]) if f.key[1:].isdigit() else 0)
        verdict = verdict_of(group, model)
        significant = not verdict["clean"]
        if not significant:  # observations only: the worst of them says what it is
            worst = min(group, key=lambda f: (severity_rank(f.severity), f.start or math.inf))
            start, end = _span(group)
            victims = [s for f in group for s in f.subjects_with("victim")]
            culprits = [s for f in group for s in f.subjects_with("culprit")]
            verdict = {**verdict, "headline": cap(worst.headline or worst.summary), "severity": worst.severity,
                       "culprits": collapse_pods(model, culprits), "victims": collapse_pods(model, victims),
                       "start": start, "end": end}
        start, end = _span([f for f in group if is_significant(f)] or group)
        hardware = any(_hardware(f) for f in group)
        out.append(Incident("", _relevance(start, end, window, hardware), tuple(group), verdict,
                            _parties(model, group), significant, hardware))
    out.sort(key=lambda inc: _rank_key(inc, window))
    return [Incident(f"I{i}", inc.relevance, inc.findings, inc.verdict, inc.parties, inc.significant,
                     inc.hardware_fault) for i, inc in enumerate(out, 1)]
