"""`gpuforensics capture` on a (loopback) Kubernetes GPU node: the kubernetes and podresources
collectors through the real runner and CLI, into a bundle that verifies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import gpu_node_scenario
from tests.support.podresources_server import PodResourcesServer

ROOT = Path(__file__).resolve().parents[2]
NODE = "gpu-node-07"


def capture(out: Path, *args: str, env: dict[str, str] | None = None) -> tuple[Path, dict[str, Any], dict[str, bytes]]:
    proc = subprocess.run([sys.executable, "-m", "forensics", "capture", "-o", str(out),
                           "--only", "kubernetes,podresources", "--quiet", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    [bundle] = out.glob("*.tgz")
    members: dict[str, bytes] = {}
    with tarfile.open(bundle) as tf:
        for info in tf.getmembers():
            f = tf.extractfile(info)
            assert f is not None
            members[info.name.split("/", 1)[1]] = f.read()
    return bundle, json.loads(members["manifest.json"]), members


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items()
         if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NODE_NAME")}
    e["HOME"] = str(tmp_path)
    return e


def test_capture_on_a_gpu_node(tmp_path, env):
    state = gpu_node_scenario()
    sock = Path(f"/tmp/gf-pr-{os.getpid()}.sock")
    out = tmp_path / "out"
    out.mkdir()
    with KubeAPIServer(state) as api, \
            PodResourcesServer(sock, pods=[p for p in state.pods if p["spec"]["nodeName"] == NODE]):
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        bundle, manifest, members = capture(out, "--kubeconfig", str(kubeconfig), "--node", NODE,
                                            "--set", f"podresources.socket={sock}", env=env)
    status = {c["name"]: c["status"] for c in manifest["collectors"]}
    assert status["kubernetes"] == "ok" and status["podresources"] == "ok"
    for member in ("node.json", "pods.json", "pods-index.json", "events.json", "metrics.json",
                   "podresources/list.json", "podresources/allocatable.json"):
        assert f"kubernetes/{member}" in members
    index = json.loads(members["kubernetes/pods-index.json"])
    pods = json.loads(members["kubernetes/pods.json"])["items"]
    assert sorted(p["uid"] for p in index["pods"]) == sorted(p["metadata"]["uid"] for p in pods)
    assert index["container_ids"] and not {"pod_uids", "container_ids"} & set(manifest["hints"])
    assert manifest["redaction"]["counts"]["env"] >= 5
    assert b"hf_qwertyuiopasdfghjkl1234" not in b"".join(members.values())
    # the kubelet's device map joins the API's pods by namespace/name
    listing = json.loads(members["kubernetes/podresources/list.json"])
    gpu_holders = {f"{p['namespace']}/{p['name']}" for p in listing["pod_resources"]
                   if any(c["devices"] for c in p["containers"])}
    assert gpu_holders <= {p["key"] for p in index["pods"]}
    assert "ml/trainer-0" in gpu_holders and "research/notebook-alice" not in gpu_holders
    verify = subprocess.run([sys.executable, "-m", "forensics", "verify", str(bundle)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_capture_off_cluster(tmp_path, env):
    out = tmp_path / "out"
    out.mkdir()
    _, manifest, members = capture(out, "--set", f"podresources.socket={tmp_path}/absent.sock", env=env)
    by_name = {c["name"]: c for c in manifest["collectors"]}
    assert by_name["kubernetes"]["status"] == "unavailable"
    assert "no Kubernetes configuration" in by_name["kubernetes"]["error"]
    assert by_name["podresources"]["status"] == "unavailable"
    assert "no kubelet pod-resources socket" in by_name["podresources"]["error"]
    assert not [m for m in members if m.startswith("kubernetes/")]


def test_node_labels_and_event_messages_are_redacted(tmp_path, env):
    """A token in a Node label or annotation and a password in an Event message never reach the
    bundle; the keys, the node's GPU labels and the event's reason stay readable, and the
    analysis still reads the node."""
    import copy

    state = gpu_node_scenario()
    node = next(n for n in state.nodes if n["metadata"]["name"] == NODE)
    node["metadata"]["labels"]["vault.io/agent-token"] = "nd-tok-6c1f0a9e"
    node["metadata"].setdefault("annotations", {})["registry"] = "https://admin:nd-pw-3e8d@registry.local/v2"
    event = copy.deepcopy(next(e for e in state.events if e["reason"] == "BackOff"))
    event["metadata"]["name"] += ".redact"
    event["metadata"]["uid"] = "0f0e0d0c-redact-event"
    event["reason"] = "Failed"
    event["message"] = "exec: prestart.sh --db-password=ev-pw-91b2c7 failed: exit status 1"
    state.events.append(event)
    out = tmp_path / "out"
    out.mkdir()
    with KubeAPIServer(state) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        bundle, manifest, members = capture(out, "--kubeconfig", str(kubeconfig), "--node", NODE,
                                            "--skip", "podresources", env=env)
    blob = b"".join(members.values())
    for secret in (b"nd-tok-6c1f0a9e", b"nd-pw-3e8d", b"ev-pw-91b2c7"):
        assert secret not in blob, secret
    written = json.loads(members["kubernetes/node.json"])
    labels = written["metadata"]["labels"]
    assert labels["vault.io/agent-token"].startswith("<redacted:")
    assert labels["nvidia.com/gpu.product"] == node["metadata"]["labels"]["nvidia.com/gpu.product"]
    assert written["metadata"]["annotations"]["registry"].startswith("https://admin:<redacted:")
    [kept] = [e for e in json.loads(members["kubernetes/events.json"])["items"] if e["reason"] == "Failed"]
    assert kept["message"].startswith("exec: prestart.sh --db-password=<redacted:")
    assert manifest["redaction"]["counts"]["events"] == 1
    analyzed = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(bundle), "-f", "json"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert analyzed.returncode == 0, analyzed.stderr
    doc = json.loads(analyzed.stdout)
    assert any(n.get("node_name") == NODE or NODE in json.dumps(n) for n in doc["nodes"])
