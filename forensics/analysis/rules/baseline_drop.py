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
from operator import attrgetter, itemgetter
from typing import Any, cast

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


def _series(model: Model, node: str, uuid: str, pids: dict[int, list[ProcessGpuSample]]) -> dict[
        Subject, tuple[list[float], list[float], list[ProcessGpuSample]]]:
    """owner -> its ticks in time order, its processes' SM % summed at each, and the sample of its
    lowest PID at each (three parallel lists), from the GPU's samples per PID (time order).

    An owner of one PID whose ticks are distinct (the common case: a container's or a host
    process's one process) is its samples with SM as they are, no per-tick table; several PIDs are
    summed per tick in PID order (the order the sum was always taken in)."""
    owner = model.joins.owner
    columns = model.proc_columns()[(node, uuid)]
    mine: dict[Subject, list[int]] = {}
    for pid in sorted(pids):
        mine.setdefault(owner(node, pid).subject, []).append(pid)
    out: dict[Subject, tuple[list[float], list[float], list[ProcessGpuSample]]] = {}
    for who, its in mine.items():
        if len(its) == 1:
            col = columns[its[0]]
            if col.distinct and None not in col.sm_util_pct:  # (the view's lists: read, never changed)
                out[who] = (col.t, cast("list[float]", col.sm_util_pct), pids[its[0]])
                continue
            ss = [s for s in pids[its[0]] if s.sm_util_pct is not None]
            ts = list(map(_T, ss))
            if len(set(ts)) == len(ts):
                out[who] = (ts, list(map(_SM, ss)), ss)
                continue
        row: dict[float, list[Any]] = {}
        for pid in its:  # ascending: the first sample at a tick is its lowest PID's
            for s in pids[pid]:
                sm = s.sm_util_pct
                if sm is None:
                    continue
                got = row.get(s.t)
                if got is None:
                    row[s.t] = [sm, s]
                else:
                    got[0] += sm
        ordered = sorted(row.items(), key=_tick)
        out[who] = ([t for t, _ in ordered], [v for _, (v, _) in ordered], [f for _, (_, f) in ordered])
    return out


_tick = itemgetter(0)
_T = attrgetter("t")
_SM = attrgetter("sm_util_pct")


@BELOW_BASELINE.rule
def below_baseline(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A workload's SM share during the capture well below its own normal from the ring's history."""
    settings = baseline_settings(cfg)
    findings: list[Finding] = []
    for (node, uuid), pids in sorted(model.proc_samples_by_pid().items()):
        info = model.node(node)
        # the incident from when a trigger's condition began (record --trigger), else the capture's start
        start = info.trigger_crossed_at if info.trigger_crossed_at is not None else info.start
        if start is None or not pids or min(ss[0].t for ss in pids.values()) >= start:
            continue  # no history before it: nothing to call normal
        cut = start
        gl = gpu_label(model, node, uuid)
        for who, (ts, vs, firsts) in sorted(_series(model, node, uuid, pids).items(), key=lambda kv: kv[0].key()):
            k = bisect_left(ts, cut)  # in time order: the history is what is before the cut
            n = len(ts)
            if not k or k == n:  # no history, or nothing since (start is the cut)
                continue
            b = compute_baseline(bucket_means(zip(ts[:k], vs[:k], strict=True), settings.bucket_s), cut, settings)
            name = label(model, who, long=False)
            if not isinstance(b, Baseline):
                model.limit(f"below-baseline: {name}'s SM share on {gl} not compared with its normal: {b.describe()}")
                continue
            span_s = ts[-1] - ts[k]
            if n - k < cfg.baseline_min_recent_samples or span_s < cfg.baseline_min_recent_s:
                model.limit(f"below-baseline: {name}'s SM share on {gl} not judged: {n - k} sample(s) "
                            f"over {span_s:.0f} s since the incident began, fewer than "
                            f"{cfg.baseline_min_recent_samples} over {cfg.baseline_min_recent_s:g} s")
                continue
            lo, _ = b.band(settings.k, settings.min_delta_pct)
            recent = vs[k:]
            now = median(recent)
            if now >= lo:
                continue
            lowest = k + recent.index(min(recent))  # (the first of equal lows, as min() picks)
            ev: list[Evidence] = [firsts[lowest].evidence, firsts[k - 1].evidence]  # and the last before
            when = (f"at this time of day on {b.days} earlier days" if b.by_time_of_day
                    else f"over the {_span(b.history_s, b.window_s)}")
            headline = (f"{name}'s SM share on {gl} {now:.0f}%, its normal {b.low:.0f}-{b.high:.0f}% {when}")
            means = "one-minute means" if settings.bucket_s == 60 else f"{settings.bucket_s:g} s means"
            summary = (f"{headline} (median {b.median:.1f}%, MAD {b.mad:.1f}, {b.buckets} {means}; "
                       f"below {lo:.1f}%, its median minus max({settings.k:g} robust spreads, "
                       f"{settings.min_delta_pct:g} points)), over {n - k} samples since")
            findings.append(Finding(
                kind=BELOW_BASELINE.id, severity=BELOW_BASELINE.severity,
                confidence=BELOW_BASELINE.confidence(model, node, 0.7, cfg),
                summary=summary, start=ts[k], end=ts[-1], node=node,
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
