"""A GPU the device plugin marked unhealthy, on a loopback Kubernetes node: the node's allocatable
``nvidia.com/gpu`` is below its capacity and the kubelet's pod-resources ``GetAllocatableResources``
leaves the GPU out. Kubernetes and pod-resources are captured by the real collectors through the
CLI; the GPU side of the same host (NVML and the kernel log's Xid 79) comes from a bundle built with
the real writer. The on-call engineer's questions: which GPU, why, and did it come back by the end
of the window (the Node read again, ``kubernetes/node-end.json``)."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path

from forensics.analysis import analyze_bundles
from tests.integration.test_kubernetes_capture import capture, env  # noqa: F401 - the fixture
from tests.support.analysis_bundles import BundleSpec, gpu_uuid
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import ClusterState, make_node
from tests.support.podresources_server import PodResourcesServer
from tests.support.polling import wait_for

NODE = "gpu-node-09"
XID79 = "NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _gpu_side(tmp_path: Path, now: datetime) -> Path:
    """The GPU side of the node (named after it, as a capture there with --node is): two GPUs, and
    GPU 1 (PCI 86) fell off the bus 25 s before the node was read."""
    b = BundleSpec(host=NODE, start=now.timestamp() - 30)
    b.gpu(0)
    b.gpu(1)
    b.kmsg(now.timestamp() - 25, XID79)
    b.status.update({"docker": "unavailable", "kubernetes": "skipped"})
    gpu_dir = tmp_path / "gpu"
    gpu_dir.mkdir()
    return b.write(gpu_dir)


def test_a_gpu_marked_unhealthy_by_the_device_plugin(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    now = datetime.now(UTC).replace(microsecond=0)
    # the capture names itself after the Kubernetes node (--node): the GPU bundle is the same node
    healthy, lost = gpu_uuid(0, NODE), gpu_uuid(1, NODE)
    node = make_node(NODE, now, gpus=2)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "1"  # the plugin reported GPU 1 unhealthy
    state = ClusterState(nodes=[node], pods=[])
    sock = Path(f"/tmp/gf-alloc-{os.getpid()}.sock")
    out = tmp_path / "out"
    out.mkdir()
    with KubeAPIServer(state) as api, PodResourcesServer(sock, pods=[], gpu_ids=[healthy]):
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        kube_bundle, manifest, members = capture(out, "--kubeconfig", str(kubeconfig), "--node", NODE,
                                                 "--set", f"podresources.socket={sock}", env=env)
    assert healthy.encode() in members["kubernetes/podresources/allocatable.json"]
    assert lost.encode() not in members["kubernetes/podresources/allocatable.json"]
    assert manifest["host"]["node_name"] == NODE
    doc = analyze_bundles([kube_bundle, _gpu_side(tmp_path, now)])
    (f,) = [f for f in doc["findings"] if f["kind"] == "gpu-allocatable-reduced"]
    assert (f["metrics"]["capacity"], f["metrics"]["allocatable"], f["metrics"]["gpus_left_out"]) == (2, 1, lost)
    assert "left out of the kubelet's allocatable devices: GPU 1" in f["summary"] and "Xid 79 at" in f["summary"]
    (gone,) = [g for g in doc["findings"] if g["kind"] == "gpu-lost"]
    assert f["id"] in gone["causes"]
    assert f["next_step"] and "device plugin" in f["next_step"]


def test_allocatable_recovered_during_the_window(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    """The device plugin comes back during a sampling window (its pod restarted): the Node read at
    the start says 1 of 2, the one read at the end 2 of 2, and the finding says it recovered."""
    now = datetime.now(UTC).replace(microsecond=0)
    healthy, lost = gpu_uuid(0, NODE), gpu_uuid(1, NODE)
    node = make_node(NODE, now, gpus=2)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    state = ClusterState(nodes=[node], pods=[])
    sock = Path(f"/tmp/gf-alloc-end-{os.getpid()}.sock")
    out = tmp_path / "out"
    out.mkdir()
    node_path = f"/api/v1/nodes/{NODE}"
    with KubeAPIServer(state) as api, PodResourcesServer(sock, pods=[], gpu_ids=[healthy]):
        def recover() -> None:  # once the snapshot has read the Node
            wait_for(lambda: any(r[1] == node_path for r in list(api.requests)), timeout=60, interval=0.02)
            node["status"]["allocatable"]["nvidia.com/gpu"] = "2"

        changer = threading.Thread(target=recover, daemon=True)
        changer.start()
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        kube_bundle, manifest, members = capture(out, "--kubeconfig", str(kubeconfig), "--node", NODE,
                                                 "--set", f"podresources.socket={sock}",
                                                 "--duration", "2", "--interval", "1", env=env)
        changer.join(5)
        reads = [r for r in api.requests if r[1] == node_path]
    assert len(reads) == 2, reads
    (kube,) = [c for c in manifest["collectors"] if c["name"] == "kubernetes"]
    assert kube["status"] == "ok" and kube["sampling"]["end_of_window_only"] is True
    assert b'"nvidia.com/gpu":"1"' in members["kubernetes/node.json"].replace(b" ", b"")
    assert b'"nvidia.com/gpu":"2"' in members["kubernetes/node-end.json"].replace(b" ", b"")
    doc = analyze_bundles([kube_bundle, _gpu_side(tmp_path, now)])
    (f,) = [f for f in doc["findings"] if f["kind"] == "gpu-allocatable-reduced"]
    assert (f["metrics"]["recovered_by_end"], f["metrics"]["allocatable_at_end"], f["metrics"]["gpus_left_out"]) == (1, 2, lost)
    assert "recovered by the end of the window: 2 of 2 when the node was read again at" in f["summary"]
    assert f["severity"] == "medium"
    (again,) = [e for e in f["evidence"] if e["member"] == "kubernetes/node-end.json"]
    assert again["excerpt"] == "2"
