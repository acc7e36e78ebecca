"""``gpu-allocatable-reduced``: the node's allocatable GPU resource below its capacity.

Source: the node's ``status.capacity`` and ``status.allocatable`` per ``nvidia.com/*`` resource
(the GPU resource under whatever name the device plugin advertises) and the device ids of the
kubelet's pod-resources ``GetAllocatableResources`` (:mod:`forensics.analysis.loaders.node_resources`).
Capacity counts every device the plugin registered, allocatable the healthy ones: allocatable below
capacity means the device plugin marked a GPU unhealthy, and the scheduler places no new pod on it.

The GPUs left out: NVML's GPUs of the node whose UUID (``GPU-...``, time-sliced replicas
``GPU-...::N``) is missing from the allocatable device ids. The witnesses: the Xids and lost-GPU
records of those GPUs (all the node's, when which GPU is unknown) from before the node was read,
less the lost-GPU records the GPU's own later state contradicts (NVML read it after them:
:mod:`.gpu_answers`); the finding starts at the first of them, and ``gpu-xid-fault``/``gpu-lost`` findings of the same GPU
are chained to it as its cause.

With ``--duration`` the Node is read again at the end of the window (``kubernetes/node-end.json``):
the finding says whether allocatable recovered by then (``metrics.recovered_by_end`` 1, severity
medium: the plugin advertises the GPU again) or not (0), citing that read; allocatable that was
full at the start and below capacity at the end fell during the window (``metrics.fell_during_window``
1; which GPU left is told by pod-resources read again at the end, ``allocatable-end.json``, else
inferred: ``metrics.gpus_suspected``, the GPUs with an Xid or lost-GPU record before the second read,
when no more than the devices lost). Without the second read (a snapshot, or it failed) whether
allocatable recovered is not known, and the finding says so.

Next step: fix or reset the GPU the plugin marked unhealthy (the Xid's action), then restart the
device plugin pod so it registers the GPU as healthy again.
"""

from __future__ import annotations

from forensics.analysis.events import GpuLostWitness, XidEvent
from forensics.analysis.findings import Evidence, Finding, Severity, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Gpu, Model, NodeGpuResource
from forensics.analysis.naming import fmt_time, gpu_label
from forensics.analysis.rules.common import dedupe_evidence
from forensics.analysis.rules.gpu_answers import answered_after
from forensics.analysis.rules.xid_bursts import FELL_OFF_BUS
from forensics.parsing.pci import pci_bus_key
from forensics.specs.roles import ORCHESTRATOR
from forensics.thresholds import AnalysisConfig

__all__ = ["GPU_ALLOCATABLE_REDUCED", "gpu_allocatable_reduced"]

GPU_ALLOCATABLE_REDUCED = FindingKind("gpu-allocatable-reduced", severity="high", needs=(ORCHESTRATOR,), rank=79,
                                      caused_by=("gpu-xid-fault", "gpu-lost"))


def _left_out(model: Model, node: str, ids: tuple[str, ...] | None) -> list[Gpu] | None:
    """NVML's GPUs missing from the allocatable device ids; None when that cannot be told."""
    if ids is None:
        return None
    listed = {i.split("::", 1)[0] for i in ids}
    if listed and not all(i.upper().startswith("GPU-") for i in listed):
        return None  # MIG devices or another plugin's ids: not NVML GPU UUIDs
    gpus = model.node_gpus(node)
    return [g for g in gpus if g.uuid not in listed] if gpus else None


def _which(model: Model, r: NodeGpuResource, fell: bool) -> tuple[list[Gpu] | None, Evidence | None, str]:
    """The GPUs left out of pod-resources' allocatable device ids of the read that showed the
    reduction (the end-of-window one when allocatable fell during the window), its evidence, and
    the words for when it was read."""
    if fell:
        return _left_out(model, r.node, r.end_allocatable_ids), r.end_ids_evidence, " at the end of the window"
    return _left_out(model, r.node, r.allocatable_ids), r.ids_evidence, ""


def _on(g: Gpu, uuid: str | None, pci: str | None) -> bool:
    return (uuid is not None and uuid == g.uuid) or (
        pci is not None and g.pci_bus_id is not None and pci_bus_key(pci) == pci_bus_key(g.pci_bus_id))


