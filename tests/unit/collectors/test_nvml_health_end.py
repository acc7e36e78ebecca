"""The health counters read at both ends of a capture window, through the real capture runner and
the nvml collector driving the simulated libnvidia-ml.so.1, then analyzed: what the on-call engineer
checks first on a GPU that went bad during the incident (the driver's recovery action, memory
counters that moved, the VBIOS the report names)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.nvml.nvml import NvmlCollector
from tests.support.nvmlsim import Scenario, activate
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib
nvml_clean = nvf.nvml_clean
pytestmark = [pytest.mark.usefixtures("nvml_clean"), pytest.mark.slow]


def _capture(sc: Scenario, tmp_path: Path, lib: Path, duration_s: float = 4) -> tuple[Path, dict[str, Any]]:
    activate(sc.write(tmp_path / "scenario.tsv"))
    out = tmp_path / "out"
    out.mkdir()
    res = run_capture(CaptureOptions(nvml_library=str(lib), duration_s=duration_s, interval_s=1, timeout_s=60),
                      out, collectors=[NvmlCollector()])
    assert {c["name"]: c["status"] for c in res.manifest["collectors"]}["nvml"] == "ok", res.manifest["collectors"]
    with tarfile.open(res.path) as tf:
        name = next(n for n in tf.getnames() if n.endswith("nvml/health_end.json"))
        member = tf.extractfile(name)
        assert member is not None
        health_end = json.loads(member.read())
    return res.path, health_end


def _by_kind(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for f in doc["findings"]:
        out.setdefault(f["kind"], []).append(f)
    return out


def test_a_gpu_that_went_bad_during_the_window(sim_lib: Path, tmp_path: Path) -> None:
    sc = Scenario()
    # GPU 0: at 2 s into the window the driver asks for a node reboot, uncorrectable ECC errors
    # appear and a row remap becomes pending. GPU 1 stays healthy.
    sc.add_gpu(gpu_recovery_action=[(0, 0), (2, 2)], ecc_uncorrected_volatile=[(0, 0), (2, 2)],
               remapped_rows=(0, 0, 0, 0), attrs={"remapped_rows_pending": [(0, 0), (2, 1)]},
               vbios_version="96.00.99.00.01")
    sc.add_gpu()
    bundle, health_end = _capture(sc, tmp_path, sim_lib)

    g0 = health_end["devices"][0]["nvml"]
    assert health_end["complete"] is True and len(health_end["devices"]) == 2
    assert g0["nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"]["decoded"] == "NODE_REBOOT"
    # a GPU without NVLink: the link count field is recorded as not supported, no per-link reads
    assert g0["nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_LINK_COUNT)"]["missing"] == "not_supported"
    assert not any(k.startswith("nvmlDeviceGetNvLinkState") for k in g0)

    doc = analyze_bundles([bundle])
    kinds = _by_kind(doc)
    (rec,) = kinds["gpu-recovery-action"]
    assert rec["severity"] == "critical" and rec["metrics"]["meaning"] == "node reboot"
    assert rec["subjects"][0]["id"] == sc.gpu_uuid(0)
    assert rec["metrics"]["changed_during_window"] == 1 and "it changed during the window (it was none" in rec["summary"]
    assert [e["member"].rsplit("/", 1)[-1] for e in rec["evidence"]] == ["devices.json", "health_end.json"]
    (mem,) = kinds["gpu-memory-health"]
    assert mem["subjects"][0]["id"] == sc.gpu_uuid(0)
    assert mem["metrics"]["verdict"] == "reset-needed" and mem["severity"] == "critical"
    assert "ecc_uncorrected_volatile 0 -> 2" in mem["metrics"]["moved"]
    assert "remap_pending 0 -> 1" in mem["metrics"]["moved"]
    gpus = {g["uuid"]: g for g in doc["gpus"]}
    assert gpus[sc.gpu_uuid(0)]["vbios_version"] == "96.00.99.00.01"
    assert gpus[sc.gpu_uuid(1)]["vbios_version"] == "96.00.74.00.01"


def test_a_healthy_gpu_and_an_old_driver_without_the_field(sim_lib: Path, tmp_path: Path) -> None:
    sc = Scenario()
    sc.add_gpu(vbios_version=None)
    sc.add_gpu(gpu_recovery_action=None)  # a driver that does not know the field: NotSupported per field
    bundle, health_end = _capture(sc, tmp_path, sim_lib, duration_s=2)
    g1 = health_end["devices"][1]["nvml"]
    assert g1["nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"]["missing"] == "not_supported"
    doc = analyze_bundles([bundle])
    kinds = _by_kind(doc)
    assert "gpu-recovery-action" not in kinds and "gpu-memory-health" not in kinds
    gpus = {g["uuid"]: g for g in doc["gpus"]}
    assert gpus[sc.gpu_uuid(0)]["vbios_version"] is None


def test_links_that_degraded_during_the_window(sim_lib: Path, tmp_path: Path) -> None:
    sc = Scenario()
    # GPU 0, busy: its PCIe link drops from x16 to x8 at 2 s and 60 replays happen.
    sc.add_gpu(gpu_util=90, pcie_width_curr=[(0, 16), (2, 8)], pcie_replay_counter=[(0, 5), (2, 65)])
    # GPU 1, idle at Gen1 (power saving, not degradation): NVLink 2 counts 40 CRC flit errors and
    # link 3 goes down at 2 s.
    sc.add_gpu(gpu_util=0, pcie_gen_curr=1, nvlink_links=4,
               attrs={"nvlink_crc_flit_2": [(0, 3), (2, 43)], "nvlink_state_3": [(0, 1), (2, 0)]})
    sc.add_gpu(nvlink_links=4)  # healthy links
    bundle, health_end = _capture(sc, tmp_path, sim_lib)
    assert health_end["devices"][1]["nvml"]["nvmlDeviceGetNvLinkState(3)"]["decoded"] == "Disabled"

    kinds = _by_kind(analyze_bundles([bundle]))
    (pcie,) = kinds["gpu-pcie-degraded"]
    assert pcie["subjects"][0]["id"] == sc.gpu_uuid(0) and pcie["severity"] == "medium"
    m = pcie["metrics"]
    assert (m["width"], m["max_width"], m["degraded_at_start"], m["degraded_at_end"]) == ("x8", "x16", 0, 1)
    assert m["replays_in_window"] == 60
    assert "link width x8 of x16 by the end of the window" in pcie["summary"]
    assert {e["member"].rsplit("/", 1)[-1] for e in pcie["evidence"]} == {"devices.json", "health_end.json"}
    (nvl,) = kinds["gpu-nvlink-errors"]
    assert nvl["subjects"][0]["id"] == sc.gpu_uuid(1) and nvl["severity"] == "high"
    assert nvl["metrics"]["links_went_down"] == 1 and nvl["metrics"]["links_with_errors"] == "2"
    assert "link 3 went down during the window" in nvl["summary"]
    assert "link 2: CRC flit +40" in nvl["summary"]
