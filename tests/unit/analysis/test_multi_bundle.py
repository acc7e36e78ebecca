"""Several bundles: one host -> one timeline; several hosts -> per-node sections, offsets noted."""

from __future__ import annotations

from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, of_kind


def _half(start: float, seconds: range, host: str = "gpu-07") -> BundleSpec:
    b = BundleSpec(host=host, start=start, duration_s=len(seconds))
    b.gpu(0)
    trainer = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
    notebook = b.container("notebook")
    b.process(4101, "python", container=trainer)
    b.process(4202, "python", container=notebook)

    def gpu0(s: float) -> tuple[float, int, dict[int, tuple[int, float | None]]]:
        off = s + (start - T0)
        if off < 20:
            return 96, 30 * GIB, {4101: (30 * GIB, 95.0)}
        return 99, 76 * GIB, {4101: (30 * GIB, 7.0), 4202: (46 * GIB, 88.0)}

    b.gpu_series(0, seconds, gpu0)
    return b


def test_two_bundles_of_one_host_form_one_timeline(analyze: Analyze) -> None:
    first = _half(T0, range(0, 30))
    second = _half(T0 + 30, range(0, 30))
    doc = analyze(first, second)
    assert [n["host"] for n in doc["nodes"]] == ["gpu-07"]
    assert len(doc["nodes"][0]["bundles"]) == 2 and len(doc["bundles"]) == 2
    (hog,) = of_kind(doc, "gpu-compute-hog")
    assert hog["metrics"]["samples"] == 40  # ticks 20..59 across both bundles
    assert len(doc["gpus"]) == 1 and len(doc["gpus"][0]["series"]["t"]) == 60
    assert len({e["bundle"] for f in doc["findings"] for e in f["evidence"]}) == 2


def test_overlapping_bundles_of_one_host_are_not_double_counted(analyze: Analyze) -> None:
    doc = analyze(_half(T0, range(0, 40)), _half(T0 + 20, range(0, 40)))
    assert len(doc["gpus"][0]["series"]["t"]) == 60
    (hog,) = of_kind(doc, "gpu-compute-hog")
    assert hog["metrics"]["samples"] == 40


def test_bundles_of_two_nodes(analyze: Analyze) -> None:
    a = _half(T0, range(0, 60), host="gpu-07")
    b = _half(T0, range(0, 60), host="gpu-08")
    doc = analyze(a, b)
    assert [n["host"] for n in doc["nodes"]] == ["gpu-07", "gpu-08"]
    assert doc["nodes"][0]["clock_offset_s"] == 0.0 and doc["nodes"][1]["clock_offset_s"] is None
    assert any("clocks" in lim for lim in doc["limitations"])
    findings = of_kind(doc, "unallocated-gpu-use")
    assert sorted(f["node"] for f in findings) == ["gpu-07", "gpu-08"]
    for f in findings:  # each node's culprit is that node's own container
        assert all(s["node"] == f["node"] for s in f["subjects"])
    assert {g["node"] for g in doc["gpus"]} == {"gpu-07", "gpu-08"}
