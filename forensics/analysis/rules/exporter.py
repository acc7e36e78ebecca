"""``gpu-exporter-blind-spot``: dcgm-exporter's pod labels disagree with what the GPU was doing.

dcgm-exporter names a pod for a GPU only when the kubelet's pod-resources API says the device
plugin gave that GPU to it. A GPU reached another way (a pod without an ``nvidia.com/gpu`` limit
whose image sets ``NVIDIA_VISIBLE_DEVICES=all``, a privileged pod, a process outside Kubernetes)
is busy in the exporter's series with no pod named, and every dashboard built on those labels
shows nobody using it. Sources: ``prometheus/query_range/DCGM_FI_DEV_GPU_UTIL.json`` (the
utilization and the ``pod``/``namespace``/``container`` labels per step) and, when the bundle has
them, NVML's process samples joined through /proc/<pid>/cgroup (the bundle's own attribution).

Two shapes, one finding per GPU and shape:

- busy, no pod named: at least ``exporter_blind_min_steps`` consecutive steps at or above
  ``exporter_busy_util_pct`` with no pod label; the bundle's own owners of the GPU in that span,
  if any, are the culprits;
- another pod named: the bundle's own attribution puts a different pod on the GPU during steps
  where dcgm-exporter named a pod.
"""

from __future__ import annotations

from collections import defaultdict

from forensics.analysis.findings import Evidence, Finding, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Model, Pod
from forensics.analysis.naming import fmt_time, gpu_label, gpu_subject, label, with_pod
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects
from forensics.analysis.samples import ExporterAttribution, ProcessGpuSample
from forensics.specs.roles import GPU_DEVICES, PROCESS_TABLE
from forensics.thresholds import AnalysisConfig

__all__ = ["GPU_EXPORTER_BLIND_SPOT", "gpu_exporter_blind_spot"]

# needs: the "another pod named" shape compares with the bundle's own attribution (NVML processes
# through /proc/<pid>/cgroup); the "no pod named" shape rests on the exporter's series alone.
GPU_EXPORTER_BLIND_SPOT = FindingKind("gpu-exporter-blind-spot", severity="high", needs=(GPU_DEVICES, PROCESS_TABLE),
                                      rank=110)


def _runs(steps: list[ExporterAttribution], busy: float, min_steps: int) -> list[list[ExporterAttribution]]:
    """Runs of consecutive busy steps with no pod named (a gap of more than two steps ends a run)."""
    runs: list[list[ExporterAttribution]] = []
    cur: list[ExporterAttribution] = []
    for a in steps:
        contiguous = not cur or a.t - cur[-1].t <= 2 * a.step_s
        if a.pod is None and a.util_pct >= busy and contiguous:
            cur.append(a)
            continue
        if len(cur) >= min_steps:
            runs.append(cur)
        cur = [a] if a.pod is None and a.util_pct >= busy else []
    if len(cur) >= min_steps:
        runs.append(cur)
    return runs


def _own_owners(model: Model, node: str, uuid: str, start: float, end: float,
                cfg: AnalysisConfig) -> dict[Subject, list[float]]:
    """The bundle's own attribution: owners (container or pod) of active NVML process samples in [start, end]."""
    out: dict[Subject, list[float]] = {}
    for subject, (owner, samples) in model.joins.active_owners(cfg.process_active_sm_pct).get((node, uuid), {}).items():
        times = [s.t for s in samples if start <= s.t <= end]
        if owner.attributed and times:
            out[subject] = times
    return out


def _pod_uid_of(model: Model, subject: Subject) -> str | None:
    pod = model.joins.pod_of(subject)
    if pod is not None:
        return pod.uid
    c = model.container(subject.node, subject.id) if subject.type == "container" else None
    return c.pod_uid if c is not None else None


def _pod_by_name(model: Model, node: str, namespace: str | None, name: str | None) -> Pod | None:
    for p in model.pods.values():
        if p.node == node and p.namespace == namespace and p.name == name:
            return p
    return None


