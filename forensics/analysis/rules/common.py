"""Helpers shared by the rules: owners of GPU processes, confidence, formatting of numbers and times."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from forensics.analysis.allocation import kubernetes_allocation
from forensics.analysis.findings import Evidence, Subject
from forensics.analysis.model import UNKNOWN_ALLOCATION, GpuAllocation, Model, Pod, ProcessGpuSample
from forensics.analysis.thresholds import AnalysisConfig

__all__ = [
    "Owner",
    "cap",
    "collapse_pods",
    "confidence",
    "fmt_bytes",
    "fmt_time",
    "gpu_subject",
    "label",
    "owner_of",
    "owners_on_gpu",
    "pod_allocation",
    "pod_of",
    "with_pod",
]


@dataclass(frozen=True)
class Owner:
    """Who a GPU process belongs to: a container, a pod, or (unattributed) the process itself."""

    subject: Subject
    allocation: GpuAllocation
    attributed: bool
    evidence: tuple[Evidence, ...]


def owner_of(model: Model, node: str, pid: int, comm_hint: str | None = None) -> Owner:
    """PID -> /proc/<pid>/cgroup -> container (or pod) and its GPU allocation."""
    proc = model.gpu_process(node, pid)
    if proc is None:
        # Never join across PID namespaces or to a process that was not there when NVML saw the PID.
        name = comm_hint or "?"
        return Owner(Subject("process", str(pid), name, node), UNKNOWN_ALLOCATION, False, ())
    container = model.container(node, proc.container_id)
    if container is not None:
        return Owner(container.subject(), container.allocation, True, proc.evidence)
    if proc.pod_uid and proc.pod_uid in model.pods:
        # containerd/CRI-O: the cgroup names the pod UID, but no pod status lists this container id
        # (yet): the pod as a whole is the owner, with what its spec grants as a whole.
        pod = model.pods[proc.pod_uid]
        return Owner(pod.subject(), pod_allocation(model, pod), True, proc.evidence)
    if proc.container_id:
        # A container the cgroup names but no other source describes: kept, by its id.
        subj = Subject("container", proc.container_id, proc.container_id[:12], node)
        return Owner(subj, UNKNOWN_ALLOCATION, True, proc.evidence)
    return Owner(proc.subject(), UNKNOWN_ALLOCATION, False, proc.evidence)


def pod_allocation(model: Model, pod: Pod) -> GpuAllocation:
    """What a pod as a whole was granted (pods.json ``nvidia.com/gpu`` limits, pod-resources devices).

    No limit in any container: ``none``. Limits with every container's devices known: the union
    of those devices. Otherwise the devices are unknown (no verdict on which GPU is whose).
    """
    evidence = pod.evidence[1:] or pod.evidence  # spec resources and pod-resources devices (after the UID)
    limit = pod.gpu_limit()
    if limit <= 0 and not pod.gpu_devices:
        return GpuAllocation("none", False, (), "pod spec", "pod with no nvidia.com/gpu limit", evidence)
    ids = [d for _, devs in pod.gpu_devices for d in devs]
    with_limit = {name for name, n in pod.gpu_limits if n > 0}
    if ids and with_limit <= {name for name, _ in pod.gpu_devices}:
        return kubernetes_allocation(limit, ids, model.node_gpus(pod.node), evidence, True)
    return GpuAllocation("kubernetes", True, (), "pod spec",
                         f"nvidia.com/gpu: {limit} (devices unknown)", evidence, devices_known=False)


def owners_on_gpu(model: Model, samples: Sequence[ProcessGpuSample]) -> dict[Subject, list[ProcessGpuSample]]:
    """Group a GPU's process samples by owner subject (stable order of first appearance)."""
    out: dict[Subject, list[ProcessGpuSample]] = defaultdict(list)
    cache: dict[tuple[str, int], Subject] = {}
    for s in samples:
        key = (s.node, s.pid)
        if key not in cache:
            cache[key] = owner_of(model, s.node, s.pid).subject
        out[cache[key]].append(s)
    return out


def gpu_subject(model: Model, node: str, uuid: str) -> Subject:
    gpu = model.gpus.get((node, uuid))
    if gpu is not None:
        return gpu.subject()
    return Subject("gpu", uuid, uuid, node)


def gpu_label(model: Model, node: str, uuid: str) -> str:
    gpu = model.gpus.get((node, uuid))
    return f"GPU {gpu.index}" if gpu is not None else uuid


def confidence(model: Model, node: str, base: float, needs: Iterable[str], cfg: AnalysisConfig) -> float:
    """``base`` lowered by ``missing_source_confidence_factor`` for each needed collector absent on ``node``."""
    c = base
    for name in needs:
        if not model.has_source(node, name):
            c *= cfg.missing_source_confidence_factor
    return round(max(0.05, min(1.0, c)), 2)


