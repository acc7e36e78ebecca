"""Realistic Kubernetes API objects for tests, benchmarks and sample bundles.

Objects are shaped like what a v1.31-era API server returns (``metadata.uid``,
``resourceVersion``, ``managedFields``, ``ownerReferences``, full pod ``status`` with
``containerStatuses``, ``qosClass``, ``hostIPs``; Node ``capacity``/``allocatable`` with
``nvidia.com/gpu`` and MIG resources and the GPU feature-discovery labels). List items carry no
``kind``/``apiVersion``, as in real list responses; :class:`ClusterState` holds them and the
loopback server (``tests/support/kube_apiserver.py``) serves them.

Build your own scenario with :func:`make_node`, :func:`make_pod` (:class:`ContainerSpec`),
:func:`make_event`, :func:`make_pod_metrics`, or start from :func:`gpu_node_scenario`.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "ClusterState",
    "ContainerSpec",
    "container_id",
    "gpu_node_scenario",
    "iso",
    "make_event",
    "make_node",
    "make_node_metrics",
    "make_pod",
    "make_pod_metrics",
]

_RV = itertools.count(184_467_000)


def _rv() -> str:
    return str(next(_RV))


def iso(t: datetime) -> str:
    """RFC 3339 UTC, seconds precision, as the API server writes metav1.Time."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(t: datetime) -> str:
    """metav1.MicroTime (Events' eventTime)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _uid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "k8s://" + "/".join(parts)))


def container_id(*parts: str) -> str:
    """A stable 64-hex container id (what containerd/CRI-O/Docker use)."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def _hash10(*parts: str) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:10])


