"""Rules about CPU and pressure: ``cpu-throttling`` and ``pressure-stall``.

Sources: cgroup ``cpu.stat`` (nr_periods, nr_throttled, throttled_usec / v1 throttled_time) or
Docker stats ``cpu_stats.throttling_data``; PSI (``/proc/pressure/*``, ``<cgroup>/*.pressure``);
NVML device utilization to tell whether the throttled container's own GPU sat idle.
"""

from __future__ import annotations

from collections import defaultdict
from operator import attrgetter

from forensics.analysis.findings import Evidence, Finding, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model
from forensics.analysis.naming import fmt_time, gpu_label, gpu_subject, label, with_pod
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.samples import CpuSample, PsiSample
from forensics.specs.roles import CGROUP_COUNTERS
from forensics.thresholds import AnalysisConfig

_BY_TIME = attrgetter("t")  # a C sort key: the series sorted here are per sample

__all__ = ["CPU_THROTTLING", "PRESSURE_STALL", "cpu_throttling", "pressure_stall"]

CPU_THROTTLING = FindingKind("cpu-throttling", severity="medium", needs=(CGROUP_COUNTERS,), rank=60)
PRESSURE_STALL = FindingKind("pressure-stall", severity="low", needs=(CGROUP_COUNTERS,), rank=100,
                             causes=("oom-kill",))


