"""The analysis model: entities and one timeline, built from bundles only.

Entities (GPU, process, container, pod, node) are frozen records; samples
(forensics/analysis/samples.py) and events (forensics/analysis/events.py) carry unix seconds
(``t``) and the evidence they were read from. :class:`Model` holds them, keyed by node, samples and
events as series keyed by their record type (``model.series(GpuSample)``), plus what is known about
which sources were present (collector status) and the limitations met. Only
:func:`forensics.analysis.loaders.load_model` makes one: the loaders fill it (their scratch state
is a :class:`forensics.analysis.loaders.state.LoadState`, not here), then
:func:`forensics.analysis.joins.resolve_joins` links PID -> cgroup -> container -> pod -> GPU
allocation once, into ``Model.joins``, which rules, the chain and the document read (they never
build joins themselves). What they may ask of the
joins is declared here (:class:`Joins`, with its answers :class:`Owner` and :data:`ActiveOwners`);
forensics.analysis.joins implements it over this module, which imports neither it nor the
allocation models, so the model, the joins and the allocations form no import cycle.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import Any, Protocol, TypeVar

from forensics.analysis.findings import Evidence, Subject
from forensics.analysis.process_index import ByPid, Columns, ProcessViews
from forensics.analysis.samples import GpuSample, ProcessGpuSample
from forensics.parsing.pci import pci_bus_key
from forensics.specs import Role, playing

_BY_TIME = attrgetter("t")  # a C sort key: the series sorted here are per sample

__all__ = [
    "ActiveOwners",
    "Container",
    "Gpu",
    "GpuAllocation",
    "Joins",
    "Model",
    "NodeInfo",
    "Owner",
    "Pod",
    "Process",
    "ShareContract",
]

_R = TypeVar("_R")


@dataclass(frozen=True)
class Gpu:
    """A GPU (or MIG instance) as NVML described it (nvmlDeviceGetUUID, GetName, GetPciInfo, GetMemoryInfo)."""

    node: str
    index: int
    uuid: str
    name: str
    pci_bus_id: str | None
    memory_total_bytes: int | None
    mig_enabled: bool = False
    evidence: Evidence | None = None
    minor_number: int | None = None  # nvmlDeviceGetMinorNumber: N of /dev/nvidiaN
    serial: str | None = None  # nvmlDeviceGetSerial
    vbios_version: str | None = None  # nvmlDeviceGetVbiosVersion
    mig_mode: str | None = None  # "enabled", "disabled", "not supported"; None when not read
    minor_evidence: Evidence | None = None  # where minor_number was read

    def subject(self) -> Subject:
        return Subject("gpu", self.uuid, f"GPU {self.index}", self.node)


@dataclass(frozen=True)
class Process:
    """A host process and what its /proc/<pid>/cgroup says (container id, pod UID), or why unknown."""

    node: str
    pid: int
    comm: str
    cgroup_path: str | None
    container_id: str | None
    pod_uid: str | None
    evidence: tuple[Evidence, ...] = ()
    unresolved_reason: str | None = None
    start_ticks: int | None = None  # /proc/<pid>/stat starttime (ticks since boot)
    visible_devices: str | None = None  # NVIDIA_VISIBLE_DEVICES in /proc/<pid>/environ
    visible_devices_evidence: Evidence | None = None
    # RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, NODE_RANK, GROUP_RANK from /proc/<pid>/environ
    rank_env: tuple[tuple[str, str], ...] = ()

    def subject(self) -> Subject:
        return Subject("process", str(self.pid), self.comm or "?", self.node)


@dataclass(frozen=True)
class GpuAllocation:
    """What a container or pod was given.

    ``gpus``: GPU UUIDs granted explicitly by an operator (``--gpus``, DeviceRequests, CDI, device
    nodes, a specific ``-e NVIDIA_VISIBLE_DEVICES``, a Kubernetes ``nvidia.com/gpu`` limit);
    ``blanket_gpus``: GPUs reachable only through a blanket grant (image ENV
    ``NVIDIA_VISIBLE_DEVICES=all``, ``all`` under the default nvidia runtime, privileged mode, a pod
    without a GPU limit). ``kind`` summarises: device-request, cdi, device-node, env, privileged,
    kubernetes, dra (a ResourceClaim granted it: ``claims``), none, unknown; ``explicit`` is true when any explicit grant exists.
    """

    kind: str
    explicit: bool
    gpus: tuple[str, ...]
    source: str
    detail: str
    evidence: tuple[Evidence, ...] = ()
    blanket_gpus: tuple[str, ...] = ()
    blanket_detail: str = ""
    blanket_evidence: tuple[Evidence, ...] = ()
    devices_known: bool = True
    time_sliced: bool = False  # a device plugin's time-slicing replicas (GPU-<uuid>::N): sharing by design
    claims: tuple[str, ...] = ()  # DRA: the ResourceClaims (namespace/name) that granted ``gpus``
    cdi_devices: tuple[str, ...] = ()  # the CDI device names that granted ``gpus`` (nvidia.com/gpu=0)

    def grants(self, gpu_uuid: str, mig_uuid: str | None = None) -> bool:
        """True when this allocation explicitly grants the GPU (or the MIG device on it)."""
        return gpu_uuid in self.gpus or (mig_uuid is not None and mig_uuid in self.gpus)

    @property
    def known(self) -> bool:
        return self.kind != "unknown"


UNKNOWN_ALLOCATION = GpuAllocation("unknown", False, (), "", "allocation not in the bundle", devices_known=False)
NO_ALLOCATION = GpuAllocation("none", False, (), "", "no GPU requested")


@dataclass(frozen=True)
class Container:
    """A container from Docker inspect (or only from a cgroup path / a pod status when Docker is absent)."""

    node: str
    id: str
    name: str
    image: str
    pod_uid: str | None
    state: str
    exit_code: int | None
    oom_killed: bool
    started_at: float | None
    finished_at: float | None
    allocation: GpuAllocation
    cpu_quota_cores: float | None
    memory_limit_bytes: int | None
    evidence: tuple[Evidence, ...] = ()
    k8s_container_name: str | None = None

    def subject(self) -> Subject:
        return Subject("container", self.id, self.name or self.id[:12], self.node)


@dataclass(frozen=True)
class Pod:
    """A pod from the Kubernetes API (pods.json), with pod-resources device ids when present, or
    only from its CRI sandbox (``gpu_limits_known`` false: the runtime does not know the pod spec's
    limits; its containers' grants are their OCI runtime specs)."""

    node: str
    uid: str
    namespace: str
    name: str
    phase: str
    container_ids: tuple[tuple[str, str], ...]  # (container name, 64-hex id)
    gpu_limits: tuple[tuple[str, int], ...]  # (container name, nvidia.com/gpu limit)
    gpu_devices: tuple[tuple[str, tuple[str, ...]], ...]  # (container name, device ids)
    evidence: tuple[Evidence, ...] = ()
    gpu_limits_known: bool = True
    # (container name, its allocation in every grant form: forensics.analysis.allocation_kubernetes)
    allocations: tuple[tuple[str, GpuAllocation], ...] = ()

    def subject(self) -> Subject:
        return Subject("pod", self.uid, f"{self.namespace}/{self.name}", self.node)

    def gpu_limit(self) -> int:
        return sum(n for _, n in self.gpu_limits)


@dataclass(frozen=True)
class ShareContract:
    """What a container was allowed when it shares a GPU by design: a device plugin's time-slicing or
    MPS replicas (``GPU-<uuid>::N`` ids of a renamed or shared resource in pod-resources), MPS limits
    (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) or a software vGPU's
    environment limits (``CUDA_DEVICE_MEMORY_LIMIT``, ``CUDA_DEVICE_SM_LIMIT``). ``gpus`` empty: any
    GPU of the node (an environment limit names none); ``replicas_total`` the replicas the node
    advertises per GPU (capacity / GPUs), when known."""

    node: str
    container_id: str
    kind: str  # time-slicing | mps | vgpu-env
    resource: str | None
    gpus: tuple[str, ...]
    replicas: int
    replicas_total: int | None
    memory_limit_bytes: int | None
    sm_limit_pct: float | None
    contract: str  # quoted as the finding states it
    evidence: tuple[Evidence, ...]

    def covers(self, gpu_uuid: str) -> bool:
        return not self.gpus or gpu_uuid in self.gpus


@dataclass(frozen=True)
class NodeGpuResource:
    """A GPU resource the node advertises (``kubernetes/node.json``: ``status.capacity`` and
    ``status.allocatable``, read at ``t``), and the device ids the kubelet reports allocatable for it
    (pod-resources ``GetAllocatableResources``; None when not captured): the device plugin leaves a
    GPU it found unhealthy out of both. ``end_*``: the same resource in the Node read again at the
    end of the window (``kubernetes/node-end.json``, read at ``end_t``; None without that read), and
    pod-resources' allocatable device ids read again then (``allocatable-end.json``)."""

    node: str
    resource: str
    capacity: int
    allocatable: int | None
    t: float | None
    evidence: Evidence
    allocatable_ids: tuple[str, ...] | None = None
    ids_evidence: Evidence | None = None
    end_capacity: int | None = None
    end_allocatable: int | None = None
    end_t: float | None = None
    end_evidence: Evidence | None = None
    end_allocatable_ids: tuple[str, ...] | None = None  # GetAllocatableResources at the end of the window
    end_ids_evidence: Evidence | None = None


@dataclass(frozen=True)
class DStateHolder:
    """A process in uninterruptible sleep (``D``) holding NVIDIA device files open
    (``proc/dstate.json``): it cannot be killed, and keeps its GPU memory until it leaves the driver."""

    node: str
    pid: int
    comm: str | None
    wchan: str | None
    devices: tuple[str, ...]
    t: float | None
    evidence: Evidence


@dataclass
class NodeInfo:
    """One host: its bundles, capture window and the collectors' statuses."""

    host: str
    bundles: list[str] = field(default_factory=list)
    start: float | None = None
    end: float | None = None
    clock_offset_s: float | None = 0.0  # add to this node's times for the first node's clock (None: unknown)
    clock_uncertainty_s: float | None = 0.0  # how far off clock_offset_s may be (None: unknown)
    # this node's clock against references it was compared with during capture:
    # reference name -> (offset_s to add for the reference's clock, uncertainty_s, evidence)
    clock_refs: dict[str, tuple[float, float, Evidence | None]] = field(default_factory=dict)
    clock_reference: str | None = None  # the reference clock_offset_s was derived through
    collector_status: dict[str, str] = field(default_factory=dict)
    kernel_records: int = 0
    # the member folders (``ring/nvml/``) whose flight recorder history the analysis read for this node,
    # with the wall times of their first and last record in the window (None: not known)
    history_held: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    psi_readings: int = 0
    members_used: dict[str, str] = field(default_factory=dict)  # family (nvml, kernel, cgroups, psi) -> member
    kernel_window: tuple[float, float] | None = None
    lookback_s: float | None = None  # capture --lookback: older evidence is history, not the incident
    since: float | None = None  # capture --since: the lead-up the capture folded in
    trigger_crossed_at: float | None = None  # a triggered capture's: when its rule's condition began to hold
    # What the node is (page one of a report): driver_version, cuda_version, nvml_version (nvml
    # devices.json "system"), kernel, os (host/host.json uname and os_release).
    facts: dict[str, str] = field(default_factory=dict)

    def lead_up_start(self) -> float | None:
        """Where the capture's lead-up begins: ``--since``, else the look-back before its start."""
        if self.since is not None:
            return self.since
        if self.start is not None and self.lookback_s is not None:
            return self.start - self.lookback_s
        return self.start
    # GPUs whose NVML event set was registered for XidCriticalError during sampling, and where
    xid_watch_gpus: int = 0
    xid_watch_evidence: Evidence | None = None
    # the step of the Prometheus history folded in (None: none): findings resting on it have that resolution
    history_step_s: float | None = None


@dataclass(frozen=True)
class Owner:
    """Who a GPU process belongs to: a container, a pod, or (unattributed) the process itself."""

    subject: Subject
    allocation: GpuAllocation
    attributed: bool
    evidence: tuple[Evidence, ...]


# (node, GPU UUID) -> owner subject -> (owner, its active process samples on that GPU, in time order)
ActiveOwners = dict[tuple[str, str], dict[Subject, tuple[Owner, list[ProcessGpuSample]]]]


class Joins(Protocol):
    """What rules, the chain and the document ask of the resolved joins (``Model.joins``; built
    by :func:`forensics.analysis.joins.resolve_joins`)."""

    #: (node, container id) of the containers whose processes or cgroups the bundle saw (though no
    #: runtime may describe them)
    seen_running: frozenset[tuple[str, str]]

    def owner(self, node: str, pid: int, comm_hint: str | None = None) -> Owner:
        """The owner of host PID ``pid``; an untrusted or unknown PID is its own (unattributed) owner."""
        ...

    def pod_of(self, subject: Subject) -> Pod | None:
        """The pod a pod or container subject belongs to, when that pod is in the bundle."""
        ...

    def explicit_holders(self, node: str, uuid: str) -> Sequence[tuple[Subject, Owner]]:
        """Containers, then pods without container records, on ``node`` whose explicit allocation
        names GPU ``uuid``."""
        ...

    def gpus_used_by(self, node: str, subject_type: str, subject_id: str) -> frozenset[str]:
        """The GPUs (UUIDs) NVML listed a process of this owner on."""
        ...

    def active_owners(self, min_sm_pct: float) -> ActiveOwners:
        """Per GPU, each owner's samples that count as use."""
        ...


@dataclass
class Model:
    """Every entity and sample of the analysed bundles, keyed by node.

    Samples and events are kept as series keyed by their record type (:meth:`series`,
    :meth:`add`): a new source's sample type is a new key, not a new field. Loaders fill a model
    (their scratch state is :class:`forensics.analysis.loaders.state.LoadState`, never here); the
    loading code (:func:`forensics.analysis.loaders.load_model`) resolves its :attr:`joins` before
    anyone else sees it."""

    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    gpus: dict[tuple[str, str], Gpu] = field(default_factory=dict)  # (node, uuid)
    processes: dict[tuple[str, int], Process] = field(default_factory=dict)
    containers: dict[tuple[str, str], Container] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)  # uid
    # (node, container id) -> the highest memory use its cgroup recorded (memory.peak v2,
    # memory.max_usage_in_bytes v1): samples miss the moment before an OOM kill.
    memory_peaks: dict[tuple[str, str], int] = field(default_factory=dict)
    # (node, container id) -> device (MAJ:MIN) -> {"rbps", "wbps", "riops", "wiops"} (None: unlimited),
    # from io.max / blkio.throttle.*_device in cgroup/index.json, with the evidence of the file
    io_limits: dict[tuple[str, str], tuple[dict[str, dict[str, int | None]], Evidence]] = field(default_factory=dict)
    dstate_scanned: set[str] = field(default_factory=set)  # nodes whose bundle has proc/dstate.json
    shares: dict[tuple[str, str], ShareContract] = field(default_factory=dict)  # (node, container id)
    limitations: list[str] = field(default_factory=list)
    collectors: list[dict[str, object]] = field(default_factory=list)
    bundles: list[dict[str, object]] = field(default_factory=list)
    # Nodes whose NVML PIDs are not this capture's /proc PIDs (capture outside the host PID namespace),
    # and (node, pid) NVML listed while /proc had no such PID: neither may be joined to /proc.
    pid_mismatch_nodes: set[str] = field(default_factory=set)
    pids_absent_at_nvml: set[tuple[str, int]] = field(default_factory=set)
    # (node, container id) -> the name Docker events give it (Actor.Attributes.name): names a
    # container that existed only between two snapshots (created, OOM-killed, removed).
    event_names: dict[tuple[str, str], str] = field(default_factory=dict)
    # The joins, resolved once after loading (forensics.analysis.joins.resolve_joins, called by
    # forensics.analysis.loaders.load_model before the model leaves the loading code).
    joins: Joins = field(init=False, repr=False, compare=False)
    # record type (GpuSample, OomKill, ...) -> its records in load order (:meth:`series`)
    _series: dict[type, list[Any]] = field(default_factory=dict, init=False, repr=False)
    by_origin: dict[frozenset[str], dict[tuple[str, str], list[GpuSample]]] = field(default_factory=dict, repr=False, compare=False)  # samples_from

    # -- series --------------------------------------------------------------------------------
    def series(self, kind: type[_R]) -> list[_R]:
        """The records of type ``kind`` (a sample or event type), in load order; an empty list,
        held by the model, when there are none yet. Loaders append to it (a hot loop takes
        ``append = model.series(GpuSample).append`` once); readers must not reorder it."""
        found = self._series.get(kind)
        if found is None:
            found = self._series[kind] = []
        return found

    def add(self, record: object) -> None:
        """Append one record to the series of its type."""
        self.series(type(record)).append(record)

    def extend(self, kind: type[_R], records: Iterable[_R]) -> None:
        """Append records of type ``kind`` to its series."""
        self.series(kind).extend(records)

    # -- sources -------------------------------------------------------------------------------
    def node(self, host: str) -> NodeInfo:
        if host not in self.nodes:
            self.nodes[host] = NodeInfo(host)
        return self.nodes[host]

    def has_source(self, node: str, collector: str) -> bool:
        """True when the collector ran with status ok or partial on that node."""
        info = self.nodes.get(node)
        return info is not None and info.collector_status.get(collector) in ("ok", "partial")

    def has_role(self, node: str, role: Role) -> bool:
        """True when a source that plays ``role`` (its spec says so) ran with status ok or partial on
        that node: "was the kernel log read?", "did a container runtime describe the containers?"
        (Docker and podman, or a CRI runtime). Rules ask roles, never lists of source names."""
        return any(self.has_source(node, name) for name in playing(role))

    def limit(self, text: str) -> None:
        if text not in self.limitations:
            self.limitations.append(text)

    # -- lookups -------------------------------------------------------------------------------
    def gpu_by_index(self, node: str, index: int) -> Gpu | None:
        for (n, _), g in self.gpus.items():
            if n == node and g.index == index:
                return g
        return None

    def gpu_by_pci(self, node: str, pci: str) -> Gpu | None:
        want = pci_bus_key(pci)
        for (n, _), g in self.gpus.items():
            if n == node and g.pci_bus_id and pci_bus_key(g.pci_bus_id) == want:
                return g
        return None

    def node_gpus(self, node: str) -> list[Gpu]:
        return sorted((g for (n, _), g in self.gpus.items() if n == node), key=lambda g: g.index)

    def container(self, node: str, cid: str | None) -> Container | None:
        if not cid:
            return None
        return self.containers.get((node, cid))

    def container_subject(self, node: str, cid: str) -> Subject:
        """The container's subject: from its record, else named as its Docker events name it,
        else by its 12-hex id (a kernel OOM line's memcg, a cgroup path)."""
        c = self.containers.get((node, cid))
        if c is not None:
            return c.subject()
        return Subject("container", cid, self.event_names.get((node, cid)) or cid[:12], node)

    def gpu_process(self, node: str, pid: int) -> Process | None:
        """The /proc record of a PID NVML reported, unless it cannot be trusted to be that process."""
        if node in self.pid_mismatch_nodes or (node, pid) in self.pids_absent_at_nvml:
            return None
        return self.processes.get((node, pid))

    # -- views built on first use, after loading (within one analysis, never across analyses) --
    def samples_by_gpu(self) -> dict[tuple[str, str], list[GpuSample]]:
        """(node, GPU UUID) -> its device samples in time order (by origin: :func:`.samples.samples_from`)."""
        return self._samples_by_gpu

    def proc_samples_by_gpu(self) -> dict[tuple[str, str], list[ProcessGpuSample]]:
        """(node, GPU UUID) -> its process samples in (time, PID) order."""
        return self.process_views.by_gpu()

    def proc_samples_by_pid(self) -> ByPid:
        """(node, GPU UUID) -> PID -> its process samples in time order (:data:`.process_index.ByPid`)."""
        return self.process_views.by_pid()

    def proc_columns(self) -> Columns:
        """The same as columns of figures (:class:`.process_index.PidColumns`)."""
        return self.process_views.columns()

    def nvml_pid(self, node: str, pid: int) -> bool:
        """Whether NVML reported ``pid`` as a GPU process of ``node``."""
        return (node, pid) in self.process_views.nvml_pids()

    @cached_property
    def process_views(self) -> ProcessViews:
        """The shared views of the process samples (forensics.analysis.process_index)."""
        return ProcessViews(self.series(ProcessGpuSample))

    def gpu_sample_count(self, node: str) -> int:
        """How many device samples the node's bundles hold."""
        return self._gpu_sample_counts[node]

    @cached_property
    def _samples_by_gpu(self) -> dict[tuple[str, str], list[GpuSample]]:
        out: dict[tuple[str, str], list[GpuSample]] = defaultdict(list)
        for s in self.series(GpuSample):
            out[(s.node, s.gpu_uuid)].append(s)
        for v in out.values():
            v.sort(key=_BY_TIME)
        return out

    @cached_property
    def _gpu_sample_counts(self) -> Counter[str]:
        return Counter(s.node for s in self.series(GpuSample))
