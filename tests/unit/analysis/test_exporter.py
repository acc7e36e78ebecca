"""``gpu-exporter-blind-spot``: dcgm-exporter's pod labels (Prometheus history in the bundle) against
the GPU's use and the bundle's own attribution; both shapes fire, agreeing labels are ruled out."""

from __future__ import annotations

from typing import Any

from forensics.specs.prometheus import QUERIES, TARGET, query_member
from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, cid_of, kinds, names, of_kind

T_UID, N_UID = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-8999-aaaaaaaaaaaa"
STEP = 15.0


def _dcgm_history(b: BundleSpec, uuid: str, points: list[tuple[float, float]], pod: tuple[str, str, str] | None) -> None:
    """dcgm-exporter's ``DCGM_FI_DEV_GPU_UTIL`` for GPU 0 as query_range answers it, naming ``pod``
    (namespace, pod, container) or no pod; the query index and target as the collector writes them."""
    labels: dict[str, Any] = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": uuid, "gpu": "0", "Hostname": b.host,
                              "modelName": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:3B:00.0"}
    if pod is not None:
        labels.update(zip(("namespace", "pod", "container"), pod, strict=True))
    member = query_member("DCGM_FI_DEV_GPU_UTIL")
    b.add_json(member, {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[t, f"{v:g}"] for t, v in points]}]}})
    b.add_json(QUERIES, {"queries": [{"metric": "DCGM_FI_DEV_GPU_UTIL", "exporter": "dcgm-exporter",
                                      "status": "ok", "member": member}]})
    b.add_json(TARGET, {"step_s": STEP, "node": b.host})


def _two_pods(b: BundleSpec) -> str:
    """trainer-0 granted GPU 0 (limit and pod-resources); notebook-alice without a limit, using it."""
    uuid = b.gpu(0)
    trainer, notebook = cid_of("trainer"), cid_of("jupyter")
    b.pod("ml", "trainer-0", T_UID, [("trainer", trainer, 1)])
    b.pod_devices("ml", "trainer-0", "trainer", [uuid])
    b.pod("research", "notebook-alice", N_UID, [("jupyter", notebook, 0)])
    b.process(32, "python", container=notebook, pod_uid=N_UID)
    b.status["docker"] = "unavailable"
    return uuid


def test_exporter_credits_the_allocated_pod_while_another_uses_the_gpu(analyze: Analyze) -> None:
    b = BundleSpec()
    uuid = _two_pods(b)
    b.gpu_series(0, range(60), lambda s: (95, 40 * GIB, {32: (40 * GIB, 90.0)}))
    _dcgm_history(b, uuid, [(T0 + STEP * i, 95.0) for i in range(1, 5)], ("ml", "trainer-0", "trainer"))
    doc = analyze(b)
    (f,) = of_kind(doc, "gpu-exporter-blind-spot")
    assert f["metrics"]["shape"] == "other-pod-named" and f["metrics"]["exporter_pod"] == "ml/trainer-0"
    assert "research/notebook-alice" in names(f, "culprit", "pod") and names(f, "victim", "pod") == ["ml/trainer-0"]
    assert f["severity"] == "high" and f["confidence"] == 0.85
    assert f["history"]["step_s"] == STEP and f["history"]["only"] is True
    assert {e["member"] for e in f["evidence"]} == {query_member("DCGM_FI_DEV_GPU_UTIL")}
    assert f["next_step"].startswith("stop notebook-alice") or "from reaching GPU 0 outside" in f["next_step"], f
    assert doc["verdict"]["impact"].startswith("pod ml/trainer-0: credited by dcgm-exporter with GPU 0, used by")


def test_busy_gpu_with_no_pod_named_from_history_alone(analyze: Analyze) -> None:
    b = BundleSpec()
    b.status = {"host": "ok"}
    uuid = "GPU-0b6d2c4e-1f3a-4b5c-8d9e-000000000000"
    busy = [(T0 + STEP * i, 97.0 if 2 <= i < 8 else 3.0) for i in range(12)]
    _dcgm_history(b, uuid, busy, None)
    doc = analyze(b)
    (f,) = of_kind(doc, "gpu-exporter-blind-spot")
    assert f["metrics"]["shape"] == "no-pod-named" and f["metrics"]["steps"] == 6
    assert f["confidence"] == 0.75 and "nothing in the bundle names who used it" in f["summary"]
    assert f["next_step"].startswith("find who uses GPU 0 outside the device plugin: capture on the node")
    assert f["history"] == {"source": "prometheus", "step_s": STEP, "members": [query_member("DCGM_FI_DEV_GPU_UTIL")],
                            "only": True}
    assert doc["nodes"][0]["history_step_s"] == STEP


def test_labels_that_agree_are_ruled_out(analyze: Analyze) -> None:
    b = BundleSpec()
    uuid = _two_pods(b)
    b.gpu_series(0, range(60), lambda s: (95, 40 * GIB, {}))  # the notebook holds nothing: nobody to disagree
    _dcgm_history(b, uuid, [(T0 + STEP * i, 95.0) for i in range(1, 5)], ("ml", "trainer-0", "trainer"))
    doc = analyze(b)
    assert "gpu-exporter-blind-spot" not in kinds(doc)
    (r,) = [r for r in doc["ruled_out"] if r["kind"] == "gpu-exporter-blind-spot"]
    assert r["statement"].startswith("dcgm-exporter named a pod whenever a GPU on gpu-07 was busy for 4 steps")
    assert r["evidence"][0]["member"] == QUERIES and r["evidence"][0]["excerpt"] == "4 GPU utilization steps, 4 of them busy"


def test_no_history_no_statement(analyze: Analyze) -> None:
    b = BundleSpec()
    _two_pods(b)
    b.gpu_series(0, range(10), lambda s: (95, 40 * GIB, {32: (40 * GIB, 90.0)}))
    doc = analyze(b)
    assert not [r for r in doc["ruled_out"] if r["kind"] == "gpu-exporter-blind-spot"]
    assert "gpu-exporter-blind-spot" not in kinds(doc)


def test_history_held_under_ring_is_cited_under_ring(analyze: Analyze) -> None:
    """The Prometheus members held as the flight recorder's (``ring/prometheus/...``): the ruled-out
    check cites the query index by its path in the bundle, ``ring/`` and all."""
    b = BundleSpec()
    uuid = _two_pods(b)
    b.gpu_series(0, range(60), lambda s: (95, 40 * GIB, {}))
    _dcgm_history(b, uuid, [(T0 + STEP * i, 95.0) for i in range(1, 5)], ("ml", "trainer-0", "trainer"))
    for member in [m for m in b.members if m.startswith("prometheus/")]:
        b.members[f"ring/{member}"] = b.members.pop(member)
    (r,) = [r for r in analyze(b)["ruled_out"] if r["kind"] == "gpu-exporter-blind-spot"]
    assert r["evidence"][0]["member"] == f"ring/{QUERIES}"
