"""A pod's init containers are containers too: a native sidecar (an init container with
``restartPolicy: Always``, running beside the app) or a plain init container (a warm-up, a model
check) may hold the pod's GPU grant. Its processes are judged against its own grant, never against
the app containers' (which may have none): the pod is not accused of unallocated use of the GPU
its sidecar was granted."""

from __future__ import annotations

from tests.support.analysis_bundles import GIB, BundleSpec, cid_of
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind

UID = "0c1d2e3f-4a5b-4c6d-8e7f-0000000000c1"


def _sidecar_pod(*, used_gpu: int, restart_always: bool = True, devices: bool = True) -> BundleSpec:
    """Pod ml/serve-0: app container ``web`` with no GPU, init container ``infer`` with
    ``nvidia.com/gpu: 1`` (the kubelet's pod-resources give it GPU 0); infer's process runs on
    GPU ``used_gpu``."""
    b = BundleSpec()
    u0 = b.gpu(0)
    b.gpu(1)
    web, infer = cid_of("web"), cid_of("infer")
    b.pod("ml", "serve-0", UID, [("web", web, 0)])
    pod = b.pods[-1]
    init = {"name": "infer", "image": "nvcr.io/nvidia/tritonserver:24.05-py3",
            "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}
    if restart_always:
        init["restartPolicy"] = "Always"
    pod["spec"]["initContainers"] = [init]
    pod["status"]["initContainerStatuses"] = [{
        "name": "infer", "containerID": f"containerd://{infer}", "ready": True, "restartCount": 0,
        "image": "x", "imageID": "y", "state": {"running": {"startedAt": "2026-11-29T14:00:00Z"}},
        "lastState": {}}]
    if devices:
        b.pod_devices("ml", "serve-0", "infer", [u0])
    b.process(41, "tritonserver", container=infer, pod_uid=UID)
    b.gpu_series(used_gpu, range(20), lambda s: (90, 30 * GIB, {41: (20 * GIB, 80.0)}))
    b.status["docker"] = "unavailable"
    return b


def test_a_sidecar_on_its_granted_gpu_is_not_accused(analyze: Analyze) -> None:
    for restart_always in (True, False):
        doc = analyze(_sidecar_pod(used_gpu=0, restart_always=restart_always))
        assert "unallocated-gpu-use" not in kinds(doc), doc["findings"]


def test_a_sidecar_with_a_limit_whose_devices_are_unknown_is_not_judged(analyze: Analyze) -> None:
    doc = analyze(_sidecar_pod(used_gpu=1, devices=False))
    assert "unallocated-gpu-use" not in kinds(doc), doc["findings"]


def test_a_sidecar_on_another_gpu_than_its_grant_is_accused_as_itself(analyze: Analyze) -> None:
    doc = analyze(_sidecar_pod(used_gpu=1))
    (f,) = of_kind(doc, "unallocated-gpu-use")
    assert "ml/serve-0" in names(f, "culprit", "pod"), f["subjects"]
    assert "pod ml/serve-0 was allocated GPU 0 (nvidia.com/gpu: 1)" in f["summary"], f["summary"]
    assert "(container infer)" in f["summary"], f["summary"]
