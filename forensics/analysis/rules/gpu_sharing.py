"""Sharing contracts: ``gpu-share-exceeded``, a pod allowed to share a GPU that used more than its share.

A pod holding a shared grant for a GPU (time-slicing or MPS replicas ``GPU-<uuid>::N`` of a renamed
or shared device-plugin resource, MPS limits, a software vGPU's environment limits; see
:mod:`forensics.analysis.loaders.sharing`) is allowed on that GPU: ``unallocated-gpu-use`` never
names it. Using more than the contract (memory above ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` /
``CUDA_DEVICE_MEMORY_LIMIT``, SM above ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` / ``CUDA_DEVICE_SM_LIMIT``,
or, for time-slicing replicas, far more SM time than its replicas' part of the GPU while another
process shared it) is this lower-severity finding, quoting the contract. Sources: NVML process
samples (``usedGpuMemory``, per-process ``smUtil``) joined to containers through ``/proc/<pid>/cgroup``.

Next step: hold the pod to its share (the device plugin's MPS limits or a vGPU limit enforce it;
time-slicing does not), or give it a whole GPU.
"""

from __future__ import annotations

from collections import defaultdict

from forensics.analysis.findings import Finding, Subject
from forensics.analysis.kinds import FindingKind, Harm
from forensics.analysis.model import Model, ShareContract
from forensics.analysis.naming import fmt_bytes, gpu_label, gpu_subject, label, with_pod
from forensics.analysis.rules.common import dedupe_evidence, span
from forensics.specs.roles import GPU_DEVICES, ORCHESTRATOR, PROCESS_TABLE
from forensics.thresholds import AnalysisConfig

__all__ = ["GPU_SHARE_EXCEEDED", "contract_for", "gpu_share_exceeded"]

GPU_SHARE_EXCEEDED = FindingKind("gpu-share-exceeded", severity="low", needs=(GPU_DEVICES, PROCESS_TABLE, ORCHESTRATOR),
                                 rank=15)


@GPU_SHARE_EXCEEDED.next_step
def _share_step(f: Finding, h: Harm) -> str:
    return (f"hold {h.culprits} to its share of {h.gpu} ({f.metric('sharing')}: {f.metric('contract')}): MPS or "
            "vGPU limits enforce a share, time-slicing does not; or give it a whole GPU")
_SM_TOLERANCE_PCT = 5.0
_TIME_SLICE_MARGIN_PCT = 20.0


def contract_for(model: Model, subject: Subject, gpu_uuid: str) -> ShareContract | None:
    """The sharing contract that lets ``subject`` (a container, or a pod through its containers) use the GPU."""
    ids: list[str] = []
    if subject.type == "container":
        ids = [subject.id]
    elif subject.type == "pod":
        pod = model.pods.get(subject.id)
        ids = [cid for _, cid in pod.container_ids] if pod else []
    for cid in ids:
        c = model.shares.get((subject.node, cid))
        if c is not None and c.covers(gpu_uuid):
            return c
    return None


@GPU_SHARE_EXCEEDED.rule
def gpu_share_exceeded(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    findings: list[Finding] = []
    active = model.joins.active_owners(cfg.process_active_sm_pct)
    for (node, uuid), owners in sorted(active.items()):
        for subject, (_owner, samples) in owners.items():
            contract = contract_for(model, subject, uuid)
            if contract is None:
                continue
            mem_at: dict[float, int] = defaultdict(int)
            sm_at: dict[float, float] = defaultdict(float)
            for s in samples:
                mem_at[s.t] += s.used_memory_bytes or 0
                sm_at[s.t] += s.sm_util_pct or 0.0
            peak_mem = max(mem_at.values(), default=0)
            mean_sm = sum(sm_at.values()) / len(sm_at) if sm_at else 0.0
            over: list[str] = []
            if contract.memory_limit_bytes is not None and peak_mem > contract.memory_limit_bytes:
                over.append(f"{fmt_bytes(peak_mem)} of GPU memory, above its {fmt_bytes(contract.memory_limit_bytes)} limit")
            if contract.sm_limit_pct is not None and mean_sm > contract.sm_limit_pct + _SM_TOLERANCE_PCT:
                over.append(f"{mean_sm:.0f}% SM on average, above its {contract.sm_limit_pct:.0f}% limit")
            if (contract.kind == "time-slicing" and contract.replicas_total and contract.memory_limit_bytes is None
                    and contract.sm_limit_pct is None):
                fair = 100.0 * contract.replicas / contract.replicas_total
                others = {o for o in owners if o.key() != subject.key()}
                if others and mean_sm > fair + _TIME_SLICE_MARGIN_PCT:
                    over.append(f"{mean_sm:.0f}% SM on average while sharing, against the {fair:.0f}% its "
                                f"{contract.replicas} of {contract.replicas_total} replicas stand for")
            if not over:
                continue
            gl = gpu_label(model, node, uuid)
            who = label(model, subject)
            start, end = span(s.t for s in samples)
            findings.append(Finding(
                kind=GPU_SHARE_EXCEEDED.id, severity=GPU_SHARE_EXCEEDED.severity,
                confidence=GPU_SHARE_EXCEEDED.confidence(model, node, 0.85, cfg),
                summary=(f"{who}, allowed to share {gl} ({contract.kind}: {contract.contract}), used "
                         + "; ".join(over)),
                start=start, end=end, node=node,
                subjects=(*with_pod(model, subject.with_role("culprit")), gpu_subject(model, node, uuid)),
                evidence=dedupe_evidence([*contract.evidence, max(samples, key=lambda s: s.used_memory_bytes or 0).evidence]),
                metrics=(("contract", contract.contract), ("sharing", contract.kind),
                         ("peak_memory_bytes", peak_mem), ("mean_sm_pct", round(mean_sm, 1)),
                         ("memory_limit_bytes", contract.memory_limit_bytes), ("sm_limit_pct", contract.sm_limit_pct)),
                key=f"share:{node}:{uuid}:{subject.id}",
                headline=f"{who} used more than its share of {gl}",
            ))
    return findings


@GPU_SHARE_EXCEEDED.harm
def _harm(f: Finding, h: Harm) -> str:
    return f"shared {h.gpu} with {h.culprits}, which went over its share, from {h.when}"
