"""gpu-allocatable-reduced: the node's allocatable GPUs below capacity, the GPU the device plugin
left out and the fault that made it, a negative case, and garbage in its inputs never raising."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis import analyze_bundles
from forensics.bundle.format import iso_from_unix
from tests.support.analysis_bundles import T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, kinds, of_kind

XID79 = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _node(b: BundleSpec, capacity: int, allocatable: int, resource: str = "nvidia.com/gpu",
          member: str = "kubernetes/node.json") -> None:
    b.add_json(member, {"kind": "Node", "metadata": {"name": b.host}, "status": {
        "capacity": {"cpu": "64", resource: str(capacity)}, "allocatable": {"cpu": "63", resource: str(allocatable)}}})


def _node_end(b: BundleSpec, capacity: int, allocatable: int, at: float) -> None:
    """The Node read again at ``at`` (``kubernetes/node-end.json`` and its request)."""
    _node(b, capacity, allocatable, member="kubernetes/node-end.json")
    b.add_json("kubernetes/requests-end.json", {"server": "https://127.0.0.1:6443", "config": "in-cluster", "requests": [
        {"path": f"/api/v1/nodes/{b.host}", "query": {}, "status": 200, "outcome": "ok", "duration_s": 0.01,
         "response_bytes": 300, "error": None, "server_date": None, "sent_unix": at - 0.01, "received_unix": at}]})


def test_a_gpu_marked_unhealthy_after_it_fell_off_the_bus(analyze: Analyze) -> None:
    b = BundleSpec()
    g0, g1 = b.gpu(0), b.gpu(1)
    _node(b, 2, 1)
    b.add_json("kubernetes/podresources/allocatable.json",
               {"devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [g0]}], "cpu_ids": [0, 1]})
    b.kmsg(T0 - 20, XID79.format(bus="86"))  # GPU 1, 20 s before the node was read
    doc = analyze(b)
    (f,) = of_kind(doc, "gpu-allocatable-reduced")
    assert f["severity"] == "high"
    assert (f["metrics"]["capacity"], f["metrics"]["allocatable"], f["metrics"]["gpus_left_out"]) == (2, 1, g1)
    assert "allocatable nvidia.com/gpu is 1 of its capacity 2" in f["summary"]
    assert "left out of the kubelet's allocatable devices: GPU 1" in f["summary"]
    assert "Xid 79 at" in f["summary"] and "whether it recovered by the end of the window is not known" in f["summary"]
    members = {e["member"] for e in f["evidence"]}
    assert {"kubernetes/node.json", "kubernetes/podresources/allocatable.json", "kernel/kmsg.txt"} <= members
    assert g0 not in {s["id"] for s in f["subjects"]}
    # the lost GPU is this finding's cause
    (lost,) = of_kind(doc, "gpu-lost")
    assert f["id"] in lost["causes"]


def test_a_renamed_resource_without_podresources(analyze: Analyze) -> None:
    b = BundleSpec()
    b.gpu(0)
    _node(b, 8, 6, resource="nvidia.com/gpu.shared")
    (f,) = of_kind(analyze(b), "gpu-allocatable-reduced")
    assert f["metrics"]["resource"] == "nvidia.com/gpu.shared" and f["metrics"]["unhealthy"] == 2
    assert f["metrics"]["gpus_left_out"] is None and "no Xid or lost-GPU record" in f["summary"]


def _two_reads(start: int, end: int, listed: tuple[int, ...] | None, xid_at: float) -> tuple[BundleSpec, str, str]:
    """Two GPUs; the node's allocatable ``start`` of 2, then ``end`` of 2 read again at T0 + 50;
    pod-resources (read with the first) listing the GPUs ``listed``; GPU 1 falls off the bus at ``xid_at``."""
    b = BundleSpec()
    g = (b.gpu(0), b.gpu(1))
    _node(b, 2, start)
    _node_end(b, 2, end, T0 + 50)
    if listed is not None:
        b.add_json("kubernetes/podresources/allocatable.json",
                   {"devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [g[i] for i in listed]}]})
    b.kmsg(xid_at, XID79.format(bus="86"))
    return b, g[0], g[1]


def test_recovered_by_the_end_of_the_window(analyze: Analyze) -> None:
    b, _, g1 = _two_reads(1, 2, (0,), T0 - 20)
    (f,) = of_kind(analyze(b), "gpu-allocatable-reduced")
    assert f["metrics"]["recovered_by_end"] == 1 and f["metrics"]["allocatable_at_end"] == 2
    assert f["severity"] == "medium" and f["metrics"]["gpus_left_out"] == g1
    assert "recovered by the end of the window: 2 of 2 when the node was read again at" in f["summary"]
    (again,) = [e for e in f["evidence"] if e["member"] == "kubernetes/node-end.json"]
    assert again["locator"] == "/status/allocatable/nvidia.com~1gpu" and again["excerpt"] == "2"


def test_not_recovered_by_the_end_of_the_window(analyze: Analyze) -> None:
    b, _, _ = _two_reads(1, 1, None, T0 - 20)
    (f,) = of_kind(analyze(b), "gpu-allocatable-reduced")
    assert f["metrics"]["recovered_by_end"] == 0 and f["severity"] == "high"
    assert "not recovered by the end of the window: 1 of 2 when the node was read again at" in f["summary"]
    assert f["end"][:19] == iso_from_unix(T0 + 50)[:19]
    assert "kubernetes/node-end.json" in {e["member"] for e in f["evidence"]}


def test_allocatable_that_fell_during_the_window(analyze: Analyze) -> None:
    # pod-resources, read with the first read of the node, lists both GPUs: it cannot say which one
    # left; GPU 1 falls off the bus during the window, before the second read
    b, _, g1 = _two_reads(2, 1, (0, 1), T0 + 10)
    doc = analyze(b)
    (f,) = of_kind(doc, "gpu-allocatable-reduced")
    assert (f["metrics"]["fell_during_window"], f["metrics"]["recovered_by_end"], f["metrics"]["allocatable"]) == (1, 0, 1)
    assert "fell below its capacity during the window, to 1 of 2" in f["summary"]
    assert "2 of 2 at the capture's start, 1 of 2 when the node was read again at" in f["summary"]
    assert "Xid 79 at" in f["summary"] and f["metrics"]["gpus_left_out"] is None
    assert f["metrics"]["gpus_suspected"] == g1 and "so which GPU left is inferred" in f["summary"]
    (lost,) = of_kind(doc, "gpu-lost")
    assert f["id"] in lost["causes"]


def test_pod_resources_read_again_names_the_gpu_that_left(analyze: Analyze) -> None:
    b, g0, g1 = _two_reads(2, 1, (0, 1), T0 + 10)
    b.add_json("kubernetes/podresources/allocatable-end.json",
               {"devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [g0]}]})
    (f,) = of_kind(analyze(b), "gpu-allocatable-reduced")
    assert f["metrics"]["gpus_left_out"] == g1 and f["metrics"]["gpus_suspected"] is None
    assert "left out of the kubelet's allocatable devices at the end of the window: GPU 1" in f["summary"]
    assert "inferred" not in f["summary"]
    members = {e["member"] for e in f["evidence"]}
    assert "kubernetes/podresources/allocatable-end.json" in members
    assert "kubernetes/podresources/allocatable.json" not in members  # read before the GPU left


def test_full_at_both_reads_is_no_finding(analyze: Analyze) -> None:
    b = BundleSpec()
    b.gpu(0)
    _node(b, 1, 1)
    _node_end(b, 1, 1, T0 + 50)
    doc = analyze(b)
    assert "gpu-allocatable-reduced" not in kinds(doc)
    (r,) = [r for r in doc["ruled_out"] if r["kind"] == "gpu-allocatable-reduced"]
    assert "at the start and the end of the window" in r["statement"]
    assert {e["member"] for e in r["evidence"]} == {"kubernetes/node.json", "kubernetes/node-end.json"}


def test_full_allocatable_is_no_finding(analyze: Analyze) -> None:
    b = BundleSpec()
    b.gpu(0)
    _node(b, 1, 1)
    b.kmsg(T0 - 20, XID79.format(bus="3B"))
    doc = analyze(b)
    assert "gpu-allocatable-reduced" not in kinds(doc)
    (r,) = [r for r in doc["ruled_out"] if r["kind"] == "gpu-allocatable-reduced"]
    assert "nvidia.com/gpu 1 of 1" in r["statement"] and r["evidence"][0]["member"] == "kubernetes/node.json"


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=14), inner, max_size=4),
                     max_leaves=12)
_COUNT = st.one_of(st.integers(-3, 10).map(str), st.integers(-3, 10), _JSON)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=_COUNT, allocatable=_COUNT, devices=_JSON, status=_JSON, end=_COUNT, requests=_JSON)
def test_garbage_node_resources_never_raise(capacity: Any, allocatable: Any, devices: Any, status: Any,
                                            end: Any, requests: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = BundleSpec()
        b.gpu(0)
        node = {"capacity": {"nvidia.com/gpu": capacity}, "allocatable": {"nvidia.com/gpu": allocatable}}
        b.add_json("kubernetes/node.json", {"status": status if isinstance(status, dict) and status else node})
        b.add_json("kubernetes/node-end.json", {"status": {"capacity": {"nvidia.com/gpu": capacity},
                                                           "allocatable": {"nvidia.com/gpu": end}}})
        b.add_json("kubernetes/requests-end.json", {"requests": requests})
        b.add_json("kubernetes/podresources/allocatable.json", {"devices": devices})
        b.add_json("kubernetes/podresources/allocatable-end.json", {"devices": requests})
        doc = analyze_bundles([b.write(Path(tmp))])
        assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
        json.dumps(doc)
