"""The joins, resolved once after loading: process -> owner container -> pod -> GPU allocation.

:func:`resolve_joins` runs when every bundle is loaded (:func:`forensics.analysis.loaders.load_model`)
and sets ``Model.joins``; rules, the chain, naming and the document read the resolved entities from
it and never build joins themselves.

- owner of a host PID: ``/proc/<pid>/cgroup`` names a container (docker inspect / pod status) or
  only a pod UID (containerd/CRI-O before its status lists the container), else it is a host process;
  a PID NVML saw that cannot be trusted to be the /proc one (another PID namespace, gone or reused)
  has no owner but itself;
- pod of a container: the container record's pod UID (kubelet labels, pod status), else the pod
  UID of a process cgroup that names the container;
- allocation: the container's (:mod:`forensics.analysis.allocation`), or the pod's as a whole.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import cast

from forensics.analysis.allocation import kubernetes_allocation
from forensics.analysis.allocation_kubernetes import merge_allocations
from forensics.analysis.findings import Subject
from forensics.analysis.model import (
    UNKNOWN_ALLOCATION,
    ActiveOwners,
    GpuAllocation,
    Model,
    Owner,
    Pod,
)
from forensics.analysis.samples import CpuSample, MemorySample, ProcessGpuSample

_FIRST_SEEN = itemgetter(0, 1)

_BY_TIME = attrgetter("t")  # a C sort key: the series sorted here are per sample

__all__ = ["ResolvedJoins", "owner_of", "pod_allocation", "resolve_joins"]


def pod_allocation(model: Model, pod: Pod) -> GpuAllocation:
    """What a pod as a whole was granted (pods.json ``nvidia.com/gpu`` limits, pod-resources devices).

    No limit in any container: ``none``. Limits with every container's devices known: the union
    of those devices. Otherwise the devices are unknown (no verdict on which GPU is whose).
    """
    evidence = pod.evidence[1:] or pod.evidence  # spec resources and pod-resources devices (after the UID)
    if pod.allocations:  # every grant form, per container (forensics.analysis.allocation_kubernetes)
        return merge_allocations([a for _, a in pod.allocations], evidence)
    if not pod.gpu_limits_known:  # only its CRI sandbox: the grants are its containers'
        return GpuAllocation("unknown", False, (), "runtime", "pod spec not in the bundle (CRI sandbox only)",
                             evidence, devices_known=False)
    limit = pod.gpu_limit()
    if limit <= 0 and not pod.gpu_devices:
        return GpuAllocation("none", False, (), "pod spec", "pod with no nvidia.com/gpu limit", evidence)
    ids = [d for _, devs in pod.gpu_devices for d in devs]
    with_limit = {name for name, n in pod.gpu_limits if n > 0}
    if ids and with_limit <= {name for name, _ in pod.gpu_devices}:
        return kubernetes_allocation(limit, ids, model.node_gpus(pod.node), evidence, True)
    return GpuAllocation("kubernetes", True, (), "pod spec",
                         f"nvidia.com/gpu: {limit} (devices unknown)", evidence, devices_known=False)


class ResolvedJoins:
    """The model's entities linked to one another, built once by :func:`resolve_joins`: the
    implementation of :class:`forensics.analysis.model.Joins`."""

    def __init__(self, model: Model) -> None:
        self._model = model
        self.pod_allocations: dict[str, GpuAllocation] = {uid: pod_allocation(model, p) for uid, p in model.pods.items()}
        # (node, container id) -> its pod: a process cgroup's pod UID (the first process naming it),
        # overridden by the container record's own pod UID
        self._pod_of_container: dict[tuple[str, str], Pod] = {}
        for proc in model.processes.values():
            if proc.container_id and proc.pod_uid in model.pods:
                self._pod_of_container.setdefault((proc.node, proc.container_id), model.pods[proc.pod_uid])
        for (node, cid), c in model.containers.items():
            if c.pod_uid and c.pod_uid in model.pods:
                self._pod_of_container[(node, cid)] = model.pods[c.pod_uid]
        self._owners: dict[tuple[str, int], Owner] = {}
        for key in model.processes:
            owner = self._resolve_owner(*key)
            if owner is not None:
                self._owners[key] = owner
        self._holders = self._explicit_holders()
        # containers whose processes or cgroups the bundle saw (though no runtime may describe them)
        self.seen_running: frozenset[tuple[str, str]] = frozenset(
            {(p.node, p.container_id) for p in model.processes.values() if p.container_id}
            | {(c.node, c.container_id) for c in model.series(CpuSample)}
            | {(m.node, m.container_id) for m in model.series(MemorySample)})
        self._active: dict[float, ActiveOwners] = {}
        self._gpus_used: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        for (node, uuid), pids in model.proc_samples_by_pid().items():  # owners per PID, not per sample
            for pid in pids:
                self._gpus_used[self.owner(node, pid).subject.key()].add(uuid)

    def _resolve_owner(self, node: str, pid: int) -> Owner | None:
        model = self._model
        proc = model.gpu_process(node, pid)
        if proc is None:
            return None  # never joined across PID namespaces or to a process NVML did not see
        container = model.container(node, proc.container_id)
        if container is not None:
            return Owner(container.subject(), container.allocation, True, proc.evidence)
        if proc.pod_uid and proc.pod_uid in model.pods:
            # containerd/CRI-O: the cgroup names the pod UID, but no pod status lists this container id
            # (yet): the pod as a whole is the owner, with what its spec grants as a whole.
            pod = model.pods[proc.pod_uid]
            return Owner(pod.subject(), self.pod_allocations[pod.uid], True, proc.evidence)
        if proc.container_id:
            # A container the cgroup names but no other source describes: kept, by its id.
            subj = model.container_subject(node, proc.container_id)
            return Owner(subj, UNKNOWN_ALLOCATION, True, proc.evidence)
        return Owner(proc.subject(), UNKNOWN_ALLOCATION, False, proc.evidence)

    def _explicit_holders(self) -> dict[tuple[str, str], list[tuple[Subject, Owner]]]:
        model = self._model
        out: dict[tuple[str, str], list[tuple[Subject, Owner]]] = defaultdict(list)
        for (node, _), c in sorted(model.containers.items(), key=lambda kv: (kv[1].name, kv[1].id)):
            if c.allocation.explicit:
                for uuid in dict.fromkeys(c.allocation.gpus):
                    out[(node, uuid)].append((c.subject(), Owner(c.subject(), c.allocation, True, c.evidence)))
        # Pods no container record describes (containerd/CRI-O: statuses without container ids yet):
        # the pod's own grant, as its processes' cgroups name the pod.
        described = {(n, c.pod_uid) for (n, _), c in model.containers.items() if c.pod_uid}
        for pod in sorted(model.pods.values(), key=lambda p: (p.namespace, p.name)):
            alloc = self.pod_allocations[pod.uid]
            if (pod.node, pod.uid) in described or not alloc.explicit:
                continue
            for uuid in dict.fromkeys(alloc.gpus):
                out[(pod.node, uuid)].append((pod.subject(), Owner(pod.subject(), alloc, True, alloc.evidence)))
        return out

    def owner(self, node: str, pid: int, comm_hint: str | None = None) -> Owner:
        """The owner of host PID ``pid``; an untrusted or unknown PID is its own (unattributed) owner,
        named ``comm_hint`` when the caller knows its name (an Xid line's ``name=``)."""
        owner = self._owners.get((node, pid))
        if owner is not None:
            return owner
        return Owner(Subject("process", str(pid), comm_hint or "?", node), UNKNOWN_ALLOCATION, False, ())

    def pod_of(self, subject: Subject) -> Pod | None:
        """The pod a pod or container subject belongs to, when that pod is in the bundle."""
        if subject.type == "pod":
            return self._model.pods.get(subject.id)
        if subject.type != "container":
            return None
        return self._pod_of_container.get((subject.node, subject.id))

    def explicit_holders(self, node: str, uuid: str) -> Sequence[tuple[Subject, Owner]]:
        """Containers (by name), then pods without container records (by namespace/name), on ``node``
        whose explicit allocation names GPU ``uuid``."""
        return self._holders.get((node, uuid), ())

    def gpus_used_by(self, node: str, subject_type: str, subject_id: str) -> frozenset[str]:
        """The GPUs (UUIDs) NVML listed a process of this owner on (container, pod or process)."""
        return frozenset(self._gpus_used.get((node, subject_type, subject_id), ()))

    def active_owners(self, min_sm_pct: float) -> ActiveOwners:
        """Per GPU, each owner's samples that count as use: holding memory, at least ``min_sm_pct``
        SM, or with nothing more reported by NVML."""
        cached = self._active.get(min_sm_pct)
        if cached is not None:
            return cached
        out: ActiveOwners = defaultdict(dict)
        columns = self._model.proc_columns()
        for (node, uuid), pids in self._model.proc_samples_by_pid().items():
            active: list[tuple[float, int, list[ProcessGpuSample]]] = []
            for pid, all_ss in pids.items():
                col = columns[(node, uuid)][pid]
                mem, sm = col.used_memory_bytes, col.sm_util_pct
                if ((None not in mem and min(cast("list[int]", mem)) > 0)
                        or (None not in sm and min(cast("list[float]", sm)) >= min_sm_pct)):
                    ss = list(all_ss)  # every sample holds memory or computes (a copy: the view's is not handed out)
                else:
                    ss = [s for s in all_ss if (s.used_memory_bytes or 0) > 0 or (s.sm_util_pct or 0) >= min_sm_pct
                          or (s.used_memory_bytes is None and s.sm_util_pct is None)]
                if ss:
                    active.append((ss[0].t, pid, ss))
            active.sort(key=_FIRST_SEEN)  # PIDs as a walk of the active samples in (time, PID) order meets them
            per_gpu = out[(node, uuid)]
            for _, pid, ss in active:
                owner = self.owner(node, pid)
                entry = per_gpu.get(owner.subject)
                if entry is None:
                    per_gpu[owner.subject] = (owner, ss)  # (a new list: the view's own is not handed out)
                else:
                    entry[1].extend(ss)
                    entry[1].sort(key=_BY_TIME)
        self._active[min_sm_pct] = out
        return out


def resolve_joins(model: Model) -> None:
    """Link the loaded model's entities (``model.joins``); run once, after every bundle is loaded."""
    model.joins = ResolvedJoins(model)


def owner_of(model: Model, node: str, pid: int, comm_hint: str | None = None) -> Owner:
    """The resolved owner of host PID ``pid`` on ``node`` (see :meth:`ResolvedJoins.owner`)."""
    return model.joins.owner(node, pid, comm_hint)
