"""What the live state's readers give: one immutable record per GPU, GPU process, cgroup and event.

:class:`~forensics.record.live.state.LiveState` derives them from the samplers' records;
the triggers, the metrics exposition and ``gpuforensics top`` read only these (and the state's
plain rows). Units are in the names; ``t`` is the sampler record's wall clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from forensics.analysis.attribution import Grant, OwnerInfo

__all__ = ["NO_GRANT", "UNKNOWN_OWNER", "CgroupLive", "GpuLive", "LiveEvent", "ProcessLive"]


@dataclass(frozen=True)
class GpuLive:
    index: int
    uuid: str
    name: str
    t: float
    util_pct: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    lost: bool = False

    @property
    def memory_used_pct(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return 100.0 * self.memory_used_bytes / self.memory_total_bytes


@dataclass(frozen=True)
class ProcessLive:
    pid: int
    gpu_index: int
    gpu_uuid: str
    mig_uuid: str | None
    t: float
    used_memory_bytes: int | None
    sm_util_pct: float | None
    owner: OwnerInfo
    grant: Grant


@dataclass(frozen=True)
class CgroupLive:
    path: str
    container_id: str | None
    container_name: str
    t: float
    throttled_pct: float | None
    psi_pct: dict[str, dict[str, float]] = field(default_factory=dict)  # resource -> some|full -> %


@dataclass(frozen=True)
class LiveEvent:
    kind: str  # oom | xid | gpu-lost
    t: float
    summary: str
    xid: int | None = None
    gpu: str | None = None  # GPU UUID or PCI bus id, where known
    container_id: str | None = None
    pid: int | None = None
    member: str = ""  # where the samplers wrote it (cited in a trigger's manifest entry)


#: a process' owner and grant before the first attribution ran
UNKNOWN_OWNER = OwnerInfo("process")
NO_GRANT = Grant(False, "none", "unknown", "not attributed yet", False)
