"""A ring's history holds the node's pods but no node object, so which ``nvidia.com/`` resources are
GPUs (the node's ``status.capacity``) is not known when a ring capture is analysed. A pod that holds
a renamed GPU resource (``nvidia.com/gpu.shared``) must not be accused of ``unallocated-gpu-use``
for want of it: the limit is taken for a GPU grant, its devices from the device plugin's
``NVIDIA_VISIBLE_DEVICES`` where the ring has the process environment, else not judged."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.analysis_bundles import GIB, BundleSpec, cid_of
from tests.support.ring_bundle import capture_since, ring_from_sample

ROOT = Path(__file__).resolve().parents[3]
UID = "11111111-2222-4333-8444-555555555555"


def _node_spec(resource: str, env_devices: bool, node: bool = False) -> BundleSpec:
    """What the recorder keeps of a node where pod ml/trainer-0 (limit ``resource: 1``) runs torchrun
    on GPU 0 at 90% SM: pods, GPU samples, the process's cgroup and environment."""
    b = BundleSpec(start=time.time() - 900)
    uuid = b.gpu(0)
    cid = cid_of("trainer")
    b.pod("ml", "trainer-0", UID, [("trainer", cid, 0)])
    b.pods[-1]["spec"]["containers"][0]["resources"]["limits"][resource] = "1"
    if node:
        b.add_json("kubernetes/node.json", {"kind": "Node", "metadata": {"name": b.host},
                                            "status": {"capacity": {"cpu": "64", "nvidia.com/gpu.shared": "4"}}})
    environ = [f"NVIDIA_VISIBLE_DEVICES={uuid}"] if env_devices else ["PATH=/usr/bin"]
    b.process(31, "torchrun", container=cid, pod_uid=UID, environ=environ)
    b.gpu_series(0, range(20), lambda s: (95, 40 * GIB, {31: (30 * GIB, 90.0)}))
    b.status["docker"] = "unavailable"
    return b


def _analyze_ring_capture(spec: BundleSpec, tmp: Path) -> dict:
    """The spec's members in a ring (as the recorder writes them), ``capture --since 1h --only ring``
    over it, and ``analyze -f json`` of that capture."""
    (tmp / "b").mkdir()
    ring_from_sample(tmp / "ring", sample=spec.write(tmp / "b"))
    bundle = capture_since(tmp / "ring", tmp / "out", "1h")
    res = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(bundle), "-f", "json"],
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def _kinds(doc: dict) -> set[str]:
    return {f["kind"] for f in doc["findings"]}


def test_a_renamed_gpu_resource_in_a_ring_capture_is_a_grant(tmp_path: Path) -> None:
    doc = _analyze_ring_capture(_node_spec("nvidia.com/gpu.shared", env_devices=True), tmp_path)
    assert "unallocated-gpu-use" not in _kinds(doc)


def test_without_the_devices_it_is_not_judged(tmp_path: Path) -> None:
    doc = _analyze_ring_capture(_node_spec("nvidia.com/gpu.shared", env_devices=False), tmp_path)
    assert "unallocated-gpu-use" not in _kinds(doc)


def test_the_node_capacity_still_decides_when_it_was_read(tmp_path: Path) -> None:
    """The control: the node object read, a resource it does not advertise as a GPU (an RDMA device)
    grants no GPU, and the pod on GPU 0 is judged (so the rule did run on these bundles)."""
    doc = _analyze_ring_capture(_node_spec("nvidia.com/hostdev", env_devices=False, node=True), tmp_path)
    (f,) = [f for f in doc["findings"] if f["kind"] == "unallocated-gpu-use"]
    assert any(s["role"] == "culprit" and "trainer-0" in s["name"] for s in f["subjects"])