def fmt_bytes(n: float | int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def fmt_time(t: float | None) -> str:
    if t is None:
        return "an unknown time"
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%SZ")


def span(times: Iterable[float]) -> tuple[float | None, float | None]:
    ts = list(times)
    return (min(ts), max(ts)) if ts else (None, None)


def dedupe_evidence(items: Iterable[Evidence], limit: int = 12) -> tuple[Evidence, ...]:
    seen: dict[tuple[str, str, str], Evidence] = {}
    for e in items:
        seen.setdefault((e.bundle, e.member, e.locator), e)
    return tuple(list(seen.values())[:limit])


def dedupe_subjects(items: Iterable[Subject]) -> tuple[Subject, ...]:
    """Keep the first role seen per entity (culprit/victim listed first by callers)."""
    seen: dict[tuple[str, str, str], Subject] = {}
    for s in items:
        seen.setdefault(s.key(), s)
    return tuple(seen.values())


def name_of(s: Subject) -> str:
    """How a summary names a subject without the model: ``trainer``, ``pod ml/trainer-0``, ``host process 4242 (python)``."""
    if s.type == "container":
        return s.name
    if s.type == "pod":
        return f"pod {s.name}"
    if s.type == "process":
        return f"host process {s.id} ({s.name})"
    return s.name


def pod_of(model: Model, subject: Subject) -> Pod | None:
    """The pod a container subject belongs to (kubelet labels, a pod status's container id, or the
    process cgroup's pod UID on containerd/CRI-O), when that pod is in the bundle."""
    if subject.type == "pod":
        return model.pods.get(subject.id)
    if subject.type != "container":
        return None
    c = model.container(subject.node, subject.id)
    if c is not None and c.pod_uid and c.pod_uid in model.pods:
        return model.pods[c.pod_uid]
    for proc in model.processes.values():  # a container only a cgroup path names (no runtime data)
        if proc.node == subject.node and proc.container_id == subject.id and proc.pod_uid in model.pods:
            return model.pods[proc.pod_uid]
    return None


def container_in_pod(model: Model, subject: Subject) -> str:
    """The Kubernetes name of a pod's container (``jupyter``), else its runtime name."""
    c = model.container(subject.node, subject.id)
    if c is not None and c.k8s_container_name:
        return c.k8s_container_name
    pod = pod_of(model, subject)
    if pod is not None:
        for cname, cid in pod.container_ids:
            if cid == subject.id:
                return cname
    return c.name if c is not None else subject.id[:12]


def label(model: Model, s: Subject, *, long: bool = True) -> str:
    """How a sentence names a subject, knowing the model.

    A container of a pod is named by its pod, as a Kubernetes operator thinks of it
    (``pod research/notebook-alice (container jupyter)``; short: ``pod research/notebook-alice``);
    a Docker container ``container notebook`` (short: ``notebook``); a container the bundle only
    knows by id (a kernel OOM line, a cgroup path) ``container 3f9a0c1b2d4e (no longer present)``.
    """
    if s.type == "container":
        pod = pod_of(model, s)
        if pod is not None:
            whole = f"pod {pod.namespace}/{pod.name}"
            return f"{whole} (container {container_in_pod(model, s)})" if long else whole
        if model.container(s.node, s.id) is not None:
            return f"container {s.name}" if long else s.name
        return f"container {s.id[:12]} ({absent_reason(model, s)})"
    return name_of(s)


def absent_reason(model: Model, s: Subject) -> str:
    """Why a container named only by its id is not described in the bundle."""
    seen = model.cache.get("containers_seen_running")
    if not isinstance(seen, set):
        seen = {(p.node, p.container_id) for p in model.processes.values() if p.container_id}
        seen |= {(c.node, c.container_id) for c in model.cpu_samples}
        seen |= {(m.node, m.container_id) for m in model.memory_samples}
        model.cache["containers_seen_running"] = seen
    if (s.node, s.id) in seen:  # its processes or cgroup were there: another runtime's, or unlisted
        return "not described by Docker or Kubernetes in the bundle"
    if model.has_source(s.node, "docker") or model.has_source(s.node, "kubernetes"):
        return "no longer present"
    return "no container runtime data in the bundle"


def cap(text: str) -> str:
    """``text`` with its first letter upper-cased (a headline starts a sentence)."""
    return text[:1].upper() + text[1:]


def with_pod(model: Model, subject: Subject) -> list[Subject]:
    """A container subject preceded by its pod's subject (same role) when the pod is known: in
    Kubernetes the pod is the party an operator acts on; the container stays as a further subject."""
    pod = pod_of(model, subject) if subject.type == "container" else None
    if pod is None:
        return [subject]
    return [pod.subject().with_role(subject.role), subject]


def collapse_pods(model: Model, subjects: Iterable[Subject]) -> list[Subject]:
    """Distinct subjects, a container left out when its pod is listed too (verdict lists, impact)."""
    out: list[Subject] = []
    seen: set[tuple[str, str, str]] = set()
    items = list(subjects)
    pods = {s.key() for s in items if s.type == "pod"}
    for s in items:
        if s.key() in seen:
            continue
        pod = pod_of(model, s) if s.type == "container" else None
        if pod is not None and pod.subject().key() in pods:
            continue
        seen.add(s.key())
        out.append(s)
    return out
