"""``resource.k8s.io`` objects as the API server sends them, and the pod fields that use them.

Byte shapes (field names, nesting, value forms) taken from upstream, not from memory:

- Kubernetes API types, ``k8s.io/api`` ``resource/v1/types.go`` (kubernetes/api commit
  426b1b9979354bee48c10e727c46eb9b5a7bbc95,
  https://github.com/kubernetes/api/blob/426b1b9979354bee48c10e727c46eb9b5a7bbc95/resource/v1/types.go):
  ResourceSlice ``spec`` (``driver``, ``pool`` {``name``, ``generation``, ``resourceSliceCount``},
  ``nodeName``, ``devices[]`` {``name``, ``attributes`` (one-key values ``string``/``int``/
  ``bool``/``version``), ``capacity`` {``value``}}); v1beta1 nests a device's attributes and
  capacity under ``basic``. ResourceClaim ``status.allocation.devices`` {``results[]`` {``request``,
  ``driver``, ``pool``, ``device``}, ``config[]`` {``source``, ``requests``, ``opaque`` {``driver``,
  ``parameters``}}}, ``status.reservedFor[]`` {``resource``, ``name``, ``uid``}; the field selector
  ``spec.nodeName`` of ResourceSlices.
- NVIDIA's DRA driver, k8s-dra-driver-gpu: the devices it publishes,
  ``cmd/gpu-kubelet-plugin/deviceinfo.go`` (commit 03af824603ff1b1c3c3193cb25cc584690f4785c):
  ``gpu-<minor>``, ``gpu-<minor>-mig-<profile id>-<start>-<size>``, attributes ``type``
  (``gpu``/``mig``), ``uuid``, ``parentUUID``, ``profile``, ``productName``, ``brand``,
  ``architecture``, ``cudaComputeCapability``/``driverVersion``/``cudaDriverVersion`` (versions),
  ``pcieBusID``, capacity ``memory``; its sharing configuration ``GpuConfig``,
  ``api/nvidia.com/resource/v1beta1/sharing.go`` (commit 06756cbb9405fbd3b28abfca886d3c95e43eea3d):
  ``sharing`` {``strategy`` TimeSlicing|MPS, ``timeSlicingConfig`` {``interval``}, ``mpsConfig``
  {``defaultActiveThreadPercentage``, ``defaultPinnedDeviceMemoryLimit``}}; the demo specs
  ``demo/specs/quickstart/gpu-test7.yaml`` (pod ``spec.resourceClaims`` with
  ``resourceClaimTemplateName``, container ``resources.claims``) and
  ``demo/specs/extended-resources/gpu-full.yaml`` (commit c9ccbbeedb75ec5ff426e92125692d64f350113b:
  the generated claim ``<pod>-extended-resources-<suffix>`` with the annotation
  ``resource.kubernetes.io/extended-resource-claim``, request ``container-0-request-0``, the
  pod's ``status.extendedResourceClaimStatus`` {``resourceClaimName``, ``requestMappings[]``
  {``containerName``, ``requestName``, ``resourceName``}}, the DeviceClass ``gpu.nvidia.com`` with
  ``extendedResourceName: nvidia.com/gpu``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DRIVER",
    "DraDevice",
    "claim_pod",
    "device_class",
    "extended_resource_pod",
    "resource_claim",
    "resource_slice",
    "to_version",
]

DRIVER = "gpu.nvidia.com"
GROUP = "resource.k8s.io"


@dataclass(frozen=True)
class DraDevice:
    """A device of NVIDIA's driver: a GPU (``gpu-<minor>``) or a MIG device on one."""

    minor: int
    uuid: str
    mig: tuple[int, int, int] | None = None  # (profile id, start, size)
    parent_uuid: str | None = None
    profile: str | None = None  # e.g. 1g.10gb
    product: str = "NVIDIA H100 80GB HBM3"

    @property
    def name(self) -> str:
        if self.mig is None:
            return f"gpu-{self.minor}"
        return f"gpu-{self.minor}-mig-{self.mig[0]}-{self.mig[1]}-{self.mig[2]}"

    def to_api(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "type": {"string": "mig" if self.mig else "gpu"},
            "uuid": {"string": self.uuid},
            "productName": {"string": self.product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "570.124.6"},
            "cudaDriverVersion": {"version": "12.8.0"},
            "pcieBusID": {"string": f"0000:{0x18 + self.minor:02x}:00.0"},
            "addressingMode": {"string": "None"},
        }
        capacity: dict[str, Any] = {"memory": {"value": "80Gi"}}
        if self.mig is not None:
            attrs["parentUUID"] = {"string": self.parent_uuid or ""}
            attrs["profile"] = {"string": self.profile or ""}
            capacity = {"memory": {"value": "10Gi"}, "multiprocessors": {"value": "16"}}
            for i in range(self.mig[1], self.mig[1] + self.mig[2]):
                capacity[f"memorySlice{i}"] = {"value": "1"}
        return {"name": self.name, "attributes": attrs, "capacity": capacity}


def resource_slice(node: str, devices: list[DraDevice], *, uid: str = "9d1f0a4e-5b7c-4e21-8f3a-1c2d3e4f5a60",
                   rv: str = "4711") -> dict[str, Any]:
    """The driver's ResourceSlice of ``node`` (v1): one pool named after the node."""
    return {
        "apiVersion": f"{GROUP}/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}-x2m4k", "generateName": f"{node}-{DRIVER}-", "uid": uid,
                     "resourceVersion": rv, "creationTimestamp": "2026-12-06T06:00:00Z",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                          "uid": "00000000-0000-4000-8000-00000000aaaa", "controller": True}]},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [d.to_api() for d in devices]},
    }


