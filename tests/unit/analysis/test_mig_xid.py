"""A MIG Xid names its GPU instance (``(PCI:0000:3b:00 GPU-I:02)``): the fault on that slice names
the pods that ran on that slice only, not the whole GPU's; without the instance, every one of them."""

from __future__ import annotations

from tests.support.analysis_bundles import GIB, T0, BundleSpec, gpu_uuid
from tests.unit.analysis.conftest import Analyze, names, of_kind

# the MIG form of the driver's line (open-gpu-kernel-modules kern_gpu_ga100.c's example, tests/support/recent_lines.py)
XID_ON_SLICE = "NVRM: Xid (PCI:0000:3b:00 GPU-I:02): 95, pid=7062, Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No"
XID_WHOLE = "NVRM: Xid (PCI:0000:3b:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x1). RST: Yes, D-RST: No"


def _two_slices(line: str) -> BundleSpec:
    """GPU 0 in MIG mode: trainer's process on GPU instance 1, notebook's on GPU instance 2."""
    b = BundleSpec()
    b.gpu(0)
    trainer = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
    notebook = b.container("notebook", env=["NVIDIA_VISIBLE_DEVICES=0"])
    b.process(4101, "python", container=trainer)
    b.process(4202, "python", container=notebook)
    for s in range(30):
        t = T0 + s
        b.add_jsonl("nvml/samples.jsonl", {
            "kind": "device", "tick": s, "t": t, "gpu_index": 0, "uuid": gpu_uuid(0),
            "nvml": {"nvmlDeviceGetMemoryInfo_v2": {"value": {"total": 80 * GIB, "used": 20 * GIB,
                                                              "free": 60 * GIB, "reserved": 0}},
                     "nvmlDeviceGetUtilizationRates": {"value": {"gpu": 50, "memory": 0}}},
            "processes": [{"pid": pid, "usedGpuMemory": 10 * GIB, "gpuInstanceId": gi, "computeInstanceId": 0,
                           "type": "compute", "mig_uuid": f"MIG-{gi}"} for pid, gi in ((4101, 1), (4202, 2))]})
    b.kmsg(T0 + 20, line)
    return b


def test_a_fault_on_one_slice_names_that_slice_only(analyze: Analyze) -> None:
    (f,) = [x for x in of_kind(analyze(_two_slices(XID_ON_SLICE)), "gpu-xid-fault") if x["metrics"]["xid"] == 95]
    assert f["metrics"]["gpu_instance_id"] == "2"
    assert "GPU instance 2" in f["summary"]
    victims = names(f, "victim", "container")
    assert victims == ["notebook"], f["subjects"]


def test_without_the_instance_the_whole_gpu_is_named(analyze: Analyze) -> None:
    (f,) = [x for x in of_kind(analyze(_two_slices(XID_WHOLE)), "gpu-xid-fault") if x["metrics"]["xid"] == 95]
    assert f["metrics"]["gpu_instance_id"] is None
    assert sorted(names(f, "victim", "container")) == ["notebook", "trainer"], f["subjects"]
