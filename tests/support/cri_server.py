"""A CRI ``runtime.v1.RuntimeService`` gRPC server on a unix socket, for tests and the benchmark.

It answers from what a real containerd 1.6.20 answered (``tests/fixtures/cri/containerd-1.6.20.json``,
recorded from the private containerd of tests/support/containerd_engine.py: one pod sandbox and
one container with a device, envs, limits), cloned for ``pods`` x ``containers_per_pod`` with fresh
ids, names and pod UIDs (in the responses and inside the verbose ``info`` JSON), so sizes and
shapes are a real runtime's. It uses the same generated modules as the collector.

Modes (``mode=``):

- ``"ok"``: answers every call the collector makes;
- ``"hang"``: accepts each call and never answers (until the server stops);
- ``"refuse"``: a unix socket that is bound but not listening (connect: ECONNREFUSED);
- ``"v1alpha2"``: no ``runtime.v1`` service at all (a runtime before containerd 1.6 / CRI-O
  1.23): every call is UNIMPLEMENTED;
- ``"old-version"``: ``Version`` answers with ``runtime_api_version: "v1alpha2"``;
- ``"flaky"``: the first container's status is NOT_FOUND (removed meanwhile),
  ``ListContainerStats`` is UNIMPLEMENTED and the second container's ``ContainerStats`` fails
  with INTERNAL.

``python -m tests.support.cri_server SOCKET [PODS] [CONTAINERS]`` serves until SIGTERM (the
benchmark runs it in its own process).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import uuid
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from forensics.collectors.cri import api_pb2, api_pb2_grpc

__all__ = ["FIXTURE", "CriServer", "node_responses"]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cri" / "containerd-1.6.20.json"
MODES = ("ok", "hang", "refuse", "v1alpha2", "old-version", "flaky")


def _hex_id(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def _replace_all(obj: Any, subst: dict[str, str]) -> Any:
    """Every string in ``obj`` with each key of ``subst`` replaced (ids inside JSON strings too)."""
    if isinstance(obj, str):
        for old, new in subst.items():
            obj = obj.replace(old, new)
        return obj
    if isinstance(obj, list):
        return [_replace_all(v, subst) for v in obj]
    if isinstance(obj, dict):
        return {_replace_all(k, subst): _replace_all(v, subst) for k, v in obj.items()}
    return obj


def node_responses(pods: int = 1, containers_per_pod: int = 1, seed: str = "node") -> dict[str, Any]:
    """JSON responses for a node of ``pods`` x ``containers_per_pod``, cloned from the fixture.

    Returns ``{"version", "pods", "containers", "sandbox_status": {id: doc},
    "container_status": {id: doc}, "container_stats": {id: doc}}``.
    """
    real = json.loads(FIXTURE.read_text())
    [sandbox] = real["pods"]["items"]
    container = next(c for c in real["containers"]["containers"] if c["pod_sandbox_id"] == sandbox["id"])
    meta = sandbox["metadata"]
    out: dict[str, Any] = {"version": real["version"], "pods": {"items": []},
                           "containers": {"containers": []}, "sandbox_status": {},
                           "container_status": {}, "container_stats": {}}
    for p in range(pods):
        uid = str(uuid.UUID(bytes=hashlib.sha256(f"{seed}/pod/{p}".encode()).digest()[:16]))
        sid = _hex_id(seed, "sandbox", p)
        pod_subst = {sandbox["id"]: sid, meta["uid"]: uid, meta["name"]: f"worker-{p}",
                     f'"{meta["namespace"]}"': '"batch"'}
        out["pods"]["items"].append(_replace_all(sandbox, pod_subst))
        out["sandbox_status"][sid] = _replace_all(real["sandbox_status"], pod_subst)
        for c in range(containers_per_pod):
            cid = _hex_id(seed, "container", p, c)
            subst = {**pod_subst, container["id"]: cid,
                     f'"{container["metadata"]["name"]}"': f'"c{c}"'}
            out["containers"]["containers"].append(_replace_all(container, subst))
            out["container_status"][cid] = _replace_all(real["container_status"], subst)
            out["container_stats"][cid] = _replace_all(real["container_stats"], subst)
    return out


def _parse(doc: dict[str, Any], message: Any) -> Any:
    return json_format.ParseDict(doc, message, ignore_unknown_fields=True)


class _Servicer(api_pb2_grpc.RuntimeServiceServicer):
    def __init__(self, server: CriServer) -> None:
        self.s = server

    def _gate(self, method: str, context: grpc.ServicerContext) -> None:
        self.s.calls.append(method)
        if self.s.mode == "hang":
            while context.is_active() and not self.s._stopping.wait(0.05):
                pass
            context.abort(grpc.StatusCode.UNAVAILABLE, "server stopping")

    def Version(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._gate("Version", context)
        return self.s.version

    def ListPodSandbox(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._gate("ListPodSandbox", context)
        return self.s.pods

    def ListContainers(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._gate("ListContainers", context)
        return self.s.containers

    def PodSandboxStatus(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._gate("PodSandboxStatus", context)
        resp = self.s.sandbox_status.get(request.pod_sandbox_id)
        if resp is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"an error occurred when try to find sandbox "
                                                     f"{request.pod_sandbox_id!r}: not found")
        return resp

    def ContainerStatus(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._gate("ContainerStatus", context)
        resp = self.s.container_status.get(request.container_id)
        if resp is None or (self.s.mode == "flaky" and request.container_id == self.s.ids[0]):
            context.abort(grpc.StatusCode.NOT_FOUND, f"an error occurred when try to find "
                                                     f"container {request.container_id!r}: not found")
        return resp

    def ListContainerStats(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._gate("ListContainerStats", context)
        if self.s.mode == "flaky":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "ListContainerStats not implemented")
        return api_pb2.ListContainerStatsResponse(
            stats=[self.s.container_stats[i].stats for i in self.s.ids if i in self.s.container_stats])

    def ContainerStats(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self._gate("ContainerStats", context)
        if self.s.mode == "flaky" and request.container_id == self.s.ids[1]:
            context.abort(grpc.StatusCode.INTERNAL, "failed to decode container metrics")
        resp = self.s.container_stats.get(request.container_id)
        if resp is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "container not found")
        return resp


class CriServer:
    """A CRI server bound to ``socket_path`` (a thread pool; ``stop()`` cleans up)."""

    def __init__(self, socket_path: str | os.PathLike[str], pods: int = 2,
                 containers_per_pod: int = 2, mode: str = "ok",
                 responses: dict[str, Any] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.socket_path = Path(socket_path)
        self.mode = mode
        self.calls: list[str] = []
        self._stopping = threading.Event()
        self.responses = responses or node_responses(pods, containers_per_pod)
        r = copy.deepcopy(self.responses)
        if mode == "old-version":
            r["version"]["runtime_api_version"] = "v1alpha2"
        self.version = _parse(r["version"], api_pb2.VersionResponse())
        self.pods = _parse(r["pods"], api_pb2.ListPodSandboxResponse())
        self.containers = _parse(r["containers"], api_pb2.ListContainersResponse())
        self.sandbox_status = {k: _parse(v, api_pb2.PodSandboxStatusResponse())
                               for k, v in r["sandbox_status"].items()}
        self.container_status = {k: _parse(v, api_pb2.ContainerStatusResponse())
                                 for k, v in r["container_status"].items()}
        self.container_stats = {k: _parse(v, api_pb2.ContainerStatsResponse())
                                for k, v in r["container_stats"].items()}
        self.ids = [c["id"] for c in r["containers"]["containers"]]
        self._server: grpc.Server | None = None
        self._sock: socket.socket | None = None

    def start(self) -> CriServer:
        if self.mode == "refuse":
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.bind(str(self.socket_path))  # bound, never listening
            return self
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        if self.mode != "v1alpha2":
            api_pb2_grpc.add_RuntimeServiceServicer_to_server(_Servicer(self), server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.socket_path.unlink(missing_ok=True)

    def __enter__(self) -> CriServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    sock = argv[0]
    pods = int(argv[1]) if len(argv) > 1 else 110
    per_pod = int(argv[2]) if len(argv) > 2 else 2
    server = CriServer(sock, pods, per_pod).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print("ready", flush=True)
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
