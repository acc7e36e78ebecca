"""A DRA GPU node (Kubernetes 1.34+ ``resource.k8s.io/v1``, NVIDIA's ``gpu.nvidia.com`` driver): real
containerd pods laid out as the kubelet lays them out, the loopback Kubernetes API serving the
pods, their ResourceClaims, the driver's ResourceSlice and DeviceClasses, the kubelet's pod-resources
server with ``dynamic_resources``, and the simulated NVML naming the pods' real PIDs; captured twice
(with the kubelet's socket, and as a new user would: a kubeconfig and no pod-resources) and
analysed. Objects: tests/support/dra_objects.py (shapes from upstream, cited there).

GPUs: index 0 is ``/dev/nvidia1`` (minor 1) and index 1 is ``/dev/nvidia0`` (the driver's ``gpu-N``
is the minor: ``gpu-1`` is GPU 0); GPU 4 runs MIG.

- ``ml/train-0``: claim ``train-0-gpu-x7k2p`` (from a template) -> ``gpu-1`` = GPU 0; runs there
  with the CDI spec's ``NVIDIA_VISIBLE_DEVICES=void``: granted, no finding;
- ``ml/train-1``: claim ``train-1-gpu-q9z8w`` -> ``gpu-2`` = GPU 2, but runs on GPU 0:
  ``unallocated-gpu-use`` naming its claim, ``ml/train-0`` the victim;
- ``research/nb-a`` and ``research/nb-b``: one claim ``shared-gpu`` (``GpuConfig`` TimeSlicing) ->
  ``gpu-0`` = GPU 1, both run there: no overlap;
- ``ml/gpu-full-pod``: ``nvidia.com/gpu: 1`` served by DRA (``extendedResourceClaimStatus``) ->
  ``gpu-3`` = GPU 3, runs there: judged by its claim, no finding;
- ``ml/mig-0``: claim ``mig-0-mig`` -> ``gpu-4-mig-19-0-1`` (MIG device 0 of GPU 4), runs there;
- ``research/shared-nb``: ``nvidia.com/gpu.shared: 1`` (the node advertises it), the device plugin's
  ``NVIDIA_VISIBLE_DEVICES=<GPU 2>`` in its environment, runs on GPU 2: granted with and without
  pod-resources.
"""

from __future__ import annotations

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
from tests.support.containerd_engine import BUSYBOX_REF, ContainerdEngine, containerd_engine
from tests.support.dra_objects import (
    DraDevice,
    DraState,
    claim_pod,
    device_class,
    extended_resource_pod,
    resource_claim,
    resource_slice,
)
from tests.support.kube_apiserver import KubeAPIServer, write_kubeconfig
from tests.support.kube_objects import ClusterState, ContainerSpec, make_node, make_pod
from tests.support.nvmlsim import Scenario as NvmlScenario
from tests.support.nvmlsim import activate
from tests.support.nvmlsim import fixtures as nvf
from tests.support.podresources_server import PodResourcesServer, gpu_uuid

__all__ = ["containerd_engine"]

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow, pytest.mark.root]

NODE = "gpu-node-07"
GIB = 1 << 30
SHARED = "nvidia.com/gpu.shared"
MINORS = {0: 1, 1: 0, 2: 2, 3: 3, 4: 4}  # NVML index -> device minor
MIG_A = "MIG-4c6e1a2b-0000-5000-8000-0000000000a1"
VOID = {"NVIDIA_VISIBLE_DEVICES": "void"}
PODS = {  # name -> (namespace, container, uid)
    "train-0": ("ml", "train", "0d7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b01"),
    "train-1": ("ml", "train", "0d7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b02"),
    "nb-a": ("research", "jupyter", "0d7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b03"),
    "nb-b": ("research", "jupyter", "0d7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b04"),
    "gpu-full-pod": ("ml", "cuda-container", "0d7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b05"),
    "mig-0": ("ml", "train", "0d7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b06"),
    "shared-nb": ("research", "jupyter", "0d7f7a0e-2a1d-4c53-9a5e-7d1c2f3a4b07"),
}
RUNS_ON = {"train-0": 0, "train-1": 0, "nb-a": 1, "nb-b": 1, "gpu-full-pod": 3, "mig-0": 4, "shared-nb": 2}


@dataclass
class Node:
    with_kubelet: Bundle
    analysis: dict[str, Any]
    without_kubelet: Bundle
    analysis_without: dict[str, Any]
    ids: dict[str, str]
    pids: dict[str, int]

    def findings(self, kind: str, without: bool = False) -> list[dict[str, Any]]:
        return [f for f in (self.analysis_without if without else self.analysis)["findings"] if f["kind"] == kind]


