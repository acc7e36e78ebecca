"""Kubernetes grant forms beyond the device plugin's ``nvidia.com/gpu`` limit: DRA claims (from the
claim and the driver's ResourceSlice, or from the kubelet's pod-resources ``dynamic_resources``),
sharing through one claim, MIG devices through DRA, extended resources served by DRA, and renamed
shared device-plugin resources with and without pod-resources. A pod granted its GPU in any of these
forms is never accused; a pod on another GPU than its grant's is, naming the grant as the user looks
it up (the claim, its driver and device, the GPU). Objects from tests/support/dra_objects.py
(upstream shapes, cited there)."""

from __future__ import annotations

import json
from typing import Any

from tests.support.analysis_bundles import GIB, BundleSpec, _v, cid_of
from tests.support.dra_objects import (
    DraDevice,
    claim_pod,
    extended_resource_pod,
    resource_claim,
    resource_slice,
    to_version,
)
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind

T_UID, N_UID = "0c1d2e3f-4a5b-4c6d-8e7f-000000000001", "0c1d2e3f-4a5b-4c6d-8e7f-000000000002"
CLAIM = "train-0-gpu-x7k2p"
VOID = "NVIDIA_VISIBLE_DEVICES=void"


def _items(kind: str, objs: list[dict[str, Any]]) -> dict[str, Any]:
    version = objs[0]["apiVersion"] if objs else "resource.k8s.io/v1"
    return {"apiVersion": version, "kind": kind, "metadata": {"resourceVersion": "9000"}, "items": objs}


def _dra_node(*, used_gpu: int = 0, claim_device: str = "gpu-0", second_pod: bool = False,
              sharing: dict[str, Any] | None = None, with_claims: bool = True, with_slices: bool = True,
              dynamic: bool = False, version: str = "v1", minors: tuple[int, int] | None = None,
              notebook_mem: int = 20 * GIB, reserved_for: list[tuple[str, str]] | None = None) -> BundleSpec:
    """Two GPUs; pod ml/train-0 uses claim ``CLAIM`` (device ``claim_device``) and its process runs on
    GPU ``used_gpu`` with the CDI spec's ``NVIDIA_VISIBLE_DEVICES=void``; ``second_pod``: pod
    research/notebook-alice uses the same claim and runs on GPU 0 too. ``reserved_for``: the claim's
    ``status.reservedFor`` (pod name, uid) instead of the pods using it."""
    b = BundleSpec()
    u0, u1 = b.gpu(0), b.gpu(1)
    if minors is not None:  # the driver's gpu-N is the device minor N, not the NVML index
        for g, m in zip(b.gpus, minors, strict=True):
            g["nvml"]["nvmlDeviceGetMinorNumber"] = _v(m)
    by_minor = {(minors or (0, 1))[0]: u0, (minors or (0, 1))[1]: u1}
    trainer, notebook = cid_of("train"), cid_of("nb")
    b.pod("ml", "train-0", T_UID, [("train", trainer, 0)])
    claim_pod(b.pods[-1], {"gpu": CLAIM}, {"train": ["gpu"]})
    reserved = [("train-0", T_UID)]
    if second_pod:
        b.pod("ml", "notebook-alice", N_UID, [("jupyter", notebook, 0)])
        claim_pod(b.pods[-1], {"gpu": CLAIM}, {"jupyter": ["gpu"]})
        reserved.append(("notebook-alice", N_UID))
    devices = [DraDevice(m, u) for m, u in sorted(by_minor.items())]
    if with_slices:
        b.add_json("kubernetes/resourceslices.json",
                   _items("ResourceSliceList", [to_version(resource_slice(b.host, devices), version)]))
    if with_claims:
        claim = resource_claim("ml", CLAIM, "5b6c7d8e-0000-4000-8000-00000000c1a1", b.host, [("gpu", claim_device)],
                               reserved_for=reserved if reserved_for is None else reserved_for, sharing=sharing)
        b.add_json("kubernetes/resourceclaims.json", _items("ResourceClaimList", [to_version(claim, version)]))
    if dynamic:
        b.podresources.append({"name": "train-0", "namespace": "ml", "containers": [{"name": "train", "devices": [],
            "dynamic_resources": [{"claim_name": CLAIM, "claim_namespace": "ml", "claim_resources": [
                {"cdi_devices": [{"name": f"k8s.gpu.nvidia.com/claim=5b6c7d8e-0000-4000-8000-00000000c1a1-{claim_device}"}],
                 "driver_name": "gpu.nvidia.com", "pool_name": b.host, "device_name": claim_device}]}]}]})
    b.process(31, "torchrun", container=trainer, pod_uid=T_UID, environ=["PATH=/usr/bin", VOID])
    procs = {31: (30 * GIB, 90.0)}
    if second_pod:
        b.process(32, "python", container=notebook, pod_uid=N_UID, environ=[VOID])
    b.gpu_series(used_gpu, range(20), lambda s: (99, 50 * GIB, dict(procs)))
    if second_pod:
        b.gpu_series(0, range(20), lambda s: (99, 50 * GIB, {32: (notebook_mem, 40.0)}))
    b.status["docker"] = "unavailable"
    return b


