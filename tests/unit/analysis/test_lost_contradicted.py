"""An older "fell off the bus" record of a GPU that NVML reads throughout the window (a previous
episode on that machine, the GPU reset since) is no cause of what happens in the window: the
allocatable drop is linked to the Xid 95 that came before it, and the lost-GPU finding says the GPU
answered again (the machine history that made tests/integration/test_gpu_degradation_capture.py
fail, rebuilt as a bundle)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, of_kind

FELL_OFF = "NVRM: GPU 0000:86:00.0: GPU has fallen off the bus."  # GPU 1 of BundleSpec (PCI 86)
XID79 = "NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _node(b: BundleSpec, allocatable: int, member: str) -> None:
    b.add_json(member, {"kind": "Node", "metadata": {"name": b.host}, "status": {
        "capacity": {"cpu": "64", "nvidia.com/gpu": "2"}, "allocatable": {"cpu": "63", "nvidia.com/gpu": str(allocatable)}}})


def _window(old_record: str | None, *, answers: bool = True) -> BundleSpec:
    """Two GPUs sampled for 60 s; GPU 1 raises Xid 95 and 154 at +20 s and the device plugin takes it
    out (allocatable 2 -> 1 at the second read, +50 s); ``old_record`` an hour before the capture."""
    b = BundleSpec()
    g0, g1 = b.gpu(0), b.gpu(1)
    _node(b, 2, "kubernetes/node.json")
    _node(b, 1, "kubernetes/node-end.json")
    b.add_json("kubernetes/requests-end.json", {"server": "https://127.0.0.1:6443", "config": "in-cluster", "requests": [
        {"path": f"/api/v1/nodes/{b.host}", "query": {}, "status": 200, "outcome": "ok", "duration_s": 0.01,
         "response_bytes": 300, "error": None, "server_date": None, "sent_unix": T0 + 50, "received_unix": T0 + 50}]})
    b.add_json("kubernetes/podresources/allocatable.json",
               {"devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [g0, g1]}]})
    b.add_json("kubernetes/podresources/allocatable-end.json",
               {"devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [g0]}]})
    if old_record is not None:
        b.kmsg(T0 - 3600, old_record)
    if answers:
        b.gpu_series(0, range(60), lambda s: (90, 0, {}))
        b.gpu_series(1, range(60), lambda s: (30, 0, {}))
    b.nvml_xid_event(1, T0 + 20, 95)
    b.nvml_xid_event(1, T0 + 20.2, 154)
    return b


def _xid95(doc: dict[str, Any]) -> dict[str, Any]:
    (x,) = [f for f in of_kind(doc, "gpu-xid-fault") if f["metrics"]["xid"] == 95]
    return x


@pytest.mark.parametrize("old", [FELL_OFF, XID79], ids=["driver-message", "xid-79"])
def test_an_older_lost_record_the_gpu_contradicts_is_no_cause(analyze: Analyze, old: str) -> None:
    doc = analyze(_window(old))
    (alloc,) = of_kind(doc, "gpu-allocatable-reduced")
    assert alloc["id"] in _xid95(doc)["causes"], [(f["id"], f["kind"], f["causes"]) for f in doc["findings"]]
    assert alloc["start"][:19] == "2025-11-29T14:00:20", "the drop starts at the Xid, not the old record"
    assert "fell off the bus" not in alloc["summary"] and "Xid 79" not in alloc["summary"]
    (lost,) = of_kind(doc, "gpu-lost")
    assert lost["causes"] == [] and lost["severity"] == "critical"  # it did fall off the bus, once
    assert lost["metrics"]["answered_nvml_at"] == "14:00:00Z"
    assert "NVML read GPU 1 (PCI 00000000:86:00.0) again at 14:00:00Z" in lost["summary"]
    assert "nvml/samples.jsonl" in {e["member"] for e in lost["evidence"]}


def test_a_lost_record_nothing_contradicts_is_still_the_cause(analyze: Analyze) -> None:
    """The same record without NVML reading GPU 1 afterwards: the GPU is gone, and the drop is its effect."""
    doc = analyze(_window(FELL_OFF, answers=False))
    (alloc,) = of_kind(doc, "gpu-allocatable-reduced")
    (lost,) = of_kind(doc, "gpu-lost")
    assert lost["severity"] == "critical" and lost["metrics"]["answered_nvml_at"] is None
    assert alloc["id"] in lost["causes"]


def test_a_reading_within_the_slack_does_not_contradict(analyze: Analyze) -> None:
    """A reading a second after the record may have been taken before it (the kernel's and NVML's
    clocks are read apart): it contradicts nothing."""
    b = _window(None, answers=False)
    b.kmsg(T0 + 10, FELL_OFF)
    b.gpu_tick(1, T0 + 11, 30, GIB)  # within the slack: may have been read before the record
    doc = analyze(b)
    (lost,) = of_kind(doc, "gpu-lost")
    assert lost["severity"] == "critical" and lost["metrics"]["answered_nvml_at"] is None