def _collectors(podresources: bool) -> list[Any]:
    from forensics.collectors.cgroups import CgroupsCollector
    from forensics.collectors.cri.collector import CriCollector
    from forensics.collectors.kubernetes.kubernetes import KubernetesCollector
    from forensics.collectors.nvml.nvml import NvmlCollector
    from forensics.collectors.podresources.collector import PodResourcesCollector
    from forensics.collectors.procfs import ProcfsCollector

    base = [NvmlCollector(), CriCollector(), ProcfsCollector(), CgroupsCollector(), KubernetesCollector()]
    return [*base, PodResourcesCollector()] if podresources else base


def _cluster(now: datetime, ids: dict[str, str]) -> ClusterState:
    uuids = {i: gpu_uuid(i) for i in range(5)}

    def pod(name: str, limits: dict[str, str] | None = None) -> dict[str, Any]:
        ns, c, uid = PODS[name]
        return make_pod(name, ns, NODE, now, [ContainerSpec(c, image=BUSYBOX_REF, limits=dict(limits or {}),
                                                            requests=dict(limits or {}), container_id=ids[name])],
                        uid=uid, started_ago_s=60)

    pods = [
        claim_pod(pod("train-0"), {"gpu": "train-0-gpu-x7k2p"}, {"train": ["gpu"]}, template=True),
        claim_pod(pod("train-1"), {"gpu": "train-1-gpu-q9z8w"}, {"train": ["gpu"]}, template=True),
        claim_pod(pod("nb-a"), {"gpu": "shared-gpu"}, {"jupyter": ["gpu"]}),
        claim_pod(pod("nb-b"), {"gpu": "shared-gpu"}, {"jupyter": ["gpu"]}),
        extended_resource_pod(pod("gpu-full-pod", {"nvidia.com/gpu": "1"}), "gpu-full-pod-extended-resources-x7k9m",
                              "cuda-container"),
        claim_pod(pod("mig-0"), {"mig": "mig-0-mig"}, {"train": ["mig"]}, template=True),
        pod("shared-nb", {SHARED: "1"}),
    ]
    uid = {name: PODS[name][2] for name in PODS}
    claims = [
        resource_claim("ml", "train-0-gpu-x7k2p", "c1a1c1a1-0000-4000-8000-000000000001", NODE, [("gpu", "gpu-1")],
                       reserved_for=[("train-0", uid["train-0"])]),
        resource_claim("ml", "train-1-gpu-q9z8w", "c1a1c1a1-0000-4000-8000-000000000002", NODE, [("gpu", "gpu-2")],
                       reserved_for=[("train-1", uid["train-1"])]),
        resource_claim("research", "shared-gpu", "c1a1c1a1-0000-4000-8000-000000000003", NODE, [("gpu", "gpu-0")],
                       reserved_for=[("nb-a", uid["nb-a"]), ("nb-b", uid["nb-b"])],
                       sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
        resource_claim("ml", "gpu-full-pod-extended-resources-x7k9m", "c1a1c1a1-0000-4000-8000-000000000004", NODE,
                       [("container-0-request-0", "gpu-3")], reserved_for=[("gpu-full-pod", uid["gpu-full-pod"])],
                       extended_for="gpu-full-pod"),
        resource_claim("ml", "mig-0-mig", "c1a1c1a1-0000-4000-8000-000000000005", NODE,
                       [("mig", "gpu-4-mig-19-0-1")], reserved_for=[("mig-0", uid["mig-0"])]),
    ]
    devices = [DraDevice(MINORS[i], uuids[i]) for i in range(4)]
    devices.append(DraDevice(4, MIG_A, (19, 0, 1), uuids[4], "1g.10gb"))
    node = make_node(NODE, now, gpus=5, mig={SHARED: 8})
    return ClusterState(nodes=[node], pods=pods, dra=DraState(
        slices=[resource_slice(NODE, devices)], claims=claims,
        device_classes=[device_class(extended_resource_name="nvidia.com/gpu")]))


@pytest.fixture(scope="module")
def node(containerd_engine: ContainerdEngine, sim_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    tmp = tmp_path_factory.mktemp("dra-node")
    ids: dict[str, str] = {}
    with containerd_engine.driver() as cri:
        try:
            for name, (ns, c, uid) in PODS.items():
                sandbox = cri.run_pod(name, ns, uid)
                envs = ({"NVIDIA_VISIBLE_DEVICES": gpu_uuid(2)} if name == "shared-nb" else VOID)
                ids[name] = cri.create_container(sandbox, c, BUSYBOX_REF, envs=envs)
            pids = {name: cri.pid_of(cid) for name, cid in ids.items()}
            now = datetime.now(UTC).replace(microsecond=0)
            state = _cluster(now, ids)
            sc = NvmlScenario()
            for i in range(5):
                sc.add_gpu(uuid=gpu_uuid(i), gpu_util=90 if i in RUNS_ON.values() else 0,
                           memory_total_bytes=80 * GIB, minor_number=MINORS[i], mig=True if i == 4 else None)
            sc.add_mig(gpu=4, slot=0, gpu_instance_id=1, uuid=MIG_A)
            for name, gpu in RUNS_ON.items():
                sc.add_process(pid=pids[name], gpu=gpu, mig=0 if name == "mig-0" else None,
                               used_memory_bytes=5 * GIB, sm_util=40, mem_util=20)
            activate(sc.write(tmp / "nvml.tsv"))
            sock = Path(f"/tmp/gf-dra-{id(tmp)}.sock")
            bundles = []
            with KubeAPIServer(state) as api, PodResourcesServer(
                    sock, pods=state.pods, gpu_ids=[gpu_uuid(i) for i in range(5)],
                    mig_ids={SHARED: [f"{gpu_uuid(2)}::{k}" for k in range(8)]}, claims=state.dra.claims):
                for name, (ns, c, _) in PODS.items():
                    api.set_pod_log(ns, name, c, [(now.timestamp() - 5, f"{name}: step 1 loss 0.31")])
                kubeconfig = write_kubeconfig(tmp / "kubeconfig", api.url)
                for podresources in (True, False):
                    out = tmp / f"out-{podresources}"
                    out.mkdir()
                    result = run_capture(CaptureOptions(
                        nvml_library=str(sim_lib), duration_s=3, interval_s=1, timeout_s=90,
                        kubeconfig=str(kubeconfig), node_name=NODE, lookback_s=600,
                        extra={"cri.endpoint": containerd_engine.endpoint, "podresources.socket": str(sock)},
                    ), out, collectors=_collectors(podresources))
                    bundles.append(result.path)
            yield Node(open_bundle(bundles[0]), analyze_bundles([bundles[0]]),
                       open_bundle(bundles[1]), analyze_bundles([bundles[1]]), ids, pids)
        finally:
            cri.remove_all()


def _names(f: dict[str, Any], role: str) -> set[str]:
    return {s["name"] for s in f["subjects"] if s["role"] == role and s["type"] == "pod"}


@pytest.mark.parametrize("without", [False, True], ids=["pod-resources", "kubeconfig-only"])
def test_only_the_pod_off_its_claims_gpu_is_accused(node: Node, without: bool) -> None:
    (f,) = node.findings("unallocated-gpu-use", without)
    assert _names(f, "culprit") == {"ml/train-1"}, f["subjects"]
    assert _names(f, "victim") == {"ml/train-0"}
    assert f"claim ml/train-1-gpu-q9z8w: gpu.nvidia.com gpu-2 (GPU 2, {gpu_uuid(2)[:8]}...)" in f["summary"], f["summary"]
    assert "ml/train-1-gpu-q9z8w" in f["next_step"] and "nvidia.com/gpu" not in f["next_step"]
    assert not node.findings("overlapping-gpu-allocation", without)


def test_the_bundle_holds_the_nodes_dra_objects(node: Node) -> None:
    members = set(node.without_kubelet.names())
    assert {"kubernetes/resourceslices.json", "kubernetes/resourceclaims.json", "kubernetes/deviceclasses.json",
            "kubernetes/resource-api.json"} <= members
    assert not [m for m in members if m.startswith("kubernetes/podresources/")]
    listing = node.with_kubelet.read_bytes("kubernetes/podresources/list.json")
    assert b"dynamic_resources" in listing and b"k8s.gpu.nvidia.com/claim=" in listing


def test_logs_of_every_dra_and_shared_pod(node: Node) -> None:
    members = set(node.without_kubelet.names())
    for name, (ns, c, _) in PODS.items():
        assert f"kubernetes/logs/{ns}/{name}/{c}.log" in members, name


def test_containers_grant_column_is_dra_with_the_claim(node: Node) -> None:
    by_name = {c["name"]: c["gpu_allocation"] for c in node.analysis_without["containers"]}
    assert by_name["ml/train-0/train"]["kind"] == "dra"
    assert by_name["ml/train-0/train"]["claims"] == ["ml/train-0-gpu-x7k2p"]
    assert by_name["ml/train-0/train"]["gpus"] == [gpu_uuid(0)]  # gpu-1 is minor 1: GPU 0
    assert by_name["ml/mig-0/train"]["gpus"] == [MIG_A]
    assert by_name["research/shared-nb/jupyter"]["gpus"] == [gpu_uuid(2)]
