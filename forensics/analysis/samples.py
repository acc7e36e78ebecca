"""The analysis model's time series: one record per reading of a sampled source, with its time.

Each sample is a NamedTuple (millions of them in a long capture: a tuple is the cheapest record),
carries unix seconds (``t``) and the reference to the line it was read from, and gives its
evidence (``.evidence``) quoting the paths of that line that hold its values. The loaders
(forensics/analysis/loaders/) make them; :class:`forensics.analysis.model.Model` holds them.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from forensics.analysis.findings import Evidence, EvidenceRef, LineRef

__all__ = [
    "DCGM_EXPORTER",
    "GPU_SAMPLE_ORIGINS",
    "LISTS_PROCESSES",
    "NVML_SAMPLED",
    "NVML_SNAPSHOT",
    "CpuSample",
    "ExporterAttribution",
    "GpuSample",
    "HoldsGpuSamples",
    "IoSample",
    "MemorySample",
    "NetSample",
    "ProcessGpuSample",
    "PsiSample",
    "samples_from",
]


#: Where a device sample was read (:attr:`GpuSample.origin`): NVML sampled by the capture, one line
#: per GPU and tick with the processes NVML listed in that same reading (``nvml``); NVML read once by
#: the snapshot, its processes read apart (``nvml-snapshot``); dcgm-exporter history from Prometheus,
#: device figures only, no process list (``dcgm-exporter``).
NVML_SAMPLED = "nvml"
NVML_SNAPSHOT = "nvml-snapshot"
DCGM_EXPORTER = "dcgm-exporter"
GPU_SAMPLE_ORIGINS = (NVML_SAMPLED, NVML_SNAPSHOT, DCGM_EXPORTER)
#: the origins whose readings come with the GPU's processes as NVML listed them then
LISTS_PROCESSES = frozenset({NVML_SAMPLED, NVML_SNAPSHOT})


class GpuSample(NamedTuple):
    """One device sample (nvmlDeviceGetUtilizationRates, GetMemoryInfo, GetCurrentClocksEventReasons, ...).
    ``origin``: what it was read from (:data:`GPU_SAMPLE_ORIGINS`): a rule judges only on the origins
    its claim can rest on (:meth:`forensics.analysis.kinds.FindingKind.gpu_samples`)."""

    node: str
    gpu_uuid: str
    t: float
    util_gpu_pct: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    clocks_event_reasons: int | None
    temperature_c: float | None
    power_w: float | None
    ref: EvidenceRef | LineRef
    origin: str = NVML_SAMPLED

    @property
    def evidence(self) -> Evidence:
        return self.ref.evidence


class ProcessGpuSample(NamedTuple):
    """One process on one GPU at time t (nvmlDeviceGetComputeRunningProcesses + GetProcessUtilization)."""

    node: str
    gpu_uuid: str
    pid: int
    t: float
    used_memory_bytes: int | None
    sm_util_pct: float | None
    ref: EvidenceRef | LineRef  # the NVML line (shared by every process of that line)
    proc_index: int = -1  # index in the line's ``processes`` list, -1 when not listed
    util_index: int = -1  # index of its nvmlDeviceGetProcessUtilization sample, -1 when none
    mig_uuid: str | None = None  # the MIG device it ran on, when the GPU is in MIG mode
    gpu_instance_id: int | None = None  # its MIG GPU instance (nvmlProcessInfo_t.gpuInstanceId), when in MIG mode

    @property
    def evidence(self) -> Evidence:
        paths: list[tuple[str | int, ...]] = []
        if self.proc_index >= 0:
            paths.append(("processes", self.proc_index))
        if self.util_index >= 0:
            paths.append(("nvml", "nvmlDeviceGetProcessUtilization", "value", self.util_index))
        if not paths or self.ref.paths:
            return self.ref.evidence
        r = self.ref
        return EvidenceRef(r.bundle, r.member, r.line, r.payload, tuple(paths), r.pointer, r.source,
                           r.offset).evidence


class CpuSample(NamedTuple):
    """Cumulative CFS counters of one container (cgroup cpu.stat or Docker stats throttling_data)."""

    node: str
    container_id: str
    t: float
    nr_periods: int
    nr_throttled: int
    throttled_usec: int | None
    ref: EvidenceRef | LineRef
    quote: tuple[tuple[str | int, ...], ...] = ()  # what to quote from the (shared) line

    @property
    def evidence(self) -> Evidence:
        return _quoting(self.ref, self.quote)


class MemorySample(NamedTuple):
    """Memory use of one container (cgroup memory.current / memory.usage_in_bytes)."""

    node: str
    container_id: str
    t: float
    memory_bytes: int
    limit_bytes: int | None


class PsiSample(NamedTuple):
    """A PSI reading (/proc/pressure/<resource> or <cgroup>/<resource>.pressure); scope ``host`` or a container id."""

    node: str
    scope: str
    resource: str
    t: float
    some_avg10_pct: float
    full_avg10_pct: float | None
    ref: EvidenceRef | LineRef
    quote: tuple[tuple[str | int, ...], ...] = ()  # what to quote from the (shared) line
    from_counters: bool = False  # the pcts are an interval's stall share from total_usec counters

    @property
    def evidence(self) -> Evidence:
        return _quoting(self.ref, self.quote)


class IoSample(NamedTuple):
    """Block IO of one container at ``t``: per device (``MAJ:MIN``) bytes read and written
    (cgroup v2 ``io.stat`` rbytes/wbytes, v1 ``blkio.throttle.io_service_bytes`` Read/Write)."""

    node: str
    container_id: str
    t: float
    devices: dict[str, tuple[int, int]]
    ref: EvidenceRef | LineRef
    quote: tuple[tuple[str | int, ...], ...] = ()

    @property
    def evidence(self) -> Evidence:
        return _quoting(self.ref, self.quote)


class NetSample(NamedTuple):
    """Counters of one link at ``t``: ``kind`` ``nic`` (an interface of the node, ``/proc/net/dev``),
    ``ib`` (an InfiniBand/RoCE port ``dev/port``, data counters turned into bytes) or ``netns`` (a
    container's network namespace, its interfaces summed, loopback left out). ``link_bytes_per_s``
    is the link rate (NIC speed, IB rate) when known; ``state`` the operstate or IB port state."""

    node: str
    kind: str
    name: str
    t: float
    counters: dict[str, int]
    link_bytes_per_s: float | None
    state: str | None
    container_id: str | None
    ref: EvidenceRef | LineRef

    @property
    def evidence(self) -> Evidence:
        return self.ref.evidence


class ExporterAttribution(NamedTuple):
    """Whom dcgm-exporter named for a GPU at one Prometheus step (its ``pod``/``namespace``/``container``
    labels, from the kubelet's pod-resources API), with the GPU's utilization then; None: no pod named."""

    node: str
    gpu_uuid: str
    t: float
    util_pct: float
    namespace: str | None
    pod: str | None
    container: str | None
    pod_uid: str | None
    ref: EvidenceRef | LineRef
    step_s: float

    @property
    def evidence(self) -> Evidence:
        return self.ref.evidence


def _quoting(ref: EvidenceRef | LineRef, quote: tuple[tuple[str | int, ...], ...]) -> Evidence:
    """The evidence of ``ref``, quoting ``quote`` paths when the reference itself names none."""
    if not quote or ref.paths:
        return ref.evidence
    return EvidenceRef(ref.bundle, ref.member, ref.line, ref.payload, quote, ref.pointer, ref.source,
                       ref.offset).evidence


class HoldsGpuSamples(Protocol):
    """What :func:`samples_from` reads of the model (:class:`forensics.analysis.model.Model`), named
    here so this module, which the model imports, never imports it back."""

    by_origin: dict[frozenset[str], dict[tuple[str, str], list[GpuSample]]]

    def samples_by_gpu(self) -> dict[tuple[str, str], list[GpuSample]]: ...


def samples_from(model: HoldsGpuSamples, origins: frozenset[str]) -> dict[tuple[str, str], list[GpuSample]]:
    """(node, GPU UUID) -> its device samples read from ``origins`` (:data:`GPU_SAMPLE_ORIGINS`), in
    time order; computed once per origin set (``Model.by_origin``), and the model's own dict when
    every sample is kept."""
    every = model.samples_by_gpu()
    if origins not in model.by_origin:
        kept = {k: ok for k, v in every.items() if (ok := [s for s in v if s.origin in origins])}
        whole = sum(map(len, kept.values())) == sum(map(len, every.values()))
        model.by_origin[origins] = every if whole else kept
    return model.by_origin[origins]
