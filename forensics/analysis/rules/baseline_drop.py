"""``below-baseline``: a workload's SM share on a GPU fell well below its own normal.

Source: NVML per-process SM utilization (nvmlDeviceGetProcessUtilization) over the flight
recorder's history in the bundle (``ring/nvml/samples.jsonl``) and the capture's own samples, per
owner (the analysis' joins) and GPU. The incident is from when the trigger's condition began (the
manifest's ``trigger.crossed_at``, a ``record --trigger`` capture; a baseline rule's capture folds
in the ring over the baseline's history) or else from the capture's start. The normal is the
owner's SM share (its processes summed per tick) before it, as one-minute means, over the
trailing ``baseline_window_s`` (forensics.analysis.baseline: median and MAD, by time of day with
three earlier days); the figure judged is the median of its SM share during the capture. It is a
finding when that is below the median minus max(``baseline_k`` robust spreads,
``baseline_min_delta_pct`` points), widened to the 1st percentile minus as much: the fall a fixed
threshold misses (95 % -> 40 % crosses neither "> 90 %" nor "< 10 %"). It names the workload as
the victim and no culprit: a fall says something took the GPU or starved the job, not who (the
other rules name who). A workload whose history is too short is not judged, nor one with fewer
than ``baseline_min_recent_samples`` samples over ``baseline_min_recent_s`` seconds since the
incident began (a single sample is a moment, not a fall), and the model's limitations say so.
"""

from __future__ import annotations

from bisect import bisect_left
from operator import itemgetter
from typing import Any

from forensics.analysis.baseline import (
    Baseline,
    baseline_settings,
    bucket_means,
    compute_baseline,
    median,
)
from forensics.analysis.findings import Evidence, Finding, Subject
from forensics.analysis.kinds import FindingKind, Harm
from forensics.analysis.model import Model
from forensics.analysis.naming import gpu_label, gpu_subject, label, with_pod
from forensics.analysis.rules.common import dedupe_subjects
from forensics.analysis.samples import ProcessGpuSample
from forensics.specs.roles import GPU_DEVICES
from forensics.thresholds import AnalysisConfig

__all__ = ["BELOW_BASELINE", "below_baseline"]

BELOW_BASELINE = FindingKind("below-baseline", severity="medium", needs=(GPU_DEVICES,), rank=41,
                             next_step="look at what else ran on that GPU then, and at the workload's own logs")


def _series(model: Model, node: str, samples: list[ProcessGpuSample]) -> dict[Subject, list[tuple[float, float, ProcessGpuSample]]]:
    """owner -> (tick, its processes' SM % summed, the sample of its lowest process) in time order.

    Rows are found by PID while summing (a Subject's hash is a Python call, and this runs per
    process sample: 1.8 million in an hour of 8 GPUs x 64 processes), by owner once per PID."""
    row_of: dict[int, dict[float, list[Any]]] = {}
    rows: dict[Subject, dict[float, list[Any]]] = {}
    owner = model.joins.owner
    for s in samples:
        sm = s.sm_util_pct
        if sm is None:
            continue
        row = row_of.get(s.pid)
        if row is None:
            row = row_of[s.pid] = rows.setdefault(owner(node, s.pid).subject, {})
        got = row.get(s.t)
        if got is None:
            row[s.t] = [sm, s]  # samples come in (time, PID) order: the first is the lowest PID's
        else:
            got[0] += sm
    return {who: [(t, v, first) for t, (v, first) in sorted(row.items())] for who, row in rows.items()}


_tick = itemgetter(0)


