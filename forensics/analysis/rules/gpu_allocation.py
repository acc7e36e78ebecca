"""Rules comparing what containers and pods were given with what they used.

``unallocated-gpu-use`` and ``overlapping-gpu-allocation`` (``unattributed-gpu-process``, its sibling
for processes in no container, is in gpu_unattributed), over
NVML process samples (nvmlDeviceGetComputeRunningProcesses), the PID -> cgroup -> container join
(/proc/<pid>/cgroup) and the allocations (docker inspect, pod spec, pod-resources).
"""

from __future__ import annotations

from forensics.analysis.findings import Evidence, Finding, Subject
from forensics.analysis.kinds import FindingKind, Harm, RuledOutCheck
from forensics.analysis.model import GpuAllocation, Model, Owner, Pod
from forensics.analysis.naming import (
    fmt_bytes,
    gpu_label,
    gpu_subject,
    label,
    name_of,
    with_pod,
)
from forensics.analysis.rules.common import dedupe_evidence, dedupe_subjects, span
from forensics.analysis.rules.gpu_sharing import contract_for
from forensics.analysis.rules.gpu_unattributed import UNATTRIBUTED_GPU_PROCESS, is_mps_server
from forensics.analysis.samples import ProcessGpuSample
from forensics.specs.roles import CONTAINER_RUNTIME, GPU_DEVICES, ORCHESTRATOR, PROCESS_TABLE
from forensics.thresholds import AnalysisConfig

__all__ = [
    "OVERLAPPING_GPU_ALLOCATION",
    "UNALLOCATED_GPU_USE",
    "covered_by_grant",
    "overlapping_gpu_allocation",
    "owner_counts_unallocated",
    "unallocated_gpu_use",
]

UNALLOCATED_GPU_USE = FindingKind(
    "unallocated-gpu-use", severity="medium", needs=(GPU_DEVICES, PROCESS_TABLE, CONTAINER_RUNTIME), rank=10,
    causes=("gpu-compute-hog", "gpu-memory-pressure", "oom-kill", "gpu-xid-fault"))
OVERLAPPING_GPU_ALLOCATION = FindingKind(
    "overlapping-gpu-allocation", severity="medium", needs=(GPU_DEVICES, PROCESS_TABLE, CONTAINER_RUNTIME), rank=20,
    causes=("gpu-compute-hog", "gpu-memory-pressure", "oom-kill"))


def _pids_text(samples: list[ProcessGpuSample], model: Model) -> str:
    pids = sorted({s.pid for s in samples})
    parts = []
    for pid in pids[:3]:
        proc = model.gpu_process(samples[0].node, pid)
        parts.append(f"pid {pid}, {proc.comm}" if proc and proc.comm else f"pid {pid}")
    more = f" and {len(pids) - 3} more" if len(pids) > 3 else ""
    return "; ".join(parts) + more


def _why_unallocated(model: Model, node: str, uuid: str, alloc: GpuAllocation, pod: Pod | None,
                     visible: tuple[int, str] | None) -> tuple[str, str]:
    """Why the owner's use of GPU ``uuid`` was not allocated: (the summary's clause, the headline's).

    In Kubernetes terms for a pod (its ``nvidia.com/gpu`` limit, how it still sees the GPU), in
    Docker terms otherwise (no grant, a blanket grant, other GPUs granted).
    """
    gl = gpu_label(model, node, uuid)
    node_gpus = {g.uuid for g in model.node_gpus(node)}
    sees = ""
    if uuid in alloc.blanket_gpus:
        every = bool(node_gpus) and node_gpus <= set(alloc.blanket_gpus)
        sees = (f"sees every GPU through {alloc.blanket_detail}" if every
                else f"reaches {gl} through {alloc.blanket_detail}")
    elif visible is not None and not (alloc.claims and visible[1].strip().lower() == "void"):
        # (a claim's CDI spec sets NVIDIA_VISIBLE_DEVICES=void: no clue to how it reached the GPU)
        pid, value = visible
        sees = (f"sees every GPU through NVIDIA_VISIBLE_DEVICES={value} in its process {pid}'s environment"
                if value.strip().lower() == "all"
                else f"its process {pid} ran with NVIDIA_VISIBLE_DEVICES={value} in its environment")
    if sees and not sees.startswith("its "):
        sees = f"it {sees}"
    if pod is not None and pod.gpu_limits_known:
        limit = pod.gpu_limit()
        if alloc.explicit and (alloc.claims or limit == 0 or not _plain_gpu_limits(alloc)):
            # a DRA claim, a renamed or MIG resource: the grant as the user looks it up
            short = f"was granted {alloc.detail}"
        elif limit == 0:
            short = "has no nvidia.com/gpu limit"
        else:
            short = f"was allocated {_gpu_list(model, node, alloc.gpus)} (nvidia.com/gpu: {limit})"
        return f"pod {pod.namespace}/{pod.name} {short}" + (f"; {sees}" if sees else ""), short
    if alloc.explicit:
        short = f"was allocated {_gpu_list(model, node, alloc.gpus)}"
        return f"it {short} ({alloc.detail})" + (f"; {sees}" if sees else ""), short
    if uuid in alloc.blanket_gpus:
        return f"it requested no GPU, and its GPU access came only from a blanket grant ({alloc.blanket_detail})", \
            "had no GPU allocation"
    return "its configuration grants no GPU at all" + (f"; {sees}" if sees else ""), "had no GPU allocation"


