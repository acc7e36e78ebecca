"""Kubernetes pods: ``kubernetes/pods.json`` (the node's PodList, indexed with the kubernetes
collector's pure :func:`forensics.parsing.podindex.index_pod`), each container's GPU grants in every
form (:mod:`forensics.analysis.allocation_kubernetes`: its limits against the node's capacity in
``kubernetes/node.json``, the kubelet's pod-resources ``List`` in
``kubernetes/podresources/list.json`` with ``devices`` and ``dynamic_resources``, its DRA claims in
``kubernetes/resourceclaims.json`` resolved through ``kubernetes/resourceslices.json``, the device
plugin's ``NVIDIA_VISIBLE_DEVICES`` of its processes), a claim's sharing contract, and the pod logs
of ``kubernetes/logs/`` (:mod:`forensics.analysis.loaders.logs`).

Pods join containers by the container id of their statuses (``containerd://<id>``); a pod
container no other source describes becomes a Container here, with its Kubernetes allocation.
Init containers are read as app containers are (a native sidecar, ``restartPolicy: Always``, runs
beside them and may hold the pod's GPU grant); ephemeral containers have no resources.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from forensics.analysis.allocation_kubernetes import (
    KubeGrantInputs,
    claim_share_contract,
    container_grants,
    dynamic_resources,
    kubernetes_grants_allocation,
    plugin_devices,
)
from forensics.analysis.events import OomKill
from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.common import Loader, dig, parse_time
from forensics.analysis.loaders.logs import load_log_signals
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Container, GpuAllocation, Model, Pod
from forensics.analysis.source import Source
from forensics.errors import ParseError
from forensics.parsing.dra import claims_by_name, pod_claim_refs, slice_devices
from forensics.parsing.podindex import index_pod
from forensics.specs import kubernetes as kube_spec
from forensics.specs import podresources as podresources_spec
from forensics.specs.roles import CONTAINER_RUNTIME

__all__ = ["LOADER", "load_kubernetes", "load_kubernetes_events"]

_LIST = podresources_spec.LIST


def _load_clock(src: Source, model: Model, node: str) -> None:
    """``kubernetes/clock.json``: this node's clock against the API server's (a reference every
    node of the cluster was compared with)."""
    doc = src.json(kube_spec.CLOCK)
    ref, off, unc = dig(doc, "reference"), dig(doc, "offset_s"), dig(doc, "uncertainty_s")
    if not isinstance(ref, str) or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (off, unc)):
        return
    if not (abs(off) < 1e9 and 0 <= unc < 3600):
        return
    model.node(node).clock_refs[ref[:200]] = (float(off), float(unc), src.ev_pointer(kube_spec.CLOCK, "/offset_s", doc))


def load_kubernetes(src: Source, model: Model, node: str) -> None:
    load_kubernetes_events(src, model, node)
    _load_clock(src, model, node)
    doc = src.json(kube_spec.PODS)
    items = dig(doc, "items")
    if not isinstance(items, list):
        return
    inputs = _grant_inputs(src, model, node)
    gpus = model.node_gpus(node)
    prebuilt = {(ev.member, ev.locator): ev for _, ev in inputs.process_env.values()}

    def evidence_for(member: str, pointer: str, excerpt: str) -> Evidence:
        return prebuilt.get((member, pointer)) or src.ev_pointer(member, pointer)
    for i, raw in enumerate(items):
        try:
            entry = index_pod(raw)
        except ParseError as exc:
            src.problems.append(f"{src.name}: kubernetes/pods.json item {i}: {exc}")
            continue
        pod_ptr = f"/items/{i}"
        # (kind, name) -> (index, entry) in the spec's and the status's list of that kind: init
        # containers (a native sidecar, a warm-up) hold grants and run processes as app containers do
        spec_of = _indexed(raw, ("spec", "containers"), ("spec", "initContainers"))
        status_of = _indexed(raw, ("status", "containerStatuses"), ("status", "initContainerStatuses"))
        claim_refs = pod_claim_refs(raw, pod_ptr)
        allocations: list[tuple[str, GpuAllocation]] = []
        container_ids: list[tuple[str, str]] = []
        limits: list[tuple[str, int]] = []
        devs: list[tuple[str, tuple[str, ...]]] = []
        grant_ev: list[Evidence] = []  # the pod's spec resources and pod-resources devices
        for ce in entry.containers:
            if ce.kind not in _SPEC_LISTS:
                continue  # an ephemeral (debug) container: no resources, no grant
            field = _SPEC_LISTS[ce.kind]
            j, spec_c = spec_of.get((ce.kind, ce.name), (None, {}))
            if ce.kind == "container" or dig(spec_c, "restartPolicy") == "Always":
                # the pod's running total: app containers and native sidecars (a plain init
                # container has finished before they start)
                limits.append((ce.name, ce.gpu_limit_count + sum(ce.mig_limits.values())))
            ev_spec = src.ev_pointer(kube_spec.PODS, f"{pod_ptr}/spec/{field}/{j}/resources", doc) if j is not None else None
            grants = container_grants(inputs, entry.namespace, entry.name, spec_c if isinstance(spec_c, dict) else {},
                                      f"{pod_ptr}/spec/{field}/{j}", claim_refs.get(ce.name, ()),
                                      [c for c in (ce.container_id, ce.last_container_id) if c],
                                      pod_uid=entry.uid)
            alloc = kubernetes_grants_allocation(grants, gpus, evidence_for,
                                                 (ev_spec,) if ev_spec is not None else ())
            allocations.append((ce.name, alloc))
            contract = claim_share_contract(node, alloc, inputs.claims, evidence_for, entry.uid)
            plugin_ids = [x for p in inputs.plugin.get((entry.namespace, entry.name, ce.name), [])
                          if p.resource == "nvidia.com/gpu" or p.resource.startswith("nvidia.com/mig-") for x in p.ids]
            if plugin_ids:
                devs.append((ce.name, tuple(plugin_ids)))
            grant_ev.extend(alloc.evidence[:3] if alloc.explicit else alloc.evidence[:1])
            for cid in (ce.container_id, ce.last_container_id):
                if not cid:
                    continue
                container_ids.append((ce.name, cid))
                if contract is not None:
                    model.shares[(node, cid)] = replace(contract, container_id=cid)
                existing = model.container(node, cid)
                if existing is not None:
                    # cri-dockerd: Docker saw it too; the pod spec is the operator's grant.
                    if alloc.explicit or not existing.allocation.known:
                        model.containers[(node, cid)] = _with(existing, alloc, entry.uid, ce.name)
                    elif existing.pod_uid is None:
                        model.containers[(node, cid)] = _with(existing, existing.allocation, entry.uid, ce.name)
                    continue
                current = cid == ce.container_id
                model.containers[(node, cid)] = Container(
                    node=node, id=cid, name=f"{entry.namespace}/{entry.name}/{ce.name}",
                    image=ce.image or "", pod_uid=entry.uid,
                    state=(ce.state or "unknown") if current else "terminated",
                    exit_code=(ce.state_exit_code if current else ce.last_terminated_exit_code),
                    oom_killed=ce.oom_killed and not current,
                    started_at=parse_time(ce.last_terminated_started_at) if not current else None,
                    finished_at=parse_time(ce.last_terminated_finished_at) if not current else None,
                    allocation=alloc, cpu_quota_cores=(ce.cpu_limit_millicores / 1000) if ce.cpu_limit_millicores else None,
                    memory_limit_bytes=ce.memory_limit_bytes,
                    evidence=(src.ev_pointer(kube_spec.PODS, f"{pod_ptr}/status", doc),),
                    k8s_container_name=ce.name)
            for previous, log_cid in ((False, ce.container_id), (True, ce.last_container_id)):
                member = kube_spec.pod_log_member(entry.namespace, entry.name, ce.name, previous)
                if src.has(member):
                    load_log_signals(src, model, node, member, log_cid, entry.uid)
            if ce.last_terminated_reason == "OOMKilled" or ce.oom_killed:
                j2 = status_of.get((ce.kind, ce.name), (None, None))[0]
                where = "lastState/terminated" if ce.last_terminated_reason == "OOMKilled" else "state/terminated"
                statuses = "containerStatuses" if ce.kind == "container" else "initContainerStatuses"
                ptr = f"{pod_ptr}/status/{statuses}/{j2}/{where}" if j2 is not None else f"{pod_ptr}/status"
                cid = ce.last_container_id if ce.last_terminated_reason == "OOMKilled" else ce.container_id
                t = parse_time(ce.last_terminated_finished_at) if ce.last_terminated_reason == "OOMKilled" else None
                model.add(OomKill(node, t, None, None, cid, entry.uid, False, None, ce.memory_limit_bytes,
                                          None, "kubernetes", (src.ev_pointer(kube_spec.PODS, ptr, doc),),
                                          k8s_container_name=ce.name))
        model.pods[entry.uid] = Pod(node, entry.uid, entry.namespace, entry.name, entry.phase or "unknown",
                                    tuple(container_ids), tuple(limits), tuple(devs),
                                    (src.ev_pointer(kube_spec.PODS, f"{pod_ptr}/metadata/uid", doc),
                                     *dict.fromkeys(grant_ev)), allocations=tuple(allocations))


_SPEC_LISTS = {"container": "containers", "init": "initContainers"}  # ContainerEntry.kind -> pod spec list


def _indexed(raw: Any, app: tuple[str, str], init: tuple[str, str]) -> dict[tuple[str, str], tuple[int, Any]]:
    """(kind, container name) -> (index, entry) of the pod's ``app`` and ``init`` lists."""
    out: dict[tuple[str, str], tuple[int, Any]] = {}
    for kind, path in (("container", app), ("init", init)):
        items = dig(raw, *path)
        for j, item in enumerate(items if isinstance(items, list) else []):
            out.setdefault((kind, str(dig(item, "name"))), (j, item))
    return out