@BELOW_BASELINE.rule
def below_baseline(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A workload's SM share during the capture well below its own normal from the ring's history."""
    settings = baseline_settings(cfg)
    findings: list[Finding] = []
    for (node, uuid), samples in sorted(model.proc_samples_by_gpu().items()):
        info = model.node(node)
        # the incident from when a trigger's condition began (record --trigger), else the capture's start
        start = info.trigger_crossed_at if info.trigger_crossed_at is not None else info.start
        if start is None or not samples or min(s.t for s in samples) >= start:
            continue  # no history before it: nothing to call normal
        cut = start
        gl = gpu_label(model, node, uuid)
        for who, series in sorted(_series(model, node, samples).items(), key=lambda kv: kv[0].key()):
            k = bisect_left(series, cut, key=_tick)  # in time order: the history is what is before the cut
            history = [(t, v) for t, v, _ in series[:k]]
            recent = series[k:]  # (start is the cut)
            if not history or not recent:
                continue
            b = compute_baseline(bucket_means(history, settings.bucket_s), cut, settings)
            name = label(model, who, long=False)
            if not isinstance(b, Baseline):
                model.limit(f"below-baseline: {name}'s SM share on {gl} not compared with its normal: {b.describe()}")
                continue
            span_s = recent[-1][0] - recent[0][0]
            if len(recent) < cfg.baseline_min_recent_samples or span_s < cfg.baseline_min_recent_s:
                model.limit(f"below-baseline: {name}'s SM share on {gl} not judged: {len(recent)} sample(s) "
                            f"over {span_s:.0f} s since the incident began, fewer than "
                            f"{cfg.baseline_min_recent_samples} over {cfg.baseline_min_recent_s:g} s")
                continue
            lo, _ = b.band(settings.k, settings.min_delta_pct)
            now = median([v for _, v, _ in recent])
            if now >= lo:
                continue
            lowest = min(recent, key=lambda r: r[1])
            before = history[-1]
            last_before = next(s for t, _, s in reversed(series) if t == before[0])
            ev: list[Evidence] = [lowest[2].evidence, last_before.evidence]
            when = (f"at this time of day on {b.days} earlier days" if b.by_time_of_day
                    else f"over the {_span(b.history_s, b.window_s)}")
            headline = (f"{name}'s SM share on {gl} {now:.0f}%, its normal {b.low:.0f}-{b.high:.0f}% {when}")
            means = "one-minute means" if settings.bucket_s == 60 else f"{settings.bucket_s:g} s means"
            summary = (f"{headline} (median {b.median:.1f}%, MAD {b.mad:.1f}, {b.buckets} {means}; "
                       f"below {lo:.1f}%, its median minus max({settings.k:g} robust spreads, "
                       f"{settings.min_delta_pct:g} points)), over {len(recent)} samples since")
            findings.append(Finding(
                kind=BELOW_BASELINE.id, severity=BELOW_BASELINE.severity,
                confidence=BELOW_BASELINE.confidence(model, node, 0.7, cfg),
                summary=summary, start=recent[0][0], end=recent[-1][0], node=node,
                subjects=dedupe_subjects([*with_pod(model, who.with_role("victim")), gpu_subject(model, node, uuid)]),
                evidence=tuple(ev),
                metrics=(("gpu", gl), ("gpu_uuid", uuid), ("sm_pct", round(now, 1)),
                         ("baseline_median_pct", round(b.median, 1)), ("baseline_mad_pct", round(b.mad, 2)),
                         ("baseline_p5_pct", round(b.low, 1)), ("baseline_p95_pct", round(b.high, 1)),
                         ("baseline_limit_pct", round(lo, 1)), ("baseline_window_s", b.window_s),
                         ("baseline_history_s", round(b.history_s)), ("baseline_days", b.days),
                         ("victim", name)),
                key=f"below-baseline:{node}:{uuid}:{who.key()}",
                headline=headline,
            ))
    return findings


def _span(history_s: float, window_s: float) -> str:
    s = min(history_s, window_s)
    return f"last {s / 3600:.0f} h" if s >= 3600 else f"last {s / 60:.0f} min"


@BELOW_BASELINE.harm
def _harm(f: Finding, h: Harm) -> str:
    return (f"its SM share on {h.gpu} fell to {f.metric('sm_pct')}% from its normal "
            f"{f.metric('baseline_p5_pct')}-{f.metric('baseline_p95_pct')}%")