def test_a_dra_pod_on_its_claims_gpu_is_not_accused(analyze: Analyze) -> None:
    doc = analyze(_dra_node())
    assert "unallocated-gpu-use" not in kinds(doc), doc["findings"]


def test_a_dra_pod_on_another_gpu_is_unallocated_naming_its_claim(analyze: Analyze) -> None:
    doc = analyze(_dra_node(used_gpu=1))
    (f,) = of_kind(doc, "unallocated-gpu-use")
    assert "ml/train-0" in names(f, "culprit", "pod")
    assert f"claim ml/{CLAIM}: gpu.nvidia.com gpu-0 (GPU 0, GPU-" in f["summary"], f["summary"]
    assert "nvidia.com/gpu limit" not in f["summary"]
    assert f["metrics"]["allocation_kind"] == "dra"
    members = {e["member"] for e in f["evidence"]}
    assert {"kubernetes/resourceclaims.json", "kubernetes/resourceslices.json"} <= members, members
    assert f"ml/{CLAIM}" in f["next_step"] and "nvidia.com/gpu" not in f["next_step"], f["next_step"]


def test_the_drivers_gpu_n_is_the_minor_number_not_the_index(analyze: Analyze) -> None:
    # GPU index 0 is /dev/nvidia1 and index 1 is /dev/nvidia0: the claim's gpu-0 is GPU 1
    doc = analyze(_dra_node(used_gpu=1, claim_device="gpu-0", minors=(1, 0), with_slices=False))
    assert "unallocated-gpu-use" not in kinds(doc), doc["findings"]
    doc = analyze(_dra_node(used_gpu=0, claim_device="gpu-0", minors=(1, 0), with_slices=False))
    (f,) = of_kind(doc, "unallocated-gpu-use")
    assert f"claim ml/{CLAIM}: gpu.nvidia.com gpu-0 (GPU 1, GPU-" in f["summary"], f["summary"]


def test_gpu_n_with_no_minor_read_is_not_guessed_from_the_index(analyze: Analyze) -> None:
    """No slice names gpu-0's UUID and NVML read no minor numbers: gpu-0 could be either GPU (the
    index is not the minor), so the pod's use of GPU 1 is not judged, in either grant source."""
    for dynamic in (False, True):
        doc = analyze(_dra_node(used_gpu=1, claim_device="gpu-0", with_slices=False, dynamic=dynamic,
                                with_claims=not dynamic))
        assert "unallocated-gpu-use" not in kinds(doc), doc["findings"]


def test_a_broken_pod_resources_entry_hides_no_other(analyze: Analyze) -> None:
    """A pod-resources entry whose containers (or a container's devices) are no list is skipped;
    the pods listed beside it keep their grants, and the Kubernetes loader still runs."""
    spec = _dra_node(with_claims=False, with_slices=False, dynamic=True, minors=(0, 1), used_gpu=1)
    spec.podresources[:0] = [{"name": "odd-0", "namespace": "ml", "containers": 1.5},
                             {"name": "odd-1", "namespace": "ml", "containers": [{"name": "c", "devices": 7,
                                                                                  "dynamic_resources": True}]}]
    (f,) = of_kind(analyze(spec), "unallocated-gpu-use")
    assert "ml/train-0" in names(f, "culprit", "pod")
    assert f"claim ml/{CLAIM}: gpu.nvidia.com gpu-0" in f["summary"], f["summary"]


