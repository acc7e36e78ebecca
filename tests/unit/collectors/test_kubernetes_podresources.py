"""The podresources collector and client against a real pod-resources v1 gRPC server."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from forensics.collectors.podresources.client import check_socket, fetch
from forensics.collectors.podresources.collector import PodResourcesCollector
from forensics.errors import SourcePermissionDenied, SourceUnavailable
from tests.support.kube_objects import gpu_node_scenario
from tests.support.kube_testing import Staged, make_ctx
from tests.support.podresources_server import PodResourcesServer, gpu_uuid, mig_uuid

NODE = "gpu-node-07"
MIG = "nvidia.com/mig-1g.10gb"


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    # unix socket paths are limited to 107 bytes: keep it short
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"pr-{os.getpid()}-{tmp_path.name[-20:]}"
    d.mkdir(exist_ok=True)
    yield d / "kubelet.sock"
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def node_pods() -> list[dict]:
    return [p for p in gpu_node_scenario().pods if p["spec"]["nodeName"] == NODE]


def server(sock: Path, mode: str = "ok") -> PodResourcesServer:
    return PodResourcesServer(sock, pods=node_pods(), gpu_ids=[gpu_uuid(i) for i in range(7)],
                              mig_ids={MIG: [mig_uuid(i) for i in range(7)]}, mode=mode)


def collect(tmp_path: Path, sock: Path, **extra: str) -> Staged:
    staged = make_ctx(tmp_path, extra={"podresources.socket": str(sock), **extra})
    PodResourcesCollector(call_timeout_s=0.5).snapshot(staged.ctx)
    return staged


def test_list_and_allocatable_written(tmp_path, sock):
    with server(sock):
        staged = collect(tmp_path, sock)
    assert staged.members() == {"kubernetes/podresources/list.json",
                                "kubernetes/podresources/allocatable.json"}
    assert staged.ctx.partial_reasons == []
    listing = staged.json("kubernetes/podresources/list.json")
    pods = {(p["namespace"], p["name"]): p for p in listing["pod_resources"]}
    trainer = pods[("ml", "trainer-0")]["containers"][0]
    [gpus] = trainer["devices"]
    assert gpus["resource_name"] == "nvidia.com/gpu"
    assert gpus["device_ids"] == [gpu_uuid(i) for i in range(4)]
    assert trainer["cpu_ids"] == list(range(2, 18)), "Guaranteed pod: exclusive CPUs, as numbers"
    assert pods[("ml", "mig-worker-0")]["containers"][0]["devices"][0]["device_ids"] == [mig_uuid(0)]
    assert pods[("research", "notebook-alice")]["containers"][0]["devices"] == [], \
        "NVIDIA_VISIBLE_DEVICES=all is invisible to the device manager"
    assert ("batch", "preprocess-28f9x") not in pods, "evicted pods hold no devices"
    allocatable = staged.json("kubernetes/podresources/allocatable.json")
    ids = [i for d in allocatable["devices"] for i in d["device_ids"]]
    assert len(ids) == 14 and gpu_uuid(6) in ids and mig_uuid(6) in ids
    assert "5 pods, 6 device ids assigned" in staged.ctx.notes


def test_allocatable_read_again_at_the_end_of_the_window(tmp_path, sock):
    from tests.support.podresources_server import allocatable_response

    with server(sock) as pr:
        collect(tmp_path, sock)
        pr.allocatable_response = allocatable_response([gpu_uuid(i) for i in range(7) if i != 5])  # GPU 5 unhealthy
        (tmp_path / "end").mkdir()
        end = make_ctx(tmp_path / "end", extra={"podresources.socket": str(sock)})
        PodResourcesCollector(call_timeout_s=0.5).end_sampling(end.ctx)
    assert end.members() == {"kubernetes/podresources/allocatable-end.json"} and end.ctx.partial_reasons == []
    ids = [i for d in end.json("kubernetes/podresources/allocatable-end.json")["devices"] for i in d["device_ids"]]
    assert ids == [gpu_uuid(i) for i in range(7) if i != 5]


def test_a_failed_end_of_window_read_is_partial(tmp_path, sock):
    with server(sock, "old-kubelet"):
        end = make_ctx(tmp_path, extra={"podresources.socket": str(sock)})
        PodResourcesCollector(call_timeout_s=0.5).end_sampling(end.ctx)
    assert end.members() == set()
    (reason,) = end.ctx.partial_reasons
    assert reason.startswith("end of window: GetAllocatableResources unimplemented")


def test_absent_socket_is_unavailable(tmp_path, sock):
    with pytest.raises(SourceUnavailable, match="no kubelet pod-resources socket"):
        collect(tmp_path, sock)


def test_not_a_socket(tmp_path, sock):
    sock.write_text("")
    with pytest.raises(SourceUnavailable, match="not a unix socket"):
        collect(tmp_path, sock)


def test_refused_is_unavailable(tmp_path, sock):
    with server(sock, "refuse"):
        with pytest.raises(SourceUnavailable, match="Connection refused|UNAVAILABLE"):
            collect(tmp_path, sock)


def test_forbidden_is_permission_denied(tmp_path, sock):
    with server(sock, "forbidden"):
        with pytest.raises(SourcePermissionDenied, match="PERMISSION_DENIED"):
            collect(tmp_path, sock)


def test_socket_without_access_is_permission_denied(sock):
    """As an unprivileged user: root drops to nobody in a forked child."""
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(sock))
        sock.chmod(0o600 if os.geteuid() == 0 else 0o000)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: never returns into pytest
            code = 1
            try:
                os.close(read_end)
                if os.geteuid() == 0:
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)
                try:
                    check_socket(str(sock))
                    os.write(write_end, b"allowed")
                except SourcePermissionDenied as exc:
                    os.write(write_end, f"denied: {exc}".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as f:
            answer = f.read().decode()
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert answer.startswith("denied: permission denied"), answer


def test_old_kubelet_without_allocatable_is_partial(tmp_path, sock):
    with server(sock, "old-kubelet"):
        staged = collect(tmp_path, sock)
    assert staged.members() == {"kubernetes/podresources/list.json"}
    assert staged.ctx.partial_reasons == [
        "GetAllocatableResources unimplemented: GetAllocatableResources: UNIMPLEMENTED: Method not implemented!"]


def test_hanging_kubelet_costs_one_timeout(tmp_path, sock):
    with server(sock, "hang") as srv:
        t0 = time.monotonic()
        with pytest.raises(SourceUnavailable, match="timed out"):
            collect(tmp_path, sock)
        took = time.monotonic() - t0
    assert 0.5 <= took < 1.5, "the second call is not attempted once the first timed out"
    assert len(srv.calls) == 1


def test_fetch_respects_deadline(sock):
    with server(sock, "hang"):
        t0 = time.monotonic()
        result = fetch(str(sock), timeout_s=5.0, deadline=time.monotonic() + 0.3)
        assert time.monotonic() - t0 < 1.0
    assert result.list.status == "timed-out"


def test_generated_modules_match_the_proto(tmp_path):
    """The checked-in *_pb2*.py are what the README's command generates from api.proto."""
    import importlib.util

    from tests.support.env import need

    need(importlib.util.find_spec("grpc_tools") is not None, "grpcio-tools (the dev extra) not installed")
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    proto = "forensics/collectors/podresources/api.proto"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", proto],
                   cwd=root, check=True, timeout=120)
    for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
        generated = (tmp_path / "forensics/collectors/podresources" / name).read_text()
        assert generated == (root / "forensics/collectors/podresources" / name).read_text(), name
