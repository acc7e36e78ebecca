"""The kubernetes collector with the real kubernetes client against the loopback API server."""

from __future__ import annotations

import json
import socket
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from forensics.collectors.kubernetes.kubernetes import KubernetesCollector
from forensics.errors import SourcePermissionDenied, SourceUnavailable
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import gpu_node_scenario
from tests.support.kube_testing import Staged, clean_kube_env, kube_api, make_ctx, scenario

__all__ = ["clean_kube_env", "kube_api", "scenario"]  # fixtures used by name

NODE = "gpu-node-07"


def run(tmp_path: Path, kubeconfig: Path | None, collector: KubernetesCollector | None = None,
        **options: object) -> Staged:
    options.setdefault("node_name", NODE)
    staged = make_ctx(tmp_path, kubeconfig=str(kubeconfig) if kubeconfig else None, **options)
    (collector or KubernetesCollector(call_timeout_s=2.0)).snapshot(staged.ctx)
    return staged


class TestFullCapture:
    def test_members_and_node_verbatim(self, tmp_path, kube_api):
        api, kubeconfig = kube_api
        staged = run(tmp_path, kubeconfig)
        members = staged.members()
        logs = {m for m in members if m.startswith("kubernetes/logs/")}
        assert members - logs == {f"kubernetes/{m}" for m in (
            "node.json", "pods.json", "pods-index.json", "events.json", "metrics.json", "requests.json",
            "clock.json", "resource-api.json")}
        assert "kubernetes/logs/index.json" in logs and "kubernetes/logs/ml/trainer-0/trainer.log" in logs
        assert staged.ctx.partial_reasons == []
        node = staged.json("kubernetes/node.json")
        assert node["kind"] == "Node" and node["metadata"]["name"] == NODE
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "7"
        assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        assert node["metadata"]["managedFields"], "verbatim objects keep managedFields"

    def test_pods_of_this_node_only_via_field_selector(self, tmp_path, kube_api):
        api, kubeconfig = kube_api
        staged = run(tmp_path, kubeconfig)
        pods = staged.json("kubernetes/pods.json")
        assert pods["kind"] == "PodList"
        names = {p["metadata"]["name"] for p in pods["items"]}
        assert "trainer-1" not in names and "trainer-0" in names and len(names) == 6
        assert ("GET", "/api/v1/pods", {"fieldSelector": f"spec.nodeName={NODE}", "limit": "500"}) in api.requests

    def test_index_join_keys_gpu_oom_eviction(self, tmp_path, kube_api):
        api, kubeconfig = kube_api
        staged = run(tmp_path, kubeconfig)
        index = staged.json("kubernetes/pods-index.json")
        pods = {p["key"]: p for p in index["pods"]}
        assert pods["ml/trainer-0"]["gpu_limit_count"] == 4
        assert pods["ml/trainer-0"]["qos_class"] == "Guaranteed"
        assert pods["ml/mig-worker-0"]["mig_limits"] == {"nvidia.com/mig-1g.10gb": 1}
        assert pods["research/notebook-alice"]["gpu_limit_count"] == 0
        assert index["gpu_visible_without_request"] == [
            {"pod": "research/notebook-alice", "container": "jupyter", "nvidia_visible_devices": "all"}]
        [oom] = index["oom_killed"]
        assert oom["pod"] == "ml/inference-7d9c8b6f5-x2k4q" and oom["exit_code"] == 137
        assert [e["pod"] for e in index["evicted"]] == ["batch/preprocess-28f9x"]
        server = pods["ml/inference-7d9c8b6f5-x2k4q"]["containers"][0]
        raw_status = next(p for p in api.state.pods if p["metadata"]["name"].startswith("inference"))
        raw_id = raw_status["status"]["containerStatuses"][0]["containerID"]
        assert raw_id == f"containerd://{server['container_id']}" and len(server["container_id"]) == 64
        assert server["restart_count"] == 3 and server["memory_limit_bytes"] == 24 * 2**30
        # the index names every container, the restarted one's previous id too
        assert server["container_id"] in index["container_ids"]
        assert server["last_container_id"] in index["container_ids"]
        # no later collector reads pod uids or container ids; the node name is for the end-of-window read
        assert staged.ctx.published == {"kube_node": [NODE]}

    def test_events_of_node_and_its_pods_within_window(self, tmp_path, kube_api):
        api, kubeconfig = kube_api
        staged = run(tmp_path, kubeconfig)
        events = staged.json("kubernetes/events.json")
        reasons = sorted(e["reason"] for e in events["items"])
        assert "OOMKilling" in reasons and "Evicted" in reasons and "EvictionThresholdMet" in reasons
        assert "Scheduled" not in reasons, "3 h old: outside the 1 h look-back"
        assert all(e["involvedObject"]["name"] != "trainer-1" for e in events["items"])
        assert events["selection"]["kept"] == len(events["items"]) == 8

    def test_shorter_lookback_keeps_fewer_events(self, tmp_path, kube_api):
        _, kubeconfig = kube_api
        staged = run(tmp_path, kubeconfig, lookback_s=7 * 60)
        reasons = sorted(e["reason"] for e in staged.json("kubernetes/events.json")["items"])
        assert reasons == sorted(["EvictionThresholdMet", "Evicted", "Killing", "NodeHasInsufficientMemory"])

    def test_metrics_of_this_node_only(self, tmp_path, kube_api):
        _, kubeconfig = kube_api
        staged = run(tmp_path, kubeconfig)
        metrics = staged.json("kubernetes/metrics.json")
        assert metrics["node"]["kind"] == "NodeMetrics" and metrics["node"]["metadata"]["name"] == NODE
        names = {m["metadata"]["name"] for m in metrics["pods"]["items"]}
        assert "trainer-0" in names and "trainer-1" not in names

    def test_never_reads_secrets_and_only_gets(self, tmp_path, kube_api):
        api, kubeconfig = kube_api
        run(tmp_path, kubeconfig)
        assert all(m == "GET" for m, _, _ in api.requests)
        assert not [p for p in api.paths_requested() if "secret" in p or "configmap" in p]

    def test_requests_log(self, tmp_path, kube_api):
        api, kubeconfig = kube_api
        staged = run(tmp_path, kubeconfig)
        log = staged.json("kubernetes/requests.json")
        assert [r["path"] for r in log["requests"]] == api.paths_requested()
        # a previous instance the kubelet no longer has is its 400, a cluster without DRA the
        # resource.k8s.io discovery's 404; nothing else fails
        assert all(r["status"] == 200 or (r["status"] == 400 and r["query"].get("previous") == "true")
                   or (r["status"] == 404 and r["path"] == "/apis/resource.k8s.io")
                   for r in log["requests"])


