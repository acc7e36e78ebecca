"""Helpers shared by the rules: owners of GPU processes, confidence, formatting of numbers and times."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from forensics.analysis.findings import Evidence, Subject
from forensics.analysis.model import UNKNOWN_ALLOCATION, GpuAllocation, Model, ProcessGpuSample
from forensics.analysis.thresholds import AnalysisConfig

__all__ = [
    "Owner",
    "confidence",
    "fmt_bytes",
    "fmt_time",
    "gpu_subject",
    "owner_of",
    "owners_on_gpu",
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
        return Owner(model.pods[proc.pod_uid].subject(), UNKNOWN_ALLOCATION, True, proc.evidence)
    if proc.container_id:
        # A container the cgroup names but no other source describes: kept, by its id.
        subj = Subject("container", proc.container_id, proc.container_id[:12], node)
        return Owner(subj, UNKNOWN_ALLOCATION, True, proc.evidence)
    return Owner(proc.subject(), UNKNOWN_ALLOCATION, False, proc.evidence)


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
    """How a summary names a subject: ``trainer``, ``pod ml/trainer-0``, ``process 4242 (python)``."""
    if s.type == "container":
        return s.name
    if s.type == "pod":
        return f"pod {s.name}"
    if s.type == "process":
        return f"host process {s.id} ({s.name})"
    return s.name


def with_pod(model: Model, subject: Subject) -> list[Subject]:
    """A container subject followed by its pod's subject (same role) when the pod is known."""
    out = [subject]
    if subject.type == "container":
        c = model.container(subject.node, subject.id)
        if c is not None and c.pod_uid and c.pod_uid in model.pods:
            out.append(model.pods[c.pod_uid].subject().with_role(subject.role))
    return out
