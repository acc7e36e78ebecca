"""gRPC client for the kubelet pod-resources API v1 over its unix socket.

Source: the kubelet's ``PodResourcesLister`` service on
``/var/lib/kubelet/pod-resources/kubelet.sock`` (``api.proto`` beside this module):

- ``/v1.PodResourcesLister/List``: which pod and container holds which device ids
  (``nvidia.com/gpu`` -> ``GPU-<uuid>``, ``nvidia.com/mig-*`` -> ``MIG-<uuid>``), CPUs, memory;
- ``/v1.PodResourcesLister/GetAllocatableResources``: every device the kubelet can hand out.

Each response is turned into JSON with the proto field names (``pod_resources``,
``resource_name``, ``device_ids``), default values included and 64-bit integers as numbers.
A method that fails is kept as the reason it failed, so one part can be missing while the
other is collected. ``grpc`` is imported lazily: only this function needs it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from forensics.errors import SourceUnavailable
from forensics.hostfs.files import check_socket as hostfs_check_socket
from forensics.specs.podresources import DEFAULT_SOCKET

__all__ = [
    "DEFAULT_SOCKET",
    "MAX_MESSAGE_BYTES",
    "METHODS",
    "PartResult",
    "PodResourcesResult",
    "check_socket",
    "fetch",
]


MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the kubelet's own limit for this API
METHODS = ("List", "GetAllocatableResources")

# part status values
OK = "ok"
UNAVAILABLE = "unavailable"
PERMISSION_DENIED = "permission-denied"
TIMED_OUT = "timed-out"
UNIMPLEMENTED = "unimplemented"
ERROR = "error"


@dataclass(frozen=True)
class PartResult:
    """The outcome of one RPC: its JSON document, or why there is none."""

    method: str
    status: str
    document: dict[str, Any] | None
    error: str | None
    duration_s: float


@dataclass(frozen=True)
class PodResourcesResult:
    """Both RPCs against one socket."""

    socket_path: str
    list: PartResult
    allocatable: PartResult

    @property
    def parts(self) -> tuple[PartResult, PartResult]:
        return (self.list, self.allocatable)


def check_socket(socket_path: str) -> None:
    """Raise ``SourceUnavailable`` / ``SourcePermissionDenied`` unless the socket is usable."""
    hostfs_check_socket(socket_path, "kubelet pod-resources")


def _classify(code_name: str, details: str) -> str:
    if code_name == "DEADLINE_EXCEEDED":
        return TIMED_OUT
    if code_name == "UNIMPLEMENTED":
        return UNIMPLEMENTED
    if code_name == "PERMISSION_DENIED" or "permission denied" in details.lower():
        return PERMISSION_DENIED
    if code_name == "UNAVAILABLE":
        return UNAVAILABLE
    return ERROR


def fetch(socket_path: str = DEFAULT_SOCKET, timeout_s: float = 5.0,
          deadline: float | None = None) -> PodResourcesResult:
    """Call ``List`` and ``GetAllocatableResources``, each with at most ``timeout_s``.

    ``deadline`` (a ``time.monotonic()`` value) caps both calls together. Raises
    ``SourceUnavailable`` / ``SourcePermissionDenied`` only when the socket itself is absent or
    not accessible; failures of a call are returned in its :class:`PartResult`.
    """
    check_socket(socket_path)
    try:
        import grpc
        from google.protobuf import json_format

        from forensics.collectors.podresources import api_pb2, api_pb2_grpc
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise SourceUnavailable(
            f"grpc/protobuf not importable ({exc}); install grpcio>=1.85.1 protobuf>=7.35.1"
        ) from None

    channel = grpc.insecure_channel(
        f"unix://{socket_path}",
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.enable_http_proxy", 0),
        ],
    )
    try:
        generated: Any = api_pb2_grpc  # generated code is untyped
        stub = generated.PodResourcesListerStub(channel)
        calls: list[tuple[str, Any, Any]] = [
            ("List", stub.List, api_pb2.ListPodResourcesRequest()),
            ("GetAllocatableResources", stub.GetAllocatableResources,
             api_pb2.AllocatableResourcesRequest()),
        ]
        results: list[PartResult] = []
        for method, call, request in calls:
            t0 = time.monotonic()
            if results and results[-1].status == TIMED_OUT:
                results.append(PartResult(method, TIMED_OUT, None,
                                          f"not attempted: {results[-1].method} timed out", 0.0))
                continue
            budget = timeout_s
            if deadline is not None:
                budget = min(budget, deadline - t0)
            if budget <= 0:
                results.append(PartResult(method, TIMED_OUT, None,
                                          "no time left in the collector's budget", 0.0))
                continue
            try:
                response = call(request, timeout=budget)
            except grpc.RpcError as exc:
                code = exc.code() if callable(getattr(exc, "code", None)) else None
                code_name = code.name if code is not None else "UNKNOWN"
                details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
                status = _classify(code_name, details or "")
                message = f"{method}: {code_name}: {details}"
                if status == TIMED_OUT:
                    message = f"{method}: timed out after {budget:.1f} s ({details})"
                results.append(PartResult(method, status, None, message, time.monotonic() - t0))
                continue
            document = json_format.MessageToDict(
                response,
                always_print_fields_with_no_presence=True,
                preserving_proto_field_name=True,
                unquote_int64_if_possible=True,
            )
            results.append(PartResult(method, OK, document, None, time.monotonic() - t0))
        return PodResourcesResult(socket_path, results[0], results[1])
    finally:
        channel.close()