class TestRedaction:
    SECRETS = ("hf_qwertyuiopasdfghjkl1234", "s3cr3t-notebook-token", "wb-5f1e9c0d2b7a4e3f",
               "s3://models/prod")

    def test_env_values_and_last_applied_redacted_everywhere(self, tmp_path, kube_api):
        _, kubeconfig = kube_api
        staged = run(tmp_path, kubeconfig)
        blob = "".join(p.read_text() for p in staged.root.rglob("*.json"))
        for secret in self.SECRETS:
            assert secret not in blob
        pods = {p["metadata"]["name"]: p for p in staged.json("kubernetes/pods.json")["items"]}
        env = {e["name"]: e for e in pods["notebook-alice"]["spec"]["containers"][0]["env"]}
        assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all", "GPU grants are evidence"
        assert env["JUPYTER_TOKEN"]["value"].startswith("<redacted:")
        applied = json.loads(pods["notebook-alice"]["metadata"]["annotations"]
                             ["kubectl.kubernetes.io/last-applied-configuration"])
        applied_env = {e["name"]: e["value"] for e in applied["spec"]["containers"][0]["env"]}
        assert applied_env["JUPYTER_TOKEN"] == env["JUPYTER_TOKEN"]["value"]
        inference = pods["inference-7d9c8b6f5-x2k4q"]["spec"]["containers"][0]["env"]
        assert {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"key": "password", "name": "inference-db"}}} in inference
        assert staged.ctx.redactor.counts["env"] >= 5

    def test_no_redact_keeps_values(self, tmp_path, kube_api):
        _, kubeconfig = kube_api
        staged = run(tmp_path, kubeconfig, redact=False)
        blob = (staged.root / "kubernetes/pods.json").read_text()
        assert all(s in blob for s in self.SECRETS)


