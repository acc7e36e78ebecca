"""A grant whose device names no GPU of the node is a grant of GPUs the bundle does not name: never
judged, and never read as "granted nothing" (its owner on the GPU it really got was accused). Forms
that do name a GPU are resolved: the device plugin's MIG ids under ``deviceIDStrategy=index``
(``0:1``, the MIG device 1 of GPU 0) and MIG UUIDs of the R450-R465 drivers
(``MIG-GPU-<uuid>/<gi>/<ci>``, which hold slashes)."""

from __future__ import annotations

from tests.support.analysis_bundles import GIB, BundleSpec, cid_of
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind

UID = "0c1d2e3f-4a5b-4c6d-8e7f-0000000000d1"


def _mig_plugin_pod(*, used_gpu: int, device_id: str = "0:1") -> BundleSpec:
    """Pod ml/mig-0 with ``nvidia.com/mig-1g.10gb: 1``; the kubelet's pod-resources give it
    ``device_id`` (the device plugin's index strategy); its process runs on GPU ``used_gpu``."""
    b = BundleSpec()
    b.gpu(0)
    b.gpu(1)
    cid = cid_of("mig-job")
    b.pod("ml", "mig-0", UID, [("job", cid, 0)])
    limits = b.pods[-1]["spec"]["containers"][0]["resources"]["limits"]
    limits["nvidia.com/mig-1g.10gb"] = "1"
    b.podresources.append({"name": "mig-0", "namespace": "ml", "containers": [
        {"name": "job", "devices": [{"resource_name": "nvidia.com/mig-1g.10gb", "device_ids": [device_id]}]}]})
    b.process(51, "python", container=cid, pod_uid=UID)
    b.gpu_series(used_gpu, range(20), lambda s: (60, 8 * GIB, {51: (8 * GIB, 60.0)}))
    b.status["docker"] = "unavailable"
    return b


def test_a_mig_index_device_id_is_its_gpus_mig_device(analyze: Analyze) -> None:
    doc = analyze(_mig_plugin_pod(used_gpu=0))
    assert "unallocated-gpu-use" not in kinds(doc), [f["summary"] for f in doc["findings"]]
    (f,) = of_kind(analyze(_mig_plugin_pod(used_gpu=1)), "unallocated-gpu-use")
    assert "ml/mig-0" in names(f, "culprit", "pod")
    # its grant as the pod spec says it: a MIG resource, not an nvidia.com/gpu limit it does not have
    assert "nvidia.com/mig-1g.10gb devices 0:1" in f["summary"] and "nvidia.com/gpu: 1" not in f["summary"], \
        f["summary"]


def test_a_device_id_no_gpu_of_the_node_matches_is_never_judged(analyze: Analyze) -> None:
    """pod-resources name a device this node's NVML does not list (a GPU that fell off the bus,
    an id form not understood): which GPU the pod got is unknown, so its use of GPU 1 is not judged."""
    for device_id in ("7", "vgpu-3a"):
        doc = analyze(_mig_plugin_pod(used_gpu=1, device_id=device_id))
        assert "unallocated-gpu-use" not in kinds(doc), (device_id, [f["summary"] for f in doc["findings"]])


def test_docker_gpus_device_index_the_node_lacks_is_never_judged(analyze: Analyze) -> None:
    """``--gpus device=2`` on a node whose NVML lists GPUs 0 and 1 (GPU 2 lost since: the indices
    after it move down): the container on GPU 1 is not accused of using it unallocated."""
    b = BundleSpec(default_runtime="runc")
    b.gpu(0)
    b.gpu(1)
    c = b.container("job", image_env=["PATH=/bin"], runtime="runc",
                    device_requests=[{"Driver": "", "Count": 0, "DeviceIDs": ["2"], "Capabilities": [["gpu"]]}])
    b.process(10, "python", container=c)
    b.gpu_series(1, range(10), lambda s: (90, 20 * GIB, {10: (20 * GIB, 90.0)}))
    doc = analyze(b)
    assert "unallocated-gpu-use" not in kinds(doc), [f["summary"] for f in doc["findings"]]


def test_an_old_style_mig_uuid_with_slashes_is_granted(analyze: Analyze) -> None:
    b = BundleSpec(default_runtime="runc")
    mig = f"MIG-{b.gpu(0)}/1/0"
    c = b.container("job", image_env=["PATH=/bin"], runtime="nvidia", env=[f"NVIDIA_VISIBLE_DEVICES={mig}"])
    b.process(10, "python", container=c)
    b.gpu_series(0, range(10), lambda s: (90, 5 * GIB, {10: (5 * GIB, 90.0)}), mig={10: mig})
    doc = analyze(b)
    assert "unallocated-gpu-use" not in kinds(doc), [f["summary"] for f in doc["findings"]]


