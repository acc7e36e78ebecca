"""The cri collector and client against a real CRI runtime.v1 gRPC server (tests/support/cri_server.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from forensics.collectors.cri.client import DEFAULT_ENDPOINTS, resolve_endpoint, socket_path
from forensics.collectors.cri.collector import CriCollector, cgroup_path_of
from forensics.errors import SourceUnavailable
from tests.support.cri_server import CriServer, node_responses
from tests.support.kube_testing import Staged, make_ctx

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def sock(tmp_path: Path):
    # unix socket paths are limited to 107 bytes: keep it short
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"cri-{os.getpid()}-{tmp_path.name[-20:]}"
    d.mkdir(exist_ok=True)
    yield d / "cri.sock"
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def collect(tmp_path: Path, sock: Path, redact: bool = True, **extra: str) -> Staged:
    staged = make_ctx(tmp_path, redact=redact, extra={"cri.endpoint": f"unix://{sock}", **extra})
    CriCollector(call_timeout_s=0.5).snapshot(staged.ctx)
    return staged


def info(doc: dict) -> dict:
    return json.loads(doc["info"]["info"])


def test_every_call_written_with_proto_field_names(tmp_path, sock):
    with CriServer(sock, pods=3, containers_per_pod=2) as srv:
        staged = collect(tmp_path, sock)
    sandboxes = [p["id"] for p in srv.responses["pods"]["items"]]
    containers = srv.ids
    assert staged.members() == {
        "cri/version.json", "cri/pods.json", "cri/containers.json",
        "cri/stats.json",
        *(f"cri/pods/{s}.json" for s in sandboxes),
        *(f"cri/containers/{c}.json" for c in containers),
    }
    assert staged.ctx.partial_reasons == []
    assert staged.json("cri/version.json")["runtime_api_version"] == "v1"
    listing = staged.json("cri/containers.json")["containers"]
    assert {c["pod_sandbox_id"] for c in listing} == set(sandboxes), "proto names, not camelCase"
    status = staged.json(f"cri/containers/{containers[0]}.json")
    spec = info(status)["runtimeSpec"]
    assert spec["linux"]["devices"][0]["path"] == "/dev/nvidia0"
    assert {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"} in \
        spec["linux"]["resources"]["devices"]
    assert status["status"]["resources"]["linux"]["memory_limit_in_bytes"] == 64 << 20
    stats = staged.json("cri/stats.json")["stats"]
    assert [s["attributes"]["id"] for s in stats] == containers
    assert stats[0]["memory"]["working_set_bytes"]["value"] > 0
    assert "3 pod sandboxes, 6 containers, 13 CRI calls" in staged.ctx.notes
    assert any("containerd 1.6.20~ds1 (CRI v1)" in n for n in staged.ctx.notes)
    hints = staged.ctx.published
    assert set(hints) == {"cgroup_paths", "pids"}
    assert all(p.startswith("/kubepods/burstable/pod") for p in hints["cgroup_paths"])
    assert len(hints["cgroup_paths"]) == 3 + 6 and hints["pids"]


def test_secrets_redacted_grants_kept(tmp_path, sock):
    with CriServer(sock, pods=1, containers_per_pod=1) as srv:
        staged = collect(tmp_path, sock)
    for member in staged.members():
        assert "hunter2" not in (staged.root / member).read_text(), member
    status = staged.json(f"cri/containers/{srv.ids[0]}.json")
    parsed = info(status)
    env = parsed["runtimeSpec"]["process"]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=0" in env and "NVIDIA_VISIBLE_DEVICES=all" in env
    assert any(e.startswith("DB_PASSWORD=<redacted:") for e in env)
    [db] = [kv for kv in parsed["config"]["envs"] if kv["key"] == "DB_PASSWORD"]
    assert db["value"].startswith("<redacted:")
    sid = srv.responses["pods"]["items"][0]["id"]
    sandbox = staged.json(f"cri/pods/{sid}.json")
    applied = json.loads(sandbox["status"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert applied["spec"]["containers"][0]["env"][0]["value"].startswith("<redacted:")
    assert staged.ctx.redactor.counts["env"] >= 4


def test_no_redact_keeps_the_runtimes_info_string(tmp_path, sock):
    with CriServer(sock, pods=1, containers_per_pod=1) as srv:
        staged = collect(tmp_path, sock, redact=False)
    cid = srv.ids[0]
    written = staged.json(f"cri/containers/{cid}.json")["info"]["info"]
    assert written == srv.responses["container_status"][cid]["info"]["info"]


def test_removed_meanwhile_is_a_race_other_failures_partial(tmp_path, sock):
    with CriServer(sock, pods=2, containers_per_pod=1, mode="flaky") as srv:
        staged = collect(tmp_path, sock)
    first, second = srv.ids
    assert f"cri/containers/{first}.json" not in staged.members()
    assert any("removed meanwhile" in n and first[:12] in n for n in staged.ctx.notes)
    assert f"cri/containers/{second}.json" in staged.members()
    assert any("ListContainerStats: UNIMPLEMENTED" in n and "ContainerStats of 2 running" in n
               for n in staged.ctx.notes)
    stats = staged.json("cri/stats.json")["stats"]
    assert [s["attributes"]["id"] for s in stats] == [first], "the second's stats failed"
    [reason] = staged.ctx.partial_reasons
    assert "ContainerStats: INTERNAL: failed to decode container metrics" in reason


def test_absent_socket_is_unavailable(tmp_path, sock):
    with pytest.raises(SourceUnavailable, match="no CRI runtime socket at"):
        collect(tmp_path, sock)


def test_not_a_socket(tmp_path, sock):
    sock.write_text("")
    with pytest.raises(SourceUnavailable, match="not a unix socket"):
        collect(tmp_path, sock)


def test_refusing_socket_is_unavailable(tmp_path, sock):
    with CriServer(sock, mode="refuse"), \
            pytest.raises(SourceUnavailable, match=r"not answering: Version: UNAVAILABLE"):
        collect(tmp_path, sock)


def test_hanging_runtime_costs_one_deadline(tmp_path, sock):
    with CriServer(sock, mode="hang") as srv:
        t0 = time.monotonic()
        with pytest.raises(SourceUnavailable, match=r"Version: no answer within 0.5 s"):
            collect(tmp_path, sock)
        took = time.monotonic() - t0
    assert 0.4 <= took < 2.0
    assert srv.calls == ["Version"], "nothing else is tried once Version timed out"


def test_runtime_without_v1_is_unavailable(tmp_path, sock):
    with CriServer(sock, mode="v1alpha2"), \
            pytest.raises(SourceUnavailable, match=r"UNIMPLEMENTED.*does not serve the CRI runtime.v1 API"):
        collect(tmp_path, sock)


def test_runtime_claiming_another_version_is_unavailable(tmp_path, sock):
    with CriServer(sock, mode="old-version"), \
            pytest.raises(SourceUnavailable, match=r"speaks API 'v1alpha2', not 'v1' \(containerd"):
        collect(tmp_path, sock)
    assert not (tmp_path / "staging" / "cri").exists()


def test_endpoint_resolution(tmp_path, monkeypatch):
    assert resolve_endpoint("/run/x.sock") == "unix:///run/x.sock"
    assert resolve_endpoint("unix:///run/x.sock") == "unix:///run/x.sock"
    assert socket_path("unix:///run/x.sock") == "/run/x.sock"
    with pytest.raises(SourceUnavailable, match="only unix://"):
        socket_path("tcp://10.0.0.1:1234")
    monkeypatch.setattr(os.path, "exists", lambda p: p == "/var/run/crio/crio.sock")
    assert resolve_endpoint(None) == DEFAULT_ENDPOINTS[1]
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    with pytest.raises(SourceUnavailable, match="set cri.endpoint="):
        resolve_endpoint(None)


def test_cgroup_path_of_both_drivers():
    assert cgroup_path_of("/kubepods/burstable/podu/abc") == "/kubepods/burstable/podu/abc"
    assert cgroup_path_of("kubepods-burstable-podu.slice:cri-containerd:abc") == \
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu.slice/cri-containerd-abc.scope"
    assert cgroup_path_of("kubepods-podu.slice:crio:abc") == \
        "/kubepods.slice/kubepods-podu.slice/crio-abc.scope"


def test_node_responses_clone_ids_everywhere():
    r = node_responses(2, 2)
    ids = [c["id"] for c in r["containers"]["containers"]]
    assert len(set(ids)) == 4
    for cid in ids:
        parsed = json.loads(r["container_status"][cid]["info"]["info"])
        assert parsed["runtimeSpec"]["linux"]["cgroupsPath"].endswith(cid)


def test_generated_modules_match_the_proto(tmp_path):
    """The checked-in *_pb2*.py are what the README's command generates from api.proto."""
    import importlib.util
    import subprocess
    import sys

    from tests.support.env import need

    need(importlib.util.find_spec("grpc_tools") is not None, "grpcio-tools (the test extra) not installed")
    proto = "forensics/collectors/cri/api.proto"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", proto],
                   cwd=ROOT, check=True, timeout=120)
    for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
        generated = (tmp_path / "forensics/collectors/cri" / name).read_text()
        assert generated == (ROOT / "forensics/collectors/cri" / name).read_text(), name


def test_client_calls_exist_in_the_proto():
    """Every method the collector calls is an rpc of runtime.v1.RuntimeService in the shipped proto."""
    from forensics.collectors.cri import api_pb2

    service = api_pb2.DESCRIPTOR.services_by_name["RuntimeService"]
    assert service.full_name == "runtime.v1.RuntimeService"
    for method in ("Version", "ListPodSandbox", "ListContainers", "PodSandboxStatus",
                   "ContainerStatus", "ContainerStats"):
        assert method in service.methods_by_name, method
    assert "verbose" in api_pb2.ContainerStatusRequest.DESCRIPTOR.fields_by_name
