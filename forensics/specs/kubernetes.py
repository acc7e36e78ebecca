"""``kubernetes``: this node, its pods, their events and metrics (bundle members ``kubernetes/*``)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, Excuse, SourceSpec, setting

__all__ = ["EVENTS", "METRICS", "NODE", "PODS", "PODS_INDEX", "PREFIX", "REQUESTS", "SPEC", "KubernetesSettings"]

PREFIX = "kubernetes"
NODE = "kubernetes/node.json"
PODS = "kubernetes/pods.json"
PODS_INDEX = "kubernetes/pods-index.json"
REQUESTS = "kubernetes/requests.json"
EVENTS = "kubernetes/events.json"
METRICS = "kubernetes/metrics.json"


@dataclass(frozen=True)
class KubernetesSettings:
    call_timeout_s: float = setting("positive-seconds", "deadline of each Kubernetes API call", 10.0)
    budget_s: float = setting("positive-seconds", "total time for all Kubernetes API calls", 40.0)


SPEC = SourceSpec(
    name="kubernetes", order=60, collector="forensics.collectors.kubernetes.kubernetes",
    settings=KubernetesSettings,
    absence=Absence("no Kubernetes data: pod allocations and OOMKilled statuses unknown", (
        Excuse(frozenset({None, "unavailable", "skipped"}), "not a Kubernetes node: nothing lost"),)),
)