@GPU_EXPORTER_BLIND_SPOT.rule
def gpu_exporter_blind_spot(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A GPU busy while dcgm-exporter names no pod for it, or names another pod than the bundle's own attribution."""
    findings: list[Finding] = []
    by_gpu: dict[tuple[str, str], list[ExporterAttribution]] = defaultdict(list)
    for a in model.series(ExporterAttribution):
        by_gpu[(a.node, a.gpu_uuid)].append(a)
    for (node, uuid), steps in sorted(by_gpu.items()):
        steps.sort(key=lambda a: a.t)
        gl = gpu_label(model, node, uuid)
        runs = _runs(steps, cfg.exporter_busy_util_pct, cfg.exporter_blind_min_steps)
        if runs:
            run = max(runs, key=len)
            start, end, step = run[0].t - run[0].step_s, run[-1].t, run[0].step_s
            mean = sum(a.util_pct for a in run) / len(run)
            owners = _own_owners(model, node, uuid, start - step, end + step, cfg)
            named = sorted(owners, key=lambda s: -len(owners[s]))
            culprits = [*(x for s in named for x in with_pod(model, s.with_role("culprit")))]
            who = (f"; the bundle's own attribution names {', '.join(label(model, s) for s in named[:3])}"
                   if named else "; nothing in the bundle names who used it")
            steps_text = f"{sum(len(r) for r in runs)} steps of {step:g} s"
            summary = (f"{gl} averaged {mean:.0f}% utilization from {fmt_time(start)} to {fmt_time(end)} "
                       f"({steps_text}) while dcgm-exporter named no pod for it{who}: the GPU was used "
                       "outside the device plugin's allocation, invisible to per-pod dashboards")
            findings.append(Finding(
                kind=GPU_EXPORTER_BLIND_SPOT.id, severity=GPU_EXPORTER_BLIND_SPOT.severity,
                confidence=0.9 if named else 0.75, summary=summary, start=start, end=end, node=node,
                subjects=dedupe_subjects([*culprits, gpu_subject(model, node, uuid)]),
                evidence=dedupe_evidence([run[0].evidence, max(run, key=lambda a: a.util_pct).evidence,
                                          run[-1].evidence]),
                metrics=(("shape", "no-pod-named"), ("util_pct_mean", round(mean, 1)), ("steps", len(run)),
                         ("step_s", step), ("own_attribution", len(named))),
                key=f"blind:{node}:{uuid}:none",
                headline=f"{gl} was {mean:.0f}% busy while dcgm-exporter named no pod for it"
                         + (f" ({label(model, named[0], long=False)} was using it)" if named else ""),
            ))
        # another pod named than the bundle's own attribution
        named_steps = [a for a in steps if a.pod is not None]
        if not named_steps or not model.series(ProcessGpuSample):
            continue
        lo, hi = named_steps[0].t - named_steps[0].step_s, named_steps[-1].t
        owners = _own_owners(model, node, uuid, lo, hi, cfg)
        for subj, times in sorted(owners.items(), key=lambda kv: kv[0].key()):
            uid = _pod_uid_of(model, subj)
            if uid is None:
                continue
            disagree = [a for a in named_steps
                        if any(a.t - a.step_s <= t <= a.t + a.step_s for t in times) and a.pod_uid != uid
                        and (a.pod_uid is not None or _pod_by_name(model, node, a.namespace, a.pod) is None
                             or _pod_by_name(model, node, a.namespace, a.pod).uid != uid)]  # type: ignore[union-attr]
            if not disagree:
                continue
            first = disagree[0]
            exporter_pod = f"{first.namespace}/{first.pod}"
            other = _pod_by_name(model, node, first.namespace, first.pod)
            summary = (f"dcgm-exporter named pod {exporter_pod} for {gl} from {fmt_time(disagree[0].t)} to "
                       f"{fmt_time(disagree[-1].t)}, while the bundle's own attribution (NVML processes through "
                       f"/proc/<pid>/cgroup) puts {label(model, subj)} on it: the exporter credits the GPU's "
                       "use to the pod it was allocated to, not the one using it")
            subjects = [*with_pod(model, subj.with_role("culprit")), gpu_subject(model, node, uuid)]
            if other is not None:
                subjects.append(other.subject().with_role("victim"))
            findings.append(Finding(
                kind=GPU_EXPORTER_BLIND_SPOT.id, severity=GPU_EXPORTER_BLIND_SPOT.severity,
                confidence=GPU_EXPORTER_BLIND_SPOT.confidence(model, node, 0.85, cfg), summary=summary,
                start=disagree[0].t - disagree[0].step_s, end=disagree[-1].t, node=node,
                subjects=dedupe_subjects(subjects),
                evidence=dedupe_evidence([first.evidence, disagree[-1].evidence]),
                metrics=(("shape", "other-pod-named"), ("exporter_pod", exporter_pod), ("steps", len(disagree)),
                         ("step_s", first.step_s)),
                key=f"blind:{node}:{uuid}:{subj.id}",
                headline=f"dcgm-exporter credited {gl} to {exporter_pod} while {label(model, subj, long=False)} used it",
            ))
    return findings


@GPU_EXPORTER_BLIND_SPOT.harm
def _blind_spot_harm(f: Finding, h: Harm) -> str:
    return f"credited by dcgm-exporter with {h.gpu}, used by {h.culprits} from {h.when}"


@GPU_EXPORTER_BLIND_SPOT.next_step
def _blind_spot_step(f: Finding, h: Harm) -> str:
    if f.metric("shape") == "other-pod-named":
        return (f"stop {h.culprits} from reaching {h.gpu} outside its allocation (no nvidia.com/gpu limit but "
                "NVIDIA_VISIBLE_DEVICES=all, privileged) and do not bill or debug it from dcgm-exporter's pod labels")
    if f.metric("own_attribution"):
        return (f"stop {h.culprits} from using {h.gpu} outside the device plugin's allocation; per-pod "
                "dashboards did not see it")
    return (f"find who uses {h.gpu} outside the device plugin: capture on the node while it is busy "
            "(gpuforensics capture --duration 60); per-pod dashboards did not see it")


@GPU_EXPORTER_BLIND_SPOT.ruled_out(rank=90)
def _exporter_labels_agree(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    if GPU_EXPORTER_BLIND_SPOT.id in c.found:
        return None
    steps = [a for a in c.model.series(ExporterAttribution) if a.node == c.node]
    if not steps:
        return None  # no Prometheus history: nothing was looked at
    busy = sum(1 for a in steps if a.util_pct >= c.cfg.exporter_busy_util_pct)
    agreed = " and the pods it named agree with the bundle's own attribution" if any(
        s.node == c.node for s in c.model.series(ProcessGpuSample)) else ""
    return (f"dcgm-exporter named a pod whenever a GPU on {c.node} was busy for "
            f"{c.cfg.exporter_blind_min_steps} steps or more{agreed}",
            c.evidence("prometheus", f"{len(steps)} GPU utilization steps, {busy} of them busy"))