@CPU_THROTTLING.rule
def cpu_throttling(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A container whose CFS quota throttled it in a large share of periods (it is the victim)."""
    findings: list[Finding] = []
    series: dict[tuple[str, str], list[CpuSample]] = defaultdict(list)
    for s in model.series(CpuSample):
        series[(s.node, s.container_id)].append(s)
    gpu_samples = CPU_THROTTLING.gpu_samples(model)
    for (node, cid), samples in sorted(series.items()):
        samples.sort(key=_BY_TIME)
        intervals: list[tuple[CpuSample, CpuSample, int, int]] = []
        for a, b in zip(samples, samples[1:], strict=False):
            dp, dt = b.nr_periods - a.nr_periods, b.nr_throttled - a.nr_throttled
            if dp > 0 and dt >= 0:  # counters reset (restart) give negative deltas: skip
                intervals.append((a, b, dp, dt))
        if intervals:
            periods = sum(i[2] for i in intervals)
            throttled = sum(i[3] for i in intervals)
            start, end = intervals[0][0].t, intervals[-1][1].t
            basis = f"over {end - start:.0f} s"
        else:
            last = samples[-1]
            periods, throttled = last.nr_periods, last.nr_throttled
            start = end = last.t
            basis = "since the container started (one reading)"
        if periods < 10:
            continue
        ratio = throttled / periods
        if ratio < cfg.cpu_throttled_ratio:
            continue
        hot = [i for i in intervals if i[3] / i[2] >= cfg.cpu_throttled_ratio] or intervals
        c = model.container(node, cid)
        subj = c.subject() if c is not None else model.container_subject(node, cid)
        # Did its own GPU sit idle while it was throttled?
        idle_gpus: list[tuple[str, float]] = []
        for uuid in sorted(model.joins.gpus_used_by(node, "container", cid)):
            utils = [g.util_gpu_pct for g in gpu_samples.get((node, uuid), [])
                     if g.util_gpu_pct is not None and any(i[0].t <= g.t <= i[1].t for i in hot)]
            if utils and sum(utils) / len(utils) <= cfg.gpu_idle_util_pct:
                idle_gpus.append((uuid, sum(utils) / len(utils)))
        throttled_s = None
        if intervals and all(i[0].throttled_usec is not None and i[1].throttled_usec is not None for i in intervals):
            throttled_s = sum((i[1].throttled_usec or 0) - (i[0].throttled_usec or 0) for i in intervals) / 1e6
        quota = f" (quota {c.cpu_quota_cores:g} CPUs)" if c is not None and c.cpu_quota_cores else ""
        summary = (f"{label(model, subj)} was CPU-throttled in {ratio * 100:.0f}% of its CFS periods "
                   f"({throttled}/{periods}) {basis}{quota}")
        if throttled_s is not None:
            summary += f", {throttled_s:.1f} s throttled"
        if idle_gpus:
            summary += "; meanwhile its " + ", ".join(
                f"{gpu_label(model, node, u)} averaged {util:.0f}% utilization" for u, util in idle_gpus
            ) + ": the GPU was starved by its CPU feeder"
        severity: Severity = ("high" if idle_gpus or ratio >= cfg.cpu_throttled_ratio_high
                              else CPU_THROTTLING.severity)
        worst = max(hot, key=lambda i: i[3] / i[2]) if hot else None
        ev = [samples[0].evidence, samples[-1].evidence]
        if worst is not None:
            ev = [worst[0].evidence, worst[1].evidence, samples[-1].evidence]
        subjects = [*with_pod(model, subj.with_role("victim")), *[gpu_subject(model, node, u) for u, _ in idle_gpus]]
        findings.append(Finding(
            kind=CPU_THROTTLING.id, severity=severity,
            confidence=CPU_THROTTLING.confidence(model, node, 0.9, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(subjects), evidence=dedupe_evidence(ev),
            metrics=(("throttled_ratio", round(ratio, 3)), ("nr_periods", periods),
                     ("nr_throttled", throttled), ("throttled_s", throttled_s),
                     ("gpu_idle", bool(idle_gpus))),
            key=f"throttle:{node}:{cid}",
            headline=f"{label(model, subj)} was CPU-throttled {ratio * 100:.0f}% of the time"
                     + (" while its GPU sat idle" if idle_gpus else ""),
        ))
    return findings


@CPU_THROTTLING.harm
def _throttling_harm(f: Finding, h: Harm) -> str:
    ratio = f.metric("throttled_ratio")
    pct = f"{float(ratio) * 100:.0f}%" if isinstance(ratio, int | float) else "many"
    return f"CPU-throttled in {pct} of its periods" + (" while its GPU idled" if f.metric("gpu_idle") else "")


@CPU_THROTTLING.ruled_out(rank=50)
def _no_throttling(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    n_cpu = sum(1 for s in c.model.series(CpuSample) if s.node == c.node)
    if CPU_THROTTLING.id in c.found or not n_cpu:
        return None
    return (f"no container CPU-throttled in {c.cfg.cpu_throttled_ratio * 100:.0f}% or more of its periods "
            f"on {c.node}", c.evidence("cgroups", f"{n_cpu} cpu.stat readings"))


@PRESSURE_STALL.rule
def pressure_stall(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """PSI ``some``/``full`` avg10 at or above the thresholds on the host or a container."""
    findings: list[Finding] = []
    series: dict[tuple[str, str, str], list[PsiSample]] = defaultdict(list)
    for s in model.series(PsiSample):
        series[(s.node, s.scope, s.resource)].append(s)
    for (node, scope, resource), samples in sorted(series.items()):
        samples.sort(key=_BY_TIME)
        hot = [s for s in samples if s.some_avg10_pct >= cfg.psi_some_avg10_pct
               or (s.full_avg10_pct is not None and s.full_avg10_pct >= cfg.psi_full_avg10_pct)]
        if not hot:
            continue
        peak = max(hot, key=lambda s: (s.full_avg10_pct or 0, s.some_avg10_pct))
        full_hit = any(s.full_avg10_pct is not None and s.full_avg10_pct >= cfg.psi_full_avg10_pct for s in hot)
        if scope == "host":
            subj = Subject("host", node, node, node)
            where = f"host {node}"
        else:
            c = model.container(node, scope)
            subj = c.subject() if c is not None else model.container_subject(node, scope)
            where = label(model, subj)
        full_txt = f", full {peak.full_avg10_pct:.1f}%" if peak.full_avg10_pct is not None else ""
        measure = "stall share per sampling interval" if peak.from_counters else "avg10"
        summary = (f"{where} stalled on {resource}: PSI some {measure} peaked at {peak.some_avg10_pct:.1f}%"
                   f"{full_txt} at {fmt_time(peak.t)}; {len(hot)} of {len(samples)} readings over the threshold")
        findings.append(Finding(
            kind=PRESSURE_STALL.id, severity="medium" if full_hit else PRESSURE_STALL.severity,
            confidence=PRESSURE_STALL.confidence(model, node, 0.85, cfg),
            summary=summary, start=hot[0].t, end=hot[-1].t, node=node,
            subjects=dedupe_subjects(with_pod(model, subj.with_role("victim"))),
            evidence=dedupe_evidence([peak.evidence, hot[0].evidence]),
            metrics=(("resource", resource), ("some_avg10_pct_peak", peak.some_avg10_pct),
                     ("full_avg10_pct_peak", peak.full_avg10_pct), ("readings_over", len(hot))),
            key=f"psi:{node}:{scope}:{resource}",
            headline=f"{where} stalled on {resource} pressure",
        ))
    return findings


@CPU_THROTTLING.next_step
def _throttling_step(f: Finding, h: Harm) -> str:
    return (f"raise {h.victims}'s CPU quota (docker --cpus, Kubernetes limits.cpu) or give it less CPU work "
            "(fewer data-loader workers)")


@PRESSURE_STALL.next_step
def _stall_step(f: Finding, h: Harm) -> str:
    resource = f.metric("resource") or "resource"
    return (f"relieve {resource} pressure on {h.victims}: raise its {resource} limit or move work off the node")


@PRESSURE_STALL.harm
def _stall_harm(f: Finding, h: Harm) -> str:
    return f"stalled on {f.metric('resource')} pressure from {h.when}"


@PRESSURE_STALL.ruled_out(rank=60)
def _no_stall(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    n_psi = c.info.psi_readings
    if PRESSURE_STALL.id in c.found or not n_psi:
        return None
    return (f"no CPU, memory or IO pressure stall on {c.node} "
            f"(PSI some avg10 below {c.cfg.psi_some_avg10_pct:g}%)", c.evidence("psi", f"{n_psi} PSI readings"))
