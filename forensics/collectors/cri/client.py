"""gRPC client for the Kubernetes Container Runtime Interface (``runtime.v1.RuntimeService``).

Source: the runtime's CRI socket (containerd ``/run/containerd/containerd.sock``, CRI-O
``/var/run/crio/crio.sock``), the service defined by ``api.proto`` beside this module. Every
call has its own deadline (``call_timeout_s``, capped by the collector's overall deadline);
responses become JSON with the proto's field names (``pod_sandbox_id``, ``created_at``),
default values included, 64-bit integers as numbers (``json_format.MessageToDict``), the
equivalent of ``crictl inspect -o json`` without crictl's re-arrangement.

gRPC failures are translated at one seam (:func:`map_rpc_error`): a runtime that refuses
connections, does not answer ``Version`` within its deadline, or does not implement the
``runtime.v1`` service (a runtime that only speaks ``v1alpha2``) is a :class:`SourceUnavailable`
whose message says which; a later call that fails is a :class:`CallFailed` the collector records
as ``partial``. ``grpc`` and ``protobuf`` are imported lazily (the ``--help`` path never pays for
them).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from forensics.errors import SourcePermissionDenied, SourceUnavailable
from forensics.specs.cri import DEFAULT_ENDPOINTS

__all__ = [
    "DEFAULT_ENDPOINTS",
    "MAX_MESSAGE_BYTES",
    "CallFailed",
    "CriClient",
    "resolve_endpoint",
    "socket_path",
]

MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the kubelet's own limit for CRI responses
SUPPORTED_API = "v1"


class CallFailed(Exception):
    """One CRI call failed after the runtime answered ``Version`` (the collector goes on)."""

    def __init__(self, method: str, code: str, message: str) -> None:
        super().__init__(message)
        self.method = method
        self.code = code


def socket_path(endpoint: str) -> str:
    """The filesystem path of a ``unix://`` endpoint (a bare path is taken as one)."""
    if endpoint.startswith("unix://"):
        return endpoint[len("unix://"):]
    if "://" in endpoint:
        raise SourceUnavailable(f"CRI endpoint {endpoint!r}: only unix:// sockets are supported")
    return endpoint


def resolve_endpoint(configured: str | None) -> str:
    """The configured endpoint, else the first default whose socket exists."""
    if configured:
        return configured if "://" in configured else f"unix://{configured}"
    for endpoint in DEFAULT_ENDPOINTS:
        if os.path.exists(socket_path(endpoint)):
            return endpoint
    tried = ", ".join(socket_path(e) for e in DEFAULT_ENDPOINTS)
    raise SourceUnavailable(f"no CRI runtime socket ({tried}); set cri.endpoint=unix:///PATH")


def _rpc_code(exc: Exception) -> tuple[str, str]:
    code = exc.code() if callable(getattr(exc, "code", None)) else None  # type: ignore[attr-defined]
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)  # type: ignore[attr-defined]
    return (code.name if code is not None else "UNKNOWN"), str(details or "").strip()


def map_rpc_error(method: str, exc: Exception, timeout_s: float, endpoint: str,
                  first: bool) -> Exception:
    """The one translation of a ``grpc.RpcError``: the first call's failure is the runtime's
    (``SourceUnavailable``/``SourcePermissionDenied``), a later one is that call's (``CallFailed``)."""
    code, details = _rpc_code(exc)
    if code == "DEADLINE_EXCEEDED":
        text = f"{method}: no answer within {timeout_s:.1f} s (deadline exceeded)"
    elif code == "UNIMPLEMENTED":
        text = (f"{method}: UNIMPLEMENTED ({details}): the runtime does not serve the CRI "
                f"runtime.v1 API (one that speaks only v1alpha2 predates containerd 1.6 and "
                f"CRI-O 1.23)")
    elif code == "UNAVAILABLE":
        text = f"{method}: UNAVAILABLE: {details or 'connection failed'}"
    else:
        text = f"{method}: {code}: {details}"
    if not first:
        return CallFailed(method, code, text)
    if code == "PERMISSION_DENIED" or "permission denied" in details.lower():
        return SourcePermissionDenied(f"permission denied: CRI runtime at {endpoint}: {text}")
    return SourceUnavailable(f"CRI runtime at {endpoint} not answering: {text}")


@dataclass(frozen=True)
class CallTiming:
    method: str
    duration_s: float


