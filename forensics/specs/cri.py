"""``cri``: the container runtime's own view of pods and containers, through the Kubernetes
Container Runtime Interface (bundle members ``cri/*``; layout in docs/bundle-format/cri.md)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, Excuse, SourceSpec, setting
from forensics.specs.hints import CGROUP_PATHS, PIDS
from forensics.specs.roles import CONTAINER_RUNTIME

__all__ = ["CONTAINERS", "CONTAINERS_DIR", "DEFAULT_ENDPOINTS", "PODS", "PODS_DIR", "PREFIX", "SPEC", "STATS",
           "VERSION", "CriSettings", "container_member", "sandbox_member"]

PREFIX = "cri/"
VERSION = "cri/version.json"
PODS = "cri/pods.json"
CONTAINERS = "cri/containers.json"
STATS = "cri/stats.json"
PODS_DIR = "cri/pods/"
CONTAINERS_DIR = "cri/containers/"

# the sockets the kubelet's --container-runtime-endpoint names on containerd and CRI-O nodes
DEFAULT_ENDPOINTS = (
    "unix:///run/containerd/containerd.sock",
    "unix:///var/run/crio/crio.sock",
    "unix:///run/crio/crio.sock",
)


def sandbox_member(sandbox_id: str) -> str:
    """``cri/pods/<sandbox id>.json``: ``PodSandboxStatus(verbose=true)``."""
    return f"{PODS_DIR}{sandbox_id}.json"


def container_member(container_id: str) -> str:
    """``cri/containers/<id>.json``: ``ContainerStatus(verbose=true)`` (its ``info`` holds the OCI
    runtime spec)."""
    return f"{CONTAINERS_DIR}{container_id}.json"


@dataclass(frozen=True)
class CriSettings:
    endpoint: str | None = setting("url", "CRI runtime endpoint (unix:///PATH)", None,
                                   shown="containerd's socket, then CRI-O's")
    call_timeout_s: float = setting("positive-seconds", "deadline of each CRI call", 5.0)


SPEC = SourceSpec(
    name="cri", order=25, collector="forensics.collectors.cri.collector", settings=CriSettings,
    absence=Absence("no container runtime (CRI) data: a containerd/CRI-O node's containers, their OCI "
                    "device grants and pods are known only from cgroup paths and the Kubernetes API", (
                        Excuse(frozenset({None}), "the bundle has no cri record: taken before the collector existed"),
                        Excuse(frozenset({"unavailable", "skipped"}),
                               "no CRI runtime answered: a Docker node or not a Kubernetes node"),
                    )),
    publishes=(PIDS, CGROUP_PATHS), roles=(CONTAINER_RUNTIME,),
)
