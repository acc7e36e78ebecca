"""The flight recorder keeps a DRA pod and its ResourceClaim at first sight (a claim is deleted with
its pod): ``gpuforensics record`` against the loopback API server (real kubernetes client) sees the
pod, its claim and the node's ResourceSlice; both are deleted; the recorder lists the pods again and
the ring still holds them. ``capture --since`` carries the ring; its rebuilt ``ring/kubernetes/*``
members (the bytes the recorder wrote) then grant the GPU use of the pod's process in the analysis:
not unallocated, the grant citing the ring's claim. The GPU use is laid out by the analysis' bundle
builder (tests/support/analysis_bundles.py): this test's recorder follows no GPU. Objects:
tests/support/dra_objects.py (upstream shapes, cited there)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from tests.integration.test_recorder_kubernetes import NODE, _cli, _record, _stop, recorders
from tests.support.analysis_bundles import GIB, BundleSpec, cid_of
from tests.support.dra_objects import DraDevice, DraState, claim_pod, resource_claim, resource_slice
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import ContainerSpec, gpu_node_scenario, make_pod
from tests.support.polling import wait_for
from tests.support.record_support import members
from tests.support.ring_bundle import ring_member

__all__ = ["recorders"]

pytestmark = [pytest.mark.slow]
POD_UID = "0d7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4c01"
SECRET = "hf_q3V9xT2mLp8RzK4wYb7NcD1sFgHj6uEa"
CLAIM, CLAIM_UID = "train-0-gpu-x7k2p", "c1a1c1a1-0000-4000-8000-0000000000c1"


def _writes(ring: Path, member: str) -> list[dict]:
    """Every copy of the write member ``member`` the recorder wrote, parsed."""
    if not (ring / "writer.json").exists():  # the recorder has not opened it yet
        return []
    return [json.loads(r.data) for r in members(ring, member) if r.data.strip()]


def test_a_deleted_dra_pods_claim_stays_in_the_ring_and_grants_its_gpu(tmp_path: Path, recorders: list) -> None:
    home = tmp_path / "home"
    home.mkdir()
    gpu0 = BundleSpec().gpu(0)  # the bundle builder's GPUs are the same in every BundleSpec
    trainer = cid_of("train")
    state = gpu_node_scenario()
    now = datetime.now(UTC).replace(microsecond=0)
    pod = claim_pod(make_pod("train-0", "ml", NODE, now, [ContainerSpec("train", container_id=trainer,
                                                                     env=[("HF_TOKEN", SECRET)])],
                             uid=POD_UID, started_ago_s=60), {"gpu": CLAIM}, {"train": ["gpu"]}, template=True)
    state.pods.append(pod)
    state.dra = DraState(slices=[resource_slice(NODE, [DraDevice(0, gpu0)])],
                         claims=[resource_claim("ml", CLAIM, CLAIM_UID, NODE, [("gpu", "gpu-0")],
                                                reserved_for=[("train-0", POD_UID)])])
    with KubeAPIServer(state) as api:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url)
        ring = tmp_path / "ring"
        proc = _record(ring, kubeconfig, home, recorders)
        wait_for(lambda: any(CLAIM in json.dumps(w) for w in _writes(ring, "kubernetes/resourceclaims.json")), 60)
        pod_writes = len(_writes(ring, "kubernetes/pods.json"))
        # the pod is deleted, and its claim with it (as the ResourceClaim controller does)
        api.set_objects(pods=[p for p in api.state.pods if p["metadata"]["uid"] != POD_UID])
        api.state.dra.claims = []
        # the next pod list (every 30 s) sees it gone: the pods are written again, the gone one kept
        wait_for(lambda: len(_writes(ring, "kubernetes/pods.json")) > pod_writes, 60)
        out = tmp_path / "out"
        out.mkdir()
        cap = _cli("capture", "--since", "10m", "--ring", str(ring), "--only", "kubernetes,ring",
                   "--kubeconfig", str(kubeconfig), "--node", NODE, "-o", str(out), "--quiet", home=home)
        assert cap.returncode == 0, cap.stderr
        status = _stop(proc)
    assert status["sources"]["kubernetes"]["status"] == "running", status
    bundle = Path(cap.stdout.strip())
    rebuilt = {m: ring_member(bundle, f"ring/{m}") for m in
               ("kubernetes/pods.json", "kubernetes/resourceclaims.json", "kubernetes/resourceslices.json")}
    ring_pods = json.loads(rebuilt["kubernetes/pods.json"])
    assert SECRET.encode() not in rebuilt["kubernetes/pods.json"]  # env values redacted as capture redacts them
    (kept,) = [p for p in ring_pods["items"] if p["metadata"]["uid"] == POD_UID]
    assert kept["spec"]["containers"][0]["env"][0]["value"].startswith("<redacted:")
    assert ring_pods["kind"] == "PodList" and POD_UID in {p["metadata"]["uid"] for p in ring_pods["items"]}
    claims = json.loads(rebuilt["kubernetes/resourceclaims.json"])
    assert claims["apiVersion"] == "resource.k8s.io/v1" and [c["metadata"]["name"] for c in claims["items"]] == [CLAIM]

    # the analysis of a node whose pod's process ran on a GPU, with only the ring's Kubernetes objects
    granted = _analyze(tmp_path / "on-its-gpu", rebuilt, used_gpu=0)
    assert not [f for f in granted["findings"] if f["kind"] == "unallocated-gpu-use"], \
        [f["summary"] for f in granted["findings"]]
    (c,) = [c for c in granted["containers"] if c["id"] == trainer]
    assert c["gpu_allocation"]["kind"] == "dra" and c["gpu_allocation"]["gpus"] == [gpu0], c["gpu_allocation"]
    assert f"ml/{CLAIM}" in json.dumps(c["gpu_allocation"]["claims"]), c["gpu_allocation"]
    # the same pod on the other GPU: accused, the grant it had cited from the ring's claim and slice
    wrong = _analyze(tmp_path / "on-another-gpu", rebuilt, used_gpu=1)
    (f,) = [f for f in wrong["findings"] if f["kind"] == "unallocated-gpu-use"]
    # its GPU named as the rest of the report names GPUs (index and short UUID), though the ring,
    # read first, holds no GPU list
    assert f"claim ml/{CLAIM}: gpu.nvidia.com gpu-0 (GPU 0, {gpu0[:8]}...)" in f["summary"], f["summary"]
    cited = {e["member"] for e in f["evidence"]}
    assert {"ring/kubernetes/resourceclaims.json", "ring/kubernetes/resourceslices.json"} <= cited, cited


def _spec() -> BundleSpec:
    spec = BundleSpec()
    spec.gpu(0)
    spec.gpu(1)
    return spec


def _analyze(out: Path, rebuilt: dict[str, bytes], used_gpu: int) -> dict:
    """A node with GPUs 0 and 1 whose pod's process runs on ``used_gpu`` with the CDI spec's
    ``NVIDIA_VISIBLE_DEVICES=void``; its Kubernetes members only the ring's (``ring/...``)."""
    spec = _spec()
    spec.status["docker"] = "unavailable"
    for member, data in rebuilt.items():
        spec.add_json(f"ring/{member}", json.loads(data))
    spec.process(31, "torchrun", container=cid_of("train"), pod_uid=POD_UID, environ=["NVIDIA_VISIBLE_DEVICES=void"])
    spec.gpu_series(used_gpu, range(20), lambda s: (99, 50 * GIB, {31: (30 * GIB, 90.0)}))
    out.mkdir()
    return analyze_bundles([spec.write(out)], None)
