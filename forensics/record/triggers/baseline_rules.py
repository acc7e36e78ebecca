"""Evaluating the baseline rules (``container.gpu.sm<baseline:5m``) once per recorder tick.

The figures are the tracker's (forensics.record.baselines: every fresh figure of a metric a
baseline rule names, per subject, added to that subject's own series first). A rule holds for a
subject while each fresh figure lies outside the subject's band (``<``: below the median minus
max(K x robust spread, min delta); ``>``: above the median plus as much), the baseline being the
one of the bucket the figure falls in (the current bucket left out), and, once the subject holds,
the one it had when the hold began (the incident's own figures never widen its normal). A
baseline is taken again every ``refresh_s`` (10 min) per series, and at once for a figure
outside the cached band before it counts (the cost stays per series per refresh, not per tick);
The cgroup figures (``container.throttled``, ``psi.*``) are read every D / 6 of the shortest
such rule's duration D (as the fixed rules look), each the share over its cgroup's last interval;
the workloads' GPU figures (``container.gpu.*``: every GPU process of the tick, summed per owner)
every D / 6 of the shortest of theirs (the GPUs' own every tick);
it fires when it has held for its duration without a break, as a
threshold rule does (forensics.record.triggers.evaluate): a figure inside the band, or a silence
longer than ``max_gap_s``, starts it again. A subject with too little history never holds;
:attr:`BaselineRules.insufficient` counts its figures, and the recorder's status says how much
history each has (:meth:`forensics.record.baselines.BaselineTracker.status`).

Cooldown and concurrency are the engine's, as for every rule; the firing carries the baseline
(window, median, MAD and spread, the band, the normal range) for the manifest's ``trigger`` entry.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from forensics.analysis.baseline import Baseline
from forensics.record.baselines import BaselineTracker, seed_from_ring
from forensics.record.live.state import LiveState
from forensics.record.triggers.evaluate import EVALUATIONS_PER_DURATION, Firing
from forensics.record.triggers.grammar import Rule
from forensics.specs import cgroups as cgroups_spec
from forensics.specs import nvml as nvml_spec

__all__ = ["BaselineRules"]


class BaselineRules:
    """The baseline rules' tracker and per-subject holds (see the module docstring)."""

    def __init__(self, rules: tuple[Rule, ...], max_gap_s: float = 10.0) -> None:
        self.rules = tuple(r for r in rules if r.kind == "baseline")
        settings = next(r.baseline for r in self.rules if r.baseline is not None)
        # the cgroup rules look every D / 6 of the shortest one's duration (as the fixed ones do)
        # and so do the workloads' GPU figures (every GPU process of a tick, summed per owner)
        def every(names: tuple[str, ...]) -> float:
            durations = [r.duration_s for r in self.rules if r.name.startswith(names)]
            return min(durations) / EVALUATIONS_PER_DURATION if durations else 0.0
        self.tracker = BaselineTracker(settings, frozenset(r.name for r in self.rules),
                                       cgroup_every_s=every(("container.throttled", "psi.")),
                                       workload_every_s=every(("container.gpu.",)))
        self.max_gap_s = max_gap_s
        self._holds: dict[str, dict[str, tuple[float, float, Baseline]]] = {r.text: {} for r in self.rules}
        self.insufficient: Counter[str] = Counter()

    def seed(self, ring: Path, now: float, log: Any = None) -> int:
        return seed_from_ring(self.tracker, ring, now, log=log)

    def evaluate(self, live: LiveState) -> list[Firing]:
        values = self.tracker.observe(live)
        out: list[Firing] = []
        for rule in self.rules:
            holds = self._holds[rule.text]
            below = rule.op.startswith("<")
            k, delta = rule.baseline_k or 0.0, rule.baseline_min_delta
            sparse = (self.tracker.cgroup_every_s if rule.name == "container.throttled" or rule.name.startswith("psi.")
                      else self.tracker.workload_every_s if rule.name.startswith("container.gpu.") else 0.0)
            gap_s = self.max_gap_s + sparse  # a silence counted beyond two looks apart
            for subject, key, t, value in values.get(rule.name, ()):
                held = holds.get(subject)
                if held is not None and t - held[1] > gap_s:
                    held = None  # a silence: the condition was not seen to hold
                # while a subject holds, it is judged against its baseline from before it began
                b = held[2] if held is not None else self.tracker.baseline(rule.name, key, t)
                if not isinstance(b, Baseline):
                    self.insufficient[rule.text] += 1
                    holds.pop(subject, None)
                    continue
                lo, hi = b.band(k, delta)
                met = (value < lo if rule.op == "<" else value <= lo) if below else \
                    (value > hi if rule.op == ">" else value >= hi)
                if met and held is None:  # outside a cached band: against the baseline of now
                    b = self.tracker.baseline(rule.name, key, t, max_age_s=0.0)
                    if not isinstance(b, Baseline):
                        continue
                    lo, hi = b.band(k, delta)
                    met = (value < lo if rule.op == "<" else value <= lo) if below else \
                        (value > hi if rule.op == ">" else value >= hi)
                if not met:
                    holds.pop(subject, None)
                    continue
                since = held[0] if held is not None else t
                holds[subject] = (since, t, b)
                if t - since >= rule.duration_s:
                    out.append(self._firing(rule, subject, key, value, since, t, b, lo if below else hi))
            if len(holds) > 50_000:
                holds.clear()
        return out

    def _firing(self, rule: Rule, subject: str, key: str, value: float, since: float, t: float,
                b: Baseline, limit: float) -> Firing:
        held = f" for {t - since:.0f} s" if rule.duration_s else ""
        dev = b.deviation(value)
        how = f"{dev:+.1f} robust units from its" if math.isfinite(dev) else "outside its flat"
        summary = f"{subject}: {rule.name} {value:.1f}% {rule.op} {limit:.1f}% ({how} {b.describe()}){held}"
        member = cgroups_spec.SAMPLES if rule.name.startswith(("container.throttled", "psi.")) else nvml_spec.SAMPLES
        doc: dict[str, Any] = {**b.as_dict(), "key": key, "k": rule.baseline_k, "min_delta_pct": rule.baseline_min_delta,
                               "limit": round(limit, 3), "deviation": round(dev, 2) if math.isfinite(dev) else None,
                               "describe": b.describe()}
        return Firing(rule, subject, round(value, 3), since, t, summary, member, baseline=doc)
