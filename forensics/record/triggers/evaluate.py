"""Evaluating parsed rules against the recorder's live state, once per recorder tick.

The GPU rules, the events and ``unallocated-gpu-use`` are looked at every tick. The cgroup rules
(:data:`CGROUP_METRICS`: shares of cumulative counters) look together every ``cgroup_every_s``
(the shortest cgroup rule's duration / :data:`EVALUATIONS_PER_DURATION`, whole ticks, at least
one) of the cgroup sampler's clock, each look reading every cgroup's shares over the whole
interval since the last (forensics.record.live.cgroups keeps the lines as text until then); at an
interval above one tick a hold starts where the first interval whose share meets the rule
starts, and a silence counts beyond the interval between two looks. A rule of duration D then
fires no later than D + 2 intervals after its condition began (docs/triggers.md).

A threshold rule holds for a subject (a GPU, a container, the host) from the first fresh sample
that satisfies it; it fires when it has held for its duration without a break. A sample that does
not satisfy it, or a silence longer than ``max_gap_s`` (the source stopped answering: the
condition was not seen to hold), starts it again. A stale sample (the subject's figure did not
advance) neither extends nor breaks it. An event rule fires on each matching event the live state
saw since the last tick (the first of a tick's batch; the others are counted). ``unallocated-gpu-use``
holds while a GPU process is active on a GPU its owner has no grant for, by the analysis' own test
(:class:`forensics.analysis.attribution.Grant` ``unallocated``; active as the rule counts it: holding
memory or at least ``process_active_sm_pct`` SM).

Cooldown and concurrency are not decided here: every firing is returned, the engine
(forensics.record.triggers.engine) decides whether it becomes a capture.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forensics.analysis.attribution import Grant, OwnerInfo
from forensics.record.live.cgroups import PSI_KEYS, FreshRow
from forensics.record.live.state import LiveState
from forensics.record.live.views import LiveEvent
from forensics.record.triggers.grammar import Rule
from forensics.specs import cgroups as cgroups_spec
from forensics.specs import nvml as nvml_spec

__all__ = ["CGROUP_METRICS", "EVALUATIONS_PER_DURATION", "Evaluator", "Firing"]

#: the metrics read from the cgroup lines' cumulative counters (evaluated at an interval, below)
CGROUP_METRICS = frozenset({"container.throttled", *(f"psi.{res}.{kind}" for res in ("cpu", "memory", "io")
                                                     for kind in ("some", "full"))})
#: a cgroup rule of duration D is evaluated every D / this, rounded down to whole ticks (at least
#: one; the shortest such D of the rules configured: they look together)
EVALUATIONS_PER_DURATION = 6

_OPS: dict[str, Callable[[float, float], bool]] = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_MISSING: Any = object()
_NO_HOLDS: dict[str, Any] = {}
_Values = list[tuple[str, float, float, str, float]]  # subject, t, value, member, from
#: per operator, the values (subject, t, value, member) that meet a limit (one comprehension)
_MET: dict[str, Callable[[_Values, float], _Values]] = {
    ">": lambda vs, lim: [v for v in vs if v[2] > lim], ">=": lambda vs, lim: [v for v in vs if v[2] >= lim],
    "<": lambda vs, lim: [v for v in vs if v[2] < lim], "<=": lambda vs, lim: [v for v in vs if v[2] <= lim],
}


@dataclass(frozen=True)
class Firing:
    """A rule that fired: on what (``subject``), with which value, since when (``crossed_at``:
    when the condition began; an event's own time) and when it fired (``t``), both wall clock."""

    rule: Rule
    subject: str
    value: float | None
    crossed_at: float
    t: float
    summary: str
    member: str  # the member whose samples or events crossed it
    also: int = 0  # further matching events in the same tick
    baseline: dict[str, Any] | None = None  # a baseline rule's: the baseline it was compared with


@dataclass
class _Hold:
    since: float
    last_t: float


def _gpu_name(index: int, uuid: str) -> str:
    return f"GPU {index} ({uuid})"


class Evaluator:
    """The rules' per-subject state across ticks (see the module docstring)."""

    def __init__(self, rules: tuple[Rule, ...], max_gap_s: float = 10.0, active_sm_pct: float = 1.0,
                 interval_s: float = 1.0) -> None:
        rules = tuple(r for r in rules if r.kind != "baseline")  # forensics.record.triggers.baseline_rules
        self.rules = rules
        self.max_gap_s = max_gap_s
        self.active_sm_pct = active_sm_pct
        self.interval_s = interval_s
        # the cgroup rules look together, every cgroup_every_s of the cgroup sampler's clock; a
        # silence (max_gap_s) is counted beyond the interval between two looks
        durations = [r.duration_s for r in rules if r.kind == "threshold" and r.name in CGROUP_METRICS]
        self.cgroup_every_s = (interval_s * max(1, int(min(durations) / EVALUATIONS_PER_DURATION // interval_s))
                               if durations else None)  # whole ticks, D / 6 or less
        self._cg_gap_s = max_gap_s + (self.cgroup_every_s or interval_s) - interval_s
        self._cg_sparse = self.cgroup_every_s is not None and self.cgroup_every_s > interval_s
        self._cg_looked: float | None = None  # the cgroup sampler's clock at the last look
        self._holds: dict[str, dict[str, _Hold]] = {}  # rule -> subject -> since when it holds
        self._seen: dict[str, dict[str, float]] = {}  # rule -> subject -> last sample time looked at
        self.evaluations = 0
        self._tick_values: dict[str, _Values] = {}
        self._cg_rows: list[FreshRow] = []  # the cgroups read since the last look ...
        self._cg_subjects: list[str | None] = []  # ... and their subjects
        self._cg_host: tuple[float, float, tuple[float | None, ...]] | None = None  # ... the host's shares
        self._cg_clock = 0.0  # the cgroup sampler's clock at the last look
        self._cg_silent_from: float | None = None  # the clock advanced since the last look: from when
        self._cg_last: dict[str, float] = {}  # container subject -> its last cgroup reading
        self._unallocated_at: tuple[int, int] = (-1, -1)  # (attribution, process set) the list is of
        self._unallocated_keys: list[tuple[int, int, str, str | None, OwnerInfo, Grant]] = []
        self._names: dict[str, tuple[str, str]] = {}  # container id -> (its name, the subject)
        self._subject_of: dict[str, str | None] = {}  # cgroup path -> subject, this attribution
        self._subjects_at = -1
        # per cgroup metric whose rules all compare one way: the loosest limit (a value beyond it
        # meets no rule and changes nothing unless its subject holds one) and those rules
        self._floors: dict[str, tuple[bool, float, list[str]]] = {}
        for name in {r.name for r in rules if r.kind == "threshold" and r.name != "gpu.util" and r.name != "gpu.memory"}:
            on = [r for r in rules if r.kind == "threshold" and r.name == name]
            limits = [r.threshold for r in on if r.threshold is not None]
            if len(limits) == len(on) and all(r.op in (">", ">=") for r in on):
                self._floors[name] = (True, min(limits), [r.text for r in on])
            elif len(limits) == len(on) and all(r.op in ("<", "<=") for r in on):
                self._floors[name] = (False, max(limits), [r.text for r in on])

    # -- the figures each metric reads -----------------------------------------------------------
    def _values(self, name: str, live: LiveState) -> _Values:
        """(subject, sample time, value, member) for every subject the metric has a new figure
        for (a GPU's: the last one; a cgroup's: those that came since the last tick), read once
        per tick for all the rules on that metric."""
        got = self._tick_values.get(name)
        if got is None:
            got = self._tick_values[name] = self._read_values(name, live)
        return got

    def _cname(self, cid: str, name: str) -> str:
        got = self._names.get(cid)
        if got is None or got[0] != name:
            if len(self._names) > 50_000:
                self._names.clear()
            got = self._names[cid] = (name, _container_name(cid, name))
        return got[1]

    def _read_values(self, name: str, live: LiveState) -> _Values:
        """The metric's values; of a metric whose rules all compare one way, only those past the
        loosest limit or of a subject that holds (the others change nothing), left out as they
        are read (a cgroup look reads every container's)."""
        floor = self._floors.get(name)
        lo, hi = -math.inf, math.inf
        held: set[str] = set()
        if floor is not None:
            above, limit, texts = floor
            lo, hi = (limit, math.inf) if above else (-math.inf, limit)
            held = set().union(*(self._holds.get(text, _NO_HOLDS).keys() for text in texts))
        if name == "gpu.util" or name == "gpu.memory":
            values = self._gpu_values(name, live)
            return values if floor is None else [v for v in values if lo <= v[2] <= hi or v[0] in held]
        # a cgroup figure's hold starts at its sample's time when the rules look every tick (as
        # a GPU's), and at the start of the interval its shares cover when they look less often
        sparse = self._cg_sparse
        rows = zip(self._cg_rows, self._cg_subjects, strict=True)
        if name == "container.throttled":
            return [(subject, t, v, cgroups_spec.SAMPLES, t0 if sparse else t)
                    for (_, _, t0, t, v, _), subject in rows
                    if subject is not None and v is not None and (lo <= v <= hi or subject in held)]
        if name.startswith("psi."):
            _, res, kind = name.split(".")
            k = PSI_KEYS.index((res, kind))
            out: _Values = []
            if self._cg_host is not None and (host := self._cg_host[2]) and (v := host[k]) is not None \
                    and (lo <= v <= hi or "host" in held):
                t0, t, _ = self._cg_host
                out.append(("host", t, v, cgroups_spec.SAMPLES, t0 if sparse else t))
            out.extend([(subject, t, v, cgroups_spec.SAMPLES, t0 if sparse else t)
                        for (_, _, t0, t, _, psi), subject in rows
                        if subject is not None and psi and (v := psi[k]) is not None and (lo <= v <= hi or subject in held)])
            return out
        return []

    @staticmethod
    def _gpu_values(name: str, live: LiveState) -> _Values:
        if name == "gpu.util":
            return [(_gpu_name(g.index, g.uuid), g.t, g.util_pct, nvml_spec.SAMPLES, g.t)
                    for g in live.gpus() if g.util_pct is not None]
        return [(_gpu_name(g.index, g.uuid), g.t, pct, nvml_spec.SAMPLES, g.t)
                for g in live.gpus() if (pct := g.memory_used_pct) is not None]

    def _cgroups_due(self, live: LiveState) -> bool:
        """Whether the cgroup rules look now: every tick, or every ``cgroup_every_s`` of the cgroup
        sampler's clock (half a tick early is on time: the sampler's lines come a little after
        the tick, by a varying delay)."""
        if self.cgroup_every_s is None:
            return False
        now = live.cgroup_clock()
        if self._cg_looked is not None and 0 <= now - self._cg_looked < self.cgroup_every_s - self.interval_s / 2:
            return False  # (a clock that went back looks now)
        self._cg_looked = now
        return True

    def _take_cgroups(self, live: LiveState) -> None:
        """The cgroups read since the last look, each with its subject (the container's name; None
        for a cgroup that is no container's), and whether the cgroup sampler's clock advanced (then
        a container not among them was silent: idle, not throttled)."""
        rows, clock, self._cg_host = live.take_cgroup_rows()
        if self._subjects_at != live.refreshes or len(self._subject_of) > 50_000:  # names come with attribution
            self._subject_of, self._subjects_at = {}, live.refreshes
        subject_of = self._subject_of
        subjects = []
        for path, cid, _, _, _, _ in rows:
            subject = subject_of.get(path, _MISSING)
            if subject is _MISSING:
                subject = subject_of[path] = self._cname(cid, live.container_name(cid)) if cid else None
            subjects.append(subject)
        self._cg_rows, self._cg_subjects = rows, subjects
        self._cg_silent_from = None
        if clock > self._cg_clock:
            self._cg_silent_from, self._cg_clock = self._cg_clock, clock
        last = self._cg_last
        for (_, _, _, t, _, _), subject in zip(rows, subjects, strict=True):
            if subject is not None:
                last[subject] = t
        if len(last) > 50_000:
            self._cg_last = {k: v for k, v in last.items() if v > clock - 3600}

    def _threshold(self, rule: Rule, live: LiveState) -> list[Firing]:
        out: list[Firing] = []
        cmp, limit = _OPS[rule.op], rule.threshold
        assert limit is not None  # a threshold rule always has one
        holds = self._holds.setdefault(rule.text, {})
        seen = self._seen.setdefault(rule.text, {})
        values = self._values(rule.name, live)
        gap_s = self._cg_gap_s if rule.name in CGROUP_METRICS else self.max_gap_s
        if rule.name == "container.throttled" and self._cg_silent_from is not None:
            values = values + self._idle(rule, holds, values)
        # Only a value that meets the rule, or one of a subject that holds (or may hold by then:
        # one with a value that meets it), changes anything: the others are skipped unread, in order.
        met = _MET[rule.op](values, limit)
        if not met and not holds:
            return out
        if len(met) < len(values):
            may_hold = holds.keys() | {v[0] for v in met}
            values = [v for v in values if v[0] in may_hold]
        for subject, t, value, member, t0 in values:
            if not cmp(value, limit):  # the common case: nothing to remember
                if subject in holds:
                    del holds[subject]
                continue
            last = seen.get(subject)
            if last is not None and t <= last:
                continue  # stale: nothing new about this subject
            seen[subject] = t
            hold = holds.get(subject)
            if hold is None or t - hold.last_t > gap_s:
                hold = holds[subject] = _Hold(t0, t)
            hold.last_t = t
            if t - hold.since >= rule.duration_s:
                held = f" for {t - hold.since:.0f} s" if rule.duration_s else ""
                out.append(Firing(rule, subject, round(value, 3), hold.since, t,
                                  f"{subject}: {rule.name} {value:.1f}% {rule.op} {rule.threshold:g}%{held}", member))
        return out

    def _idle(self, rule: Rule, holds: dict[str, _Hold], values: _Values) -> _Values:
        """``container.throttled`` of the containers whose cgroup sent nothing while the cgroup
        sampler's clock advanced: a sampler sends nothing for a cgroup whose CPU counter did not
        move, and a cgroup that did not run was not throttled: 0 % at the sampler's clock (since
        the last look), for those sampled within ``max_gap_s`` (beyond the interval between two
        looks; longer: gone, or not sampled; no figure). Only the
        subjects it can change are looked at: those that hold, or, for a rule that 0 % meets
        (``<``), every container sampled lately."""
        clock, gap_s = self._cg_clock, self._cg_gap_s
        since = self._cg_silent_from if self._cg_sparse and self._cg_silent_from is not None else clock
        fresh = {v[0] for v in values}
        last = self._cg_last
        candidates = last.keys() if _OPS[rule.op](0.0, rule.threshold or 0.0) else holds.keys()
        return [(subject, clock, 0.0, cgroups_spec.SAMPLES, since) for subject in candidates
                if subject not in fresh and (t := last.get(subject)) is not None and clock - t <= gap_s]

    def _event(self, rule: Rule, events: list[LiveEvent]) -> list[Firing]:
        if rule.name == "unallocated-gpu-use":
            return []
        hits = [e for e in events if e.kind == rule.name and (rule.xid is None or e.xid == rule.xid)]
        if not hits:
            return []
        e = hits[0]
        subject = (_container_name(e.container_id, "") if e.container_id else e.gpu or "host")
        return [Firing(rule, subject, float(e.xid) if e.xid is not None else None, e.t, e.t, e.summary,
                       e.member, also=len(hits) - 1)]

    def _unallocated(self, rule: Rule, live: LiveState) -> list[Firing]:
        """The first active process of the last NVML tick whose owner has no grant for its GPU.
        Grants change with the attribution and the process set only: the processes without one are
        listed then, and each tick looks at those alone (their memory and SM share)."""
        at = (live.refreshes, live.process_gen)
        if at != self._unallocated_at:
            unallocated = []
            for pid, gpu_index, gpu_uuid, mig in live.process_keys():
                o, grant = live.owner_grant(pid, gpu_uuid, mig)
                if grant.unallocated:
                    unallocated.append((pid, gpu_index, gpu_uuid, mig, o, grant))
            self._unallocated_keys, self._unallocated_at = unallocated, at
        for pid, gpu_index, gpu_uuid, mig, o, grant in self._unallocated_keys:
            figures = live.process_figures(pid, gpu_uuid, mig)
            if figures is None:
                continue
            t, used, sm = figures
            if not ((used or 0) > 0 or (sm or 0) >= self.active_sm_pct):
                continue
            who = _container_name(o.container_id, o.container_name) if o.container_id else f"pod {o.pod_namespace}/{o.pod_name}"
            pod = f" (pod {o.pod_namespace}/{o.pod_name})" if o.container_id and o.pod_name else ""
            return [Firing(rule, who, sm, t, t,
                           f"{who}{pod} pid {pid} on GPU {gpu_index} ({gpu_uuid}) without a grant for it "
                           f"(grant {grant.grant}: {grant.detail})", nvml_spec.SAMPLES)]
        return []

    def evaluate(self, live: LiveState) -> list[Firing]:
        """Every firing of this tick (the live state refreshed and its events taken by the caller)."""
        return self.evaluate_with(live, live.take_events())

    def evaluate_with(self, live: LiveState, events: list[LiveEvent]) -> list[Firing]:
        self.evaluations += 1
        self._tick_values = {}
        cgroups = self._cgroups_due(live)
        if cgroups:
            self._take_cgroups(live)
        out: list[Firing] = []
        for rule in self.rules:
            if rule.kind == "threshold":
                if cgroups or rule.name not in CGROUP_METRICS:
                    out.extend(self._threshold(rule, live))
            elif rule.name == "unallocated-gpu-use":
                out.extend(self._unallocated(rule, live))
            else:
                out.extend(self._event(rule, events))
        for rule_text, seen in self._seen.items():  # subjects come and go (containers): forget old ones
            if len(seen) > 50_000:
                newest = max(seen.values())
                self._seen[rule_text] = {k: v for k, v in seen.items() if v > newest - 3600}
        return out


def _container_name(cid: str | None, name: str) -> str:
    return f"container {name} ({(cid or '')[:12]})" if name else f"container {(cid or '?')[:12]}"
