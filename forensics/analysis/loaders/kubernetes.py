"""Kubernetes pods: ``kubernetes/pods.json`` (the node's PodList, indexed with the kubernetes
collector's pure :func:`forensics.parsing.podindex.index_pod`) and the kubelet
pod-resources ``List`` in ``kubernetes/podresources/list.json`` (device ids per container), and the
pod logs of ``kubernetes/logs/`` (:mod:`forensics.analysis.loaders.logs`).

Pods join containers by the container id of their statuses (``containerd://<id>``); a pod
container no other source describes becomes a Container here, with its Kubernetes allocation.
"""

from __future__ import annotations

import re
from typing import Any

from forensics.analysis.allocation import kubernetes_allocation
from forensics.analysis.events import OomKill
from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.common import Loader, dig, parse_time
from forensics.analysis.loaders.logs import load_log_signals
from forensics.analysis.model import Container, Model, Pod
from forensics.analysis.source import Source
from forensics.errors import ParseError
from forensics.parsing.podindex import index_pod
from forensics.specs import kubernetes as kube_spec
from forensics.specs import podresources as podresources_spec

__all__ = ["LOADER", "load_kubernetes", "load_kubernetes_events"]

_GPU = "nvidia.com/gpu"
_LIST = podresources_spec.LIST


def _podresources(src: Source) -> dict[tuple[str, str, str], tuple[list[str], Evidence]]:
    """(namespace, pod, container) -> (GPU device ids, evidence) from pod-resources List."""
    doc = src.json(_LIST)
    out: dict[tuple[str, str, str], tuple[list[str], Evidence]] = {}
    pods = dig(doc, "pod_resources") or dig(doc, "podResources")
    for i, p in enumerate(pods if isinstance(pods, list) else []):
        if not isinstance(p, dict):
            continue
        for j, c in enumerate(p.get("containers") or []):
            if not isinstance(c, dict):
                continue
            ids: list[str] = []
            ev: Evidence | None = None
            for k, d in enumerate(c.get("devices") or []):
                res = dig(d, "resource_name") or dig(d, "resourceName")
                if isinstance(res, str) and (res == _GPU or res.startswith("nvidia.com/mig")):
                    dev = dig(d, "device_ids") or dig(d, "deviceIds") or []
                    ids.extend(str(x) for x in dev if isinstance(x, str))
                    ptr = f"/{'pod_resources' if 'pod_resources' in doc else 'podResources'}/{i}/containers/{j}/devices/{k}"
                    ev = src.ev_pointer(_LIST, ptr, doc)
            if ids and ev is not None:
                out[(str(p.get("namespace")), str(p.get("name")), str(c.get("name")))] = (ids, ev)
    return out


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
    devices = _podresources(src)
    podresources_present = src.has(_LIST)
    gpus = model.node_gpus(node)
    for i, raw in enumerate(items):
        try:
            entry = index_pod(raw)
        except ParseError as exc:
            src.problems.append(f"{src.name}: kubernetes/pods.json item {i}: {exc}")
            continue
        pod_ptr = f"/items/{i}"
        statuses = dig(raw, "status", "containerStatuses")
        status_index = {str(dig(s, "name")): j for j, s in enumerate(statuses if isinstance(statuses, list) else [])}
        spec_containers = dig(raw, "spec", "containers")
        spec_index = {str(dig(s, "name")): j for j, s in enumerate(spec_containers if isinstance(spec_containers, list) else [])}
        container_ids: list[tuple[str, str]] = []
        limits: list[tuple[str, int]] = []
        devs: list[tuple[str, tuple[str, ...]]] = []
        grant_ev: list[Evidence] = []  # the pod's spec resources and pod-resources devices
        for ce in entry.containers:
            if ce.kind != "container":
                continue
            limits.append((ce.name, ce.gpu_limit_count + sum(ce.mig_limits.values())))
            found = devices.get((entry.namespace, entry.name, ce.name))
            dev_ids, dev_ev = (found[0], found[1]) if found else ([], None)
            if dev_ids:
                devs.append((ce.name, tuple(dev_ids)))
            j = spec_index.get(ce.name)
            ev_spec = src.ev_pointer(kube_spec.PODS, f"{pod_ptr}/spec/containers/{j}/resources", doc) if j is not None else None
            evidence = tuple(e for e in (ev_spec, dev_ev) if e is not None)
            grant_ev.extend(evidence)
            alloc = kubernetes_allocation(ce.gpu_limit_count + sum(ce.mig_limits.values()), dev_ids, gpus,
                                          evidence, podresources_present)
            for cid in (ce.container_id, ce.last_container_id):
                if not cid:
                    continue
                container_ids.append((ce.name, cid))
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
                j2 = status_index.get(ce.name)
                where = "lastState/terminated" if ce.last_terminated_reason == "OOMKilled" else "state/terminated"
                ptr = f"{pod_ptr}/status/containerStatuses/{j2}/{where}" if j2 is not None else f"{pod_ptr}/status"
                cid = ce.last_container_id if ce.last_terminated_reason == "OOMKilled" else ce.container_id
                t = parse_time(ce.last_terminated_finished_at) if ce.last_terminated_reason == "OOMKilled" else None
                model.ooms.append(OomKill(node, t, None, None, cid, entry.uid, False, None, ce.memory_limit_bytes,
                                          None, "kubernetes", (src.ev_pointer(kube_spec.PODS, ptr, doc),),
                                          k8s_container_name=ce.name))
        model.pods[entry.uid] = Pod(node, entry.uid, entry.namespace, entry.name, entry.phase or "unknown",
                                    tuple(container_ids), tuple(limits), tuple(devs),
                                    (src.ev_pointer(kube_spec.PODS, f"{pod_ptr}/metadata/uid", doc),
                                     *grant_ev))


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
            model.ooms.append(_oom_kill(node, ev, src.ev_pointer(kube_spec.EVENTS, f"/items/{i}/message", doc)))
    for no, ev, raw in src.jsonl(kube_spec.EVENTS_FOLLOWED):
        if dig(ev, "reason") in _OOM_REASONS:
            ref = src.ref(kube_spec.EVENTS_FOLLOWED, no, raw, ("reason",), ("message",))
            model.ooms.append(_oom_kill(node, ev, ref.evidence))


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


# needs: GPU limits resolve against NVML's GPUs; pods enrich Docker's and the CRI runtime's containers
def _load_with_sharing(src: Source, model: Model, node: str) -> None:
    """Pods, then their GPU sharing contracts (:mod:`forensics.analysis.loaders.sharing`), which read the pods."""
    from forensics.analysis.loaders.node_resources import load_node_resources
    from forensics.analysis.loaders.sharing import load_sharing

    load_kubernetes(src, model, node)
    load_sharing(src, model, node)
    load_node_resources(src, model, node)


LOADER = Loader("kubernetes", _load_with_sharing, needs=("nvml", "docker", "cri"))