class CriClient:
    """One channel to one runtime; each method returns the response as proto-named JSON.

    ``deadline`` (a ``time.monotonic()`` value) caps every call; ``timings`` keeps the wall time
    each call spent waiting on the runtime (the benchmark subtracts it).
    """

    def __init__(self, endpoint: str, call_timeout_s: float = 5.0,
                 deadline: float | None = None) -> None:
        try:
            import grpc
            from google.protobuf import json_format

            from forensics.collectors.cri import api_pb2, api_pb2_grpc
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise SourceUnavailable(
                f"grpc/protobuf not importable ({exc}); install grpcio>=1.85.1 protobuf>=7.35.1"
            ) from None
        self.endpoint = endpoint
        self.call_timeout_s = call_timeout_s
        self.deadline = deadline
        self.timings: list[CallTiming] = []
        self._grpc: Any = grpc
        self._json: Any = json_format
        self.pb: Any = api_pb2
        self._channel = grpc.insecure_channel(endpoint, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.enable_http_proxy", 0),
            ("grpc.enable_retries", 0),
        ])
        generated: Any = api_pb2_grpc  # generated code is untyped
        self._stub = generated.RuntimeServiceStub(self._channel)
        self._answered = False

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CriClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _budget(self) -> float:
        budget = self.call_timeout_s
        if self.deadline is not None:
            budget = min(budget, self.deadline - time.monotonic())
        return budget

    def to_json(self, message: Any) -> dict[str, Any]:
        doc: dict[str, Any] = self._json.MessageToDict(
            message, always_print_fields_with_no_presence=True,
            preserving_proto_field_name=True, unquote_int64_if_possible=True)
        return doc

    def call(self, method: str, request: Any) -> dict[str, Any]:
        """Call ``method`` with its own deadline; the response as JSON (see the module docstring)."""
        first = not self._answered
        budget = self._budget()
        if budget <= 0:
            err = f"{method}: not attempted, no time left in the collector's budget"
            if first:
                raise SourceUnavailable(f"CRI runtime at {self.endpoint}: {err}")
            raise CallFailed(method, "DEADLINE_EXCEEDED", err)
        t0 = time.monotonic()
        try:
            response = getattr(self._stub, method)(request, timeout=budget, wait_for_ready=False)
        except self._grpc.RpcError as exc:
            self.timings.append(CallTiming(method, time.monotonic() - t0))
            raise map_rpc_error(method, exc, budget, self.endpoint, first) from None
        self.timings.append(CallTiming(method, time.monotonic() - t0))
        self._answered = True
        return self.to_json(response)

    # -- the calls the collector makes ------------------------------------------------------
    def version(self) -> dict[str, Any]:
        """``Version``: runtime name and version, and the CRI API version it speaks.

        A runtime whose ``runtime_api_version`` is not ``v1`` is unavailable, said so.
        """
        doc = self.call("Version", self.pb.VersionRequest(version=SUPPORTED_API))
        api = str(doc.get("runtime_api_version", ""))
        if api != SUPPORTED_API:
            raise SourceUnavailable(
                f"CRI runtime at {self.endpoint} speaks API {api or '(none)'!r}, not "
                f"{SUPPORTED_API!r} ({doc.get('runtime_name', '?')} {doc.get('runtime_version', '?')})")
        return doc

    def list_pod_sandbox(self) -> dict[str, Any]:
        return self.call("ListPodSandbox", self.pb.ListPodSandboxRequest())

    def list_containers(self) -> dict[str, Any]:
        return self.call("ListContainers", self.pb.ListContainersRequest())

    def pod_sandbox_status(self, sandbox_id: str) -> dict[str, Any]:
        return self.call("PodSandboxStatus", self.pb.PodSandboxStatusRequest(
            pod_sandbox_id=sandbox_id, verbose=True))

    def container_status(self, container_id: str) -> dict[str, Any]:
        return self.call("ContainerStatus", self.pb.ContainerStatusRequest(
            container_id=container_id, verbose=True))

    def container_stats(self, container_id: str) -> dict[str, Any]:
        return self.call("ContainerStats", self.pb.ContainerStatsRequest(container_id=container_id))

    def list_container_stats(self) -> dict[str, Any]:
        """``ListContainerStats``: every container's ``ContainerStats`` in one answer."""
        return self.call("ListContainerStats", self.pb.ListContainerStatsRequest())