def _witnesses(model: Model, r: NodeGpuResource, gpus: list[Gpu] | None,
               until: float | None) -> list[tuple[float | None, str, Evidence]]:
    """(time, what, evidence) of the Xids and lost-GPU records behind the reduction, oldest first:
    on the left-out GPUs (any GPU of the node when those are unknown), before ``until`` (the read
    of the node that showed the reduction)."""
    out: list[tuple[float | None, str, Evidence]] = []
    for x in model.series(XidEvent):
        if x.node == r.node and (gpus is None or any(_on(g, x.gpu_uuid, x.pci_bus_id) for g in gpus)):
            if x.code == FELL_OFF_BUS and answered_after(model, x.node, x.gpu_uuid, x.pci_bus_id, x.t) is not None:
                continue  # the GPU answered NVML after it: an earlier episode
            out.append((x.t, f"Xid {x.code}", x.evidence))
    for w in model.series(GpuLostWitness):
        if w.node == r.node and w.evidence and (gpus is None or any(_on(g, w.gpu_uuid, w.pci_bus_id) for g in gpus)):
            if answered_after(model, w.node, w.gpu_uuid, w.pci_bus_id, w.t) is not None:
                continue
            out.append((w.t, "GPU lost (NVML GpuIsLost)" if w.source == "nvml" else "fell off the bus", w.evidence[0]))
    before = [w for w in out if until is None or w[0] is None or w[0] <= until]
    return sorted(before, key=lambda w: (w[0] if w[0] is not None else float("-inf"), w[1]))


def _suspects(model: Model, r: NodeGpuResource, until: float | None, missing: int) -> list[Gpu]:
    """The node's GPUs with an Xid or lost-GPU record before ``until``, when there are at least one
    and at most ``missing`` of them (more would not say which the plugin marked)."""
    gpus = model.node_gpus(r.node)
    hit = [g for g in gpus if _witnesses(model, r, [g], until)]
    return hit if 0 < len(hit) <= missing else []


def _reduced(capacity: int | None, allocatable: int | None) -> bool:
    return capacity is not None and allocatable is not None and allocatable < capacity


def _at_end(r: NodeGpuResource) -> tuple[str, int | None]:
    """The sentence on the end-of-window read, and ``recovered_by_end`` (None: not read again)."""
    if r.end_allocatable is None:
        return ("; the node was read once (no end-of-window read): whether it recovered by the end of the "
                "window is not known"), None
    cap = r.end_capacity if r.end_capacity is not None else r.capacity
    when = fmt_time(r.end_t)
    if not _reduced(r.capacity, r.allocatable) and _reduced(cap, r.end_allocatable):
        return (f"; it fell during the window: {r.allocatable} of {r.capacity} at the capture's start, "
                f"{r.end_allocatable} of {cap} when the node was read again at {when}"), 0
    if _reduced(cap, r.end_allocatable):
        return f"; not recovered by the end of the window: {r.end_allocatable} of {cap} when the node was read again at {when}", 0
    return f"; recovered by the end of the window: {r.end_allocatable} of {cap} when the node was read again at {when}", 1


