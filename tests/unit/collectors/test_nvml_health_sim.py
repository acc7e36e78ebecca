"""The fault rules on what the real nvml collector reads from the simulated NVML: memory-error
counters that say a reset is needed, and a GPU lost before the snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from tests.support.analysis_bundles import BundleSpec
from tests.support.nvmlsim import Scenario, fixtures
from tests.support.nvmlsim.fixtures import snapshot

sim_lib = fixtures.sim_lib
nvml_clean = fixtures.nvml_clean

pytestmark = pytest.mark.usefixtures("nvml_clean")


def test_memory_health_and_a_lost_gpu_from_the_simulated_library(sim_lib: Path, tmp_path: Path) -> None:
    sc = (Scenario().add_gpu(remapped_rows=(0, 2, 1, 0), ecc_uncorrected_volatile=3)
          .add_gpu().add_gpu(remapped_rows=(4, 0, 0, 1)).lose_gpu(gpu=1, at_s=-1))
    snapshot(sc, tmp_path, sim_lib)
    b = BundleSpec()
    b.members["nvml/devices.json"] = (tmp_path / "stage" / "nvml" / "devices.json").read_bytes()
    out = tmp_path / "bundle"
    out.mkdir()
    doc = analyze_bundles([b.write(out)])
    health = {f["subjects"][0]["name"]: f for f in doc["findings"] if f["kind"] == "gpu-memory-health"}
    assert health["GPU 0"]["metrics"]["verdict"] == "reset-needed"
    assert health["GPU 0"]["metrics"]["ecc_uncorrected_volatile"] == 3
    assert health["GPU 2"]["metrics"]["verdict"] == "rma-candidate"
    (lost,) = [f for f in doc["findings"] if f["kind"] == "gpu-lost"]
    assert lost["subjects"][0]["name"] == "GPU 1" and "GpuIsLost" in lost["summary"]
    assert lost["evidence"][0]["locator"] == "/devices/1/nvml/nvmlDeviceGetHandleByIndex_v2"