@dataclass
class ClusterState:
    """Everything the loopback API server serves. Mutate freely between requests."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    pod_metrics: list[dict[str, Any]] = field(default_factory=list)
    node_metrics: list[dict[str, Any]] = field(default_factory=list)
    secrets: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    metrics_available: bool = True
    dra: Any = None  # tests.support.dra_objects.DraState: resource.k8s.io served; None: not served (404)

    def copy(self) -> ClusterState:
        return copy.deepcopy(self)


# --------------------------------------------------------------------------------------------
# Node
# --------------------------------------------------------------------------------------------
def make_node(
    name: str,
    now: datetime,
    gpus: int = 8,
    product: str = "NVIDIA-A100-SXM4-80GB",
    gpu_memory_mib: int = 81920,
    mig: dict[str, int] | None = None,
    cpu: int = 64,
    memory_kib: int = 1_056_335_620,
    internal_ip: str = "10.0.7.21",
    ready: bool = True,
    memory_pressure: bool = False,
) -> dict[str, Any]:
    """A GPU Node with GPU feature discovery labels, the GPU taint and nvidia.com/* resources."""
    created = now - timedelta(days=41, hours=3)
    capacity: dict[str, str] = {
        "cpu": str(cpu),
        "ephemeral-storage": "3748435292Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_kib}Ki",
        "nvidia.com/gpu": str(gpus),
        "pods": "110",
    }
    for resource, count in (mig or {}).items():
        capacity[resource] = str(count)
    allocatable = dict(capacity)
    allocatable["cpu"] = f"{cpu * 1000 - 1500}m"
    allocatable["memory"] = f"{memory_kib - 12_000_000}Ki"
    allocatable["ephemeral-storage"] = "3454617049081"
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p4de.24xlarge",
        "nvidia.com/cuda.driver-version.full": "550.90.07",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.machine": "p4de.24xlarge",
        "nvidia.com/gpu.memory": str(gpu_memory_mib),
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed" if mig else "single",
        "topology.kubernetes.io/zone": "us-east-1a",
    }

    def cond(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return {
            "lastHeartbeatTime": iso(now - timedelta(seconds=23)),
            "lastTransitionTime": iso(created + timedelta(minutes=2)),
            "message": message,
            "reason": reason,
            "status": "True" if status else "False",
            "type": type_,
        }

    return {
        "metadata": {
            "annotations": {
                "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": "i-0a1b2c3d4e5f60718"}),
                "nfd.node.kubernetes.io/feature-labels": "pci-10de.present",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "creationTimestamp": iso(created),
            "labels": labels,
            "managedFields": [
                {
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:node.alpha.kubernetes.io/ttl": {}}}},
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "time": iso(created + timedelta(seconds=40)),
                },
                {
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}, "f:nvidia.com/gpu.product": {}}}},
                    "manager": "gpu-feature-discovery",
                    "operation": "Update",
                    "time": iso(created + timedelta(minutes=3)),
                },
                {
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:allocatable": {"f:nvidia.com/gpu": {}}, "f:capacity": {"f:nvidia.com/gpu": {}}, "f:conditions": {}}},
                    "manager": "kubelet",
                    "operation": "Update",
                    "subresource": "status",
                    "time": iso(now - timedelta(seconds=23)),
                },
            ],
            "name": name,
            "resourceVersion": _rv(),
            "uid": _uid("node", name),
        },
        "spec": {
            "podCIDR": "192.168.7.0/24",
            "podCIDRs": ["192.168.7.0/24"],
            "providerID": "aws:///us-east-1a/i-0a1b2c3d4e5f60718",
            "taints": [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "present"}],
        },
        "status": {
            "addresses": [
                {"address": internal_ip, "type": "InternalIP"},
                {"address": name, "type": "Hostname"},
                {"address": f"ip-{internal_ip.replace('.', '-')}.ec2.internal", "type": "InternalDNS"},
            ],
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": [
                cond("MemoryPressure", memory_pressure,
                     "KubeletHasInsufficientMemory" if memory_pressure else "KubeletHasSufficientMemory",
                     "kubelet has insufficient memory available" if memory_pressure else "kubelet has sufficient memory available"),
                cond("DiskPressure", False, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", False, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", ready, "KubeletReady" if ready else "KubeletNotReady",
                     "kubelet is posting ready status" if ready else "container runtime is down"),
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [
                {"names": ["nvcr.io/nvidia/pytorch@sha256:" + container_id("img", "pytorch"), "nvcr.io/nvidia/pytorch:24.05-py3"], "sizeBytes": 9_731_423_651},
                {"names": ["nvcr.io/nvidia/k8s-device-plugin@sha256:" + container_id("img", "dp"), "nvcr.io/nvidia/k8s-device-plugin:v0.16.1"], "sizeBytes": 123_456_789},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": _uid("boot", name),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.8.0-1015-aws",
                "kubeProxyVersion": "v1.31.2",
                "kubeletVersion": "v1.31.2",
                "machineID": container_id("machine", name)[:32],
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS",
                "systemUUID": _uid("system", name),
            },
            "runtimeHandlers": [
                {"features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}, "name": "nvidia"},
                {"features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}, "name": ""},
            ],
        },
    }


# --------------------------------------------------------------------------------------------
# Pods
# --------------------------------------------------------------------------------------------
@dataclass
class ContainerSpec:
    """One container of a pod, and how it is doing.

    ``requests``/``limits`` are Kubernetes quantities (``{"nvidia.com/gpu": "2", "cpu": "8"}``).
    ``env`` is a list of ``(name, value)``; ``secret_env`` is ``(name, secret, key)`` references.
    ``last_terminated`` is ``(reason, exit_code)`` of the previous run (``("OOMKilled", 137)``).
    ``container_id`` overrides the generated 64-hex id (to match a real container).
    """

    name: str
    image: str = "nvcr.io/nvidia/pytorch:24.05-py3"
    command: list[str] | None = None
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)
    env: list[tuple[str, str]] = field(default_factory=list)
    secret_env: list[tuple[str, str, str]] = field(default_factory=list)
    restart_count: int = 0
    last_terminated: tuple[str, int] | None = None
    state: str = "running"  # running | waiting | terminated
    state_reason: str | None = None
    exit_code: int | None = None
    container_id: str | None = None
    runtime: str = "containerd"


def _qos(containers: list[ContainerSpec]) -> str:
    if all(not c.requests and not c.limits for c in containers):
        return "BestEffort"
    for c in containers:
        for res in ("cpu", "memory"):
            lim = c.limits.get(res)
            req = c.requests.get(res, lim)
            if lim is None or req != lim:
                return "Burstable"
    return "Guaranteed"


def make_pod(
    name: str,
    namespace: str,
    node: str,
    now: datetime,
    containers: list[ContainerSpec],
    owner: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    reason: str | None = None,
    message: str | None = None,
    started_ago_s: int = 7200,
    pod_ip: str = "192.168.7.10",
    host_ip: str = "10.0.7.21",
    last_applied: bool = False,
    uid: str | None = None,
    service_account: str = "default",
) -> dict[str, Any]:
    """A Pod as ``GET /api/v1/pods`` returns it (an item: no kind/apiVersion).

    ``owner`` is ``(kind, name)`` of the controller (``("ReplicaSet", "inference-7d9c8b6f5")``).
    ``phase="Failed", reason="Evicted"`` gives an evicted pod (with the DisruptionTarget
    condition the kubelet sets since 1.26). ``last_applied`` adds the
    ``kubectl.kubernetes.io/last-applied-configuration`` annotation (with the env values).
    """
    created = now - timedelta(seconds=started_ago_s)
    uid = uid or _uid("pod", namespace, name)
    labels = dict(labels or {"app": name.rsplit("-", 1)[0]})
    token_volume = f"kube-api-access-{_hash10(namespace, name)[:5]}"

    def env_of(c: ContainerSpec) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in c.env]
        out += [{"name": k, "valueFrom": {"secretKeyRef": {"key": key, "name": secret}}}
                for k, secret, key in c.secret_env]
        return out

    spec_containers = []
    for c in containers:
        sc: dict[str, Any] = {
            "image": c.image,
            "imagePullPolicy": "IfNotPresent",
            "name": c.name,
            "resources": {k: v for k, v in (("limits", dict(c.limits)), ("requests", dict(c.requests or c.limits))) if v},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": token_volume, "readOnly": True}],
        }
        if c.command:
            sc["command"] = list(c.command)
        env = env_of(c)
        if env:
            sc["env"] = env
        spec_containers.append(sc)

    tolerations = [
        {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
        {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
    ]
    if any(k.startswith("nvidia.com/") for c in containers for k in c.limits):
        tolerations.insert(0, {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"})

    def status_of(c: ContainerSpec) -> dict[str, Any]:
        cid = c.container_id or container_id(namespace, name, c.name, str(c.restart_count))
        started = now - timedelta(seconds=min(started_ago_s, 600 if c.restart_count else started_ago_s))
        st: dict[str, Any] = {
            "containerID": f"{c.runtime}://{cid}",
            "image": c.image,
            "imageID": c.image.split(":")[0] + "@sha256:" + container_id("img", c.image),
            "lastState": {},
            "name": c.name,
            "ready": c.state == "running",
            "restartCount": c.restart_count,
            "started": c.state == "running",
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": token_volume, "readOnly": True, "recursiveReadOnly": "Disabled"}],
        }
        if c.state == "running":
            st["state"] = {"running": {"startedAt": iso(started)}}
        elif c.state == "waiting":
            st["state"] = {"waiting": {"message": f"back-off 5m0s restarting failed container={c.name} pod={name}_{namespace}({uid})", "reason": c.state_reason or "CrashLoopBackOff"}}
        else:
            st["state"] = {"terminated": {"containerID": f"{c.runtime}://{cid}", "exitCode": c.exit_code if c.exit_code is not None else 137, "finishedAt": iso(now - timedelta(seconds=300)), "reason": c.state_reason or "Error", "startedAt": iso(created + timedelta(seconds=12))}}
        if c.last_terminated:
            prev = container_id(namespace, name, c.name, str(c.restart_count - 1))
            st["lastState"] = {"terminated": {
                "containerID": f"{c.runtime}://{prev}",
                "exitCode": c.last_terminated[1],
                "finishedAt": iso(started - timedelta(seconds=1)),
                "reason": c.last_terminated[0],
                "startedAt": iso(started - timedelta(seconds=1800)),
            }}
        return st

    running = phase == "Running"
    conditions = [
        {"lastProbeTime": None, "lastTransitionTime": iso(created + timedelta(seconds=9)), "status": "True" if running else "False", "type": "PodReadyToStartContainers"},
        {"lastProbeTime": None, "lastTransitionTime": iso(created + timedelta(seconds=2)), "status": "True", "type": "Initialized"},
        {"lastProbeTime": None, "lastTransitionTime": iso(created + timedelta(seconds=15)), "status": "True" if running else "False", "type": "Ready"},
        {"lastProbeTime": None, "lastTransitionTime": iso(created + timedelta(seconds=15)), "status": "True" if running else "False", "type": "ContainersReady"},
        {"lastProbeTime": None, "lastTransitionTime": iso(created), "status": "True", "type": "PodScheduled"},
    ]
    if reason == "Evicted":
        conditions.insert(0, {"lastProbeTime": None, "lastTransitionTime": iso(now - timedelta(seconds=300)), "message": "The node was low on resource: memory. ", "reason": "TerminationByKubelet", "status": "True", "type": "DisruptionTarget"})

    metadata: dict[str, Any] = {
        "creationTimestamp": iso(created),
        "labels": labels,
        "managedFields": [
            {
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}},
                             "f:spec": {"f:containers": {f'k:{{"name":"{c.name}"}}': {".": {}, "f:image": {}, "f:name": {}, "f:resources": {}} for c in containers}}},
                "manager": "kube-controller-manager" if owner else "kubectl-client-side-apply",
                "operation": "Update",
                "time": iso(created),
            },
            {
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}},
                "manager": "kubelet",
                "operation": "Update",
                "subresource": "status",
                "time": iso(now - timedelta(seconds=30)),
            },
        ],
        "name": name,
        "namespace": namespace,
        "resourceVersion": _rv(),
        "uid": uid,
    }
    if owner:
        kind, owner_name = owner
        metadata["generateName"] = name.rsplit("-", 1)[0] + "-"
        api = {"ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Job": "batch/v1"}.get(kind, "v1")
        metadata["ownerReferences"] = [{"apiVersion": api, "blockOwnerDeletion": True, "controller": True, "kind": kind, "name": owner_name, "uid": _uid(kind, namespace, owner_name)}]
    if last_applied:
        applied = {"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {}, "labels": labels, "name": name, "namespace": namespace},
                   "spec": {"containers": [{k: v for k, v in sc.items() if k in ("name", "image", "command", "env", "resources")} for sc in spec_containers]}}
        metadata["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied, separators=(",", ":"), sort_keys=True) + "\n"}

    status: dict[str, Any] = {
        "conditions": conditions,
        "containerStatuses": [status_of(c) for c in containers],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "phase": phase,
        "qosClass": _qos(containers),
        "startTime": iso(created),
    }
    if running or phase == "Pending":
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message

    return {
        "metadata": metadata,
        "spec": {
            "containers": spec_containers,
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "nodeName": node,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Never" if owner and owner[0] == "Job" else "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": service_account,
            "serviceAccountName": service_account,
            "terminationGracePeriodSeconds": 30,
            "tolerations": tolerations,
            "volumes": [{"name": token_volume, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}},
            ]}}],
        },
        "status": status,
    }


# --------------------------------------------------------------------------------------------
# Events and metrics
# --------------------------------------------------------------------------------------------
def make_event(
    involved: dict[str, Any],
    reason: str,
    message: str,
    at: datetime,
    type_: str = "Normal",
    component: str = "kubelet",
    host: str | None = None,
    count: int = 1,
    field_path: str | None = None,
    first_at: datetime | None = None,
) -> dict[str, Any]:
    """A core/v1 Event about ``involved`` (a Pod or Node object from this module)."""
    meta = involved["metadata"]
    is_node = "namespace" not in meta
    kind = "Node" if is_node else "Pod"
    namespace = "default" if is_node else meta["namespace"]
    name = f"{meta['name']}.{hashlib.sha256(f'{reason}{message}{at}'.encode()).hexdigest()[:16]}"
    involved_ref: dict[str, Any] = {"kind": kind, "name": meta["name"], "uid": meta["name"] if is_node else meta["uid"]}
    if not is_node:
        involved_ref.update(apiVersion="v1", namespace=meta["namespace"], resourceVersion=meta["resourceVersion"])
    if field_path:
        involved_ref["fieldPath"] = field_path
    source: dict[str, Any] = {"component": component}
    if host:
        source["host"] = host
    return {
        "count": count,
        "eventTime": None,
        "firstTimestamp": iso(first_at or at),
        "involvedObject": involved_ref,
        "lastTimestamp": iso(at),
        "message": message,
        "metadata": {
            "creationTimestamp": iso(first_at or at),
            "managedFields": [{"apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:count": {}, "f:firstTimestamp": {}, "f:involvedObject": {}, "f:lastTimestamp": {}, "f:message": {}, "f:reason": {}, "f:source": {"f:component": {}}, "f:type": {}}, "manager": component, "operation": "Update", "time": iso(at)}],
            "name": name,
            "namespace": namespace,
            "resourceVersion": _rv(),
            "uid": _uid("event", namespace, name),
        },
        "reason": reason,
        "reportingComponent": component,
        "reportingInstance": host or "",
        "source": source,
        "type": type_,
    }


def make_pod_metrics(pod: dict[str, Any], now: datetime, usage: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """A metrics.k8s.io/v1beta1 PodMetrics item: ``usage`` maps container -> (cpu, memory)."""
    meta = pod["metadata"]
    return {
        "containers": [{"name": c, "usage": {"cpu": cpu, "memory": mem}} for c, (cpu, mem) in usage.items()],
        "metadata": {"creationTimestamp": iso(now), "labels": dict(meta.get("labels", {})), "name": meta["name"], "namespace": meta["namespace"]},
        "timestamp": iso(now - timedelta(seconds=7)),
        "window": "10.21s",
    }


def make_node_metrics(node: dict[str, Any], now: datetime, cpu: str, memory: str) -> dict[str, Any]:
    """A metrics.k8s.io/v1beta1 NodeMetrics item."""
    meta = node["metadata"]
    return {
        "metadata": {"creationTimestamp": iso(now), "labels": dict(meta.get("labels", {})), "name": meta["name"]},
        "timestamp": iso(now - timedelta(seconds=4)),
        "usage": {"cpu": cpu, "memory": memory},
        "window": "20.05s",
    }


# --------------------------------------------------------------------------------------------
# The default scenario
# --------------------------------------------------------------------------------------------
def gpu_node_scenario(now: datetime | None = None, node_name: str = "gpu-node-07",
                      extra_pods: int = 0, extra_events: int = 0) -> ClusterState:
    """A GPU node with the pods an investigation meets, plus a second node to be filtered out.

    On ``node_name`` (8 GPUs, mixed MIG with 7 ``nvidia.com/mig-1g.10gb``):

    - ``ml/trainer-0`` (StatefulSet): 4 GPUs, Guaranteed;
    - ``ml/inference-7d9c8b6f5-x2k4q`` (ReplicaSet): 1 GPU, Burstable, restarted 3 times, last
      terminated ``OOMKilled`` exit 137, env with a token value and a secretKeyRef;
    - ``research/notebook-alice``: no GPU limit but ``NVIDIA_VISIBLE_DEVICES=all``,
      created by ``kubectl apply`` (last-applied-configuration carries its env);
    - ``ml/mig-worker-0``: one ``nvidia.com/mig-1g.10gb``;
    - ``batch/preprocess-28f9x`` (Job): evicted for memory;
    - ``kube-system/nvidia-device-plugin-daemonset-8xk2p`` (DaemonSet), BestEffort.

    ``extra_pods``/``extra_events`` add filler pods and events (for the 110-pod benchmark).
    Events: kubelet and node-problem-detector events for these pods and the node, one from 3 h
    ago (outside a 1 h window) and one for a pod on the other node.
    """
    now = now or datetime.now(UTC).replace(microsecond=0)
    node = make_node(node_name, now, gpus=7, mig={"nvidia.com/mig-1g.10gb": 7})
    other = make_node("gpu-node-08", now, internal_ip="10.0.7.22")

    trainer = make_pod("trainer-0", "ml", node_name, now, [ContainerSpec(
        "trainer", command=["torchrun", "--nproc-per-node=4", "train.py"],
        requests={"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"},
        limits={"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"},
        env=[("NCCL_DEBUG", "INFO"), ("WANDB_API_KEY", "wb-5f1e9c0d2b7a4e3f")],
    )], owner=("StatefulSet", "trainer"), labels={"app": "trainer", "apps.kubernetes.io/pod-index": "0"}, pod_ip="192.168.7.11")
    inference = make_pod("inference-7d9c8b6f5-x2k4q", "ml", node_name, now, [ContainerSpec(
        "server", image="nvcr.io/nvidia/tritonserver:24.05-py3",
        requests={"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
        limits={"memory": "24Gi", "nvidia.com/gpu": "1"},
        env=[("MODEL_REPO", "s3://models/prod"), ("HF_TOKEN", "hf_qwertyuiopasdfghjkl1234")],
        secret_env=[("DB_PASSWORD", "inference-db", "password")],
        restart_count=3, last_terminated=("OOMKilled", 137),
    )], owner=("ReplicaSet", "inference-7d9c8b6f5"), labels={"app": "inference", "pod-template-hash": "7d9c8b6f5"}, pod_ip="192.168.7.12")
    notebook = make_pod("notebook-alice", "research", node_name, now, [ContainerSpec(
        "jupyter", command=["jupyter", "lab", "--ip=0.0.0.0"],
        requests={"cpu": "2", "memory": "8Gi"},
        env=[("NVIDIA_VISIBLE_DEVICES", "all"), ("JUPYTER_TOKEN", "s3cr3t-notebook-token")],
    )], labels={"app": "notebook", "owner": "alice"}, last_applied=True, pod_ip="192.168.7.13")
    mig = make_pod("mig-worker-0", "ml", node_name, now, [ContainerSpec(
        "worker", requests={"nvidia.com/mig-1g.10gb": "1"}, limits={"nvidia.com/mig-1g.10gb": "1"},
    )], owner=("StatefulSet", "mig-worker"), pod_ip="192.168.7.14")
    evicted = make_pod("preprocess-28f9x", "batch", node_name, now, [ContainerSpec(
        "preprocess", image="python:3.11-slim", state="terminated", state_reason="ContainerStatusUnknown", exit_code=137,
        requests={"cpu": "1"},
    )], owner=("Job", "preprocess"), phase="Failed", reason="Evicted",
        message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi. Container preprocess was using 6Gi, request is 0, has larger consumption of memory. ",
        pod_ip="192.168.7.15")
    plugin = make_pod("nvidia-device-plugin-daemonset-8xk2p", "kube-system", node_name, now, [ContainerSpec(
        "nvidia-device-plugin-ctr", image="nvcr.io/nvidia/k8s-device-plugin:v0.16.1",
    )], owner=("DaemonSet", "nvidia-device-plugin-daemonset"), pod_ip="192.168.7.16")
    elsewhere = make_pod("trainer-1", "ml", "gpu-node-08", now, [ContainerSpec(
        "trainer", requests={"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"},
        limits={"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"},
    )], owner=("StatefulSet", "trainer"), pod_ip="192.168.8.11", host_ip="10.0.7.22")
    pods = [trainer, inference, notebook, mig, evicted, plugin, elsewhere]
    for i in range(extra_pods):
        pods.append(make_pod(f"filler-{i:03d}", f"team-{i % 5}", node_name, now, [ContainerSpec(
            "app", image="busybox:1.36", requests={"cpu": "100m", "memory": "64Mi"}, limits={"memory": "128Mi"},
        )], owner=("ReplicaSet", f"filler-{i:03d}-5c8f"), pod_ip=f"192.168.7.{30 + i % 200}"))

    m = timedelta(minutes=1)
    events = [
        make_event(inference, "OOMKilling", "Memory cgroup out of memory: Killed process 48213 (tritonserver) total-vm:81234567kB, anon-rss:25165824kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:61234kB oom_score_adj:999", now - 12 * m, type_="Warning", component="kernel-monitor", host=node_name),
        make_event(inference, "BackOff", "Back-off restarting failed container server in pod inference-7d9c8b6f5-x2k4q_ml(" + inference["metadata"]["uid"] + ")", now - 11 * m, type_="Warning", host=node_name, count=4, field_path="spec.containers{server}", first_at=now - 40 * m),
        make_event(inference, "Started", "Started container server", now - 10 * m, host=node_name, count=4, field_path="spec.containers{server}", first_at=now - 115 * m),
        make_event(evicted, "Evicted", evicted["status"]["message"], now - 5 * m, type_="Warning", host=node_name),
        make_event(evicted, "Killing", "Stopping container preprocess", now - 5 * m, host=node_name, field_path="spec.containers{preprocess}"),
        make_event(node, "EvictionThresholdMet", "Attempting to reclaim memory", now - 6 * m, type_="Warning", host=node_name),
        make_event(node, "NodeHasInsufficientMemory", f"Node {node_name} status is now: NodeHasInsufficientMemory", now - 6 * m, host=node_name),
        make_event(notebook, "Pulled", 'Container image "nvcr.io/nvidia/pytorch:24.05-py3" already present on machine', now - 30 * m, host=node_name, field_path="spec.containers{jupyter}"),
        make_event(trainer, "Scheduled", f"Successfully assigned ml/trainer-0 to {node_name}", now - 180 * m, component="default-scheduler"),
        make_event(elsewhere, "Started", "Started container trainer", now - 8 * m, host="gpu-node-08", field_path="spec.containers{trainer}"),
    ]
    filler = [p for p in pods if p["metadata"]["name"].startswith("filler-")]
    for i in range(extra_events):
        target = filler[i % len(filler)] if filler else trainer
        events.append(make_event(target, "Pulled", f'Container image "busybox:1.36" already present on machine (#{i})', now - timedelta(seconds=5 + i % 3000), host=node_name, field_path="spec.containers{app}"))

    pod_metrics = [
        make_pod_metrics(trainer, now, {"trainer": ("15873264012n", "121468712Ki")}),
        make_pod_metrics(inference, now, {"server": ("812345678n", "24012344Ki")}),
        make_pod_metrics(notebook, now, {"jupyter": ("1987654321n", "7340032Ki")}),
        make_pod_metrics(mig, now, {"worker": ("512341234n", "3145728Ki")}),
        make_pod_metrics(plugin, now, {"nvidia-device-plugin-ctr": ("1234567n", "31244Ki")}),
        make_pod_metrics(elsewhere, now, {"trainer": ("15000000000n", "120000000Ki")}),
    ]
    node_metrics = [make_node_metrics(node, now, "36412345678n", "203948576Ki"),
                    make_node_metrics(other, now, "17000000000n", "150000000Ki")]
    secrets = [{"metadata": {"name": "inference-db", "namespace": "ml", "uid": _uid("secret", "ml", "inference-db"), "resourceVersion": _rv()},
                "data": {"password": "aHVudGVyMg=="}, "type": "Opaque"}]
    return ClusterState(nodes=[node, other], pods=pods, events=events, pod_metrics=pod_metrics,
                        node_metrics=node_metrics, secrets=secrets)


# --------------------------------------------------------------------------------------------
# The capture DaemonSet's pods (deploy/daemonset.yaml)
# --------------------------------------------------------------------------------------------
def make_capture_pod(node: str, now: datetime, namespace: str = "gpuforensics",
                     phase: str = "Running", template: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pod of the capture DaemonSet on ``node``: ``template`` is the DaemonSet's pod template
    (default: read from deploy/daemonset.yaml), so its labels, command, env and working directory
    are the manifest's own."""
    if template is None:
        from pathlib import Path

        import yaml

        ds = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "daemonset.yaml").read_text())
        template = ds["spec"]["template"]
    assert template is not None
    tpl_container = template["spec"]["containers"][0]
    name = f"gpuforensics-{_hash10('ds', node)[:5]}"
    labels = {**template["metadata"]["labels"], "controller-revision-hash": "6c9f8d7b5d", "pod-template-generation": "1"}
    pod = make_pod(name, namespace, node, now, [ContainerSpec(tpl_container["name"], image=tpl_container["image"],
                                                              state="running" if phase == "Running" else "waiting",
                                                              state_reason=None if phase == "Running" else "ContainerCreating")],
                   owner=("DaemonSet", "gpuforensics"), labels=labels, phase=phase, service_account="gpuforensics")
    container = pod["spec"]["containers"][0]
    for key in ("command", "env", "workingDir", "securityContext", "resources"):
        if key in tpl_container:
            container[key] = copy.deepcopy(tpl_container[key])
    pod["spec"]["hostPID"] = True
    return pod
