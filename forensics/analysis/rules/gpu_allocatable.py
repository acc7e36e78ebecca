"""``gpu-allocatable-reduced``: the node's allocatable GPU resource below its capacity.

Source: the node's ``status.capacity`` and ``status.allocatable`` per ``nvidia.com/*`` resource
(the GPU resource under whatever name the device plugin advertises) and the device ids of the
kubelet's pod-resources ``GetAllocatableResources`` (:mod:`forensics.analysis.loaders.node_resources`).
Capacity counts every device the plugin registered, allocatable the healthy ones: allocatable below
capacity means the device plugin marked a GPU unhealthy, and the scheduler places no new pod on it.

The GPUs left out: NVML's GPUs of the node whose UUID (``GPU-...``, time-sliced replicas
``GPU-...::N``) is missing from the allocatable device ids. The witnesses: the Xids and lost-GPU
records of those GPUs (all the node's, when which GPU is unknown) from before the node was read;
the finding starts at the first of them, and ``gpu-xid-fault``/``gpu-lost`` findings of the same GPU
are chained to it as its cause. The node is read once (at the capture's start): whether allocatable
recovered by the end of the window is not known, and the finding says so.

Next step: fix or reset the GPU the plugin marked unhealthy (the Xid's action), then restart the
device plugin pod so it registers the GPU as healthy again.
"""

from __future__ import annotations

from forensics.analysis.findings import Evidence, Finding, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import Gpu, Model, NodeGpuResource
from forensics.analysis.naming import fmt_time, gpu_label
from forensics.analysis.rules.common import dedupe_evidence
from forensics.analysis.thresholds import AnalysisConfig
from forensics.parsing.pci import pci_bus_key

__all__ = ["GPU_ALLOCATABLE_REDUCED", "gpu_allocatable_reduced"]

GPU_ALLOCATABLE_REDUCED = FindingKind("gpu-allocatable-reduced", severity="high", needs=("kubernetes",), rank=79)


def _left_out(model: Model, r: NodeGpuResource) -> list[Gpu] | None:
    """NVML's GPUs missing from the allocatable device ids; None when that cannot be told."""
    if r.allocatable_ids is None:
        return None
    listed = {i.split("::", 1)[0] for i in r.allocatable_ids}
    if listed and not all(i.upper().startswith("GPU-") for i in listed):
        return None  # MIG devices or another plugin's ids: not NVML GPU UUIDs
    gpus = model.node_gpus(r.node)
    return [g for g in gpus if g.uuid not in listed] if gpus else None


def _on(g: Gpu, uuid: str | None, pci: str | None) -> bool:
    return (uuid is not None and uuid == g.uuid) or (
        pci is not None and g.pci_bus_id is not None and pci_bus_key(pci) == pci_bus_key(g.pci_bus_id))


def _witnesses(model: Model, r: NodeGpuResource, gpus: list[Gpu] | None) -> list[tuple[float | None, str, Evidence]]:
    """(time, what, evidence) of the Xids and lost-GPU records behind the reduction, oldest first:
    on the left-out GPUs (any GPU of the node when those are unknown), before the node was read."""
    out: list[tuple[float | None, str, Evidence]] = []
    for x in model.xids:
        if x.node == r.node and (gpus is None or any(_on(g, x.gpu_uuid, x.pci_bus_id) for g in gpus)):
            out.append((x.t, f"Xid {x.code}", x.evidence))
    for w in model.lost_witnesses:
        if w.node == r.node and w.evidence and (gpus is None or any(_on(g, w.gpu_uuid, w.pci_bus_id) for g in gpus)):
            out.append((w.t, "GPU lost (NVML GpuIsLost)" if w.source == "nvml" else "fell off the bus", w.evidence[0]))
    before = [w for w in out if r.t is None or w[0] is None or w[0] <= r.t]
    return sorted(before, key=lambda w: (w[0] if w[0] is not None else float("-inf"), w[1]))


@GPU_ALLOCATABLE_REDUCED.rule
def gpu_allocatable_reduced(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    findings: list[Finding] = []
    for r in model.node_gpu_resources:
        if r.allocatable is None or r.allocatable >= r.capacity:
            continue
        gpus = _left_out(model, r)
        witnesses = _witnesses(model, r, gpus)
        missing = r.capacity - r.allocatable
        summary = (f"The node's allocatable {r.resource} is {r.allocatable} of its capacity {r.capacity}: "
                   f"the device plugin marked {missing} device(s) unhealthy and no new pod is placed on them")
        subjects: list[Subject] = [Subject("host", r.node, r.node, r.node)]
        if gpus:
            labels = [gpu_label(model, r.node, g.uuid) for g in gpus]
            summary += f"; left out of the kubelet's allocatable devices: {', '.join(labels)}"
            subjects += [g.subject() for g in gpus]
        elif gpus is not None:
            summary += "; every NVML GPU is still in the kubelet's allocatable devices (a replica or another device)"
        if witnesses:
            seen = ", ".join(f"{what} at {fmt_time(t)}" for t, what, _ in witnesses[:4])
            summary += f"; before it: {seen}" + (f" and {len(witnesses) - 4} more" if len(witnesses) > 4 else "")
        else:
            summary += "; no Xid or lost-GPU record in the bundle says why"
        summary += "; read once at the capture's start: whether it recovered by the end of the window is not known"
        times = [t for t, _, _ in witnesses if t is not None]
        evidence = [r.evidence] + ([r.ids_evidence] if r.ids_evidence is not None else []) + [e for _, _, e in witnesses]
        findings.append(Finding(
            kind=GPU_ALLOCATABLE_REDUCED.id, severity="high",
            confidence=GPU_ALLOCATABLE_REDUCED.confidence(model, r.node, 0.9 if gpus or witnesses else 0.75, cfg),
            summary=summary, start=min(times) if times else r.t, end=r.t, node=r.node,
            subjects=tuple(subjects), evidence=dedupe_evidence(evidence, limit=12),
            metrics=(("resource", r.resource), ("capacity", r.capacity), ("allocatable", r.allocatable),
                     ("unhealthy", missing), ("gpus_left_out", ", ".join(g.uuid for g in gpus) if gpus else None),
                     ("witnesses", len(witnesses)), ("recovered_by_end", None)),
            key=f"allocatable:{r.node}:{r.resource}",
            headline=f"{r.node} lost {missing} allocatable {r.resource}",
        ))
    return findings


@GPU_ALLOCATABLE_REDUCED.harm
def _allocatable_harm(f: Finding, h: Harm) -> str:
    return f"had {f.metric('unhealthy')} {f.metric('resource')} marked unhealthy at {h.when}"


@GPU_ALLOCATABLE_REDUCED.ruled_out(rank=72)
def _allocatable_full(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    full = [r for r in c.model.node_gpu_resources if r.node == c.node and r.allocatable is not None]
    if GPU_ALLOCATABLE_REDUCED.id in c.found or not full:
        return None
    return ("the node's allocatable GPU resources equal its capacity ("
            + ", ".join(f"{r.resource} {r.allocatable} of {r.capacity}" for r in full)
            + "): the device plugin marked no GPU unhealthy", [r.evidence for r in full][:4])


@GPU_ALLOCATABLE_REDUCED.next_step
def _allocatable_step(f: Finding, h: Harm) -> str:
    return ("act on the fault that made the device plugin mark the GPU unhealthy (the Xid's action: reset or "
            "replace it), then restart the NVIDIA device plugin pod on the node so it advertises the GPU again")
