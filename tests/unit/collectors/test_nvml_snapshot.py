"""The nvml collector's snapshot: real collector, real pynvml, the simulated libnvidia-ml.so.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from forensics.collectors.nvml.nvml import NvmlCollector, assess_pid_namespace
from forensics.errors import SourcePermissionDenied, SourceUnavailable
from tests.support.nvmlsim import Scenario, fixtures, subprocess_env
from tests.support.nvmlsim.fixtures import find_bundle_dir, make_ctx, snapshot

sim_lib = fixtures.sim_lib
nvml_clean = fixtures.nvml_clean

pytestmark = pytest.mark.usefixtures("nvml_clean")

GiB = 1 << 30


def _absent_pid() -> int:
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 1000  # above pid_max: never a live PID


def full_scenario() -> Scenario:
    """Two GPUs where every field the collector reads is supported, with distinct values."""
    return (
        Scenario(driver_version="550.54.15", nvml_version="12.550.54.15", cuda_driver_version=12040)
        .add_gpu(uuid="GPU-00000000-1111-2222-3333-444444444444", name="NVIDIA H100 80GB HBM3",
                 serial="1650923001234", pci_bus_id="00000000:3B:00.0", memory_total_bytes=80 * GiB,
                 memory_reserved_bytes=GiB // 2, memory_used_base_bytes=GiB, persistence_mode=1, compute_mode=3,
                 gpu_util=88, mem_util=41, clock_graphics_mhz=1755, clock_sm_mhz=1755, clock_mem_mhz=2619,
                 clocks_event_reasons=0x44, supported_clocks_event_reasons=0x1FF, temperature_c=83,
                 temp_slowdown_c=90, temp_shutdown_c=95, temp_gpu_max_c=88, temp_mem_max_c=99,
                 power_mw=612_345, power_limit_mw=700_000, ecc_corrected_volatile=3, ecc_uncorrected_volatile=1,
                 ecc_corrected_aggregate=30, ecc_uncorrected_aggregate=2, page_retirement=True,
                 retired_pages_pending=1, remapped_rows=(5, 1, 1, 0), pcie_replay_counter=17, accounting=True,
                 mig=False, pcie_gen_curr=4, pcie_width_curr=8, gpu_recovery_action=1, nvlink_links=2,
                 attrs={"nvlink_crc_flit_1": 7, "nvlink_state_0": 0})
        .add_retired_page(gpu=0, cause=1, address=0x2F5A000, timestamp=1764460000)
        .add_retired_page(gpu=0, cause=0, address=0x1000, timestamp=1764450000)
        .add_gpu(uuid="GPU-99999999-1111-2222-3333-444444444444", pci_bus_id="00000000:BE:00.0", mig=True,
                 minor_number=3)
        .add_mig(gpu=1, slot=0, gpu_instance_id=1, compute_instance_id=0,
                 uuid="MIG-aaaaaaaa-1111-2222-3333-444444444444", memory_total_bytes=10 * GiB)
        .add_mig(gpu=1, slot=3, gpu_instance_id=5, compute_instance_id=0,
                 uuid="MIG-bbbbbbbb-1111-2222-3333-444444444444", memory_total_bytes=20 * GiB)
        .add_process(pid=os.getpid(), gpu=0, used_memory_bytes=12 * GiB, sm_util=[(-3, 70)], mem_util=20)
        .add_process(pid=os.getppid(), gpu=1, mig=3, used_memory_bytes=3 * GiB)
        .add_process(pid=os.getpid(), gpu=0, kind="graphics", used_memory_bytes=None)
        # an exited process, known only to accounting
        .add_process(pid=_absent_pid(), gpu=0, used_memory_bytes=[(-60, 2 * GiB), (-40, 6 * GiB)],
                     sm_util=[(-60, 90), (-40, 10)], start_s=-60, end_s=-20)
    )


def value(dev: dict[str, Any], call: str) -> Any:
    entry = dev["nvml"][call]
    assert "value" in entry, f"{call}: {entry}"
    return entry["value"]


def decoded(dev: dict[str, Any], call: str) -> Any:
    return dev["nvml"][call]["decoded"]


class TestEveryFieldDecoded:
    def test_system_and_identity(self, sim_lib: Path, tmp_path: Path) -> None:
        _ctx, m = snapshot(full_scenario(), tmp_path, sim_lib)
        doc = m["devices.json"]
        assert doc["complete"] is True
        assert doc["library"] == str(sim_lib)
        sysv = {k: v["value"] for k, v in doc["system"].items()}
        assert sysv == {"nvmlSystemGetDriverVersion": "550.54.15", "nvmlSystemGetNVMLVersion": "12.550.54.15",
                        "nvmlSystemGetCudaDriverVersion_v2": 12040, "nvmlDeviceGetCount_v2": 2}
        g0 = doc["devices"][0]
        assert value(g0, "nvmlDeviceGetUUID") == "GPU-00000000-1111-2222-3333-444444444444"
        assert value(g0, "nvmlDeviceGetName") == "NVIDIA H100 80GB HBM3"
        assert value(g0, "nvmlDeviceGetSerial") == "1650923001234"
        pci = value(g0, "nvmlDeviceGetPciInfo_v3")
        assert (pci["busId"], pci["busIdLegacy"], pci["domain"], pci["bus"], pci["device"]) == (
            "00000000:3B:00.0", "0000:3B:00.0", 0, 0x3B, 0)
        assert pci["pciDeviceId"] == 0x233010DE
        # N of /dev/nvidiaN: the driver's numbering, not NVML's index
        assert [value(g, "nvmlDeviceGetMinorNumber") for g in doc["devices"]] == [0, 3]

    def test_every_read_answered_and_decoded(self, sim_lib: Path, tmp_path: Path) -> None:
        _ctx, m = snapshot(full_scenario(), tmp_path, sim_lib)
        g0 = m["devices.json"]["devices"][0]
        missing = {k: v for k, v in g0["nvml"].items() if "value" not in v}
        assert missing == {}
        assert decoded(g0, "nvmlDeviceGetPersistenceMode") == "Enabled"
        assert value(g0, "nvmlDeviceGetVbiosVersion") == "96.00.74.00.01"
        assert [value(g0, f"nvmlDeviceGetCurrPcieLink{x}") for x in ("Generation", "Width")] == [4, 8]
        assert [value(g0, f"nvmlDeviceGetMaxPcieLink{x}") for x in ("Generation", "Width")] == [5, 16]
        assert value(g0, "nvmlDeviceGetGpuMaxPcieLinkGeneration") == 5
        assert decoded(g0, "nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)") == "GPU_RESET"
        assert value(g0, "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_LINK_COUNT)") == 2
        # link 0 is down, its counters still read (the errors that took it down); link 1 is up
        assert decoded(g0, "nvmlDeviceGetNvLinkState(0)") == "Disabled"
        assert value(g0, "nvmlDeviceGetNvLinkErrorCounter(0,NVML_NVLINK_ERROR_DL_RECOVERY)") == 0
        assert "nvmlDeviceGetNvLinkState(2)" not in g0["nvml"]
        assert decoded(g0, "nvmlDeviceGetNvLinkState(1)") == "Enabled"
        assert value(g0, "nvmlDeviceGetNvLinkErrorCounter(1,NVML_NVLINK_ERROR_DL_CRC_FLIT)") == 7
        assert value(g0, "nvmlDeviceGetNvLinkErrorCounter(1,NVML_NVLINK_ERROR_DL_REPLAY)") == 0
        assert decoded(g0, "nvmlDeviceGetComputeMode") == "ExclusiveProcess"
        assert decoded(g0, "nvmlDeviceGetMigMode") == {"current": "Disabled", "pending": "Disabled"}
        mem = value(g0, "nvmlDeviceGetMemoryInfo_v2")
        assert (mem["total"], mem["reserved"], mem["used"]) == (80 * GiB, GiB // 2, GiB + 12 * GiB)
        assert mem["free"] == 80 * GiB - GiB // 2 - 13 * GiB
        assert value(g0, "nvmlDeviceGetUtilizationRates") == {"gpu": 88, "memory": 41}
        assert value(g0, "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)") == 1755
        assert value(g0, "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)") == 2619
        assert value(g0, "nvmlDeviceGetClockInfo(NVML_CLOCK_GRAPHICS)") == 1755
        assert value(g0, "nvmlDeviceGetCurrentClocksEventReasons") == 0x44
        assert decoded(g0, "nvmlDeviceGetCurrentClocksEventReasons") == ["SwPowerCap", "HwThermalSlowdown"]
        assert len(decoded(g0, "nvmlDeviceGetSupportedClocksEventReasons")) == 9
        assert value(g0, "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)") == 83
        assert value(g0, "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)") == 90
        assert value(g0, "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)") == 95
        assert value(g0, "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_GPU_MAX)") == 88
        assert value(g0, "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_MEM_MAX)") == 99
        assert value(g0, "nvmlDeviceGetPowerUsage") == 612_345
        assert value(g0, "nvmlDeviceGetEnforcedPowerLimit") == 700_000
        assert decoded(g0, "nvmlDeviceGetEccMode") == {"current": "Enabled", "pending": "Enabled"}
        ecc = "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_{},NVML_{}_ECC)"
        assert [value(g0, ecc.format(t, c)) for t in ("CORRECTED", "UNCORRECTED") for c in ("VOLATILE", "AGGREGATE")] \
            == [3, 30, 1, 2]
        assert value(g0, "nvmlDeviceGetRetiredPages_v2(NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)") == [
            {"address": 0x2F5A000, "timestamp": 1764460000}]
        assert value(g0, "nvmlDeviceGetRetiredPages_v2(NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)") == [
            {"address": 0x1000, "timestamp": 1764450000}]
        assert decoded(g0, "nvmlDeviceGetRetiredPagesPendingStatus") == "Enabled"
        assert decoded(g0, "nvmlDeviceGetRemappedRows") == {"corrRows": 5, "uncRows": 1, "isPending": 1,
                                                            "failureOccurred": 0}
        assert value(g0, "nvmlDeviceGetPcieReplayCounter") == 17
        assert decoded(g0, "nvmlDeviceGetAccountingMode") == "Enabled"
        assert "XidCriticalError" in decoded(g0, "nvmlDeviceGetSupportedEventTypes")

    def test_processes_and_hints(self, sim_lib: Path, tmp_path: Path) -> None:
        ctx, m = snapshot(full_scenario(), tmp_path, sim_lib)
        doc = m["processes.json"]
        procs = {(p["pid"], p["type"], p["gpu_index"]): p for p in doc["processes"]}
        me = procs[(os.getpid(), "compute", 0)]
        assert me["used_memory_bytes"] == 12 * GiB and me["in_proc"] and me["comm"]
        assert me["mig_uuid"] is None and me["gpu_instance_id"] is None
        assert me["proc_start_ticks"] and me["proc_start_ticks"] > 0
        gfx = procs[(os.getpid(), "graphics", 0)]
        assert gfx["used_memory_bytes"] is None  # NVML_VALUE_NOT_AVAILABLE
        raw = doc["devices"][0]["nvml"]["nvmlDeviceGetComputeRunningProcesses_v3"]["value"]
        assert raw == [{"pid": os.getpid(), "usedGpuMemory": 12 * GiB, "gpuInstanceId": 0xFFFFFFFF,
                        "computeInstanceId": 0xFFFFFFFF}]
        util = doc["devices"][0]["nvml"]["nvmlDeviceGetProcessUtilization"]["value"]
        assert {u["pid"] for u in util} == {os.getpid()} and all(u["smUtil"] == 70 for u in util)
        assert len({u["timeStamp"] for u in util}) == len(util) >= 3
        assert doc["pid_namespace"]["status"] == "host"
        assert sorted(ctx.published["pids"]) == sorted({os.getpid(), os.getppid()})
        assert [d["nvml"]["nvmlDeviceGetPciInfo_v3"]["value"]["busId"] for d in m["devices.json"]["devices"]] == [
            "00000000:3B:00.0", "00000000:BE:00.0"]
        assert set(ctx.published) == {"pids", "gpu_pids"}
        assert sorted(ctx.published["gpu_pids"]) == sorted(ctx.published["pids"])

    def test_mig_devices_and_their_processes(self, sim_lib: Path, tmp_path: Path) -> None:
        _ctx, m = snapshot(full_scenario(), tmp_path, sim_lib)
        g1 = m["devices.json"]["devices"][1]
        assert decoded(g1, "nvmlDeviceGetMigMode") == {"current": "Enabled", "pending": "Enabled"}
        migs = {d["slot"]: d["nvml"] for d in g1["mig_devices"]}
        assert sorted(migs) == [0, 3]
        assert migs[3]["nvmlDeviceGetUUID"]["value"] == "MIG-bbbbbbbb-1111-2222-3333-444444444444"
        assert migs[3]["nvmlDeviceGetGpuInstanceId"]["value"] == 5
        assert migs[3]["nvmlDeviceGetComputeInstanceId"]["value"] == 0
        assert migs[3]["nvmlDeviceGetMemoryInfo_v2"]["value"]["used"] == 3 * GiB
        assert migs[0]["nvmlDeviceGetMemoryInfo_v2"]["value"]["used"] == 0
        # utilization is not available per MIG / on a MIG-mode GPU in NVML: not_supported here
        (p,) = [p for p in m["processes.json"]["processes"] if p["gpu_index"] == 1]
        assert (p["pid"], p["mig_uuid"], p["gpu_instance_id"], p["compute_instance_id"]) == (
            os.getppid(), "MIG-bbbbbbbb-1111-2222-3333-444444444444", 5, 0)

    def test_accounting_keeps_exited_processes(self, sim_lib: Path, tmp_path: Path) -> None:
        _ctx, m = snapshot(full_scenario(), tmp_path, sim_lib)
        recs = {r["pid"]: r for r in m["accounting.json"]["records"]}
        gone = recs[_absent_pid()]
        assert gone["is_running"] is False
        assert gone["max_memory_bytes"] == 6 * GiB
        assert gone["time_ms"] == 40_000
        assert gone["gpu_util_percent"] == 50  # 20 s at 90 %, 20 s at 10 %
        assert gone["key"] == f"0:{gone['pid']}:{gone['start_time_us']}"
        assert recs[os.getpid()]["is_running"] is True


ERRORS = ["NotSupported", "NoPermission", "GpuIsLost", "Unknown"]
REASON = {"NotSupported": "not_supported", "NoPermission": "no_permission", "GpuIsLost": "gpu_is_lost",
          "Unknown": "unknown"}
# (C function to inject into, key it is recorded under in devices.json / processes.json)
CALLS = [
    ("nvmlDeviceGetUUID", "nvmlDeviceGetUUID"),
    ("nvmlDeviceGetName", "nvmlDeviceGetName"),
    ("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v3"),
    ("nvmlDeviceGetComputeMode", "nvmlDeviceGetComputeMode"),
    ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo_v2"),
    ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetUtilizationRates"),
    ("nvmlDeviceGetClockInfo", "nvmlDeviceGetClockInfo(NVML_CLOCK_GRAPHICS)"),  # the first clock read
    ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksEventReasons"),
    ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"),
    ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetPowerUsage"),
    ("nvmlDeviceGetEccMode", "nvmlDeviceGetEccMode"),
    ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetRemappedRows"),
    ("nvmlDeviceGetComputeRunningProcesses", "processes:nvmlDeviceGetComputeRunningProcesses_v3"),
    ("nvmlDeviceGetProcessUtilization", "processes:nvmlDeviceGetProcessUtilization"),
]


class TestErrorsPerCall:
    @pytest.mark.parametrize("error", ERRORS)
    @pytest.mark.parametrize(("func", "key"), CALLS, ids=[c[0] for c in CALLS])
    def test_error_recorded_with_its_reason_and_other_gpu_unharmed(
            self, sim_lib: Path, tmp_path: Path, func: str, key: str, error: str) -> None:
        sc = full_scenario().inject(func, error, gpu=0)
        _ctx, m = snapshot(sc, tmp_path, sim_lib)
        member, _, call = key.rpartition(":")
        doc = m[(member or "devices") + ".json"]
        entry = doc["devices"][0]["nvml"][call]
        assert entry["missing"] == REASON[error]
        assert entry["error"] == f"NVMLError_{error}"
        assert entry["nvml_return"] == getattr(pynvml, f"NVMLError_{error}")().value
        other = m["devices.json"]["devices"][1]["nvml"]
        assert other["nvmlDeviceGetUUID"] == {"value": "GPU-99999999-1111-2222-3333-444444444444"}
        assert "value" in other["nvmlDeviceGetPowerUsage"]
        if error == "GpuIsLost" and member == "":
            # later reads on the lost GPU are not attempted, and say why
            later = m["devices.json"]["devices"][0]["nvml"]["nvmlDeviceGetSupportedEventTypes"]
            assert (later["missing"], later["error"]) == ("gpu_is_lost", "Skipped")

    def test_device_count_failure_is_partial(self, sim_lib: Path, tmp_path: Path) -> None:
        ctx, m = snapshot(Scenario().add_gpu().inject("nvmlDeviceGetCount", "NoPermission"), tmp_path, sim_lib)
        assert m["devices.json"]["system"]["nvmlDeviceGetCount_v2"]["missing"] == "no_permission"
        assert m["devices.json"]["devices"] == []
        assert ctx.partial_reasons == ["nvmlDeviceGetCount_v2: no_permission (NVMLError_NoPermission)"]

    def test_lost_gpu_makes_the_snapshot_partial(self, sim_lib: Path, tmp_path: Path) -> None:
        ctx, m = snapshot(Scenario().add_gpu().add_gpu().lose_gpu(gpu=1, at_s=-1), tmp_path, sim_lib)
        assert m["devices.json"]["devices"][1]["nvml"]["nvmlDeviceGetHandleByIndex_v2"]["missing"] == "gpu_is_lost"
        assert "value" in m["devices.json"]["devices"][0]["nvml"]["nvmlDeviceGetUUID"]
        assert ctx.partial_reasons == ["GPU is lost: GPU 1"]
        assert "value" in m["devices.json"]["devices"][0]["nvml"]["nvmlDeviceGetPciInfo_v3"]
        assert "nvmlDeviceGetPciInfo_v3" not in m["devices.json"]["devices"][1]["nvml"]

    def test_absent_feature_is_not_supported(self, sim_lib: Path, tmp_path: Path) -> None:
        sc = Scenario().add_gpu(ecc=False, remapped_rows=None, accounting=None, pcie_replay_counter=None)
        _ctx, m = snapshot(sc, tmp_path, sim_lib)
        g0 = m["devices.json"]["devices"][0]["nvml"]
        for call in ("nvmlDeviceGetEccMode", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetAccountingMode",
                     "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetMigMode",
                     "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED,NVML_VOLATILE_ECC)"):
            assert g0[call]["missing"] == "not_supported", call

    def test_version_fallbacks(self, sim_lib: Path, tmp_path: Path) -> None:
        """A library without the _v3 process call, memory _v2 or the new clock-reason name: the
        collector records the mismatch and reads the older symbol."""
        sc = (full_scenario()
              .inject("nvmlDeviceGetComputeRunningProcesses_v3", "FunctionNotFound")
              .inject("nvmlDeviceGetMemoryInfo_v2", "FunctionNotFound")
              .inject("nvmlDeviceGetCurrentClocksEventReasons", "FunctionNotFound"))
        _ctx, m = snapshot(sc, tmp_path, sim_lib)
        g0 = m["devices.json"]["devices"][0]["nvml"]
        assert g0["nvmlDeviceGetMemoryInfo_v2"]["missing"] == "library_mismatch"
        assert g0["nvmlDeviceGetMemoryInfo"]["value"]["used"] == 13 * GiB + GiB // 2  # v1 counts reserved
        assert g0["nvmlDeviceGetCurrentClocksEventReasons"]["missing"] == "library_mismatch"
        assert g0["nvmlDeviceGetCurrentClocksThrottleReasons"]["decoded"] == ["SwPowerCap", "HwThermalSlowdown"]
        p0 = m["processes.json"]["devices"][0]["nvml"]
        assert p0["nvmlDeviceGetComputeRunningProcesses_v3"]["error"] == "NVMLLibraryMismatchError"
        assert p0["nvmlDeviceGetComputeRunningProcesses_v2"]["value"][0]["pid"] == os.getpid()


class TestPidNamespace:
    def test_pids_absent_from_proc_are_a_mismatch_and_not_published(self, sim_lib: Path, tmp_path: Path) -> None:
        absent = _absent_pid()
        sc = Scenario().add_gpu().add_process(pid=absent, gpu=0).add_process(pid=absent + 1, gpu=0)
        ctx, m = snapshot(sc, tmp_path, sim_lib)
        ns = m["processes.json"]["pid_namespace"]
        assert ns["status"] == "mismatch" and ns["missing_pids"] == [absent, absent + 1]
        assert ctx.published["pids"] == []
        assert all(not p["in_proc"] and p["comm"] is None for p in m["processes.json"]["processes"])
        assert any("PID namespace mismatch" in n for n in ctx.notes)

    def test_pid_zero_is_a_mismatch_even_with_live_pids(self, sim_lib: Path, tmp_path: Path) -> None:
        sc = Scenario().add_gpu().add_process(pid=0, gpu=0).add_process(pid=os.getpid(), gpu=0)
        ctx, m = snapshot(sc, tmp_path, sim_lib)
        ns = m["processes.json"]["pid_namespace"]
        assert (ns["status"], ns["invalid_pids"]) == ("mismatch", [0])
        assert ctx.published["pids"] == []

    def test_partial(self) -> None:
        ns = assess_pid_namespace([5, 6, 7], {5: True, 6: False, 7: True})
        assert (ns["status"], ns["attributable_pids"], ns["missing_pids"]) == ("partial", [5, 7], [6])
        assert assess_pid_namespace([], {})["status"] == "no_processes"
        assert assess_pid_namespace([0xFFFFFFFF], {})["status"] == "mismatch"


class TestLibrary:
    def test_missing_library_path_is_unavailable(self, tmp_path: Path) -> None:
        ctx = make_ctx(tmp_path / "s", tmp_path / "nope" / "libnvidia-ml.so.1")
        with pytest.raises(SourceUnavailable, match="NVML library not found"):
            NvmlCollector().snapshot(ctx)

    def test_no_driver_on_the_default_search_is_unavailable(self, tmp_path: Path) -> None:
        """A fresh interpreter (pynvml not preloaded) on this GPU-less machine."""
        code = (
            "from forensics.collectors.nvml.nvml import NvmlCollector\n"
            "from tests.support.nvmlsim.fixtures import make_ctx\n"
            "from forensics.errors import SourceUnavailable\n"
            "import pathlib, sys\n"
            "try:\n"
            f"    NvmlCollector().snapshot(make_ctx(pathlib.Path({str(tmp_path / 's')!r}), None))\n"
            "except SourceUnavailable as e:\n"
            "    print('UNAVAILABLE', e); sys.exit(0)\n"
            "print('LOADED'); sys.exit(3)\n"
        )
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "NVMLSIM_SCENARIO")}
        if any(Path(d, "libnvidia-ml.so.1").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")):
            pytest.skip("this machine has a real libnvidia-ml.so.1")
        res = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[3], env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "UNAVAILABLE NVML library not found" in res.stdout

    @pytest.mark.parametrize(("error", "exc"), [("DriverNotLoaded", SourceUnavailable),
                                                 ("LibRmVersionMismatch", SourceUnavailable),
                                                 ("NoPermission", SourcePermissionDenied)])
    def test_init_failures(self, sim_lib: Path, tmp_path: Path, error: str, exc: type[Exception]) -> None:
        with pytest.raises(exc, match=error if exc is SourceUnavailable else "permission denied"):
            snapshot(Scenario().add_gpu().inject("nvmlInit", error), tmp_path, sim_lib)

    def test_cli_capture_with_nvml_library(self, sim_lib: Path, tmp_path: Path) -> None:
        sc = Scenario().add_gpu().add_process(pid=os.getpid(), gpu=0, used_memory_bytes=5 * GiB)
        path = sc.write(tmp_path / "sc.tsv")
        env = subprocess_env(path, sim_lib)
        out = tmp_path / "out"
        out.mkdir()
        res = subprocess.run(
            [sys.executable, "-m", "forensics", "capture", "--only", "nvml", "--nvml-library", str(sim_lib),
             "-o", str(out), "--quiet"],
            cwd=Path(__file__).parents[3], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        top = find_bundle_dir(out)
        procs = json.loads((top / "nvml" / "processes.json").read_text())["processes"]
        assert [(p["pid"], p["used_memory_bytes"]) for p in procs] == [(os.getpid(), 5 * GiB)]
        manifest = json.loads((top / "manifest.json").read_text())
        (rec,) = [c for c in manifest["collectors"] if c["name"] == "nvml"]
        assert rec["status"] == "ok"
