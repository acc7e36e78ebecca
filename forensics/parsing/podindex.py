"""The derived pods index (``kubernetes/pods-index.json``): join keys and GPU facts per pod.

Source: the PodList of ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``
(``kubernetes/pods.json``). For each pod: UID, ``namespace/name``, owner, phase, QoS class,
eviction; for each container: the container id with its runtime prefix stripped
(``containerd://<64hex>`` -> ``<64hex>``, the id in the container's cgroup path), the previous
instance's id (``lastState.terminated.containerID``), requests and limits of ``nvidia.com/gpu`` and
``nvidia.com/mig-*`` (counts), CPU in millicores and memory in bytes, restart count, current
state, and the last termination (``OOMKilled`` with exit code 137), plus the spec's
``NVIDIA_VISIBLE_DEVICES`` (a GPU grant that bypasses the scheduler).

Always rebuildable from pods.json. Raises only ``ParseError`` on input that is not a PodList.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from forensics.errors import ParseError
from forensics.parsing.quantity import quantity_bytes, quantity_count, quantity_millicores

__all__ = [
    "ContainerEntry",
    "GPU_RESOURCE",
    "MIG_PREFIX",
    "PodEntry",
    "build_pods_index",
    "index_pod",
    "split_container_id",
]

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
_ID_RE = re.compile(r"^(?P<runtime>[a-z][a-z0-9+.-]*)://(?P<id>[0-9a-f]{12,128})$")


@dataclass(frozen=True)
class ContainerEntry:
    """One container (``kind``: container, init, ephemeral) of an indexed pod."""

    name: str
    kind: str
    image: str | None
    runtime: str | None
    container_id: str | None
    last_container_id: str | None
    gpu_request_count: int
    gpu_limit_count: int
    mig_requests: dict[str, int]
    mig_limits: dict[str, int]
    cpu_request_millicores: int | None
    cpu_limit_millicores: int | None
    memory_request_bytes: int | None
    memory_limit_bytes: int | None
    nvidia_visible_devices: str | None
    restart_count: int
    ready: bool | None
    state: str | None
    state_reason: str | None
    state_exit_code: int | None
    last_terminated_reason: str | None
    last_terminated_exit_code: int | None
    last_terminated_started_at: str | None
    last_terminated_finished_at: str | None
    oom_killed: bool


@dataclass(frozen=True)
class PodEntry:
    """One pod on the node."""

    uid: str
    namespace: str
    name: str
    key: str
    node_name: str | None
    phase: str | None
    reason: str | None
    message: str | None
    qos_class: str | None
    owner_kind: str | None
    owner_name: str | None
    start_time: str | None
    evicted: bool
    gpu_request_count: int
    gpu_limit_count: int
    mig_limits: dict[str, int]
    restart_count_total: int
    containers: tuple[ContainerEntry, ...] = field(default_factory=tuple)


def split_container_id(raw: Any) -> tuple[str | None, str | None]:
    """``"containerd://3f9a..."`` -> ``("containerd", "3f9a...")``; empty -> ``(None, None)``."""
    if raw in (None, ""):
        return None, None
    if not isinstance(raw, str):
        raise ParseError(f"containerID is not a string: {raw!r}")
    m = _ID_RE.match(raw)
    if not m:
        raise ParseError(f"containerID not in <runtime>://<hex> form: {raw!r}")
    return m["runtime"], m["id"]


def _obj(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ParseError(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"{what} is not a list")
    return value


def _opt_str(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ParseError(f"{what} is not a string")


def _opt_int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"{what} is not an integer")
    return value


def _resources(container: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    res = _obj(container.get("resources"), f"container {name} resources")
    return (_obj(res.get("requests"), f"container {name} requests"),
            _obj(res.get("limits"), f"container {name} limits"))


def _opt(fn: Any, value: Any) -> Any:
    return None if value is None else fn(value)


def _container_entry(spec: dict[str, Any], kind: str, status: dict[str, Any]) -> ContainerEntry:
    name = spec.get("name")
    if not isinstance(name, str):
        raise ParseError("container without a name")
    requests, limits = _resources(spec, name)
    # the scheduler copies limits to requests for extended resources when only limits are set
    gpu_limit = quantity_count(limits[GPU_RESOURCE]) if GPU_RESOURCE in limits else 0
    gpu_request = quantity_count(requests[GPU_RESOURCE]) if GPU_RESOURCE in requests else gpu_limit
    mig_limits = {k: quantity_count(v) for k, v in sorted(limits.items()) if k.startswith(MIG_PREFIX)}
    mig_requests = {k: quantity_count(v) for k, v in sorted(requests.items()) if k.startswith(MIG_PREFIX)}
    for k, v in mig_limits.items():
        mig_requests.setdefault(k, v)
    visible: str | None = None
    for var in _list(spec.get("env"), f"container {name} env"):
        var = _obj(var, f"container {name} env item")
        if var.get("name") == "NVIDIA_VISIBLE_DEVICES":
            visible = _opt_str(var.get("value"), "NVIDIA_VISIBLE_DEVICES value")

    runtime, cid = split_container_id(status.get("containerID"))
    state_obj = _obj(status.get("state"), f"container {name} state")
    state = next(iter(state_obj), None) if state_obj else None
    detail = _obj(state_obj.get(state), f"container {name} state detail") if state else {}
    last = _obj(_obj(status.get("lastState"), f"container {name} lastState").get("terminated"),
                f"container {name} lastState.terminated")
    _, last_cid = split_container_id(last.get("containerID"))
    last_reason = _opt_str(last.get("reason"), "lastState reason")
    state_reason = _opt_str(detail.get("reason"), "state reason")
    ready = status.get("ready")
    if ready is not None and not isinstance(ready, bool):
        raise ParseError(f"container {name} ready is not a boolean")
    return ContainerEntry(
        name=name,
        kind=kind,
        image=_opt_str(spec.get("image"), "image"),
        runtime=runtime,
        container_id=cid,
        last_container_id=last_cid,
        gpu_request_count=gpu_request,
        gpu_limit_count=gpu_limit,
        mig_requests=mig_requests,
        mig_limits=mig_limits,
        cpu_request_millicores=_opt(quantity_millicores, requests.get("cpu")),
        cpu_limit_millicores=_opt(quantity_millicores, limits.get("cpu")),
        memory_request_bytes=_opt(quantity_bytes, requests.get("memory")),
        memory_limit_bytes=_opt(quantity_bytes, limits.get("memory")),
        nvidia_visible_devices=visible,
        restart_count=_opt_int(status.get("restartCount"), "restartCount") or 0,
        ready=ready,
        state=state,
        state_reason=state_reason,
        state_exit_code=_opt_int(detail.get("exitCode"), "exitCode"),
        last_terminated_reason=last_reason,
        last_terminated_exit_code=_opt_int(last.get("exitCode"), "lastState exitCode"),
        last_terminated_started_at=_opt_str(last.get("startedAt"), "startedAt"),
        last_terminated_finished_at=_opt_str(last.get("finishedAt"), "finishedAt"),
        oom_killed="OOMKilled" in (last_reason, state_reason),
    )


def index_pod(pod: Any) -> PodEntry:
    """Index one Pod object."""
    pod = _obj(pod, "pod")
    meta = _obj(pod.get("metadata"), "pod metadata")
    spec = _obj(pod.get("spec"), "pod spec")
    status = _obj(pod.get("status"), "pod status")
    uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
    if not (isinstance(uid, str) and isinstance(namespace, str) and isinstance(name, str)):
        raise ParseError("pod metadata lacks uid, namespace or name")
    statuses: dict[tuple[str, str], dict[str, Any]] = {}
    for kind, key in (("container", "containerStatuses"), ("init", "initContainerStatuses"),
                      ("ephemeral", "ephemeralContainerStatuses")):
        for st in _list(status.get(key), f"pod {name} {key}"):
            st = _obj(st, f"pod {name} {key} item")
            statuses[(kind, str(st.get("name")))] = st
    containers: list[ContainerEntry] = []
    for kind, key in (("init", "initContainers"), ("container", "containers"),
                      ("ephemeral", "ephemeralContainers")):
        for c in _list(spec.get(key), f"pod {name} {key}"):
            c = _obj(c, f"pod {name} {key} item")
            containers.append(_container_entry(c, kind, statuses.get((kind, str(c.get("name"))), {})))
    owner_kind = owner_name = None
    for ref in _list(meta.get("ownerReferences"), "ownerReferences"):
        ref = _obj(ref, "ownerReference")
        if ref.get("controller") or owner_kind is None:
            owner_kind = _opt_str(ref.get("kind"), "owner kind")
            owner_name = _opt_str(ref.get("name"), "owner name")
    reason = _opt_str(status.get("reason"), "pod reason")
    app = [c for c in containers if c.kind == "container"]
    return PodEntry(
        uid=uid,
        namespace=namespace,
        name=name,
        key=f"{namespace}/{name}",
        node_name=_opt_str(spec.get("nodeName"), "nodeName"),
        phase=_opt_str(status.get("phase"), "phase"),
        reason=reason,
        message=_opt_str(status.get("message"), "pod message"),
        qos_class=_opt_str(status.get("qosClass"), "qosClass"),
        owner_kind=owner_kind,
        owner_name=owner_name,
        start_time=_opt_str(status.get("startTime"), "startTime"),
        evicted=reason == "Evicted",
        # effective pod request: max(any init container, sum of app containers)
        gpu_request_count=max([sum(c.gpu_request_count for c in app)]
                              + [c.gpu_request_count for c in containers if c.kind == "init"]),
        gpu_limit_count=max([sum(c.gpu_limit_count for c in app)]
                            + [c.gpu_limit_count for c in containers if c.kind == "init"]),
        mig_limits={k: sum(c.mig_limits.get(k, 0) for c in app)
                    for k in sorted({k for c in app for k in c.mig_limits})},
        restart_count_total=sum(c.restart_count for c in containers),
        containers=tuple(containers),
    )


def build_pods_index(pod_list: Any, node_name: str | None = None) -> dict[str, Any]:
    """The pods-index document for a PodList (sorted by namespace/name)."""
    pod_list = _obj(pod_list, "pod list")
    entries = sorted((index_pod(p) for p in _list(pod_list.get("items"), "pod list items")),
                     key=lambda e: (e.namespace, e.name))
    container_ids: dict[str, dict[str, str]] = {}
    oom: list[dict[str, Any]] = []
    for e in entries:
        for c in e.containers:
            for cid, which in ((c.container_id, "current"), (c.last_container_id, "previous")):
                if cid:
                    container_ids[cid] = {"pod_uid": e.uid, "pod": e.key, "container": c.name,
                                          "instance": which}
            if c.oom_killed:
                current = c.state_reason == "OOMKilled"
                oom.append({
                    "pod_uid": e.uid, "pod": e.key, "container": c.name,
                    "container_id": c.container_id if current else c.last_container_id,
                    "exit_code": c.state_exit_code if current else c.last_terminated_exit_code,
                    "finished_at": None if current else c.last_terminated_finished_at,
                    "restart_count": c.restart_count,
                })
    return {
        "source": "kubernetes/pods.json",
        "node": node_name,
        "pods": [{**asdict(e), "containers": [asdict(c) for c in e.containers]} for e in entries],
        "container_ids": dict(sorted(container_ids.items())),
        "oom_killed": oom,
        "evicted": [{"pod_uid": e.uid, "pod": e.key, "reason": e.reason, "message": e.message}
                    for e in entries if e.evicted],
        "gpu_pods": [e.key for e in entries if e.gpu_limit_count or e.mig_limits],
        "gpu_visible_without_request": [
            {"pod": e.key, "container": c.name, "nvidia_visible_devices": c.nvidia_visible_devices}
            for e in entries for c in e.containers
            if c.nvidia_visible_devices not in (None, "", "void", "none")
            and not c.gpu_limit_count and not c.mig_limits
        ],
    }