class TestPartialAccess:
    def test_forbidden_events_recorded_rest_collected(self, tmp_path, clean_kube_env):
        with KubeAPIServer(gpu_node_scenario(), forbidden={"events"}) as api:
            staged = run(tmp_path, write_kubeconfig(tmp_path / "kc", api.url))
        assert "kubernetes/events.json" not in staged.members()
        assert {"kubernetes/node.json", "kubernetes/pods.json", "kubernetes/metrics.json"} <= staged.members()
        assert staged.ctx.partial_reasons and all("403" in r and "events" in r for r in staged.ctx.partial_reasons)
        log = staged.json("kubernetes/requests.json")["requests"]
        assert {r["status"] for r in log if "/events" in r["path"]} == {403}
        assert "cannot list resource" in next(r["error"] for r in log if r["status"] == 403)

    def test_forbidden_pod_metrics(self, tmp_path, clean_kube_env):
        with KubeAPIServer(gpu_node_scenario(), forbidden={"pods.metrics.k8s.io"}) as api:
            staged = run(tmp_path, write_kubeconfig(tmp_path / "kc", api.url))
        metrics = staged.json("kubernetes/metrics.json")
        assert metrics["node"]["kind"] == "NodeMetrics" and metrics["pods"] is None
        assert staged.ctx.partial_reasons

    def test_no_metrics_server_is_a_note_not_a_failure(self, tmp_path, clean_kube_env):
        state = gpu_node_scenario()
        state.metrics_available = False
        with KubeAPIServer(state) as api:
            staged = run(tmp_path, write_kubeconfig(tmp_path / "kc", api.url))
        assert "kubernetes/metrics.json" not in staged.members()
        assert staged.ctx.partial_reasons == []
        assert any("metrics.k8s.io not served" in n for n in staged.ctx.notes)

    def test_everything_forbidden_is_permission_denied(self, tmp_path, clean_kube_env):
        forbidden = {"nodes", "pods", "events", "pods.metrics.k8s.io", "nodes.metrics.k8s.io"}
        with KubeAPIServer(gpu_node_scenario(), forbidden=forbidden) as api:
            with pytest.raises(SourcePermissionDenied, match="permission denied"):
                run(tmp_path, write_kubeconfig(tmp_path / "kc", api.url))
        assert (tmp_path / "staging/kubernetes/requests.json").exists()

    def test_hang_on_events_costs_one_timeout(self, tmp_path, clean_kube_env):
        with KubeAPIServer(gpu_node_scenario(), hang={"events"}) as api:
            t0 = time.monotonic()
            staged = run(tmp_path, write_kubeconfig(tmp_path / "kc", api.url),
                         extra={"kubernetes.call_timeout_s": "0.3"})
            took = time.monotonic() - t0
        assert {"kubernetes/node.json", "kubernetes/pods.json", "kubernetes/metrics.json"} <= staged.members()
        assert "kubernetes/events.json" not in staged.members()
        assert any("timed out" in r for r in staged.ctx.partial_reasons)
        assert sum(1 for p in api.paths_requested() if p.endswith("/events")) == 1, \
            "after one timeout the other namespaces are not tried"
        assert took < 0.3 + 2.0


class TestUnreachable:
    def test_hanging_api_server_is_unavailable_after_its_deadline(self, tmp_path, clean_kube_env):
        with KubeAPIServer(gpu_node_scenario(), hang={"*"}) as api:
            t0 = time.monotonic()
            with pytest.raises(SourceUnavailable, match="timed out"):
                run(tmp_path, write_kubeconfig(tmp_path / "kc", api.url),
                    extra={"kubernetes.call_timeout_s": "0.5"})
            took = time.monotonic() - t0
        assert 0.5 <= took < 2.5

    def test_closed_port_is_unavailable_at_once(self, tmp_path, clean_kube_env):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(SourceUnavailable, match="unreachable"):
            run(tmp_path, write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}"))
        assert time.monotonic() - t0 < 2.0

    def test_budget_caps_total_time(self, tmp_path, clean_kube_env):
        with KubeAPIServer(gpu_node_scenario(), hang={"pods", "events"}) as api:
            t0 = time.monotonic()
            staged = run(tmp_path, write_kubeconfig(tmp_path / "kc", api.url),
                         extra={"kubernetes.call_timeout_s": "0.4", "kubernetes.budget_s": "0.6"})
            took = time.monotonic() - t0
        assert took < 1.5
        log = staged.json("kubernetes/requests.json")["requests"]
        assert [r["outcome"] for r in log][:3] == ["ok", "timed-out", "timed-out"]
        assert log[-1]["outcome"] == "budget"