def test_v1beta1_slices_with_basic_attributes_resolve_the_same(analyze: Analyze) -> None:
    assert "unallocated-gpu-use" not in kinds(analyze(_dra_node(version="v1beta1")))
    (f,) = of_kind(analyze(_dra_node(version="v1beta1", used_gpu=1)), "unallocated-gpu-use")
    assert f"claim ml/{CLAIM}" in f["summary"]


def test_pod_resources_dynamic_resources_grant_without_the_claim(analyze: Analyze) -> None:
    """No resource.k8s.io in the bundle (an API server that refused it): the kubelet's
    pod-resources ``dynamic_resources`` name the claim and device."""
    doc = analyze(_dra_node(with_claims=False, with_slices=False, dynamic=True, minors=(0, 1)))
    assert "unallocated-gpu-use" not in kinds(doc), doc["findings"]
    (f,) = of_kind(analyze(_dra_node(with_claims=False, with_slices=False, dynamic=True, used_gpu=1,
                                     minors=(0, 1))), "unallocated-gpu-use")
    assert f"claim ml/{CLAIM}: gpu.nvidia.com gpu-0" in f["summary"]
    assert "kubernetes/podresources/list.json" in {e["member"] for e in f["evidence"]}


def test_a_claim_not_in_the_bundle_is_a_grant_of_unknown_devices(analyze: Analyze) -> None:
    """The pod uses a claim the capture could not read: granted, which GPU not judged."""
    doc = analyze(_dra_node(with_claims=False, with_slices=False, used_gpu=1))
    assert "unallocated-gpu-use" not in kinds(doc), doc["findings"]


def test_a_claim_reserved_for_another_pod_is_not_this_pods_evidence(analyze: Analyze) -> None:
    """The claim the bundle holds under the pod's claim name is reserved for another pod (deleted
    and recreated under the same name, for someone else): its gpu-1 is not the grant of train-0,
    which runs on GPU 0. The pod stays granted, devices unknown, saying for whom the claim is."""
    other = ("train-0-old", "0c1d2e3f-4a5b-4c6d-8e7f-0000000000ff")
    doc = analyze(_dra_node(used_gpu=0, claim_device="gpu-1", reserved_for=[other]))
    assert "unallocated-gpu-use" not in kinds(doc), doc["findings"]
    (c,) = [c for c in doc["containers"] if c["name"] == "ml/train-0/train"]
    alloc = c["gpu_allocation"]
    assert (alloc["kind"], alloc["explicit"], alloc["gpus"], alloc["claims"]) == ("dra", True, [], [f"ml/{CLAIM}"])
    assert f"claim ml/{CLAIM} (devices unknown: the claim of that name is reserved for pods/train-0-old" \
        in alloc["detail"], alloc["detail"]
    # reserved for this pod (too), or for no one yet (read mid-allocation): the claim is its grant
    for reserved in ([other, ("train-0", T_UID)], []):
        (f,) = of_kind(analyze(_dra_node(used_gpu=0, claim_device="gpu-1", reserved_for=reserved)),
                       "unallocated-gpu-use")
        assert "ml/train-0" in names(f, "culprit", "pod")


def test_two_pods_time_slicing_one_claim_are_not_overlapping(analyze: Analyze) -> None:
    doc = analyze(_dra_node(second_pod=True, sharing={"strategy": "TimeSlicing",
                                                      "timeSlicingConfig": {"interval": "Long"}}))
    assert not {"unallocated-gpu-use", "overlapping-gpu-allocation"} & set(kinds(doc)), doc["findings"]


