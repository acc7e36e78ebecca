"""A Kubernetes GPU node without Docker: a real containerd (CRI) with pods laid out as the kubelet
lays them out, the loopback Kubernetes API, the kubelet's pod-resources server and the simulated
NVML naming the pods' real PIDs; captured with every collector and analysed.

Pods (tests/support/containerd_engine.py creates them through CRI):

- ``ml/trainer-0``: container ``train``, ``nvidia.com/gpu: 1``; the kubelet assigned it GPU 0
  (pod-resources) and the device plugin gave it ``/dev/nvidia0`` (an OCI ``linux.devices`` entry
  and a device cgroup rule ``c 195:0 rwm``);
- ``research/notebook-alice``: container ``jupyter`` from the cuda-like image
  (``NVIDIA_VISIBLE_DEVICES=all`` in its ENV), no GPU limit: its process runs on GPU 0;
- ``batch/oom-0``: container ``eat``, 16 MiB limit, ``tail /dev/zero``: really OOM-killed;
- ``batch/spin-0``: container ``spin``, 0.2 CPU, a busy loop: really CPU-throttled.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.bundle.reader import Bundle, open_bundle
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.cri.collector import CriCollector
from tests.support.containerd_engine import (
    BUSYBOX_REF,
    CUDA_LIKE_REF,
    ContainerdEngine,
    containerd_engine,
)
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import ClusterState, ContainerSpec, make_node, make_pod
from tests.support.nvmlsim import Scenario as NvmlScenario
from tests.support.nvmlsim import activate
from tests.support.nvmlsim import fixtures as nvf
from tests.support.podresources_server import PodResourcesServer, gpu_uuid
from tests.support.polling import wait_for

__all__ = ["containerd_engine"]

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow, pytest.mark.root]

NODE = "gpu-node-07"
GIB = 1 << 30
UIDS = {
    "trainer-0": "0b7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b01",
    "notebook-alice": "0b7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b02",
    "oom-0": "0b7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b03",
    "spin-0": "0b7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b04",
}


@dataclass
class Node:
    engine: ContainerdEngine
    bundle: Bundle
    analysis: dict[str, Any]
    ids: dict[str, str]
    sandboxes: dict[str, str]
    pids: dict[str, int]
    bundle_runtime_only: Bundle  # captured without the kubernetes and podresources collectors
    analysis_runtime_only: dict[str, Any]

    def findings(self, kind: str, runtime_only: bool = False) -> list[dict[str, Any]]:
        analysis = self.analysis_runtime_only if runtime_only else self.analysis
        return [f for f in analysis["findings"] if f["kind"] == kind]


def _collectors(kubernetes: bool) -> list[Any]:
    """The node's collectors; without ``kubernetes`` neither the API nor the kubelet's pod-resources
    (a node whose API server is down: only the runtime names pods)."""
    from forensics.collectors.cgroups import CgroupsCollector
    from forensics.collectors.kernel import COLLECTOR as KERNEL
    from forensics.collectors.kubernetes.kubernetes import KubernetesCollector
    from forensics.collectors.nvml.nvml import NvmlCollector
    from forensics.collectors.podresources.collector import PodResourcesCollector
    from forensics.collectors.procfs import ProcfsCollector

    base = [NvmlCollector(), CriCollector(), ProcfsCollector(), CgroupsCollector(), KERNEL]
    return [*base, KubernetesCollector(), PodResourcesCollector()] if kubernetes else base




def _throttled(engine: ContainerdEngine, cgroup_parent: str, cid: str) -> int:
    for hierarchy in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup"):
        path = Path(hierarchy) / cgroup_parent.lstrip("/") / cid / "cpu.stat"
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith(("nr_throttled", "throttled_periods")):
                    return int(line.split()[1])
    return 0


@pytest.fixture(scope="module")
def node(containerd_engine: ContainerdEngine, sim_lib: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    engine = containerd_engine
    tmp = tmp_path_factory.mktemp("containerd-node")
    dev = engine.tmpdir / "nvidia0"
    if not dev.exists():
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    ids: dict[str, str] = {}
    sandboxes: dict[str, str] = {}
    with engine.driver() as cri:
        pods = {
            "trainer-0": cri.run_pod("trainer-0", "ml", UIDS["trainer-0"]),
            "notebook-alice": cri.run_pod("notebook-alice", "research", UIDS["notebook-alice"],
                                          qos="besteffort"),
            "oom-0": cri.run_pod("oom-0", "batch", UIDS["oom-0"]),
            "spin-0": cri.run_pod("spin-0", "batch", UIDS["spin-0"]),
        }
        try:
            sandboxes = {k: p.sandbox_id for k, p in pods.items()}
            ids["train"] = cri.create_container(pods["trainer-0"], "train", BUSYBOX_REF,
                                                envs={"NVIDIA_VISIBLE_DEVICES": gpu_uuid(0)},
                                                devices={str(dev): "/dev/nvidia0"})
            ids["jupyter"] = cri.create_container(pods["notebook-alice"], "jupyter", CUDA_LIKE_REF,
                                                  envs={"JUPYTER_TOKEN": "s3cr3t-notebook-token"})
            ids["eat"] = cri.create_container(pods["oom-0"], "eat", BUSYBOX_REF,
                                              command=["tail", "/dev/zero"],
                                              memory_limit_bytes=16 << 20)
            ids["spin"] = cri.create_container(pods["spin-0"], "spin", BUSYBOX_REF,
                                               command=["sh", "-c", "while :; do :; done"],
                                               cpu_quota_us=20_000)
            pids = {name: cri.pid_of(ids[name]) for name in ("train", "jupyter", "spin")}
            oom = cri.wait_exited(ids["eat"], timeout_s=60)
            assert (oom.exit_code, oom.reason) == (137, "OOMKilled"), (oom.exit_code, oom.reason)
            wait_for(lambda: _throttled(engine, pods["spin-0"].cgroup_parent, ids["spin"]) >= 5)

            # the cluster's view: the same pods, UIDs and container ids
            now = datetime.now(UTC).replace(microsecond=0)
            state = ClusterState(nodes=[make_node(NODE, now, gpus=2)], pods=[
                make_pod("trainer-0", "ml", NODE, now, [ContainerSpec(
                    "train", image=BUSYBOX_REF, limits={"nvidia.com/gpu": "1"},
                    container_id=ids["train"])], uid=UIDS["trainer-0"], started_ago_s=60),
                make_pod("notebook-alice", "research", NODE, now, [ContainerSpec(
                    "jupyter", image=CUDA_LIKE_REF, container_id=ids["jupyter"])],
                    uid=UIDS["notebook-alice"], started_ago_s=60),
                make_pod("oom-0", "batch", NODE, now, [ContainerSpec(
                    "eat", image=BUSYBOX_REF, limits={"memory": "16Mi"}, state="terminated",
                    state_reason="OOMKilled", exit_code=137, container_id=ids["eat"])],
                    uid=UIDS["oom-0"], started_ago_s=60),
                make_pod("spin-0", "batch", NODE, now, [ContainerSpec(
                    "spin", image=BUSYBOX_REF, limits={"cpu": "200m"}, container_id=ids["spin"])],
                    uid=UIDS["spin-0"], started_ago_s=60),
            ])
            sc = NvmlScenario()
            sc.add_gpu(uuid=gpu_uuid(0), gpu_util=[(0, 95), (2, 99)], memory_total_bytes=80 * GIB)
            sc.add_gpu(uuid=gpu_uuid(1), gpu_util=0, memory_total_bytes=80 * GIB)
            sc.add_process(pid=pids["train"], gpu=0, used_memory_bytes=20 * GIB,
                           sm_util=[(0, 95), (2, 7)], mem_util=30)
            sc.add_process(pid=pids["jupyter"], gpu=0, used_memory_bytes=50 * GIB,
                           sm_util=[(0, 0), (2, 88)], mem_util=60)
            activate(sc.write(tmp / "nvml.tsv"))
            sock = Path(f"/tmp/gf-pr-{os.getpid()}.sock")
            out = tmp / "out"
            out.mkdir()
            with KubeAPIServer(state) as api, PodResourcesServer(
                    sock, pods=state.pods, gpu_ids=[gpu_uuid(0), gpu_uuid(1)]):
                kubeconfig = write_kubeconfig(tmp / "kubeconfig", api.url)
                result = run_capture(CaptureOptions(
                    nvml_library=str(sim_lib), duration_s=4, interval_s=1, timeout_s=90,
                    kubeconfig=str(kubeconfig), node_name=NODE, lookback_s=600,
                    extra={"cri.endpoint": engine.endpoint, "podresources.socket": str(sock)},
                ), out, collectors=_collectors(kubernetes=True))
            out2 = tmp / "out-runtime-only"
            out2.mkdir()
            alone = run_capture(CaptureOptions(
                nvml_library=str(sim_lib), duration_s=2, interval_s=1, timeout_s=90, node_name=NODE,
                lookback_s=600, extra={"cri.endpoint": engine.endpoint},
            ), out2, collectors=_collectors(kubernetes=False))
            yield Node(engine, open_bundle(result.path), analyze_bundles([result.path]), ids, sandboxes, pids,
                       open_bundle(alone.path), analyze_bundles([alone.path]))
        finally:
            cri.remove_all()


def _status(bundle: Bundle, name: str) -> dict[str, Any]:
    return next(c for c in bundle.collectors() if c["name"] == name)


def _subjects(finding: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [s for s in finding["subjects"] if s["role"] == role]


class TestCapture:
    def test_cri_collector_ok_with_every_member(self, node: Node) -> None:
        status = _status(node.bundle, "cri")
        assert status["status"] == "ok", status
        members = set(node.bundle.names())
        assert {"cri/version.json", "cri/pods.json", "cri/containers.json"} <= members
        for sid in node.sandboxes.values():
            assert f"cri/pods/{sid}.json" in members
        for cid in node.ids.values():
            assert f"cri/containers/{cid}.json" in members
        stats = {s["attributes"]["id"]: s for s in node.bundle.read_json("cri/stats.json")["stats"]}
        assert stats[node.ids["spin"]]["cpu"]["usage_core_nano_seconds"]["value"] > 0
        version = node.bundle.read_json("cri/version.json")
        assert version["runtime_name"] == "containerd" and version["runtime_api_version"] == "v1"

    def test_runtime_spec_holds_the_device_grant(self, node: Node) -> None:
        import json

        status = node.bundle.read_json(f"cri/containers/{node.ids['train']}.json")
        spec = json.loads(status["info"]["info"])["runtimeSpec"]
        [device] = spec["linux"]["devices"]
        assert (device["path"], device["major"], device["minor"]) == ("/dev/nvidia0", 195, 0)
        assert {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"} in \
            spec["linux"]["resources"]["devices"]
        assert spec["linux"]["cgroupsPath"] == f"/kubepods/burstable/pod{UIDS['trainer-0']}/{node.ids['train']}"
        notebook = json.loads(node.bundle.read_json(
            f"cri/containers/{node.ids['jupyter']}.json")["info"]["info"])["runtimeSpec"]
        assert "NVIDIA_VISIBLE_DEVICES=all" in notebook["process"]["env"]
        assert not notebook["linux"].get("devices")

    def test_oom_killed_container_status(self, node: Node) -> None:
        status = node.bundle.read_json(f"cri/containers/{node.ids['eat']}.json")["status"]
        assert status["state"] == "CONTAINER_EXITED"
        assert (status["exit_code"], status["reason"]) == (137, "OOMKilled")

    def test_secrets_redacted(self, node: Node) -> None:
        for member in node.bundle.names():
            if member.startswith("cri/"):
                assert b"s3cr3t-notebook-token" not in node.bundle.read_bytes(member), member

    def test_hints_reach_procfs_and_cgroups(self, node: Node) -> None:
        hints = node.bundle.manifest["hints"]
        assert {node.pids["train"], node.pids["jupyter"], node.pids["spin"]} <= set(hints["pids"])
        spin_cgroup = f"/kubepods/burstable/pod{UIDS['spin-0']}/{node.ids['spin']}"
        assert spin_cgroup in hints["cgroup_paths"]
        for name in ("train", "jupyter"):
            assert f"proc/{node.pids[name]}/cgroup" in node.bundle.names()


class TestAnalysis:
    def test_notebook_pod_is_the_culprit_on_the_trainers_gpu(self, node: Node) -> None:
        [finding] = node.findings("unallocated-gpu-use")
        assert finding["severity"] == "high"
        [culprit] = [s for s in _subjects(finding, "culprit") if s["type"] == "container"]
        assert culprit["id"] == node.ids["jupyter"]
        assert culprit["name"] == "research/notebook-alice/jupyter"
        [pod] = [s for s in _subjects(finding, "culprit") if s["type"] == "pod"]
        assert (pod["id"], pod["name"]) == (UIDS["notebook-alice"], "research/notebook-alice")
        victims = _subjects(finding, "victim")
        assert any(v["id"] == node.ids["train"] and v["name"] == "ml/trainer-0/train" for v in victims)
        assert str(node.pids["jupyter"]) in finding["summary"]
        assert "GPU 0 to pod ml/trainer-0" in finding["summary"]
        assert "NVIDIA_VISIBLE_DEVICES=all" in finding["summary"] or any(
            "NVIDIA_VISIBLE_DEVICES=all" in e["excerpt"] for e in finding["evidence"])

    def test_oom_kill_names_pod_and_container(self, node: Node) -> None:
        findings = node.findings("oom-kill")
        assert findings, [f["kind"] for f in node.analysis["findings"]]
        subjects = [s for f in findings for s in f["subjects"]]
        assert any(s.get("id") == node.ids["eat"] and "oom-0" in (s.get("name") or "")
                   and "eat" in (s.get("name") or "") for s in subjects), subjects

    def test_cpu_throttling_names_pod_and_container(self, node: Node) -> None:
        findings = node.findings("cpu-throttling")
        assert findings, [f["kind"] for f in node.analysis["findings"]]
        subjects = [s for f in findings for s in f["subjects"]]
        assert any(s.get("id") == node.ids["spin"] and "spin-0" in (s.get("name") or "")
                   for s in subjects), subjects


class TestRuntimeOnly:
    """The same node captured without the Kubernetes API and the kubelet's pod-resources: the CRI
    runtime alone names pods and containers, and its OCI runtime specs say who was given which GPU."""

    def test_no_kubernetes_members_and_cri_ok(self, node: Node) -> None:
        bundle = node.bundle_runtime_only
        assert _status(bundle, "cri")["status"] == "ok"
        assert not [m for m in bundle.names() if m.startswith("kubernetes/")]
        limits = node.analysis_runtime_only["limitations"]
        # neither the runtime's nor Docker's absence costs anything: the runtime described the containers
        assert not [x for x in limits if "CRI" in x or "container runtime" in x or "Docker" in x], limits

    def test_containers_named_by_pod_and_allocated_by_runtime_spec(self, node: Node) -> None:
        containers = {c["id"]: c for c in node.analysis_runtime_only["containers"]}
        train = containers[node.ids["train"]]
        assert train["name"] == "ml/trainer-0/train"
        assert train["pod"] == UIDS["trainer-0"]
        assert train["gpu_allocation"]["explicit"] is True
        assert train["gpu_allocation"]["gpus"] == [gpu_uuid(0)]
        assert train["gpu_allocation"]["source"] == "runtime spec"
        jupyter = containers[node.ids["jupyter"]]
        assert jupyter["name"] == "research/notebook-alice/jupyter"
        assert jupyter["gpu_allocation"]["explicit"] is False and not jupyter["gpu_allocation"]["gpus"]
        pods = {p["uid"]: p for p in node.analysis_runtime_only["pods"]}
        assert (pods[UIDS["trainer-0"]]["namespace"], pods[UIDS["trainer-0"]]["name"]) == ("ml", "trainer-0")
        assert pods[UIDS["trainer-0"]]["gpu_limit"] is None  # the runtime does not know the pod spec
        assert node.ids["train"] in pods[UIDS["trainer-0"]]["containers"]

    def test_notebook_pod_is_the_culprit_on_the_trainers_gpu(self, node: Node) -> None:
        [finding] = node.findings("unallocated-gpu-use", runtime_only=True)
        assert finding["severity"] == "high"
        # the CRI runtime is the node's container runtime: Docker's absence lowers nothing (the kind
        # needed "docker" by name and said 0.66 here before it asked the container-runtime role)
        assert finding["confidence"] == 0.95
        [culprit] = [s for s in _subjects(finding, "culprit") if s["type"] == "container"]
        assert (culprit["id"], culprit["name"]) == (node.ids["jupyter"], "research/notebook-alice/jupyter")
        [pod] = [s for s in _subjects(finding, "culprit") if s["type"] == "pod"]
        assert (pod["id"], pod["name"]) == (UIDS["notebook-alice"], "research/notebook-alice")
        victims = _subjects(finding, "victim")
        assert any(v["id"] == node.ids["train"] and v["name"] == "ml/trainer-0/train" for v in victims)
        # the trainer's grant is cited from the runtime spec inside the container's status member
        member = f"cri/containers/{node.ids['train']}.json"
        assert any(e["member"] == member and e["locator"].startswith("/info/info#/runtimeSpec/linux/")
                   and "195" in e["excerpt"] for e in finding["evidence"]), finding["evidence"]

    def test_every_excerpt_is_the_members_own_text(self, node: Node) -> None:
        checked = 0
        for f in node.analysis_runtime_only["findings"]:
            for e in f["evidence"]:
                if e["member"].startswith("cri/"):
                    assert not e["excerpt_normalised"], e
                    text = node.bundle_runtime_only.read_bytes(e["member"]).decode()
                    assert e["excerpt"].removesuffix("...") in text, e
                    checked += 1
        assert checked

    def test_oom_kill_names_pod_and_container(self, node: Node) -> None:
        findings = node.findings("oom-kill", runtime_only=True)
        subjects = [s for f in findings for s in f["subjects"]]
        assert any(s.get("id") == node.ids["eat"] and s.get("name") == "batch/oom-0/eat" for s in subjects), subjects
        assert any(s.get("type") == "pod" and s.get("id") == UIDS["oom-0"] for s in subjects), subjects
        pods = {p["uid"]: p for p in node.analysis_runtime_only["pods"]}
        assert pods[UIDS["oom-0"]]["oom_killed_containers"] == ["eat"]

    def test_cpu_throttling_names_pod_and_container(self, node: Node) -> None:
        findings = node.findings("cpu-throttling", runtime_only=True)
        subjects = [s for f in findings for s in f["subjects"]]
        assert any(s.get("id") == node.ids["spin"] and s.get("name") == "batch/spin-0/spin"
                   for s in subjects), subjects