class TestConfiguration:
    def test_no_configuration_at_all(self, tmp_path, clean_kube_env):
        with pytest.raises(SourceUnavailable, match="no Kubernetes configuration"):
            run(tmp_path, None)

    def test_kubeconfig_from_env_and_context(self, tmp_path, clean_kube_env, monkeypatch):
        with KubeAPIServer(gpu_node_scenario()) as api:
            kc = write_kubeconfig(tmp_path / "kc", api.url, context="gpu-cluster")
            monkeypatch.setenv("KUBECONFIG", str(kc))
            staged = run(tmp_path, None, kube_context="gpu-cluster")
        assert "kubernetes/pods.json" in staged.members()
        assert any(f"kubeconfig:{kc}" in n for n in staged.ctx.notes)

    def test_unknown_context_is_unavailable(self, tmp_path, kube_api):
        _, kubeconfig = kube_api
        with pytest.raises(SourceUnavailable, match="configuration not usable"):
            run(tmp_path, kubeconfig, kube_context="nope")

    def test_node_name_from_env(self, tmp_path, kube_api, monkeypatch):
        _, kubeconfig = kube_api
        monkeypatch.setenv("NODE_NAME", "gpu-node-08")
        staged = run(tmp_path, kubeconfig, node_name=None)
        assert {p["metadata"]["name"] for p in staged.json("kubernetes/pods.json")["items"]} == {"trainer-1"}

    def test_node_name_from_hostname(self, tmp_path, kube_api, monkeypatch):
        api, kubeconfig = kube_api
        monkeypatch.setattr(socket, "gethostname", lambda: f"{NODE}.ec2.internal")
        staged = run(tmp_path, kubeconfig, node_name=None)
        assert staged.json("kubernetes/node.json")["metadata"]["name"] == NODE
        assert ("GET", "/api/v1/nodes", {"fieldSelector": f"metadata.name={NODE}"}) in api.requests

    def test_host_not_a_node(self, tmp_path, kube_api, monkeypatch):
        _, kubeconfig = kube_api
        monkeypatch.setattr(socket, "gethostname", lambda: "laptop")
        with pytest.raises(SourceUnavailable, match="no Node named or labelled 'laptop'"):
            run(tmp_path, kubeconfig, node_name=None)

    def test_unknown_node(self, tmp_path, kube_api):
        _, kubeconfig = kube_api
        with pytest.raises(SourceUnavailable, match="not a Node"):
            run(tmp_path, kubeconfig, node_name="gpu-node-99")


def test_pagination_follows_continue(tmp_path, clean_kube_env):
    from forensics.collectors.kubernetes.api import KubeAPI, load_config

    with KubeAPIServer(gpu_node_scenario(extra_pods=9)) as api:
        loaded = load_config(str(write_kubeconfig(tmp_path / "kc", api.url)), None)
        client = KubeAPI(loaded, time.monotonic() + 10)
        try:
            last, items = client.list_all("/api/v1/pods", {"fieldSelector": f"spec.nodeName={NODE}"}, page_size=4)
        finally:
            client.close()
    assert len(items) == 15 and len({i["metadata"]["uid"] for i in items}) == 15
    assert "continue" not in last["metadata"]
    assert sum(1 for _, p, _ in api.requests if p == "/api/v1/pods") == 4


