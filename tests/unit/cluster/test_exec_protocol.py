"""The exec subresource of the loopback API server, as the real kubernetes client sees it, and
the cluster receiver's side of the channel protocol (forensics/cluster/stream.py)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from forensics.cluster.kube import APIError, Kube, load_client_config
from forensics.cluster.stream import _exit_status, receive
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_exec import V4, V5, ExecRuntime, SimNode
from tests.support.kube_objects import ClusterState, make_capture_pod, make_node
from tests.support.kube_testing import clean_kube_env

__all__ = ["clean_kube_env"]

NS = "gpuforensics"


@pytest.fixture
def served(tmp_path: Path, clean_kube_env: None):
    now = datetime.now(UTC)
    pods = [make_capture_pod("n1", now), make_capture_pod("n2", now, phase="Pending")]
    runtime = ExecRuntime([SimNode("n1", tmp_path / "n1", {"EXTRA": "x"}),
                           SimNode("n2", tmp_path / "n2")])
    with KubeAPIServer(ClusterState(nodes=[make_node("n1", now)], pods=pods), user="bob",
                       exec_runtime=runtime) as api:
        kube = Kube(load_client_config(str(write_kubeconfig(tmp_path / "kc", api.url)), None))
        yield api, runtime, kube, pods
        kube.close()


def _run(kube: Kube, pod: str, command: list[str], out: Path, deadline_s: float = 10.0):
    ws = kube.open_exec(NS, pod, "capture", command, connect_timeout_s=5)
    return receive(ws, out, time.monotonic() + deadline_s, threading.Event())


def test_stdout_to_file_stderr_tail_and_exit_code(served, tmp_path: Path) -> None:
    api, runtime, kube, pods = served
    script = "printf 'bundle-bytes\\000\\377'; echo oops >&2; echo \"$NODE_NAME $EXTRA $PWD\" >&2; exit 3"
    out = _run(kube, pods[0]["metadata"]["name"], ["sh", "-c", script], tmp_path / "o.bin")
    assert out.ended == "exited" and out.exit_code == 3 and out.subprotocol == V5
    assert (tmp_path / "o.bin").read_bytes() == b"bundle-bytes\0\377"  # binary-safe, stdout only
    assert out.stderr_tail == f"oops\nn1 x {tmp_path / 'n1'}\n"  # the pod spec's env: NODE_NAME from spec.nodeName
    assert "non-zero exit code" in (out.status_message or "")
    assert runtime.execs[0].outcome == "exited"


def test_large_output_arrives_whole_in_many_frames(served, tmp_path: Path) -> None:
    _, _, kube, pods = served
    out = _run(kube, pods[0]["metadata"]["name"], ["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' 'a'"], tmp_path / "big")
    assert out.exit_code == 0 and out.stdout_bytes == 3_000_000
    assert (tmp_path / "big").read_bytes() == b"a" * 3_000_000


def test_a_client_offering_only_v4_gets_v4(served) -> None:
    api, _, kube, pods = served
    from kubernetes.stream import ws_client

    _, url, headers, _, _ = kube._api.api_client.param_serialize(
        method="GET", resource_path=f"/api/v1/namespaces/{NS}/pods/{pods[0]['metadata']['name']}/exec",
        header_params={}, auth_settings=["BearerToken"])
    headers["sec-websocket-protocol"] = V4
    client = ws_client.websocket_call(kube.configuration, "GET", url, headers=headers, _preload_content=False,
                                      query_params=[("command", ["sh", "-c", "echo hi"]), ("stdout", "true"),
                                                    ("stderr", "true")], binary=True)
    client.run_forever(timeout=10)
    assert client.subprotocol == V4 and client.returncode == 0
    assert client.read_stdout() == b"hi\n"


def test_refusals_are_the_api_servers(served, tmp_path: Path) -> None:
    api, runtime, kube, pods = served
    api.forbidden.add("pods/exec")
    with pytest.raises(APIError) as denied:
        kube.open_exec(NS, pods[0]["metadata"]["name"], "capture", ["true"], connect_timeout_s=5)
    assert denied.value.kind == "forbidden" and denied.value.status == 403
    assert str(denied.value) == (f'pods "{pods[0]["metadata"]["name"]}" is forbidden: User "bob" cannot create '
                                 f'resource "pods/exec" in API group "" in the namespace "{NS}"')
    api.forbidden.clear()
    with pytest.raises(APIError) as pending:
        kube.open_exec(NS, pods[1]["metadata"]["name"], "capture", ["true"], connect_timeout_s=5)
    assert pending.value.status == 400 and "container not found" in str(pending.value)
    with pytest.raises(APIError) as missing:
        kube.open_exec(NS, "nope", "capture", ["true"], connect_timeout_s=5)
    assert missing.value.kind == "not-found"
    assert runtime.execs == []


def test_a_cut_stream_and_a_deadline(served, tmp_path: Path) -> None:
    _, runtime, kube, pods = served
    runtime.nodes["n1"].cut_after_bytes = 5000
    cut = _run(kube, pods[0]["metadata"]["name"], ["sh", "-c", "head -c 100000 /dev/zero"], tmp_path / "c")
    assert cut.ended == "cut" and cut.stdout_bytes == 5000 and cut.exit_code is None
    runtime.nodes["n1"].cut_after_bytes = None
    t0 = time.monotonic()
    late = _run(kube, pods[0]["metadata"]["name"], ["sleep", "30"], tmp_path / "d", deadline_s=1.0)
    assert late.ended == "deadline" and time.monotonic() - t0 < 3
    assert _wait(lambda: runtime.execs[-1].outcome == "client-gone")


def _wait(pred, timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not pred():
        time.sleep(0.05)
    return bool(pred())


@pytest.mark.parametrize(("raw", "expected"), [
    (b'{"metadata":{},"status":"Success"}', (0, None)),
    (b'{"status":"Failure","message":"m","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"2"}]}}', (2, "m")),
    (b'{"status":"Failure","message":"failed to exec in container: not found","reason":"InternalError"}', (None, "failed to exec in container: not found")),
    (b"not json at all", (None, "not json at all")),
])
def test_exit_status_from_the_error_channel(raw: bytes, expected: tuple[int | None, str | None]) -> None:
    assert _exit_status(raw) == expected


def test_receive_never_overwrites(served, tmp_path: Path) -> None:
    _, _, kube, pods = served
    (tmp_path / "exists").write_bytes(b"evidence")
    with pytest.raises(FileExistsError):
        _run(kube, pods[0]["metadata"]["name"], ["true"], tmp_path / "exists")
    assert (tmp_path / "exists").read_bytes() == b"evidence"