def _grant_inputs(src: Source, model: Model, node: str) -> KubeGrantInputs:
    """The node's grant documents: capacity, pod-resources, DRA claims and slices, and the device
    plugin's ``NVIDIA_VISIBLE_DEVICES`` of each container's processes (procfs is loaded first)."""
    from forensics.analysis.loaders.sharing import gpu_resource_names, node_capacity_read

    listing = src.json(_LIST)
    node_doc = src.json(kube_spec.NODE)
    env: dict[str, tuple[str, Evidence]] = {}
    for (pnode, _), proc in sorted(model.processes.items()):
        if pnode == node and proc.container_id and proc.visible_devices and proc.visible_devices_evidence:
            env.setdefault(proc.container_id, (proc.visible_devices, proc.visible_devices_evidence))
    return KubeGrantInputs(
        advertised=gpu_resource_names(node_doc, other_vendors=True), capacity_read=node_capacity_read(node_doc),
        node_gpus=len(model.node_gpus(node)),
        plugin=plugin_devices(listing), dynamic=dynamic_resources(listing),
        podresources_present=src.has(_LIST),
        claims=claims_by_name(src.json(kube_spec.RESOURCE_CLAIMS)),
        claims_present=src.has(kube_spec.RESOURCE_CLAIMS),
        slices=slice_devices(src.json(kube_spec.RESOURCE_SLICES)), process_env=env)


