"""Pod logs through the loopback API server: which containers, previous=true where one restarted,
the newest ``logs.max_bytes`` kept, redacted, and read back into log signals by the analysis."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from forensics.collectors.kubernetes.kubernetes import KubernetesCollector, log_targets
from forensics.specs import kubernetes as kspec
from tests.support import log_lines as L
from tests.support.kube_apiserver import KubeAPIServer
from tests.support.kube_testing import Staged, clean_kube_env, kube_api, make_ctx, scenario

__all__ = ["clean_kube_env", "kube_api", "scenario"]  # fixtures used by name

pytest.importorskip("kubernetes")

INFERENCE = ("ml", "inference-7d9c8b6f5-x2k4q", "server")


def capture(tmp_path: Path, api: KubeAPIServer, kubeconfig: Path, **extra: str) -> Staged:
    staged = make_ctx(tmp_path, kubeconfig=str(kubeconfig), node_name="gpu-node-07", extra=extra)
    KubernetesCollector().snapshot(staged.ctx)
    return staged


def test_previous_instance_of_a_restarted_gpu_container_and_its_current_one(tmp_path, kube_api) -> None:
    api, kubeconfig = kube_api
    now = time.time()
    api.set_pod_log(*INFERENCE, [(now - 40, "loading model from https://bob:hunter2@models.example/llama"),
                                 (now - 20.5, L.TORCH_OOM_NEW.text)], previous=True)
    api.set_pod_log(*INFERENCE, [(now - 2, "restarted, serving")])
    staged = capture(tmp_path, api, kubeconfig)
    prev = (staged.root / kspec.pod_log_member(*INFERENCE, previous=True)).read_text()
    assert prev.splitlines()[1].endswith(L.TORCH_OOM_NEW.text)
    assert "hunter2" not in prev and "models.example" in prev  # redacted like every member
    assert (staged.root / kspec.pod_log_member(*INFERENCE)).read_text().endswith(" restarted, serving\n")
    queries = [q for _, p, q in api.requests if p.endswith("/inference-7d9c8b6f5-x2k4q/log")]
    assert {q.get("previous") for q in queries} == {None, "true"}
    for q in queries:
        assert q["container"] == "server" and q["timestamps"] == "true" and int(q["sinceSeconds"]) >= 3600
    index = staged.json(kspec.LOGS_INDEX)
    whys = {(e["pod"], e["previous"]): e["why"] for e in index["containers"]}
    assert whys[("inference-7d9c8b6f5-x2k4q", True)] == "GPU limit, OOMKilled, 3 restart(s)"
    # the device plugin (no GPU limit, never restarted) is not asked for
    assert not any(p.startswith("/api/v1/namespaces/kube-system/pods/") for _, p, _ in api.requests)
    assert staged.ctx.partial_reasons == []


def test_newest_bytes_kept_and_limit_bytes_only_a_guard(tmp_path, kube_api) -> None:
    api, kubeconfig = kube_api
    now = time.time()
    # 1.4 MB of log: more than limitBytes (1 MiB guard), which keeps the *oldest* bytes
    lines = [(now - 1000 + i / 3, f"[rank0]: step {i} " + "x" * 450) for i in range(3000)]
    api.set_pod_log("ml", "trainer-0", "trainer", [*lines, (now - 1, L.NCCL_WATCHDOG.text.splitlines()[0])])
    staged = capture(tmp_path, api, kubeconfig, **{"logs.max_bytes": "8192"})
    text = (staged.root / kspec.pod_log_member("ml", "trainer-0", "trainer")).read_text()
    assert len(text.encode()) <= 8192 and text.endswith(L.NCCL_WATCHDOG.text.splitlines()[0] + "\n")
    assert text.split(" ", 1)[0].endswith("Z")  # starts on a whole line
    entry = next(e for e in staged.json(kspec.LOGS_INDEX)["containers"] if e["pod"] == "trainer-0")
    assert entry["tail_lines_retry"] < 3001 and entry["kept_bytes"] == len(text.encode())
    assert [q["tailLines"] for _, p, q in api.requests if p.endswith("/trainer-0/log")] == ["5000", str(entry["tail_lines_retry"])]
    assert staged.json(kspec.LOGS_INDEX)["max_bytes"] == 8192


def test_forbidden_pod_logs_are_partial_rest_collected(tmp_path, clean_kube_env) -> None:
    from tests.support.kube_apiserver import write_kubeconfig
    with KubeAPIServer(forbidden={"pods/log"}) as api:
        staged = capture(tmp_path, api, write_kubeconfig(tmp_path / "kc", api.url))
    assert any("pods/log" in r for r in staged.ctx.partial_reasons)
    assert (staged.root / kspec.PODS).is_file()
    assert all(e["member"] is None for e in staged.json(kspec.LOGS_INDEX)["containers"])


def test_clock_from_the_date_headers(tmp_path, kube_api) -> None:
    api, kubeconfig = kube_api
    staged = capture(tmp_path, api, kubeconfig)
    clock = staged.json(kspec.CLOCK)
    # same host, same clock: the offset is within its own uncertainty (Date has whole seconds)
    assert abs(clock["offset_s"]) <= clock["uncertainty_s"] + 1e-6 and clock["uncertainty_s"] <= 0.6
    assert clock["samples"] >= 3 and clock["consistent"] is True
    reqs = json.loads((staged.root / kspec.REQUESTS).read_text())["requests"]
    assert all(r["server_date"].endswith("GMT") for r in reqs if r["status"])


def test_log_targets_garbage_and_init_containers() -> None:
    assert log_targets({}) == []
    assert log_targets({"pods": [None, {"containers": [None, {"kind": "init", "restart_count": 2}]}]}) == []
    t = log_targets({"pods": [{"namespace": "a", "name": "p", "containers": [
        {"kind": "container", "name": "c", "restart_count": 0, "state": "terminated", "state_exit_code": 139}]}]})
    assert t == [("a", "p", "c", False, "exited 139")]


TOKEN_BODY = "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # ghp_ and 36 characters: a GitHub token's shape


def _pieces(secret: str, n: int = 6) -> list[str]:
    return [secret[i:i + n] for i in range(len(secret) - n + 1)]


def test_a_token_the_kubelets_limit_bytes_cut_in_two_is_redacted(tmp_path, kube_api) -> None:
    """limitBytes keeps the oldest 1 MiB: a line longer than that ends inside the token."""
    api, kubeconfig = kube_api
    guard = 1 << 20  # the guard for logs.max_bytes 8192: limitBytes = max(4 * 8192, 1 MiB)
    # the timestamp prefix is 20 to 31 bytes: the cut falls 8 to 19 bytes into "ghp_..."
    line = "x" * (guard - 40) + f" ghp_{TOKEN_BODY} pushed"
    api.set_pod_log("ml", "trainer-0", "trainer", [(time.time() - 5, line)])
    staged = capture(tmp_path, api, kubeconfig, **{"logs.max_bytes": "8192"})
    text = (staged.root / kspec.pod_log_member("ml", "trainer-0", "trainer")).read_text()
    entry = next(e for e in staged.json(kspec.LOGS_INDEX)["containers"] if e["pod"] == "trainer-0")
    assert entry["limit_reached"] is True and entry["received_bytes"] == guard
    assert "ghp_" not in text and not any(p in text for p in _pieces(TOKEN_BODY, 4))
    assert text.endswith(">") and "<redacted:" in text[-40:]
    assert text.startswith("xxxxxxxx")  # the cut start holds a word's end, no token: kept


def test_a_token_at_the_start_of_a_line_cut_to_max_bytes_is_redacted(tmp_path, kube_api) -> None:
    """A line longer than logs.max_bytes keeps its end: the kept text may begin inside a token."""
    api, kubeconfig = kube_api
    token = f"ghp_{TOKEN_BODY}"
    tail = " " + "w" * (8192 - (len(token) - 14) - 2)  # the newest 8192 bytes start at token[14:]
    now = time.time()
    api.set_pod_log("ml", "trainer-0", "trainer", [(now - 9, "starting"),
                                                   (now - 5, "z" * 20000 + " " + token + tail)])
    staged = capture(tmp_path, api, kubeconfig, **{"logs.max_bytes": "8192"})
    text = (staged.root / kspec.pod_log_member("ml", "trainer-0", "trainer")).read_text()
    assert not any(p in text for p in _pieces(TOKEN_BODY))
    assert text.startswith("<redacted:") and text.endswith("w" * 100 + "\n")