def _plain_gpu_limits(alloc: GpuAllocation) -> bool:
    """Whether every grant of a pod's allocation is an ``nvidia.com/gpu`` limit (its detail's
    parts, forensics.analysis.allocation_kubernetes): else its grant is not said as one."""
    return all(part.startswith(("nvidia.com/gpu devices ", "nvidia.com/gpu: ")) for part in alloc.detail.split("; "))


def _gpu_list(model: Model, node: str, uuids: tuple[str, ...]) -> str:
    labels = [gpu_label(model, node, u) for u in uuids]
    return ", ".join(labels) if labels else "GPUs the bundle does not name"


def _assigned_text(model: Model, uuid: str, holders: list[tuple[Subject, Owner]]) -> str:
    """Who ``uuid`` was explicitly given to, and by what (the kubelet's pod-resources, docker inspect)."""
    parts = []
    for subj, owner in holders:
        alloc = owner.allocation
        gl = gpu_label(model, subj.node, uuid)
        if alloc.source == "pod-resources":
            parts.append(f"the kubelet assigned {gl} to {label(model, subj)}, "
                         f"per its pod-resources list ({alloc.detail})")
        else:
            parts.append(f"{gl} was allocated to {label(model, subj)} ({alloc.detail})")
    return "; ".join(parts)


def covered_by_grant(model: Model, node: str, alloc: GpuAllocation, uuid: str, mig_uuid: str | None) -> bool:
    """Whether ``alloc`` grants a process's use of GPU ``uuid`` (MIG device ``mig_uuid``), or may:
    a sample on a GPU in MIG mode that names no MIG device (NVML's parent list, the MIG devices'
    own lists not read) may be on the MIG device ``alloc`` grants, so it is not judged."""
    if alloc.grants(uuid, mig_uuid):
        return True
    if mig_uuid is None and any(g.upper().startswith("MIG-") for g in alloc.gpus):
        gpu = model.gpus.get((node, uuid))
        return gpu is None or gpu.mig_enabled
    return False


def owner_counts_unallocated(model: Model, owner: Owner, uuid: str) -> bool:
    """Whether this rule judges ``owner``'s use of GPU ``uuid`` at all (its samples on a device
    not granted are then unallocated use); the flight recorder's live attribution
    (forensics.analysis.attribution) asks the same question."""
    if not owner.attributed or owner.subject.type == "process":
        return False  # unattributed-gpu-process covers these
    alloc = owner.allocation
    if not alloc.known:
        return False  # limitation recorded by the loaders
    if alloc.explicit and not alloc.devices_known:
        return False  # e.g. a GPU limit whose devices the bundle does not name
    # allowed to share this GPU: gpu-share-exceeded judges its use
    return contract_for(model, owner.subject, uuid) is None


