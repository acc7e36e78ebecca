"""``kubernetes``: this node, its pods, their events and metrics (bundle members ``kubernetes/*``)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, Excuse, SourceSpec, setting
from forensics.specs.hints import GPU_PIDS, KUBE_NODE
from forensics.specs.logs import LOGS
from forensics.specs.roles import ORCHESTRATOR

__all__ = [
    "CLOCK", "DEVICE_CLASSES", "EVENTS", "LOGS_DIR", "LOGS_INDEX", "METRICS", "NODE", "NODE_END", "PODS", "PODS_INDEX", "PREFIX",
    "REQUESTS", "REQUESTS_END", "RESOURCE_API", "RESOURCE_CLAIMS", "RESOURCE_SLICES", "SPEC",
    "KubernetesSettings", "pod_log_member",
]

PREFIX = "kubernetes"
NODE = "kubernetes/node.json"
# with --duration: the Node read again at the end of the window, and that request
NODE_END = "kubernetes/node-end.json"
REQUESTS_END = "kubernetes/requests-end.json"
PODS = "kubernetes/pods.json"
PODS_INDEX = "kubernetes/pods-index.json"
REQUESTS = "kubernetes/requests.json"
EVENTS = "kubernetes/events.json"
METRICS = "kubernetes/metrics.json"
CLOCK = "kubernetes/clock.json"
# resource.k8s.io (Dynamic Resource Allocation), each a List as the API server sent it (its
# apiVersion the version the server offered): the node's ResourceSlices, the ResourceClaims its
# pods use or that are reserved for them, the DeviceClasses those claims name; and which versions
# of the group the server offered (its discovery document) with the one read
RESOURCE_API = "kubernetes/resource-api.json"
RESOURCE_SLICES = "kubernetes/resourceslices.json"
RESOURCE_CLAIMS = "kubernetes/resourceclaims.json"
DEVICE_CLASSES = "kubernetes/deviceclasses.json"
LOGS_DIR = "kubernetes/logs/"
LOGS_INDEX = "kubernetes/logs/index.json"


def pod_log_member(namespace: str, pod: str, container: str, previous: bool = False) -> str:
    """``kubernetes/logs/<namespace>/<pod>/<container>.log`` (``.previous.log``: the instance
    before the last restart, where a crash is). Kubernetes names are DNS labels: no ``/``."""
    return f"{LOGS_DIR}{namespace}/{pod}/{container}{'.previous' if previous else ''}.log"


@dataclass(frozen=True)
class KubernetesSettings:
    call_timeout_s: float = setting("positive-seconds", "deadline of each Kubernetes API call", 10.0)
    budget_s: float = setting("positive-seconds", "total time for all Kubernetes API calls", 40.0)
    logs_tail: int = setting("non-negative-int", "pod log lines asked for per container, 0 for no pod logs", 5000)


SPEC = SourceSpec(
    name="kubernetes", order=60, collector="forensics.collectors.kubernetes.kubernetes",
    settings=KubernetesSettings,
    absence=Absence("no Kubernetes data: pod allocations and OOMKilled statuses unknown", (
        Excuse(frozenset({None, "unavailable", "skipped"}), "not a Kubernetes node: nothing lost"),)),
    publishes=(KUBE_NODE,), reads=(KUBE_NODE, GPU_PIDS), shared=(LOGS,),
    roles=(ORCHESTRATOR,),
)

#: the flight recorder's Kubernetes events (forensics.collectors.kubernetes.follow): one Event a
#: line, each as an item of :data:`EVENTS`; in a bundle only under ``ring/`` (``capture --since``)
EVENTS_FOLLOWED = "kubernetes/events.jsonl"
