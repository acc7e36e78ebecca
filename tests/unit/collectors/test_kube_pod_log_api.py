"""The loopback API server's pods/{name}/log, read by the real kubernetes client as the kubelet
answers it: container, previous, timestamps, sinceSeconds, tailLines, limitBytes, RBAC."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forensics.parsing.logsignals.cuda import CudaOom
from forensics.parsing.logsignals.scan import scan_log
from tests.support import log_lines as L
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import gpu_node_scenario

kubernetes = pytest.importorskip("kubernetes")


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[KubeAPIServer, object]]:
    with KubeAPIServer(gpu_node_scenario()) as server:
        config = write_kubeconfig(tmp_path / "kubeconfig", server.url)
        client = kubernetes.config.new_client_from_config(config_file=str(config))
        yield server, kubernetes.client.CoreV1Api(client)
        client.close()


def test_previous_instance_with_timestamps(api: tuple[KubeAPIServer, object]) -> None:
    server, core = api
    now = time.time()
    crash = [(now - 30, "loading model"), (now - 20.5, L.TORCH_OOM_NEW.text)]
    server.set_pod_log("ml", "inference-7d9c8b6f5-x2k4q", "server", crash, previous=True)
    server.set_pod_log("ml", "inference-7d9c8b6f5-x2k4q", "server", [(now - 1, "restarted, serving")])
    text = core.read_namespaced_pod_log("inference-7d9c8b6f5-x2k4q", "ml", container="server", previous=True,
                                        timestamps=True, since_seconds=3600, limit_bytes=262144)
    lines = text.splitlines()
    assert len(lines) == 2 and lines[1].endswith(L.TORCH_OOM_NEW.text)
    ((no, oom),) = list(scan_log(text))
    assert no == 2 and isinstance(oom, CudaOom) and oom.t == pytest.approx(now - 20.5, abs=1e-6)
    current = core.read_namespaced_pod_log("inference-7d9c8b6f5-x2k4q", "ml", container="server")
    assert current == "restarted, serving\n"
    _, path, query = server.requests[0]
    assert path == "/api/v1/namespaces/ml/pods/inference-7d9c8b6f5-x2k4q/log"
    assert query == {"container": "server", "previous": "true", "timestamps": "true", "sinceSeconds": "3600",
                     "limitBytes": "262144"}


def test_since_tail_and_limit_bytes(api: tuple[KubeAPIServer, object]) -> None:
    server, core = api
    now = time.time()
    server.set_pod_log("ml", "trainer-0", "trainer", [(now - 600, "old"), (now - 50, "a" * 10), (now - 5, "b" * 10)])
    assert core.read_namespaced_pod_log("trainer-0", "ml", since_seconds=60) == "a" * 10 + "\n" + "b" * 10 + "\n"
    assert core.read_namespaced_pod_log("trainer-0", "ml", tail_lines=1) == "b" * 10 + "\n"
    # limitBytes stops the output after that many bytes: the oldest are kept, mid-line
    assert core.read_namespaced_pod_log("trainer-0", "ml", limit_bytes=6) == "old\naa"


def test_timestamps_are_go_rfc3339nano(api: tuple[KubeAPIServer, object]) -> None:
    server, core = api
    server.set_pod_log("ml", "trainer-0", "trainer", [(1795960987.0, "x"), (1795960987.25, "y")])
    assert core.read_namespaced_pod_log("trainer-0", "ml", timestamps=True) == (
        "2026-11-29T14:03:07Z x\n2026-11-29T14:03:07.25Z y\n")


def test_a_log_still_being_written(api: tuple[KubeAPIServer, object]) -> None:
    server, core = api
    now = time.time()
    server.append_pod_log("ml", "trainer-0", "trainer", now - 2, "step 1")
    first = core.read_namespaced_pod_log("trainer-0", "ml", timestamps=True)
    server.append_pod_log("ml", "trainer-0", "trainer", now - 1, "Killed")
    second = core.read_namespaced_pod_log("trainer-0", "ml", timestamps=True)
    assert second.startswith(first) and len(second.splitlines()) == 2
    assert [s.kind for _, s in scan_log(second)] == ["process-end"]


@pytest.mark.parametrize(("kwargs", "status", "message"), [
    ({"previous": True}, 400, 'previous terminated container "trainer" in pod "trainer-0" not found'),
    ({"container": "nope"}, 400, "container nope is not valid for pod trainer-0"),
    ({"limit_bytes": 0}, 422, "PodLogOptions.limitBytes"),
])
def test_kubelet_errors(api: tuple[KubeAPIServer, object], kwargs: dict[str, object], status: int,
                        message: str) -> None:
    _, core = api
    with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
        core.read_namespaced_pod_log("trainer-0", "ml", **kwargs)
    assert err.value.status == status and message in json.loads(err.value.body)["message"]


def test_missing_pod_and_rbac(tmp_path: Path) -> None:
    with KubeAPIServer(gpu_node_scenario(), forbidden={"pods/log"}) as server:
        config = write_kubeconfig(tmp_path / "kubeconfig", server.url)
        client = kubernetes.config.new_client_from_config(config_file=str(config))
        core = kubernetes.client.CoreV1Api(client)
        with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
            core.read_namespaced_pod_log("trainer-0", "ml")
        assert err.value.status == 403
        assert 'cannot get resource "pods/log" in API group "" in the namespace "ml"' in json.loads(err.value.body)["message"]
        server.forbidden.clear()
        with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
            core.read_namespaced_pod_log("gone-0", "ml")
        assert err.value.status == 404
        client.close()
