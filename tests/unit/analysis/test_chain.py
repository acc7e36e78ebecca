"""The evidence chain, the verdict and what was ruled out."""

from __future__ import annotations

from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, of_kind, secretly_taken


def test_worked_example_chain_and_headline(analyze: Analyze) -> None:
    b = secretly_taken(takeover_s=20)
    b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"], state="exited", exit_code=1, finished=T0 + 59)
    doc = analyze(b)
    (root,) = of_kind(doc, "unallocated-gpu-use")
    (hog,) = of_kind(doc, "gpu-compute-hog")
    (mem,) = of_kind(doc, "gpu-memory-pressure")
    assert set(root["causes"]) >= {hog["id"], mem["id"]}
    v = doc["verdict"]
    assert v["clean"] is False
    assert [c["name"] for c in v["culprits"]] == ["notebook"]
    assert v["victims"][0]["name"] == "trainer"
    # One sentence that reads naturally, with the numbers: who took what from whom, then the harm.
    assert v["headline"].startswith(
        "Container notebook, which had no GPU allocation, took GPU 0 (allocated to trainer): 9"), v["headline"]
    assert "% of its compute; trainer fell from 95% to 7% SM; GPU 0 memory 9" in v["headline"], v["headline"]
    assert "trainer exited with code 1" in v["headline"], v["headline"]
    assert "without a GPU allocation" not in v["headline"] and ". " not in v["headline"]
    assert root["summary"].startswith("container notebook (pid 4202, python) used GPU 0 without an allocation")
    chain_ids = [c["finding"] for c in doc["chain"]]
    assert chain_ids.index(root["id"]) < chain_ids.index(hog["id"])
    times = [c["time"] for c in doc["chain"]]
    assert times == sorted(times)
    ruled = {r["kind"] for r in doc["ruled_out"]}
    assert {"gpu-xid-fault", "gpu-clock-throttle", "oom-kill", "cpu-throttling"} <= ruled
    assert all(r["evidence"] for r in doc["ruled_out"])


def test_clean_bundle_has_no_culprit(analyze: Analyze) -> None:
    b = BundleSpec()
    b.gpu(0)
    b.gpu(1)
    a = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
    c = b.container("inference", env=["NVIDIA_VISIBLE_DEVICES=1"])
    b.process(1, "python", container=a)
    b.process(2, "python", container=c)
    b.gpu_series(0, range(30), lambda s: (88, 35 * GIB, {1: (35 * GIB, 86.0)}))
    b.gpu_series(1, range(30), lambda s: (41, 10 * GIB, {2: (10 * GIB, 40.0)}))
    b.kmsg(T0 + 3, "eth0: link up")
    doc = analyze(b)
    assert doc["findings"] == []
    v = doc["verdict"]
    assert v["clean"] is True and v["culprits"] == [] and v["victims"] == []
    assert "No contention" in v["headline"]
    assert len(doc["ruled_out"]) >= 4


def test_missing_sources_lower_confidence_and_are_stated(analyze: Analyze) -> None:
    full = analyze(secretly_taken())
    b = secretly_taken()
    b.status["docker"] = "failed"
    degraded = analyze(b)
    assert any("no Docker data" in lim for lim in degraded["limitations"])
    assert not any("no Docker data" in lim for lim in full["limitations"])
    # without Docker the allocation is unknown: nobody is accused of unallocated use
    assert not of_kind(degraded, "unallocated-gpu-use")
    (h1,) = of_kind(full, "gpu-compute-hog")
    b2 = secretly_taken()
    b2.status["cgroups"] = "failed"
    (h2,) = of_kind(analyze(b2), "gpu-compute-hog")
    assert h1["confidence"] == h2["confidence"]  # cgroups are not needed for this finding
    b3 = secretly_taken()
    b3.status["nvml"] = "unavailable"
    doc3 = analyze(b3)
    assert doc3["findings"] == [] and any("no NVML data: GPU attribution not possible" in lim
                                          for lim in doc3["limitations"])