_OOM_REASONS = ("SystemOOM", "OOMKilling")
_OOM_EVENT = re.compile(r"victim process: (?P<comm>[^,]+), pid: (?P<pid>\d+)|Killed process (?P<pid2>\d+) \((?P<comm2>[^)]*)\)")


def load_kubernetes_events(src: Source, model: Model, node: str) -> None:
    """Node OOM events (kubelet ``SystemOOM``, node-problem-detector ``OOMKilling``) from
    ``kubernetes/events.json``, and from ``kubernetes/events.jsonl`` (the flight recorder's, one
    Event a line: a bundle has it under ``ring/``, read through the ring view)."""
    doc = src.json(kube_spec.EVENTS)
    items = dig(doc, "items")
    for i, ev in enumerate(items if isinstance(items, list) else []):
        if dig(ev, "reason") in _OOM_REASONS:
            model.add(_oom_kill(node, ev, src.ev_pointer(kube_spec.EVENTS, f"/items/{i}/message", doc)))
    for no, ev, raw in src.jsonl(kube_spec.EVENTS_FOLLOWED):
        if dig(ev, "reason") in _OOM_REASONS:
            ref = src.ref(kube_spec.EVENTS_FOLLOWED, no, raw, ("reason",), ("message",))
            model.add(_oom_kill(node, ev, ref.evidence))


def _oom_kill(node: str, ev: Any, evidence: Evidence) -> OomKill:
    message = dig(ev, "message")
    m = _OOM_EVENT.search(message) if isinstance(message, str) else None
    pid = int(m.group("pid") or m.group("pid2")) if m else None
    comm = (m.group("comm") or m.group("comm2")) if m else None
    t = parse_time(dig(ev, "lastTimestamp")) or parse_time(dig(ev, "series", "lastObservedTime")) or \
        parse_time(dig(ev, "eventTime")) or parse_time(dig(ev, "firstTimestamp"))
    return OomKill(node, t, pid, comm, None, None, dig(ev, "reason") == "SystemOOM", None, None, None,
                   "kubernetes", (evidence,))


def _with(c: Container, alloc: Any, pod_uid: str, k8s_name: str) -> Container:
    from dataclasses import replace
    return replace(c, allocation=alloc, pod_uid=pod_uid, k8s_container_name=k8s_name)


# needs: GPU limits resolve against NVML's GPUs; pods enrich the containers of every container runtime
def _load_with_sharing(src: Source, model: Model, node: str, loading: LoadState) -> None:
    """Pods, then their GPU sharing contracts (:mod:`forensics.analysis.loaders.sharing`), which read the pods."""
    from forensics.analysis.loaders.node_resources import load_node_resources
    from forensics.analysis.loaders.sharing import load_sharing

    load_kubernetes(src, model, node)
    load_sharing(src, model, node)
    load_node_resources(src, model, node)


LOADER = Loader("kubernetes", _load_with_sharing, needs=("nvml", CONTAINER_RUNTIME))