@UNALLOCATED_GPU_USE.rule
def unallocated_gpu_use(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """A container/pod process on a GPU its owner was not explicitly allocated (the "secretly taken" GPU)."""
    findings: list[Finding] = []
    joins = model.joins
    for (node, uuid), owners in sorted(joins.active_owners(cfg.process_active_sm_pct).items()):
        for subject, (owner, samples) in owners.items():
            if not owner_counts_unallocated(model, owner, uuid):
                continue
            alloc = owner.allocation
            samples = [s for s in samples if not covered_by_grant(model, node, alloc, uuid, s.mig_uuid)
                       and not is_mps_server(model, node, s.pid)]  # (it serves the GPU's MPS clients)
            if not samples:
                continue
            holders = [h for h in joins.explicit_holders(node, uuid) if h[0].key() != subject.key()]
            start, end = span(s.t for s in samples)
            peak_mem = max((s.used_memory_bytes or 0 for s in samples), default=0)
            sm_vals = [s.sm_util_pct for s in samples if s.sm_util_pct is not None]
            gl = gpu_label(model, node, uuid)
            pod = joins.pod_of(subject)
            env_ev: list[Evidence] = []
            visible = None
            for s in samples:
                proc = model.gpu_process(node, s.pid)
                if proc is not None and proc.visible_devices is not None:
                    visible = (s.pid, proc.visible_devices)
                    if proc.visible_devices_evidence is not None:
                        env_ev.append(proc.visible_devices_evidence)
                    break
            why, why_short = _why_unallocated(model, node, uuid, alloc, pod, visible)
            who = label(model, subject)
            who_brief = label(model, subject, long=False) if pod is not None else who
            holder_names = ", ".join(label(model, h[0], long=False) for h in holders)
            if holders:
                assigned = _assigned_text(model, uuid, holders)
                took = (f"took {gl} from {holder_names}" if pod is not None and all(
                    joins.pod_of(h[0]) is not None for h in holders)
                    else f"took {gl} (allocated to {', '.join(label(model, h[0], long=False) for h in holders)})")
            else:
                assigned = f"{gl} was allocated to no container or pod"
                took = f"used {gl}"
            sm_avg = sum(sm_vals) / len(sm_vals) if sm_vals else None
            numbers = f"peak {fmt_bytes(peak_mem)} of GPU memory" + (
                f", SM {sm_avg:.0f}% on average" if sm_avg is not None else "")
            summary = (f"{who} ({_pids_text(samples, model)}) used {gl} without an allocation of it: {why}; "
                       f"{assigned}; {numbers}")
            lead = f"{who_brief}, which {why_short}, {'also ' if alloc.explicit else ''}{took}"
            headline = lead + (f", holding {fmt_bytes(peak_mem)}" if peak_mem else "") + (
                f" at {sm_avg:.0f}% SM" if sm_avg is not None else "")
            subjects = with_pod(model, subject.with_role("culprit"))
            subjects += [s for h in holders for s in with_pod(model, h[0].with_role("victim"))]
            subjects.append(gpu_subject(model, node, uuid))
            for mig in sorted({s.mig_uuid for s in samples if s.mig_uuid}):
                subjects.append(Subject("mig", mig, f"{gl} {mig[:12]}", node))
            for pid in sorted({s.pid for s in samples})[:5]:
                proc = model.gpu_process(node, pid)
                if proc is not None:
                    subjects.append(proc.subject())
            first = min(samples, key=lambda s: s.t)
            evidence = [first.evidence, *owner.evidence[:2], *alloc.evidence[:3], *alloc.blanket_evidence[:3],
                        *env_ev]
            for h in holders:
                evidence.extend(h[1].allocation.evidence[:2])
            base = 0.95 if holders else 0.85
            findings.append(Finding(
                kind=UNALLOCATED_GPU_USE.id,
                severity="high" if holders else UNALLOCATED_GPU_USE.severity,
                confidence=UNALLOCATED_GPU_USE.confidence(model, node, base, cfg),
                summary=summary,
                start=start, end=end, node=node,
                subjects=dedupe_subjects(subjects),
                evidence=dedupe_evidence(evidence),
                metrics=(("gpu", gl), ("peak_gpu_memory_bytes", peak_mem),
                         ("sm_util_avg_pct", round(sum(sm_vals) / len(sm_vals), 1) if sm_vals else None),
                         ("allocation_kind", alloc.kind),
                         *((("claims", ", ".join(alloc.claims)),) if alloc.claims else ()),
                         *((("granted", alloc.detail),) if alloc.explicit and pod is not None
                           and not alloc.blanket_gpus else ()),
                         *((("node_grants", "dra"),) if dra_node(model, node) else ())),
                key=f"unallocated:{node}:{uuid}:{subject.id}",
                headline=headline, lead=lead,
            ))
    return findings


@UNALLOCATED_GPU_USE.harm
def _unallocated_harm(f: Finding, h: Harm) -> str:
    return f"{h.gpu}, allocated to it, used by {h.culprits} from {h.when}"


def dra_node(model: Model, node: str) -> bool:
    """Whether a DRA claim granted a GPU to any pod of the node (its next steps speak of claims)."""
    return any(p.node == node and any(a.claims for _, a in p.allocations) for p in model.pods.values())


@UNALLOCATED_GPU_USE.next_step
def _unallocated_step(f: Finding, h: Harm) -> str:
    if f.metric("allocation_kind") == "dra":
        return (f"find how {h.culprits} reached {h.gpu} outside its claim {f.metric('claims')} (a privileged "
                "container, a hostPath /dev/nvidia* or an NVIDIA_VISIBLE_DEVICES in its spec bypass the claim's "
                "CDI devices) and close it: its ResourceClaim should be its only GPU grant")
    if f.metric("granted") is not None:  # granted other GPUs (a renamed resource, a limit, --gpus)
        return (f"find how {h.culprits} reached {h.gpu} outside its grant ({f.metric('granted')}): a privileged "
                "container, a hostPath /dev/nvidia* or an NVIDIA_VISIBLE_DEVICES that names other GPUs bypass "
                "it; close that path")
    if f.metric("node_grants") == "dra":
        return (f"close the grant that let {h.culprits} reach {h.gpu}: set NVIDIA_VISIBLE_DEVICES=void or none "
                "for jobs without a GPU, and grant GPUs only through a ResourceClaim (resources.claims)")
    how = {"env": "NVIDIA_VISIBLE_DEVICES from its image or environment",
           "privileged": "privileged mode",
           "kubernetes": "a pod without an nvidia.com/gpu limit that still sees the GPUs"}.get(
        str(f.metric("allocation_kind")), "a blanket grant (NVIDIA_VISIBLE_DEVICES=all, the default nvidia runtime)")
    return (f"close the grant that let {h.culprits} reach {h.gpu} ({how}): set NVIDIA_VISIBLE_DEVICES=void or "
            "none for jobs without a GPU, and grant GPUs only explicitly (--gpus, nvidia.com/gpu)")


@UNALLOCATED_GPU_USE.ruled_out(rank=70)
def _every_gpu_process_allocated(c: RuledOutCheck) -> tuple[str, list[Evidence]] | None:
    model, node = c.model, c.node
    if c.found & {UNALLOCATED_GPU_USE.id, UNATTRIBUTED_GPU_PROCESS.id}:
        return None
    n_proc = sum(1 for s in model.series(ProcessGpuSample) if s.node == node)
    if (n_proc and model.has_role(node, PROCESS_TABLE)
            and (model.has_role(node, CONTAINER_RUNTIME) or model.has_role(node, ORCHESTRATOR))):
        return (f"every GPU process on {node} ran in a container allocated that GPU",
                c.evidence("nvml", f"{n_proc} process samples"))
    return None


_OVERLAP_TOLERANCE_S = 2.0  # two sampling intervals at the default 1 s


def _distinct_names(subjects: list[Subject]) -> list[str]:
    """Names, with a short id added where two subjects share one (a recreated container)."""
    names = [name_of(s) for s in subjects]
    return [f"{n} ({s.id[:12]})" if names.count(n) > 1 else n for n, s in zip(names, subjects, strict=True)]


@OVERLAPPING_GPU_ALLOCATION.rule
def overlapping_gpu_allocation(model: Model, cfg: AnalysisConfig) -> list[Finding]:
    """Two containers/pods explicitly allocated the same GPU, both active on it."""
    findings: list[Finding] = []
    active = model.joins.active_owners(cfg.process_active_sm_pct)
    for (node, uuid), owners in sorted(active.items()):
        holders = model.joins.explicit_holders(node, uuid)
        active_holders = [(subj, owners[subj]) for subj, _ in holders if subj in owners]
        # "both active on it" means at the same time: a container recreated later (a new id,
        # often the same name, as in two captures of one host) shares nothing with its predecessor
        spans = {subj: (min(s.t for s in ss), max(s.t for s in ss)) for subj, (_, ss) in active_holders}
        active_holders = [
            h for h in active_holders
            if any(o[0] != h[0] and spans[h[0]][0] <= spans[o[0]][1] + _OVERLAP_TOLERANCE_S
                   and spans[o[0]][0] <= spans[h[0]][1] + _OVERLAP_TOLERANCE_S for o in active_holders)]
        if len(active_holders) < 2:
            continue
        if all(h[1].allocation.time_sliced for h in holders):
            continue  # time-slicing replicas: the operator chose to share this GPU
        if set.intersection(*(set(h[1].allocation.claims) for h in holders)):
            continue  # one DRA claim used by every holder: its device is theirs together
        def first_seen(item: tuple[Subject, tuple[Owner, list[ProcessGpuSample]]], node: str = node) -> float:
            c = model.container(node, item[0].id)
            if c is not None and c.started_at is not None:
                return c.started_at
            return min(s.t for s in item[1][1])
        ordered = sorted(active_holders, key=first_seen)
        gl = gpu_label(model, node, uuid)
        earliest, latest = ordered[0], ordered[-1]
        tie = first_seen(earliest) == first_seen(latest)
        # The holder that started last joined a GPU already allocated to another: it is the culprit
        # and the earlier holder its victim. Holders that started together share the blame for the
        # configuration: both are culprits (never mere witnesses, which would leave the verdict clean).
        subjects: list[Subject] = []
        for i, (subj, _) in enumerate(ordered):
            subjects.append(subj.with_role("culprit" if tie or i > 0 else "victim"))
        subjects.append(gpu_subject(model, node, uuid))
        all_samples = [s for _, (_, ss) in ordered for s in ss]
        start, end = span(s.t for s in all_samples)
        details = []
        for s_, _ in ordered:
            holder = model.container(node, s_.id)
            details.append(f"{name_of(s_)} ({holder.allocation.detail if holder is not None else '?'})")
        names = ", ".join(details)
        summary = (f"{gl} was explicitly allocated to {len(ordered)} containers that all ran on it: {names}"
                   + ("" if tie else f"; {name_of(latest[0])} started last, on a GPU already allocated to {name_of(earliest[0])}"))
        evidence: list[Evidence] = []
        for _subj, (owner, ss) in ordered:
            evidence.extend(owner.allocation.evidence[:1])
            evidence.append(min(ss, key=lambda s: s.t).evidence)
        findings.append(Finding(
            kind=OVERLAPPING_GPU_ALLOCATION.id, severity=OVERLAPPING_GPU_ALLOCATION.severity,
            confidence=OVERLAPPING_GPU_ALLOCATION.confidence(model, node, 0.9, cfg),
            summary=summary, start=start, end=end, node=node,
            subjects=dedupe_subjects(subjects), evidence=dedupe_evidence(evidence),
            metrics=(("gpu", gl), ("holders", len(ordered))),
            key=f"overlap:{node}:{uuid}",
            headline=f"{gl} was allocated to both " + " and ".join(_distinct_names([s for s, _ in ordered])),
        ))
    return findings


@OVERLAPPING_GPU_ALLOCATION.harm
def _overlapping_harm(f: Finding, h: Harm) -> str:
    return f"{h.gpu} also allocated to {h.culprits}"


@OVERLAPPING_GPU_ALLOCATION.next_step
def _overlapping_step(f: Finding, h: Harm) -> str:
    return (f"give {h.culprits} different GPUs: fix the --gpus / NVIDIA_VISIBLE_DEVICES or device-plugin "
            f"assignment that handed {h.gpu} to both, or share it deliberately (MIG, MPS)")
