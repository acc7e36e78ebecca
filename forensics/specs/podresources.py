"""``podresources``: the kubelet's own map of which container holds which device
(members ``kubernetes/podresources/*``)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import SourceSpec, setting

__all__ = ["ALLOCATABLE", "ALLOCATABLE_END", "DEFAULT_SOCKET", "LIST", "SPEC", "PodResourcesSettings"]

LIST = "kubernetes/podresources/list.json"
ALLOCATABLE = "kubernetes/podresources/allocatable.json"
# with --duration: GetAllocatableResources again at the end of the window
ALLOCATABLE_END = "kubernetes/podresources/allocatable-end.json"
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass(frozen=True)
class PodResourcesSettings:
    socket: str = setting("path", "kubelet pod-resources socket", DEFAULT_SOCKET)
    call_timeout_s: float = setting("positive-seconds", "deadline of each pod-resources call", 5.0)


SPEC = SourceSpec(name="podresources", order=65, collector="forensics.collectors.podresources.collector",
                  settings=PodResourcesSettings)
