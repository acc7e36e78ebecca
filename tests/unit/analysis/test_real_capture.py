"""The analyzer on a bundle made by the real capture: the lead's runner, the real procfs and
cgroups collectors reading this host, and the NVML collector driving the simulated
libnvidia-ml.so.1 (tests/support/nvmlsim), with two real host processes standing for GPU jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.cgroups import CgroupsCollector
from forensics.collectors.nvml.nvml import NvmlCollector
from forensics.collectors.procfs import ProcfsCollector
from tests.support.nvmlsim import Scenario, activate
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib
nvml_clean = nvf.nvml_clean
sleepers = nvf.sleepers
pytestmark = [pytest.mark.usefixtures("nvml_clean"), pytest.mark.slow]

GIB = 1 << 30




def test_host_processes_sharing_a_gpu(sim_lib: Path, tmp_path: Path, sleepers: list[int]) -> None:
    owner, intruder = sleepers
    sc = Scenario()
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 95), (2, 99)], memory_total_bytes=80 * GIB)
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=0, memory_total_bytes=80 * GIB)
    sc.add_process(pid=owner, gpu=0, used_memory_bytes=20 * GIB, sm_util=[(0, 95), (2, 6)], mem_util=30)
    sc.add_process(pid=intruder, gpu=0, start_s=2, used_memory_bytes=55 * GIB, sm_util=[(2, 90)], mem_util=60)
    activate(sc.write(tmp_path / "scenario.tsv"))
    out = tmp_path / "out"
    out.mkdir()
    res = run_capture(CaptureOptions(nvml_library=str(sim_lib), duration_s=6, interval_s=1, timeout_s=60),
                      out, collectors=[NvmlCollector(), ProcfsCollector(), CgroupsCollector()])
    statuses = {c["name"]: c["status"] for c in res.manifest["collectors"]}
    assert statuses["nvml"] == "ok", res.manifest["collectors"]

    doc = analyze_bundles([res.path])
    by_kind: dict[str, list[dict]] = {}
    for f in doc["findings"]:
        by_kind.setdefault(f["kind"], []).append(f)
    # Both sleepers are host processes (or in this test's own cgroup): reported, never dropped.
    unattributed = {s["id"] for f in by_kind.get("unattributed-gpu-process", []) for s in f["subjects"]
                    if s["type"] == "process"} | {u["id"] for u in doc["unattributed"]}
    assert {str(owner), str(intruder)} <= unattributed
    entries = {u["id"]: u for u in doc["unattributed"]}
    assert entries[str(owner)]["name"] == "sleep"  # comm read back from the real /proc/<pid>/stat
    # The intruder appeared during the sampling window, after procfs took its snapshot: it stays
    # an unresolved PID, reported with the reason, not silently dropped or guessed.
    assert entries[str(intruder)]["name"] in (None, "sleep")
    if entries[str(intruder)]["name"] is None:
        assert "no /proc/" in entries[str(intruder)]["reason"]
    (hog,) = by_kind["gpu-compute-hog"]
    culprits = [s["id"] for s in hog["subjects"] if s["role"] == "culprit"]
    victims = [s["id"] for s in hog["subjects"] if s["role"] == "victim"]
    assert culprits == [str(intruder)] and victims == [str(owner)]
    (mem,) = by_kind["gpu-memory-pressure"]
    assert mem["metrics"]["peak_ratio"] >= 0.9
    for f in doc["findings"]:
        for e in f["evidence"]:
            assert e["member"] in doc["bundles"][0]["members"]
    # no Docker, no kernel collector in this capture: stated, not silently ignored
    assert any("no Docker data" in lim for lim in doc["limitations"])
    assert any("kernel" in lim for lim in doc["limitations"])