def _mig_uuid_container(*, mig_mode: bool, sample_mig: bool) -> BundleSpec:
    """Container job given ``--gpus device=MIG-...`` (a MIG device of GPU 0); its process is listed
    on GPU 0, with its MIG device (``sample_mig``) or without it (the MIG devices' own process lists
    were not read: NVML's parent list names no MIG device)."""
    b = BundleSpec(default_runtime="runc")
    b.gpu(0)
    if mig_mode:
        b.gpus[0]["nvml"]["nvmlDeviceGetMigMode"] = {"value": [1, 1]}
    mig = "MIG-0a1b2c3d-0000-5000-8000-0000000000a1"
    c = b.container("job", image_env=["PATH=/bin"], runtime="runc",
                    device_requests=[{"Driver": "", "Count": 0, "DeviceIDs": [mig], "Capabilities": [["gpu"]]}])
    b.process(10, "python", container=c)
    b.gpu_series(0, range(10), lambda s: (90, 5 * GIB, {10: (5 * GIB, 90.0)}),
                 mig={10: mig} if sample_mig else None)
    return b


def test_a_mig_grant_on_a_mig_gpu_whose_sample_names_no_mig_device_is_not_judged(analyze: Analyze) -> None:
    """Which MIG device of GPU 0 the process ran on is unknown: its MIG grant may be it."""
    doc = analyze(_mig_uuid_container(mig_mode=True, sample_mig=False))
    assert "unallocated-gpu-use" not in kinds(doc), [f["summary"] for f in doc["findings"]]
    doc = analyze(_mig_uuid_container(mig_mode=True, sample_mig=True))
    assert "unallocated-gpu-use" not in kinds(doc), [f["summary"] for f in doc["findings"]]
    # a GPU not in MIG mode holds no MIG device: the MIG grant is not this GPU
    (f,) = of_kind(analyze(_mig_uuid_container(mig_mode=False, sample_mig=False)), "unallocated-gpu-use")
    assert "job" in names(f, "culprit", "container")


def test_without_the_nodes_gpu_list_a_uuid_names_itself_and_an_index_nothing() -> None:
    """The ring's pass reads the pods before the capture's GPUs (a ring without NVML devices): a
    grant by UUID is still known (its samples carry the UUID: the pod stays judged), one by index
    is not (which GPU index 0 is, nothing read yet says)."""
    from forensics.analysis.allocation_kubernetes import kubernetes_grants_allocation
    from forensics.analysis.findings import Evidence
    from forensics.parsing.gpu_allocation import GpuGrant, GpuRef

    def ev(member: str, pointer: str, excerpt: str) -> Evidence:
        return Evidence("b1", member, pointer, excerpt)

    uuid = "GPU-8550bccd-99cf-7353-d6d9-f2c7c3992553"
    by_uuid = GpuGrant("device-plugin", "devices", (GpuRef(uuid, "uuid"),), "operator", True, "x", ())
    by_index = GpuGrant("device-plugin", "devices", (GpuRef("0", "index"),), "operator", True, "x", ())
    a = kubernetes_grants_allocation([by_uuid], [], ev)
    assert (a.gpus, a.devices_known) == ((uuid,), True)
    assert kubernetes_grants_allocation([by_index], [], ev).devices_known is False


def _gke_pod(used_gpu: int, *, minors: tuple[int, int] | None) -> BundleSpec:
    """GKE's device plugin names a GPU by its device file: pod-resources id ``nvidia1`` is
    /dev/nvidia1 (minor 1). ``minors``: NVML's minor number of GPU index 0 and 1 (None: not read)."""
    b = BundleSpec()
    b.gpu(0)
    b.gpu(1)
    if minors is not None:
        for g, m in zip(b.gpus, minors, strict=True):
            g["nvml"]["nvmlDeviceGetMinorNumber"] = {"value": m}
    cid = cid_of("gke-job")
    b.pod("ml", "gke-0", UID, [("job", cid, 1)])
    b.pod_devices("ml", "gke-0", "job", ["nvidia1"])
    b.process(61, "python", container=cid, pod_uid=UID)
    b.gpu_series(used_gpu, range(20), lambda s: (60, 8 * GIB, {61: (8 * GIB, 60.0)}))
    b.status["docker"] = "unavailable"
    return b


def test_a_gke_device_id_is_its_device_file_not_the_nvml_index(analyze: Analyze) -> None:
    """Index 0 is /dev/nvidia1 here: the pod granted nvidia1 runs on GPU 0, its own (it was taken
    for NVML index 1, and the pod was accused); with no minor number read, not judged."""
    assert "unallocated-gpu-use" not in kinds(analyze(_gke_pod(0, minors=(1, 0))))
    (f,) = of_kind(analyze(_gke_pod(1, minors=(1, 0))), "unallocated-gpu-use")
    assert "ml/gke-0" in names(f, "culprit", "pod")
    assert "unallocated-gpu-use" not in kinds(analyze(_gke_pod(0, minors=None)))


def test_the_live_grant_of_a_mig_grant_whose_sample_names_no_mig_device_is_not_none() -> None:
    """The recorder's label (forensics.analysis.attribution): granted, not 'none'."""
    from forensics.analysis.attribution import attribute

    b = _mig_uuid_container(mig_mode=True, sample_mig=False)
    b.add_json("nvml/devices.json", {"t": b.start, "complete": True, "system": {}, "devices": b.gpus})
    members = dict(b.members)
    members.update({m: ("\n".join(lines) + "\n").encode() for m, lines in b.jsonl.items()})
    grant = attribute(members).grant(10, b.gpus[0]["nvml"]["nvmlDeviceGetUUID"]["value"])
    assert (grant.allocated, grant.unallocated, grant.grant) == (True, False, "explicit"), grant