def resource_claim(namespace: str, name: str, uid: str, node: str, results: list[tuple[str, str]],
                   *, reserved_for: list[tuple[str, str]] = (),  # type: ignore[assignment]
                   sharing: dict[str, Any] | None = None, extended_for: str | None = None,
                   request: str = "gpu") -> dict[str, Any]:
    """An allocated ResourceClaim (v1): ``results`` (request, device name) on ``node``'s pool;
    ``sharing`` a GpuConfig ``sharing`` object; ``reserved_for`` (pod name, pod uid);
    ``extended_for``: the claim the scheduler generated for that pod's extended resource."""
    requests = sorted({r for r, _ in results} or {request})
    spec: dict[str, Any] = {"devices": {"requests": [
        {"name": r, "exactly": {"allocationMode": "ExactCount", "count": 1, "deviceClassName": DRIVER}}
        for r in requests]}}
    config: list[dict[str, Any]] = []
    if sharing is not None:
        opaque = {"driver": DRIVER, "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                                                   "sharing": sharing}}
        spec["devices"]["config"] = [{"requests": requests, "opaque": opaque}]
        config.append({"source": "FromClaim", "requests": requests, "opaque": copy.deepcopy(opaque)})
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "5120",
                            "creationTimestamp": "2026-12-06T06:10:00Z",
                            "finalizers": ["resource.kubernetes.io/delete-protection"]}
    if extended_for is not None:
        meta["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
        meta["generateName"] = f"{extended_for}-extended-resources-"
    status: dict[str, Any] = {"allocation": {
        "devices": {"results": [{"request": r, "driver": DRIVER, "pool": node, "device": d} for r, d in results]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        "allocationTimestamp": "2026-12-06T06:10:01Z"}}
    if config:
        status["allocation"]["devices"]["config"] = config
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": n, "uid": u} for n, u in reserved_for]
    return {"apiVersion": f"{GROUP}/v1", "kind": "ResourceClaim", "metadata": meta, "spec": spec, "status": status}


def device_class(name: str = DRIVER, extended_resource_name: str | None = None) -> dict[str, Any]:
    """A DeviceClass selecting the driver's GPUs (``extendedResourceName`` as NVIDIA's chart sets it)."""
    spec: dict[str, Any] = {"selectors": [{"cel": {
        "expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"}}]}
    if extended_resource_name is not None:
        spec["extendedResourceName"] = extended_resource_name
    return {"apiVersion": f"{GROUP}/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "uid": "3f2e1d0c-0000-4000-8000-00000000dc01", "resourceVersion": "77",
                         "creationTimestamp": "2026-12-06T05:00:00Z"}, "spec": spec}


def claim_pod(pod: dict[str, Any], claims: dict[str, str], uses: dict[str, list[str]],
              template: bool = False) -> dict[str, Any]:
    """Give ``pod`` (a Pod object) DRA claims: ``claims`` pod claim name -> ResourceClaim name,
    ``uses`` container name -> pod claim names. ``template``: the claims came from a
    ResourceClaimTemplate (their names only in ``status.resourceClaimStatuses``)."""
    spec, status = pod["spec"], pod.setdefault("status", {})
    spec["resourceClaims"] = [({"name": pc, "resourceClaimTemplateName": "single-gpu"} if template
                               else {"name": pc, "resourceClaimName": rc}) for pc, rc in claims.items()]
    if template:
        status["resourceClaimStatuses"] = [{"name": pc, "resourceClaimName": rc} for pc, rc in claims.items()]
    for c in spec["containers"]:
        if c["name"] in uses:
            c.setdefault("resources", {})["claims"] = [{"name": pc} for pc in uses[c["name"]]]
    return pod


def extended_resource_pod(pod: dict[str, Any], claim: str, container: str,
                          resource: str = "nvidia.com/gpu", request: str = "container-0-request-0") -> dict[str, Any]:
    """``pod`` with its extended resource served by DRA (``status.extendedResourceClaimStatus``)."""
    pod.setdefault("status", {})["extendedResourceClaimStatus"] = {
        "resourceClaimName": claim,
        "requestMappings": [{"containerName": container, "requestName": request, "resourceName": resource}]}
    return pod


def to_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """The object as ``resource.k8s.io/<version>`` serves it: v1beta1 puts a device's attributes and
    capacity under ``basic`` (and a request's class and count at the request's top level)."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{GROUP}/{version}"
    if version != "v1beta1":
        return out
    if out.get("kind") == "ResourceSlice":
        out["spec"]["devices"] = [{"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
                                  for d in out["spec"].get("devices", [])]
    if out.get("kind") == "ResourceClaim":
        for r in out["spec"]["devices"]["requests"]:
            r.update(r.pop("exactly", {}))
    return out


@dataclass
class DraState:
    """The ``resource.k8s.io`` objects a loopback API server serves (see tests/support/kube_apiserver.py)."""

    slices: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    device_classes: list[dict[str, Any]] = field(default_factory=list)
    versions: tuple[str, ...] = ("v1", "v1beta2", "v1beta1")  # what the server offers, preferred first