@GPU_ALLOCATABLE_REDUCED.rule
def gpu_allocatable_reduced(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    findings: list[Finding] = []
    for r in model.series(NodeGpuResource):
        if r.allocatable is None:
            continue
        end_cap = r.end_capacity if r.end_capacity is not None else r.capacity
        at_start = _reduced(r.capacity, r.allocatable)
        fell = not at_start and _reduced(end_cap, r.end_allocatable)
        if not at_start and not fell:
            continue
        gpus, ids_evidence, read_when = _which(model, r, fell)
        at_end, recovered = _at_end(r)
        witnesses = _witnesses(model, r, gpus, r.end_t if fell or recovered == 0 else r.t)
        low = r.end_allocatable if fell and r.end_allocatable is not None else r.allocatable
        cap = end_cap if fell else r.capacity
        missing = cap - low
        suspects = _suspects(model, r, r.end_t, missing) if fell and gpus is None else []
        if fell:
            summary = (f"The node's allocatable {r.resource} fell below its capacity during the window, to "
                       f"{low} of {cap}: the device plugin marked {missing} device(s) unhealthy and no new pod "
                       "is placed on them")
        else:
            summary = (f"The node's allocatable {r.resource} is {r.allocatable} of its capacity {r.capacity}: "
                       f"the device plugin marked {missing} device(s) unhealthy and no new pod is placed on them")
        subjects: list[Subject] = [Subject("host", r.node, r.node, r.node)]
        if gpus:
            labels = [gpu_label(model, r.node, g.uuid) for g in gpus]
            summary += f"; left out of the kubelet's allocatable devices{read_when}: {', '.join(labels)}"
            subjects += [g.subject() for g in gpus]
        elif gpus is not None:
            summary += (f"; every NVML GPU is still in the kubelet's allocatable devices{read_when} "
                        "(a replica or another device)")
        elif suspects:
            labels = [gpu_label(model, r.node, g.uuid) for g in suspects]
            summary += (f"; the GPU(s) with a fault record before the second read: {', '.join(labels)} "
                        "(pod-resources was not read again at the end, so which GPU left is inferred)")
            subjects += [g.subject() for g in suspects]
        if witnesses:
            seen = ", ".join(f"{what} at {fmt_time(t)}" for t, what, _ in witnesses[:4])
            summary += f"; before it: {seen}" + (f" and {len(witnesses) - 4} more" if len(witnesses) > 4 else "")
        else:
            summary += "; no Xid or lost-GPU record in the bundle says why"
        summary += at_end
        times = [t for t, _, _ in witnesses if t is not None]
        evidence = ([r.evidence] + ([r.end_evidence] if r.end_evidence is not None else [])
                    + ([ids_evidence] if ids_evidence is not None else []) + [e for _, _, e in witnesses])
        severity: Severity = "medium" if recovered == 1 else "high"
        findings.append(Finding(
            kind=GPU_ALLOCATABLE_REDUCED.id, severity=severity,
            confidence=GPU_ALLOCATABLE_REDUCED.confidence(model, r.node, 0.9 if gpus or witnesses else 0.75, cfg),
            summary=summary, start=min(times) if times else (r.t if at_start else r.end_t),
            end=r.end_t if r.end_t is not None else r.t, node=r.node,
            subjects=tuple(subjects), evidence=dedupe_evidence(evidence, limit=12),
            metrics=(("resource", r.resource), ("capacity", cap), ("allocatable", low),
                     ("unhealthy", missing), ("gpus_left_out", ", ".join(g.uuid for g in gpus) if gpus else None),
                     ("witnesses", len(witnesses)), ("recovered_by_end", recovered),
                     ("allocatable_at_end", r.end_allocatable), ("fell_during_window", 1 if fell else 0),
                     ("gpus_suspected", ", ".join(g.uuid for g in suspects) if suspects else None)),
            key=f"allocatable:{r.node}:{r.resource}",
            headline=f"{r.node} lost {missing} allocatable {r.resource}" + (" (recovered)" if recovered == 1 else ""),
        ))
    return findings


@GPU_ALLOCATABLE_REDUCED.harm
def _allocatable_harm(f: Finding, h: Harm) -> str:
    return f"had {f.metric('unhealthy')} {f.metric('resource')} marked unhealthy at {h.when}"


@GPU_ALLOCATABLE_REDUCED.ruled_out(rank=72)
def _allocatable_full(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    full = [r for r in c.model.series(NodeGpuResource) if r.node == c.node and r.allocatable is not None]
    if GPU_ALLOCATABLE_REDUCED.id in c.found or not full:
        return None
    again = [r.end_evidence for r in full if r.end_evidence is not None]
    return ("the node's allocatable GPU resources equal its capacity ("
            + ", ".join(f"{r.resource} {r.allocatable} of {r.capacity}" for r in full)
            + (", at the start and the end of the window" if again else "")
            + "): the device plugin marked no GPU unhealthy", ([r.evidence for r in full] + again)[:4])


@GPU_ALLOCATABLE_REDUCED.next_step
def _allocatable_step(f: Finding, h: Harm) -> str:
    return ("act on the fault that made the device plugin mark the GPU unhealthy (the Xid's action: reset or "
            "replace it), then restart the NVIDIA device plugin pod on the node so it advertises the GPU again")