def test_two_pods_on_one_claim_without_a_sharing_config_are_not_overlapping(analyze: Analyze) -> None:
    """Several pods referencing one claim share its device on purpose, whatever its config."""
    doc = analyze(_dra_node(second_pod=True))
    assert not {"unallocated-gpu-use", "overlapping-gpu-allocation"} & set(kinds(doc)), doc["findings"]


def test_over_the_claims_mps_memory_limit_is_share_exceeded(analyze: Analyze) -> None:
    doc = analyze(_dra_node(second_pod=True, notebook_mem=12 * GIB, sharing={
        "strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "8Gi"}}))
    assert not {"unallocated-gpu-use", "overlapping-gpu-allocation"} & set(kinds(doc)), doc["findings"]
    found = of_kind(doc, "gpu-share-exceeded")
    assert "ml/notebook-alice" in {n for f in found for n in names(f, "culprit", "pod")}, found
    f = next(f for f in found if "ml/notebook-alice" in names(f, "culprit", "pod"))
    assert "defaultPinnedDeviceMemoryLimit 8Gi" in f["summary"] and f"claim ml/{CLAIM}" in f["summary"]


def test_mig_through_dra(analyze: Analyze) -> None:
    b = BundleSpec()
    u0 = b.gpu(0)
    mig_a, mig_b = "MIG-0a1b2c3d-0000-5000-8000-0000000000a1", "MIG-0a1b2c3d-0000-5000-8000-0000000000b2"
    trainer = cid_of("mig-train")
    b.pod("ml", "train-0", T_UID, [("train", trainer, 0)])
    claim_pod(b.pods[-1], {"mig": CLAIM}, {"train": ["mig"]})
    devices = [DraDevice(0, mig_a, (19, 0, 1), u0, "1g.10gb"), DraDevice(0, mig_b, (19, 1, 1), u0, "1g.10gb")]
    b.add_json("kubernetes/resourceslices.json", _items("ResourceSliceList", [resource_slice(b.host, devices)]))
    b.add_json("kubernetes/resourceclaims.json", _items("ResourceClaimList", [resource_claim(
        "ml", CLAIM, "5b6c7d8e-0000-4000-8000-00000000c1a2", b.host, [("mig", "gpu-0-mig-19-0-1")],
        reserved_for=[("train-0", T_UID)])]))
    b.process(31, "torchrun", container=trainer, pod_uid=T_UID, environ=[VOID])
    b.status["docker"] = "unavailable"
    on_own = BundleSpec(**{k: v for k, v in vars(b).items() if not k.startswith("_")})
    on_own.gpu_series(0, range(20), lambda s: (99, 50 * GIB, {31: (5 * GIB, 90.0)}), mig={31: mig_a})
    assert "unallocated-gpu-use" not in kinds(analyze(on_own))
    b.jsonl = {}
    b.gpu_series(0, range(20), lambda s: (99, 50 * GIB, {31: (5 * GIB, 90.0)}), mig={31: mig_b})
    (f,) = of_kind(analyze(b), "unallocated-gpu-use")
    assert f"claim ml/{CLAIM}: gpu.nvidia.com gpu-0-mig-19-0-1 (1g.10gb)" in f["summary"], f["summary"]


def test_an_extended_resource_served_by_dra(analyze: Analyze) -> None:
    """A ``nvidia.com/gpu: 1`` pod whose GPU the scheduler took from a DRA claim: judged by the claim."""
    def node(used: int) -> BundleSpec:
        b = BundleSpec()
        b.gpu(0), b.gpu(1)
        cid = cid_of("ext")
        b.pod("ml", "gpu-full-pod", T_UID, [("cuda-container", cid, 1)])
        claim = "gpu-full-pod-extended-resources-x7k9m"
        extended_resource_pod(b.pods[-1], claim, "cuda-container")
        b.add_json("kubernetes/resourceslices.json", _items("ResourceSliceList", [resource_slice(
            b.host, [DraDevice(0, b.gpus[0]["nvml"]["nvmlDeviceGetUUID"]["value"]),
                     DraDevice(1, b.gpus[1]["nvml"]["nvmlDeviceGetUUID"]["value"])])]))
        b.add_json("kubernetes/resourceclaims.json", _items("ResourceClaimList", [resource_claim(
            "ml", claim, "5b6c7d8e-0000-4000-8000-00000000c1a3", b.host, [("container-0-request-0", "gpu-1")],
            reserved_for=[("gpu-full-pod", T_UID)], extended_for="gpu-full-pod")]))
        b.process(31, "vectoradd", container=cid, pod_uid=T_UID, environ=[VOID])
        b.gpu_series(used, range(20), lambda s: (99, 50 * GIB, {31: (5 * GIB, 90.0)}))
        b.status["docker"] = "unavailable"
        return b

    assert "unallocated-gpu-use" not in kinds(analyze(node(1)))
    (f,) = of_kind(analyze(node(0)), "unallocated-gpu-use")
    assert "claim ml/gpu-full-pod-extended-resources-x7k9m: gpu.nvidia.com gpu-1 (GPU 1, GPU-" in f["summary"]


def _renamed(pod_resources: bool, env_gpu: int | None, used: int = 0,
             resource: str = "nvidia.com/gpu.shared") -> BundleSpec:
    b = BundleSpec()
    uuids = [b.gpu(0), b.gpu(1)]
    cid = cid_of("shared-nb")
    b.pod("research", "notebook-alice", N_UID, [("jupyter", cid, 0)])
    for res in (b.pods[-1]["spec"]["containers"][0]["resources"][k] for k in ("limits", "requests")):
        res[resource] = "1"
    b.add_json("kubernetes/node.json", {"kind": "Node", "metadata": {"name": b.host},
                                        "status": {"capacity": {"cpu": "64", resource: "8"}}})
    if pod_resources:
        b.podresources.append({"name": "notebook-alice", "namespace": "research", "containers": [
            {"name": "jupyter", "devices": [{"resource_name": resource,
                                             "device_ids": [f"{uuids[0]}::3"]}]}]})
    environ = ["PATH=/usr/bin"] + ([f"NVIDIA_VISIBLE_DEVICES={uuids[env_gpu]}"] if env_gpu is not None else [])
    b.process(32, "python", container=cid, pod_uid=N_UID, environ=environ)
    b.gpu_series(used, range(20), lambda s: (99, 50 * GIB, {32: (5 * GIB, 30.0)}))
    b.status["docker"] = "unavailable"
    return b


def test_a_renamed_shared_resource_without_pod_resources_is_granted_its_gpu(analyze: Analyze) -> None:
    doc = analyze(_renamed(pod_resources=False, env_gpu=0))
    assert "unallocated-gpu-use" not in kinds(doc), doc["findings"]
    # the device plugin's NVIDIA_VISIBLE_DEVICES names which GPU: another one is still judged
    (f,) = of_kind(analyze(_renamed(pod_resources=False, env_gpu=0, used=1)), "unallocated-gpu-use")
    assert "nvidia.com/gpu.shared: 1" in f["summary"] and "proc/32/environ" in {e["member"] for e in f["evidence"]}


def test_a_renamed_shared_resource_without_its_devices_is_not_judged(analyze: Analyze) -> None:
    assert "unallocated-gpu-use" not in kinds(analyze(_renamed(pod_resources=False, env_gpu=None)))


def test_a_renamed_shared_resource_with_pod_resources(analyze: Analyze) -> None:
    assert "unallocated-gpu-use" not in kinds(analyze(_renamed(pod_resources=True, env_gpu=None)))
    (f,) = of_kind(analyze(_renamed(pod_resources=True, env_gpu=None, used=1)), "unallocated-gpu-use")
    assert "nvidia.com/gpu.shared" in f["summary"]


def test_a_gpu_resource_of_another_vendors_device_plugin_is_a_grant(analyze: Analyze) -> None:
    """GPU-sharing device plugins outside NVIDIA's domain (Alibaba's gpushare ``aliyun.com/gpu-mem``,
    Volcano's ``volcano.sh/vgpu-number``) hand out NVIDIA GPUs too: a limit on such a resource the
    node advertises is a grant, as a renamed nvidia.com resource is (the pod on its GPU was accused:
    'has no nvidia.com/gpu limit')."""
    for resource in ("aliyun.com/gpu-mem", "volcano.sh/vgpu-number"):
        assert "unallocated-gpu-use" not in kinds(analyze(_renamed(False, env_gpu=0, resource=resource)))
        assert "unallocated-gpu-use" not in kinds(analyze(_renamed(False, env_gpu=None, resource=resource)))
        (f,) = of_kind(analyze(_renamed(False, env_gpu=0, used=1, resource=resource)), "unallocated-gpu-use")
        assert f"{resource}: 1" in f["summary"], f["summary"]


def test_a_resource_that_names_no_gpu_is_no_grant(analyze: Analyze) -> None:
    (f,) = of_kind(analyze(_renamed(False, env_gpu=0, resource="rdma/hca_shared_devices_a")), "unallocated-gpu-use")
    assert "no nvidia.com/gpu limit" in f["summary"], f["summary"]


def test_the_live_grant_of_a_dra_pod_is_dra_with_its_claim() -> None:
    """The flight recorder's metrics label (forensics.analysis.attribution, the rule's own joins)."""
    from forensics.analysis.attribution import attribute

    for used, allocated in ((0, True), (1, False)):
        b = _dra_node(used_gpu=used)
        b.add_json("nvml/devices.json", {"t": b.start, "complete": True, "system": {}, "devices": b.gpus})
        b.add_json("kubernetes/pods.json", {"kind": "PodList", "apiVersion": "v1", "items": b.pods})
        members = dict(b.members)
        members.update({m: ("\n".join(lines) + "\n").encode() for m, lines in b.jsonl.items()})
        grant = attribute(members).grant(31, b.gpus[used]["nvml"]["nvmlDeviceGetUUID"]["value"])
        assert (grant.allocated, grant.unallocated) == (allocated, not allocated), grant
        if allocated:
            assert (grant.grant, grant.claim) == ("dra", f"ml/{CLAIM}") and f"claim ml/{CLAIM}" in grant.detail


def test_the_reports_grant_column_says_dra_with_the_claim(analyze: Analyze) -> None:
    from forensics.report.markdown import render_markdown

    doc = analyze(_dra_node())
    (c,) = [c for c in doc["containers"] if c["name"] == "ml/train-0/train"]
    assert c["gpu_allocation"]["kind"] == "dra" and c["gpu_allocation"]["claims"] == [f"ml/{CLAIM}"]
    assert f"dra (claim ml/{CLAIM}): GPU 0" in render_markdown(doc).replace("\\", "")


def test_a_claim_on_a_non_gpu_device_grants_no_gpu(analyze: Analyze) -> None:
    """A pod whose only claim is a NIC's (another driver, its slice device without a GPU UUID)
    taking a GPU is judged as any pod without a GPU grant."""
    b = _dra_node(used_gpu=1)
    b.add_json("kubernetes/resourceslices.json", _items("ResourceSliceList", [
        {**resource_slice(b.host, []), "spec": {"driver": "dra.net", "nodeName": b.host,
                                                "pool": {"name": b.host, "generation": 1, "resourceSliceCount": 1},
                                                "devices": [{"name": "eth1", "attributes": {"ifName": {"string": "eth1"}}}]}}]))
    claim = resource_claim("ml", CLAIM, "5b6c7d8e-0000-4000-8000-00000000c1a1", b.host, [("gpu", "eth1")],
                           reserved_for=[("train-0", T_UID)])
    claim["status"]["allocation"]["devices"]["results"][0]["driver"] = "dra.net"
    b.add_json("kubernetes/resourceclaims.json", _items("ResourceClaimList", [claim]))
    (f,) = of_kind(analyze(b), "unallocated-gpu-use")
    assert "ml/train-0" in names(f, "culprit", "pod") and f["metrics"]["allocation_kind"] == "none"


def test_on_a_dra_node_a_pod_without_a_grant_is_told_to_use_a_claim(analyze: Analyze) -> None:
    b = _dra_node()
    cid = cid_of("nb-nogrant")
    b.pod("research", "notebook-bob", N_UID, [("jupyter", cid, 0)])
    b.process(33, "python", container=cid, pod_uid=N_UID)
    b.gpu_series(1, range(20), lambda s: (99, 50 * GIB, {33: (5 * GIB, 60.0)}))
    (f,) = of_kind(analyze(b), "unallocated-gpu-use")
    assert "research/notebook-bob" in names(f, "culprit", "pod")
    assert "ResourceClaim" in f["next_step"] and "nvidia.com/gpu" not in f["next_step"], f["next_step"]


def _two_pods_on_gpu0(resource: str, capacity: int) -> BundleSpec:
    """Two pods with ``resource: 1`` (the node advertises ``capacity`` of it over 2 GPUs); the
    device plugin's NVIDIA_VISIBLE_DEVICES in both processes names GPU 0; no pod-resources."""
    b = BundleSpec()
    u0 = b.gpu(0)
    b.gpu(1)
    procs: dict[int, tuple[int, float | None]] = {}
    for k, uid in enumerate((T_UID, N_UID)):
        cid = cid_of(f"nb-{k}")
        b.pod("research", f"nb-{k}", uid, [("c", cid, 0)])
        for res in (b.pods[-1]["spec"]["containers"][0]["resources"][x] for x in ("limits", "requests")):
            res[resource] = "1"
        b.process(40 + k, "python", container=cid, pod_uid=uid, environ=[f"NVIDIA_VISIBLE_DEVICES={u0}"])
        procs[40 + k] = (5 * GIB, 40.0)
    b.add_json("kubernetes/node.json", {"kind": "Node", "metadata": {"name": b.host},
                                        "status": {"capacity": {"cpu": "64", resource: str(capacity)}}})
    b.gpu_series(0, range(20), lambda s: (99, 10 * GIB, dict(procs)))
    b.status["docker"] = "unavailable"
    return b


def test_pods_on_replicas_of_a_shared_resource_are_not_overlapping(analyze: Analyze) -> None:
    """Time-slicing replicas (8 nvidia.com/gpu.shared over 2 GPUs), read from the device plugin's
    NVIDIA_VISIBLE_DEVICES without pod-resources: sharing by design (both pods were culprits of
    overlapping-gpu-allocation); a renamed resource with one unit per GPU is exclusive and judged."""
    for resource in ("nvidia.com/gpu.shared", "aliyun.com/gpu-mem"):
        doc = analyze(_two_pods_on_gpu0(resource, 8))
        assert not {"overlapping-gpu-allocation", "unallocated-gpu-use"} & set(kinds(doc)), doc["findings"]
    (f,) = of_kind(analyze(_two_pods_on_gpu0("nvidia.com/a100", 2)), "overlapping-gpu-allocation")
    assert len(names(f, "culprit")) + len(names(f, "victim")) == 2


def test_a_slice_device_without_a_uuid_is_judged_by_its_driver(analyze: Analyze) -> None:
    """The driver's slice lists gpu-0 with no ``uuid`` attribute: it is still a GPU of NVIDIA's
    driver (gpu-0: minor 0), never 'no GPU' (the pod on its claim's GPU was accused)."""
    def stripped(used: int) -> BundleSpec:
        b = _dra_node(used_gpu=used, minors=(0, 1))
        doc = json.loads(b.members["kubernetes/resourceslices.json"])
        for item in doc["items"]:
            for dev in item["spec"]["devices"]:
                dev.get("attributes", {}).pop("uuid", None)
        b.add_json("kubernetes/resourceslices.json", doc)
        return b
    assert "unallocated-gpu-use" not in kinds(analyze(stripped(0)))
    (f,) = of_kind(analyze(stripped(1)), "unallocated-gpu-use")
    assert f"claim ml/{CLAIM}: gpu.nvidia.com gpu-0 (GPU 0, GPU-" in f["summary"], f["summary"]


def test_a_claim_name_the_ring_holds_twice_is_the_pods_own(analyze: Analyze) -> None:
    """The recorder keeps a deleted claim after the live ones (kubernetes/resourceclaims.json from
    the ring): a claim of the same name deleted and recreated is there twice. The pod's is the one
    reserved for it, wherever it stands in the list (the last one read won: the old claim, reserved
    for no one by then, gave train-0 its gpu-1, and train-0 on its own gpu-0 was accused)."""
    def node(order: tuple[int, int], reserved_old: list[tuple[str, str]]) -> BundleSpec:
        b = _dra_node(used_gpu=0, claim_device="gpu-0")
        current = resource_claim("ml", CLAIM, "5b6c7d8e-0000-4000-8000-00000000c1a1", b.host, [("gpu", "gpu-0")],
                                 reserved_for=[("train-0", T_UID)])
        old = resource_claim("ml", CLAIM, "5b6c7d8e-0000-4000-8000-0000000000d0", b.host, [("gpu", "gpu-1")],
                             reserved_for=reserved_old)
        claims = [current, old]
        b.add_json("kubernetes/resourceclaims.json", _items("ResourceClaimList", [claims[i] for i in order]))
        return b
    for order in ((0, 1), (1, 0)):
        for reserved_old in ([], [("train-0-old", "0c1d2e3f-4a5b-4c6d-8e7f-0000000000ff")]):
            doc = analyze(node(order, reserved_old))
            assert "unallocated-gpu-use" not in kinds(doc), (order, reserved_old, [f["summary"] for f in doc["findings"]])


def test_pods_on_a_renamed_resource_without_the_node_object_are_not_overlapping(analyze: Analyze) -> None:
    """A ring's history holds no node object: whether nvidia.com/gpu.shared is replicas is not
    known, so two pods the plugin's NVIDIA_VISIBLE_DEVICES puts on GPU 0 are not judged exclusive."""
    b = _two_pods_on_gpu0("nvidia.com/gpu.shared", 8)
    del b.members["kubernetes/node.json"]
    doc = analyze(b)
    assert not {"overlapping-gpu-allocation", "unallocated-gpu-use"} & set(kinds(doc)), doc["findings"]


def test_a_slice_gone_before_a_reconfiguration_gives_no_stale_uuid(analyze: Analyze) -> None:
    """The recorder keeps a slice gone since (kubernetes/resourceslices.json from the ring): after
    the driver republished its pool (a MIG reconfiguration bumps spec.pool.generation), the old
    slice's gpu-0 names another GPU. The device is the newest slice's, wherever the old one stands
    in the list (the first one read won: an old slice listed first gave train-0's gpu-0 GPU 1's
    UUID, and train-0 on its real GPU 0 was accused of using a GPU it was not granted)."""
    def node(order: tuple[int, int], used_gpu: int = 0) -> BundleSpec:
        b = _dra_node(used_gpu=used_gpu, claim_device="gpu-0")
        u0, u1 = (g["nvml"]["nvmlDeviceGetUUID"]["value"] for g in b.gpus)
        live = resource_slice(b.host, [DraDevice(0, u0), DraDevice(1, u1)], rv="5200")
        live["spec"]["pool"]["generation"] = 2
        old = resource_slice(b.host, [DraDevice(0, u1), DraDevice(1, u0)],
                             uid="9d1f0a4e-5b7c-4e21-8f3a-1c2d3e4f5a59", rv="4711")
        slices = [live, old]
        b.add_json("kubernetes/resourceslices.json", _items("ResourceSliceList", [slices[i] for i in order]))
        return b
    for order in ((0, 1), (1, 0)):
        doc = analyze(node(order))
        assert "unallocated-gpu-use" not in kinds(doc), (order, [f["summary"] for f in doc["findings"]])
    # and the grant still matters: on GPU 1 (the old slice's gpu-0) train-0 is accused, naming gpu-0 as GPU 0
    doc = analyze(node((1, 0), used_gpu=1))
    (f,) = of_kind(doc, "unallocated-gpu-use")
    assert "ml/train-0" in names(f, "culprit", "pod") and "gpu.nvidia.com gpu-0 (GPU 0, GPU-" in f["summary"]

