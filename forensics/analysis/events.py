"""The analysis model's events: what happened on a node at a time, each with its evidence.

OOM kills, Xids, the witnesses of a GPU lost from the bus, GPU health counters at the start and end
of a capture, CUDA out-of-memory lines and the signals of container logs (and where each log ends).
The loaders (forensics/analysis/loaders/) make them; :class:`forensics.analysis.model.Model` holds
them; the rules read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics.analysis.findings import Evidence
from forensics.parsing.logsignals.line import Signal

__all__ = [
    "CudaOom",
    "GpuHealthReading",
    "GpuLostWitness",
    "LogSignal",
    "LogTail",
    "OomKill",
    "XidEvent",
]


@dataclass(frozen=True)
class OomKill:
    """An OOM kill: kernel log sequence, Docker ``oom`` event / State.OOMKilled, or Kubernetes OOMKilled."""

    node: str
    t: float | None
    pid: int | None
    comm: str | None
    container_id: str | None
    pod_uid: str | None
    global_oom: bool
    usage_bytes: int | None
    limit_bytes: int | None
    task_memcg: str | None
    source: str  # kernel | docker | cri | kubernetes | prometheus
    evidence: tuple[Evidence, ...]
    k8s_container_name: str | None = None


@dataclass(frozen=True)
class XidEvent:
    """An NVRM Xid from the kernel log or an NVML XidCriticalError event."""

    node: str
    t: float | None
    code: int
    pci_bus_id: str | None
    gpu_uuid: str | None
    pid: int | None
    proc_name: str | None
    text: str
    evidence: Evidence
    gpu_instance_id: int | None = None  # MIG: the GPU instance the driver attributed it to (``GPU-I:05``)


@dataclass(frozen=True)
class GpuLostWitness:
    """One witness that a GPU left the bus: an Xid 79 record (``kernel-xid``), a driver message naming
    the PCI address without an Xid number (``kernel-nvrm``, its continuation records joined), an NVML
    XidCriticalError 79 event (``nvml-event``) or an NVML call answering GpuIsLost (``nvml``)."""

    node: str
    t: float | None
    pci_bus_id: str | None
    gpu_uuid: str | None
    source: str
    text: str
    evidence: tuple[Evidence, ...]
    gpu_index: int | None = None  # NVML's index, for a device lost before its UUID was read


@dataclass(frozen=True)
class GpuHealthReading:
    """A GPU's health counters at one moment (``phase``: ``start`` = the snapshot, ``end`` = the reading
    after sampling): ``counters`` name -> value (None when NVML did not give it), from
    nvmlDeviceGetTotalEccErrors, GetRetiredPages(_v2), GetRetiredPagesPendingStatus, GetRemappedRows,
    GetPcieReplayCounter, the PCIe link width/generation, NVLink state and error counters per link
    (``nvlink_<link>_<counter>``) and the recovery action field; ``evidence`` per counter name."""

    node: str
    gpu_uuid: str
    t: float | None
    phase: str
    counters: tuple[tuple[str, int | None], ...]
    evidence: tuple[tuple[str, Evidence], ...]

    def get(self, name: str) -> int | None:
        return next((v for k, v in self.counters if k == name), None)

    def cite(self, name: str) -> Evidence | None:
        return next((e for k, e in self.evidence if k == name), None)


@dataclass(frozen=True)
class CudaOom:
    """A CUDA out-of-memory message in a container's log."""

    node: str
    t: float | None
    container_id: str
    text: str
    evidence: Evidence


@dataclass(frozen=True)
class LogSignal:
    """One signal of a container's or pod's own log (:mod:`forensics.parsing.logsignals`)."""

    node: str
    container_id: str | None
    pod_key: str | None
    signal: Signal
    evidence: Evidence


@dataclass(frozen=True)
class LogTail:
    """Where one log ends: its last timestamped line (``t`` None when no line had a timestamp)."""

    node: str
    container_id: str | None
    pod_key: str | None
    member: str
    t: float | None
    evidence: Evidence | None
