"""Who a live GPU process belongs to and what it was granted, decided exactly as the analysis decides.

The flight recorder's live state (forensics.record.live) holds the latest member bytes its samplers
wrote (``nvml/devices.json``, ``nvml/samples.jsonl``, ``proc/<pid>/cgroup``, ``proc/window.jsonl``,
``docker/containers/<id>/inspect.json``, ``docker/images/<hex>/inspect.json``, ``docker/info.json``,
...). :func:`attribute` runs the analysis' own loaders and joins over those bytes, as over a bundle,
and answers per PID and GPU with the same process -> container -> pod -> allocation joins
(forensics.analysis.joins), the same explicit/blanket classification
(forensics.analysis.allocation) and the same sharing contracts (forensics.analysis.rules.gpu_sharing)
that ``analyze`` uses: a live label and a finding never disagree. It is meant to be run when those
members change (a new PID, a new container), not every tick.

Grant of an owner on one GPU (:class:`Grant`):

- ``dra``: a DRA ResourceClaim granted that GPU (``claim`` names it; shared through one claim
  too) -> ``allocated`` true;
- ``explicit``: an operator granted that GPU (``--gpus``, DeviceRequests, CDI, a device node, a
  specific ``NVIDIA_VISIBLE_DEVICES``, a pod's ``nvidia.com/gpu`` devices) -> ``allocated`` true;
- ``shared``: a sharing contract (MPS, time-slicing, a vGPU/HAMi limit) covers it -> ``allocated`` true;
- ``blanket``: reachable only through a blanket grant (image ``NVIDIA_VISIBLE_DEVICES=all``, the
  default nvidia runtime, privileged mode) -> ``allocated`` false;
- ``none``: no grant of that GPU at all (or an owner the evidence does not describe) -> false.

``Grant.unallocated`` is the ``unallocated-gpu-use`` rule's own test of the owner (attributed, its
allocation known, no contract, that GPU not granted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forensics.analysis.loaders import LoadState, finalize, load_model, load_source
from forensics.analysis.model import Model, Owner
from forensics.analysis.rules.gpu_allocation import covered_by_grant, owner_counts_unallocated
from forensics.analysis.rules.gpu_sharing import contract_for
from forensics.analysis.rules.gpu_unattributed import is_mps_server
from forensics.analysis.source import Source

__all__ = ["Attribution", "Grant", "OwnerInfo", "attribute"]

LIVE_NODE = "live"


@dataclass(frozen=True)
class OwnerInfo:
    """A process's owner: ``kind`` container, pod (its cgroup names only the pod) or process
    (unattributed); ids and names empty where the evidence does not say."""

    kind: str
    container_id: str = ""
    container_name: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    attributed: bool = False


@dataclass(frozen=True)
class Grant:
    """What the owner was granted on one GPU (see the module docstring)."""

    allocated: bool
    grant: str  # dra | explicit | shared | blanket | none
    allocation_kind: str  # GpuAllocation.kind: device-request, cdi, env, privileged, kubernetes, dra, none, unknown
    detail: str
    unallocated: bool  # the unallocated-gpu-use rule counts this owner's use of this GPU
    claim: str = ""  # grant dra: the ResourceClaim(s), namespace/name


class _Members:
    """The BundleLike the loaders read: member name -> bytes, held in memory."""

    def __init__(self, members: Mapping[str, bytes]) -> None:
        self._members = members
        self.manifest: dict[str, Any] = {"host": {"hostname": LIVE_NODE}, "collectors": []}

    def read_bytes(self, member: str) -> bytes:
        return self._members[member]


class Attribution:
    """The joins of one :func:`attribute` pass, asked per PID and GPU."""

    def __init__(self, model: Model) -> None:
        self.model = model

    def _owner(self, pid: int) -> Owner:
        return self.model.joins.owner(LIVE_NODE, pid)

    def owner(self, pid: int) -> OwnerInfo:
        owner = self._owner(pid)
        subj = owner.subject
        pod = self.model.joins.pod_of(subj)
        ns, name = (pod.namespace, pod.name) if pod is not None else ("", "")
        if subj.type == "container":
            c = self.model.container(LIVE_NODE, subj.id)
            cname = c.name if c is not None else (subj.name if subj.name != subj.id[:12] else "")
            return OwnerInfo("container", subj.id, cname, ns, name, owner.attributed)
        if subj.type == "pod":
            return OwnerInfo("pod", "", "", ns, name, owner.attributed)
        return OwnerInfo("process", attributed=False)

    def grant(self, pid: int, gpu_uuid: str, mig_uuid: str | None = None) -> Grant:
        owner = self._owner(pid)
        alloc = owner.allocation
        unallocated = (owner_counts_unallocated(self.model, owner, gpu_uuid)
                       and not covered_by_grant(self.model, LIVE_NODE, alloc, gpu_uuid, mig_uuid)
                       and not is_mps_server(self.model, LIVE_NODE, pid))
        if alloc.claims and (alloc.grants(gpu_uuid, mig_uuid) or not alloc.devices_known):
            return Grant(True, "dra", alloc.kind, alloc.detail, unallocated, ", ".join(alloc.claims))
        if owner.attributed and contract_for(self.model, owner.subject, gpu_uuid) is not None:
            return Grant(True, "shared", alloc.kind, "a sharing contract covers this GPU", unallocated)
        if covered_by_grant(self.model, LIVE_NODE, alloc, gpu_uuid, mig_uuid) or (
                alloc.explicit and not alloc.devices_known):
            return Grant(True, "shared" if alloc.time_sliced else "explicit", alloc.kind, alloc.detail, unallocated)
        if gpu_uuid in alloc.blanket_gpus:
            return Grant(False, "blanket", alloc.kind, alloc.blanket_detail, unallocated)
        return Grant(False, "none", alloc.kind, alloc.detail, unallocated)


def attribute(members: Mapping[str, bytes], psi_some_floor: float = 20.0, psi_full_floor: float = 10.0) -> Attribution:
    """Load ``members`` (collector member names -> bytes) through the analysis' loaders and resolve
    its joins; a member that cannot be read becomes a limitation of that model, never an exception."""
    def fill(model: Model, loading: LoadState) -> None:
        model.node(LIVE_NODE)
        load_source(Source(_Members(members), LIVE_NODE, members.keys()), model, LIVE_NODE, loading)
        finalize(model)

    return Attribution(load_model(fill, LoadState(psi_some_floor=psi_some_floor, psi_full_floor=psi_full_floor)))
