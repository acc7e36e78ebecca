"""The false-accusation case on a loopback Kubernetes node: a pod holding a shared grant (a renamed
time-slicing resource, ``nvidia.com/gpu.shared`` replicas ``GPU-<uuid>::N`` from the kubelet's
pod-resources) on the GPU it uses is never `unallocated-gpu-use`; over its MPS memory limit it is
`gpu-share-exceeded`. Kubernetes and pod-resources are captured by the real collectors through the
CLI; the GPU side of the same node comes from a bundle built with the real writer, named after the
Kubernetes node (``--node``) as a capture on that node is, so the analysis joins the two. The same
node without the shared grant is the control: there the notebook's use of the GPU is
`unallocated-gpu-use`, so the first test's "not accused" is the sharing contract's doing."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics.analysis import analyze_bundles
from tests.integration.test_kubernetes_capture import capture, env  # noqa: F401 - the fixture
from tests.support.analysis_bundles import GIB, BundleSpec, gpu_uuid
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import ClusterState, ContainerSpec, make_node, make_pod
from tests.support.podresources_server import PodResourcesServer

NODE = "gpu-node-07"
SHARED = "nvidia.com/gpu.shared"
T_UID, N_UID = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-8999-aaaaaaaaaaaa"
TRAINER, NOTEBOOK = "a1" * 32, "b2" * 32


def _analyse(tmp_path: Path, env: dict[str, str], shared: bool) -> dict[str, Any]:  # noqa: F811
    """Capture the node (pods, pod-resources) and analyse it with its GPU side; ``shared``: the
    notebook holds a time-slicing replica of GPU 0 (else no GPU grant at all)."""
    now = datetime.now(UTC).replace(microsecond=0)
    uuid = gpu_uuid(0, NODE)
    notebook = (ContainerSpec("jupyter", limits={SHARED: "1"}, requests={SHARED: "1"}, container_id=NOTEBOOK,
                              env=[("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=16G")])
                if shared else ContainerSpec("jupyter", container_id=NOTEBOOK))
    pods = [
        make_pod("trainer-0", "ml", NODE, now, [ContainerSpec(
            "trainer", limits={SHARED: "1"}, requests={SHARED: "1"}, container_id=TRAINER)], uid=T_UID),
        make_pod("notebook-alice", "research", NODE, now, [notebook], uid=N_UID),
    ]
    state = ClusterState(nodes=[make_node(NODE, now, gpus=1, mig={SHARED: 4})], pods=pods)
    sock = Path(f"/tmp/gf-share-{os.getpid()}.sock")
    out = tmp_path / "out"
    out.mkdir()
    with KubeAPIServer(state) as api, \
            PodResourcesServer(sock, pods=pods, gpu_ids=[uuid], mig_ids={SHARED: [f"{uuid}::{i}" for i in range(4)]}):
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        kube_bundle, manifest, members = capture(out, "--kubeconfig", str(kubeconfig), "--node", NODE,
                                                 "--set", f"podresources.socket={sock}", env=env)
    assert manifest["host"]["node_name"] == NODE
    assert (f'"{uuid}::1"'.encode() in members["kubernetes/podresources/list.json"]) is shared
    # the GPU side of the same node: a capture there names itself after the node (--node / NODE_NAME)
    b = BundleSpec(host=NODE, start=now.timestamp() - 30)
    b.gpu(0)
    b.process(31, "torchrun", container=TRAINER, pod_uid=T_UID)
    b.process(32, "python", container=NOTEBOOK, pod_uid=N_UID)
    b.gpu_series(0, range(20), lambda s: (99, 40 * GIB, {31: (10 * GIB, 40.0), 32: (30 * GIB, 40.0)}))
    b.status.update({"docker": "unavailable", "kubernetes": "skipped"})
    gpu_dir = tmp_path / "gpu"
    gpu_dir.mkdir()
    doc = analyze_bundles([kube_bundle, b.write(gpu_dir)])
    # one node: the pods and the GPU processes are joined, not analysed as two hosts
    assert [n["host"] for n in doc["nodes"]] == [NODE], doc["nodes"]
    (gpu,) = doc["gpus"]
    assert {"ml/trainer-0/trainer", "research/notebook-alice/jupyter"} <= {s["name"] for s in gpu["used_by"]}, gpu["used_by"]
    return doc


def test_a_pod_sharing_by_design_is_not_accused(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    doc = _analyse(tmp_path, env, shared=True)
    kinds = [f["kind"] for f in doc["findings"]]
    assert "unallocated-gpu-use" not in kinds and "overlapping-gpu-allocation" not in kinds, doc["findings"]
    (f,) = [f for f in doc["findings"] if f["kind"] == "gpu-share-exceeded"]
    assert f["severity"] == "low" and f["node"] == NODE
    assert {s["name"] for s in f["subjects"] if s["role"] == "culprit"} >= {"research/notebook-alice"}
    assert f"{SHARED}: {gpu_uuid(0, NODE)}::" in f["summary"] and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=16G" in f["summary"]


def test_without_the_shared_grant_the_same_use_is_unallocated(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    """The control: the same node and GPU use, the notebook granted nothing."""
    doc = _analyse(tmp_path, env, shared=False)
    (f,) = [f for f in doc["findings"] if f["kind"] == "unallocated-gpu-use"]
    assert {s["name"] for s in f["subjects"] if s["role"] == "culprit"} >= {"research/notebook-alice"}
    assert "gpu-share-exceeded" not in {g["kind"] for g in doc["findings"]}
