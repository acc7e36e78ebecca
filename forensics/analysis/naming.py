"""How the analysis's sentences name things: subjects (containers by their pods, as a Kubernetes
operator thinks of them), GPUs, sizes and times. Read by the rules, the chain and the document;
the pods come from the resolved joins (``Model.joins``), never looked up here.
"""

from __future__ import annotations

from collections.abc import Iterable

from forensics.analysis.findings import Subject
from forensics.analysis.model import Model
from forensics.humanize import format_bytes, format_clock
from forensics.specs.roles import CONTAINER_RUNTIME, ORCHESTRATOR

__all__ = [
    "absent_reason",
    "cap",
    "collapse_pods",
    "container_in_pod",
    "fmt_bytes",
    "fmt_time",
    "gpu_label",
    "gpu_subject",
    "label",
    "name_of",
    "process_label",
    "with_pod",
]


def cap(text: str) -> str:
    """``text`` with its first letter upper-cased (a headline starts a sentence)."""
    return text[:1].upper() + text[1:]


def fmt_bytes(n: float | int | None) -> str:
    return format_bytes(n, "?", largest="TiB")


def fmt_time(t: float | None) -> str:
    return format_clock(t, "an unknown time", zone="Z")


def gpu_subject(model: Model, node: str, uuid: str) -> Subject:
    gpu = model.gpus.get((node, uuid))
    if gpu is not None:
        return gpu.subject()
    return Subject("gpu", uuid, uuid, node)


def gpu_label(model: Model, node: str, uuid: str) -> str:
    gpu = model.gpus.get((node, uuid))
    return f"GPU {gpu.index}" if gpu is not None else uuid


def name_of(s: Subject) -> str:
    """How a summary names a subject without the model: ``trainer``, ``pod ml/trainer-0``,
    ``process 4242 (python)`` (whether it is a host process only the model knows: :func:`label`)."""
    if s.type == "container":
        return s.name
    if s.type == "pod":
        return f"pod {s.name}"
    if s.type == "process":
        return f"process {s.id} ({s.name})"
    return s.name


def process_label(model: Model, node: str, pid: int, comm: str | None = None) -> str:
    """A PID as far as the capture knows it: ``host process 4242 (python)`` when this capture's /proc
    holds it outside any container, ``process 4242 (python)`` inside one, else what is known of it:
    ``PID 4242 as NVML reports it; not found in this capture's /proc`` (another PID namespace, or
    gone) or, from the kernel log, ``PID 4242 (python), not found in this capture's /proc``."""
    proc = model.gpu_process(node, pid) if model.nvml_pid(node, pid) else model.processes.get((node, pid))
    name = comm or (proc.comm if proc is not None else None)
    if proc is not None:
        where = "process" if proc.container_id or proc.pod_uid else "host process"
        return f"{where} {pid} ({name or '?'})"
    if model.nvml_pid(node, pid):
        return f"PID {pid} as NVML reports it; not found in this capture's /proc"
    return f"PID {pid}" + (f" ({name})" if name and name != "?" else "") + ", not found in this capture's /proc"


def container_in_pod(model: Model, subject: Subject) -> str:
    """The Kubernetes name of a pod's container (``jupyter``), else its runtime name."""
    c = model.container(subject.node, subject.id)
    if c is not None and c.k8s_container_name:
        return c.k8s_container_name
    pod = model.joins.pod_of(subject)
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
        pod = model.joins.pod_of(s)
        if pod is not None:
            whole = f"pod {pod.namespace}/{pod.name}"
            return f"{whole} (container {container_in_pod(model, s)})" if long else whole
        if model.container(s.node, s.id) is not None:
            return f"container {s.name}" if long else s.name
        named = model.event_names.get((s.node, s.id))
        if named is not None:  # existed only between two snapshots: Docker's events name it
            return f"container {named} ({s.id[:12]}, known only from Docker events)" if long else named
        return f"container {s.id[:12]} ({absent_reason(model, s)})"
    if s.type == "process" and s.id.isdigit():
        return process_label(model, s.node, int(s.id), s.name)
    return name_of(s)


def absent_reason(model: Model, s: Subject) -> str:
    """Why a container named only by its id is not described in the bundle."""
    if (s.node, s.id) in model.joins.seen_running:  # its processes or cgroup were there: another runtime's, or unlisted
        return ("not described by Docker, the CRI runtime or Kubernetes in the bundle" if model.has_source(s.node, "cri")
                else "not described by Docker or Kubernetes in the bundle")
    if model.has_role(s.node, CONTAINER_RUNTIME) or model.has_role(s.node, ORCHESTRATOR):
        return "no longer present"
    return "no container runtime data in the bundle"


def with_pod(model: Model, subject: Subject) -> list[Subject]:
    """A container subject preceded by its pod's subject (same role) when the pod is known: in
    Kubernetes the pod is the party an operator acts on; the container stays as a further subject."""
    pod = model.joins.pod_of(subject) if subject.type == "container" else None
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
        pod = model.joins.pod_of(s) if s.type == "container" else None
        if pod is not None and pod.subject().key() in pods:
            continue
        seen.add(s.key())
        out.append(s)
    return out
