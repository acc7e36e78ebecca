"""A real kubelet pod-resources v1 gRPC server on a unix socket, for tests and sample bundles.

It serves ``/v1.PodResourcesLister/List`` and ``GetAllocatableResources`` from the same
``api.proto`` as the collector's client (forensics/collectors/podresources/). The allocation map
is built from Kubernetes Pod objects the way the kubelet's device manager builds it: every
container with an ``nvidia.com/gpu`` (or ``nvidia.com/mig-*``) limit gets that many device ids,
Guaranteed pods with integer CPU get exclusive CPU ids, containers without devices still appear.

Modes (``mode=``):

- ``"ok"``: answers both methods;
- ``"hang"``: accepts the call and never answers (until the server stops);
- ``"refuse"``: a unix socket that is bound but not listening (connect: ECONNREFUSED);
- ``"old-kubelet"``: only ``List`` is implemented (kubelet < 1.21: UNIMPLEMENTED for the other);
- ``"forbidden"``: every call ends with PERMISSION_DENIED.

Usage::

    with PodResourcesServer(tmp_path / "kubelet.sock", pods=pods) as srv:
        fetch(str(srv.socket_path))
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import uuid
from collections.abc import Iterable, Mapping
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from forensics.collectors.podresources import api_pb2, api_pb2_grpc

__all__ = [
    "PodResourcesServer",
    "allocatable_response",
    "gpu_uuid",
    "list_response_from_pods",
    "mig_uuid",
]

MODES = ("ok", "hang", "refuse", "old-kubelet", "forbidden")


def gpu_uuid(index: int, seed: str = "gpu-node") -> str:
    """A stable, realistic NVML GPU UUID (``GPU-8f2c1a3e-...``) for GPU ``index``."""
    digest = hashlib.sha256(f"{seed}/gpu/{index}".encode()).digest()
    return "GPU-" + str(uuid.UUID(bytes=digest[:16]))


def mig_uuid(index: int, seed: str = "gpu-node") -> str:
    """A stable MIG device UUID (``MIG-...``), the form NVML reports since R470."""
    digest = hashlib.sha256(f"{seed}/mig/{index}".encode()).digest()
    return "MIG-" + str(uuid.UUID(bytes=digest[:16]))


def _int_quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def list_response_from_pods(
    pods: Iterable[Mapping[str, Any]],
    gpu_ids: list[str],
    mig_ids: Mapping[str, list[str]] | None = None,
    numa_of: Mapping[str, int] | None = None,
    claims: Iterable[Mapping[str, Any]] = (),
) -> api_pb2.ListPodResourcesResponse:
    """Assign devices to the pods' containers as the kubelet device manager would.

    ``claims`` (ResourceClaim objects, tests/support/dra_objects.py): a container that uses a claim
    (``resources.claims`` through the pod's ``spec.resourceClaims``, or an extended resource the
    pod's ``status.extendedResourceClaimStatus`` maps to a claim request) gets its allocated devices
    as ``dynamic_resources`` (claim name and namespace, driver, pool, device, and the CDI device
    NVIDIA's driver names ``k8s.gpu.nvidia.com/claim=<claim uid>-<device>``), as the kubelet's DRA
    manager reports them (kubelet pod-resources v1 ``DynamicResource``); an extended resource served
    by DRA gets no device plugin ids.

    ``gpu_ids`` are handed out in order to containers with an ``nvidia.com/gpu`` limit;
    ``mig_ids`` maps a MIG resource name (``nvidia.com/mig-1g.10gb``), or any other resource such as
    a renamed time-slicing one (``nvidia.com/gpu.shared`` with ``GPU-<uuid>::N`` replicas), to its device ids.
    Pods not Running/Pending (evicted, succeeded) hold no devices and are left out, like the
    kubelet does once it has released their resources.
    """
    free_gpus = list(gpu_ids)
    free_migs = {k: list(v) for k, v in (mig_ids or {}).items()}
    numa_of = numa_of or {}
    next_cpu = 2  # kubelet reserves the first CPUs for system daemons in a typical setup
    response = api_pb2.ListPodResourcesResponse()
    for pod in pods:
        phase = pod.get("status", {}).get("phase")
        if phase not in ("Running", "Pending"):
            continue
        meta = pod["metadata"]
        pr = response.pod_resources.add(name=meta["name"], namespace=meta["namespace"])
        guaranteed = pod.get("status", {}).get("qosClass") == "Guaranteed"
        by_name = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        for container in pod["spec"].get("containers", []):
            cr = pr.containers.add(name=container["name"])
            limits = container.get("resources", {}).get("limits", {})
            served = _dynamic_resources(cr, pod, container["name"], by_name)
            for resource, quantity in sorted(limits.items()):
                if resource in served:
                    continue
                n = _int_quantity(quantity)
                if resource == "nvidia.com/gpu":
                    ids, free_gpus = free_gpus[:n], free_gpus[n:]
                elif resource.startswith("nvidia.com/mig-") or resource in free_migs:
                    pool = free_migs.get(resource, [])
                    ids, free_migs[resource] = pool[:n], pool[n:]
                else:
                    continue
                if not ids:
                    continue
                dev = cr.devices.add(resource_name=resource, device_ids=ids)
                numa = {numa_of.get(i.split("::")[0], 0) for i in ids}
                for node in sorted(numa):
                    dev.topology.nodes.add(ID=node)
            cpu = limits.get("cpu")
            if guaranteed and cpu is not None and str(cpu).isdigit():
                count = int(str(cpu))
                cr.cpu_ids.extend(range(next_cpu, next_cpu + count))
                next_cpu += count
    return response


def _dynamic_resources(cr: Any, pod: Mapping[str, Any], container: str,
                       claims: Mapping[tuple[str, str], Mapping[str, Any]]) -> set[str]:
    """Add the container's claims' devices as ``dynamic_resources``; the extended resources they serve."""
    ns = pod["metadata"]["namespace"]
    status = pod.get("status", {})
    generated = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses", [])}
    pod_claims = {rc["name"]: rc.get("resourceClaimName") or generated.get(rc["name"])
                  for rc in pod["spec"].get("resourceClaims", [])}
    uses: list[tuple[str | None, str | None]] = []
    spec_c = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    for use in spec_c.get("resources", {}).get("claims", []):
        uses.append((pod_claims.get(use["name"]), use.get("request")))
    served: set[str] = set()
    ext = status.get("extendedResourceClaimStatus") or {}
    for m in ext.get("requestMappings", []):
        if m["containerName"] == container:
            uses.append((ext["resourceClaimName"], m["requestName"]))
            served.add(m["resourceName"])
    for claim_name, request in uses:
        claim = claims.get((ns, claim_name or ""))
        if claim is None:
            continue
        results = [r for r in claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
                   if request is None or r["request"] == request]
        if not results:
            continue
        dr = cr.dynamic_resources.add(claim_name=claim_name, claim_namespace=ns)
        for r in results:
            res = dr.claim_resources.add(driver_name=r["driver"], pool_name=r["pool"], device_name=r["device"])
            res.cdi_devices.add(name=f"k8s.gpu.nvidia.com/claim={claim['metadata']['uid']}-{r['device']}")
    return served


def allocatable_response(
    gpu_ids: list[str],
    mig_ids: Mapping[str, list[str]] | None = None,
    numa_of: Mapping[str, int] | None = None,
    cpu_count: int = 64,
    memory_bytes_per_numa: int = 512 * 1024**3,
    numa_nodes: int = 2,
) -> api_pb2.AllocatableResourcesResponse:
    """What the kubelet reports as allocatable: every device, CPUs and memory per NUMA node."""
    numa_of = numa_of or {}
    resp = api_pb2.AllocatableResourcesResponse()
    for gid in gpu_ids:
        dev = resp.devices.add(resource_name="nvidia.com/gpu", device_ids=[gid])
        dev.topology.nodes.add(ID=numa_of.get(gid, 0))
    for resource, ids in sorted((mig_ids or {}).items()):
        for mid in ids:
            dev = resp.devices.add(resource_name=resource, device_ids=[mid])
            dev.topology.nodes.add(ID=numa_of.get(mid, 0))
    resp.cpu_ids.extend(range(2, cpu_count))
    for node in range(numa_nodes):
        mem = resp.memory.add(memory_type="memory", size=memory_bytes_per_numa)
        mem.topology.nodes.add(ID=node)
    return resp


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, server: PodResourcesServer) -> None:
        self._server = server

    def _gate(self, context: grpc.ServicerContext) -> None:
        self._server.calls.append(context.peer())
        if self._server.mode == "hang":
            while context.is_active() and not self._server._stopping.wait(0.05):
                pass
            context.abort(grpc.StatusCode.UNAVAILABLE, "server stopping")
        if self._server.mode == "forbidden":
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "pod-resources: access denied")

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._gate(context)
        return self._server.list_response

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._gate(context)
        return self._server.allocatable_response


class _OldKubeletServicer(_Servicer):
    """kubelet < 1.21: GetAllocatableResources is not implemented."""

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return api_pb2_grpc.PodResourcesListerServicer.GetAllocatableResources(
            self, request, context
        )


class PodResourcesServer:
    """A pod-resources server bound to ``socket_path`` (a thread pool; stop() cleans up)."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        pods: Iterable[Mapping[str, Any]] = (),
        gpu_ids: list[str] | None = None,
        mig_ids: Mapping[str, list[str]] | None = None,
        mode: str = "ok",
        list_response: api_pb2.ListPodResourcesResponse | None = None,
        allocatable: api_pb2.AllocatableResourcesResponse | None = None,
        claims: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.socket_path = Path(socket_path)
        self.mode = mode
        gpu_ids = gpu_ids if gpu_ids is not None else [gpu_uuid(i) for i in range(8)]
        numa_of = {g: (0 if i < len(gpu_ids) // 2 else 1) for i, g in enumerate(gpu_ids)}
        self.list_response = list_response or list_response_from_pods(
            list(pods), gpu_ids, mig_ids, numa_of, list(claims)
        )
        self.allocatable_response = allocatable or allocatable_response(gpu_ids, mig_ids, numa_of)
        self.calls: list[str] = []
        self._stopping = threading.Event()
        self._grpc: grpc.Server | None = None
        self._sock: socket.socket | None = None

    def start(self) -> PodResourcesServer:
        if self.socket_path.exists():
            self.socket_path.unlink()
        if self.mode == "refuse":
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.bind(str(self.socket_path))  # bound, never listening
            return self
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        servicer = _OldKubeletServicer(self) if self.mode == "old-kubelet" else _Servicer(self)
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, self._grpc)
        port = self._grpc.add_insecure_port(f"unix://{self.socket_path}")
        if port == 0:
            raise RuntimeError(f"cannot bind {self.socket_path}")
        self._grpc.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._grpc is not None:
            self._grpc.stop(grace=0).wait(5)
            self._grpc = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.socket_path.exists():
            self.socket_path.unlink()

    def __enter__(self) -> PodResourcesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