class TestInCluster:
    @pytest.fixture
    def in_cluster(self, tmp_path, clean_kube_env, monkeypatch):
        import kubernetes.config.incluster_config as incluster

        import forensics.kube.config as kube_config_module

        token, cert = tmp_path / "token", tmp_path / "ca.crt"
        token.write_text("sa-token-abc")
        cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
        monkeypatch.setattr(incluster, "SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr(incluster, "SERVICE_CERT_FILENAME", str(cert))
        monkeypatch.setattr(kube_config_module, "SA_TOKEN", str(token))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")

    def test_service_account_is_used_in_a_pod(self, in_cluster, tmp_path, monkeypatch):
        from forensics.collectors.kubernetes.api import load_config

        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")))
        loaded = load_config(None, None)
        assert loaded.source == "in-cluster"
        assert loaded.configuration.host == "https://10.96.0.1:443"
        assert loaded.configuration.api_key["BearerToken"] == "bearer sa-token-abc"
        assert loaded.configuration.retries is False

    def test_explicit_kubeconfig_wins(self, in_cluster, tmp_path):
        from forensics.collectors.kubernetes.api import load_config

        kc = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
        loaded = load_config(str(kc), None)
        assert loaded.source == f"kubeconfig:{kc}" and loaded.configuration.host == "http://127.0.0.1:1"


def test_objects_can_be_replaced_between_captures(tmp_path, kube_api):
    from tests.support.kube_objects import ContainerSpec, container_id, make_pod

    api, kubeconfig = kube_api
    real_id = container_id("docker", "trainer")
    pod = make_pod("trainer-x", "ml", NODE, datetime.now(UTC),
                   [ContainerSpec("trainer", container_id=real_id, runtime="docker",
                                  limits={"nvidia.com/gpu": "1"})])
    api.set_objects(pods=[pod], events=[])
    staged = run(tmp_path, kubeconfig)
    assert list(staged.json("kubernetes/pods-index.json")["container_ids"]) == [real_id]
    assert staged.json("kubernetes/events.json")["items"] == []
    with pytest.raises(TypeError):
        api.set_objects(configmaps=[])


class TestEndOfWindow:
    """``end_sampling``: the Node read again at the end of the window, redacted as the first read."""

    def test_the_node_read_again_after_allocatable_changed(self, tmp_path, clean_kube_env):
        state = gpu_node_scenario()
        node = next(n for n in state.nodes if n["metadata"]["name"] == NODE)
        node["metadata"]["labels"]["vault.io/agent-token"] = "nd-tok-6c1f0a9e"
        with KubeAPIServer(state) as api:
            kubeconfig = write_kubeconfig(tmp_path / "kc", api.url)
            collector = KubernetesCollector(call_timeout_s=2.0)
            staged = run(tmp_path, kubeconfig, collector)
            assert staged.ctx.published == {"kube_node": [NODE]}
            node["status"]["allocatable"]["nvidia.com/gpu"] = "6"  # the plugin marks a GPU unhealthy
            (tmp_path / "end").mkdir()
            end = make_ctx(tmp_path / "end", kubeconfig=str(kubeconfig), node_name=NODE)
            end.ctx.redactor = staged.ctx.redactor  # one capture, one redaction key
            end.ctx.hints.update(staged.ctx.published)
            collector.end_sampling(end.ctx)
        assert end.ctx.partial_reasons == []
        first, again = staged.json("kubernetes/node.json"), end.json("kubernetes/node-end.json")
        assert (first["status"]["allocatable"]["nvidia.com/gpu"], again["status"]["allocatable"]["nvidia.com/gpu"]) == ("7", "6")
        assert again["metadata"]["labels"]["vault.io/agent-token"] == first["metadata"]["labels"]["vault.io/agent-token"]
        assert b"nd-tok-6c1f0a9e" not in (end.root / "kubernetes/node-end.json").read_bytes()
        (call,) = end.json("kubernetes/requests-end.json")["requests"]
        assert (call["path"], call["outcome"]) == (f"/api/v1/nodes/{NODE}", "ok") and call["received_unix"] > 0

    def test_no_node_read_at_the_start_no_second_read(self, tmp_path, clean_kube_env):
        with KubeAPIServer(gpu_node_scenario()) as api:
            end = make_ctx(tmp_path, kubeconfig=str(write_kubeconfig(tmp_path / "kc", api.url)), node_name=NODE)
            KubernetesCollector(call_timeout_s=2.0).end_sampling(end.ctx)
            assert api.requests == []
        assert end.members() == set()

    def test_a_failed_second_read_is_partial(self, tmp_path, clean_kube_env):
        with KubeAPIServer(gpu_node_scenario(), forbidden={"nodes"}) as api:
            end = make_ctx(tmp_path, kubeconfig=str(write_kubeconfig(tmp_path / "kc", api.url)), node_name=NODE)
            end.ctx.hints["kube_node"] = [NODE]
            KubernetesCollector(call_timeout_s=2.0).end_sampling(end.ctx)
        assert end.members() == {"kubernetes/requests-end.json"}
        (reason,) = end.ctx.partial_reasons
        assert reason.startswith("end of window: node not read again:") and "403" in reason


def test_an_event_whose_pod_uid_is_not_text_matches_no_pod() -> None:
    """A pod Event whose involvedObject.uid is a list made select_events raise TypeError (in the
    recorder that ended a namespace's follower thread for good): it matches no pod, and its host
    still counts."""
    from forensics.collectors.kubernetes.events import select_events

    def event(host: str) -> dict:
        return {"metadata": {"uid": "ev-1", "resourceVersion": "5"}, "reason": "OOMKilling",
                "involvedObject": {"kind": "Pod", "uid": ["pod-uid-1"], "name": "p", "namespace": "ml"},
                "source": {"host": host}, "lastTimestamp": "2026-12-01T00:00:00Z"}

    assert select_events([event("other-node")], "gpu-1", {"pod-uid-1"}, None) == []
    assert select_events([event("gpu-1")], "gpu-1", {"pod-uid-1"}, None) == [event("gpu-1")]
