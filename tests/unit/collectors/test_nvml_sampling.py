"""The nvml collector under the lead's runner: sampling ticks, events, a lost GPU, hanging calls."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.nvml.nvml import NvmlCollector
from tests.support.nvmlsim import Scenario, activate
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib
nvml_clean = nvf.nvml_clean
sleepers = nvf.sleepers
pytestmark = [pytest.mark.usefixtures("nvml_clean"), pytest.mark.slow]

GiB = 1 << 30




def capture(sc: Scenario, tmp_path: Path, lib: Path, collector: NvmlCollector | None = None,
            **options: Any) -> tuple[dict[str, Any], dict[str, Any], float]:
    activate(sc.write(tmp_path / "scenario.tsv"))
    out = tmp_path / "out"
    out.mkdir()
    started = time.monotonic()
    res = run_capture(CaptureOptions(nvml_library=str(lib), **options), out, collectors=[collector or NvmlCollector()])
    elapsed = time.monotonic() - started
    (rec,) = res.manifest["collectors"]
    top = nvf.find_bundle_dir(out)
    return rec, nvf.read_members(top), elapsed


def lines(members: dict[str, Any], kind: str, gpu: int | None = None) -> list[dict[str, Any]]:
    return [x for x in members.get("samples.jsonl", []) if x["kind"] == kind
            and (gpu is None or x.get("gpu_index") == gpu)]


class TestSamplingWindow:
    def test_ticks_processes_events_and_a_lost_gpu(self, sim_lib: Path, tmp_path: Path, sleepers: list[int]) -> None:
        a, b = sleepers
        sc = (Scenario()
              .add_gpu(gpu_util=[(-10, 30)])
              .add_gpu(gpu_util=[(-10, 10), (2.0, 95)], accounting=True)
              .add_process(pid=a, gpu=0, used_memory_bytes=20 * GiB, sm_util=[(-10, 40), (1.5, 80)], mem_util=30)
              # appears after the first tick and exits before the last
              .add_process(pid=b, gpu=1, used_memory_bytes=[(1.6, 4 * GiB), (2.2, 9 * GiB)], sm_util=60,
                           start_s=1.6, end_s=2.9)
              .add_xid(gpu=0, at_s=3.0, code=79)
              .lose_gpu(gpu=0, at_s=3.3))
        rec, m, _ = capture(sc, tmp_path, sim_lib, duration_s=4.0, interval_s=1.0)
        assert rec["status"] == "ok", rec
        assert rec["sampling"]["ticks"] >= 4
        g0, g1 = lines(m, "device", 0), lines(m, "device", 1)
        assert len(g0) == len(g1) == rec["sampling"]["ticks"]

        # process b appears and exits between ticks; a is there until GPU 0 is lost
        seen_b = [any(p["pid"] == b for p in x["processes"]) for x in g1]
        assert not seen_b[0] and not seen_b[-1] and any(seen_b)
        assert all(p["usedGpuMemory"] in (4 * GiB, 9 * GiB) for x in g1 for p in x["processes"])
        assert [p["pid"] for p in g0[0]["processes"]] == [a]

        # device utilization follows the scenario
        util = [x["nvml"]["nvmlDeviceGetUtilizationRates"]["value"]["gpu"] for x in g1]
        assert util[0] == 10 and util[-1] == 95

        # per-process utilization: lastSeenTimeStamp carried across ticks, no sample twice
        samples = [(s["pid"], s["timeStamp"]) for x in g0 + g1
                   for s in x["nvml"]["nvmlDeviceGetProcessUtilization"].get("value", [])]
        assert samples and len(samples) == len(set(samples))
        last_seen = [x["nvml"]["nvmlDeviceGetProcessUtilization"]["lastSeenTimeStamp"] for x in g0]
        assert last_seen[0] == 0 and last_seen[1] > 0 and last_seen == sorted(last_seen)
        sm_a = [s["smUtil"] for x in g0 for s in x["nvml"]["nvmlDeviceGetProcessUtilization"].get("value", [])]
        assert 40 in sm_a and 80 in sm_a

        # GPU 0 lost mid-capture: the last tick says so, GPU 1 carries on
        last0 = g0[-1]["nvml"]
        assert last0["nvmlDeviceGetUtilizationRates"]["error"] == "NVMLError_GpuIsLost"
        assert last0["nvmlDeviceGetPowerUsage"]["missing"] == "gpu_is_lost"
        assert all("value" in x["nvml"]["nvmlDeviceGetPowerUsage"] for x in g1)
        assert any("GPU 0 lost" in n for n in rec["notes"])

        # the Xid arrived through nvmlEventSetWait, registered at the first tick
        events = m["events.jsonl"]
        regs = [e for e in events if e["kind"] == "registration"]
        assert [r["mask_decoded"] for r in regs][0] == ["SingleBitEccError", "DoubleBitEccError", "XidCriticalError"]
        (xid,) = [e for e in events if e["kind"] == "event"]
        assert (xid["gpu_index"], xid["xid"], xid["eventType_decoded"]) == (0, 79, ["XidCriticalError"])
        assert xid["uuid"] == sc.gpu_uuid(0) and xid["xid_description"] == "GPU has fallen off the bus"

        # accounting at the end of the window remembers the exited process
        acc = {r["pid"]: r for r in m["accounting_end.json"]["records"]}
        assert acc[b]["is_running"] is False and acc[b]["max_memory_bytes"] == 9 * GiB
        # the snapshot (before b started) did not know it
        assert b not in {r["pid"] for r in m["accounting.json"]["records"]}


class TestDeadlines:
    def test_hanging_snapshot_call_is_cut_and_named(self, sim_lib: Path, tmp_path: Path, sleepers: list[int]) -> None:
        sc = (Scenario().add_gpu().add_gpu()
              .add_process(pid=sleepers[0], gpu=0)
              .hang("nvmlDeviceGetTemperature", seconds=60, gpu=1))
        collector = NvmlCollector()
        collector.timeout_s = 3.0
        rec, m, elapsed = capture(sc, tmp_path, sim_lib, collector=collector)
        assert elapsed < 10
        assert rec["status"] == "partial"
        assert "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU) on GPU 1 did not return" in rec["error"]
        doc = m["devices.json"]
        assert doc["complete"] is False
        assert "value" in doc["devices"][0]["nvml"]["nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"]
        assert doc["devices"][1]["nvml"]["nvmlDeviceGetUUID"]["value"] == sc.gpu_uuid(1)
        assert doc["devices"][-1]["timed_out"]["missing"] == "timed_out"
        assert "processes.json" in m  # written from what was read

    def test_one_hung_call_ends_the_wait_long_before_the_deadline(self, sim_lib: Path, tmp_path: Path,
                                                                  sleepers: list[int]) -> None:
        """A wedged GPU (Xid 79/45) hangs every later call: waiting out a 30 s deadline would only
        delay the collectors after NVML, so one call hung past nvml.call_timeout_s is enough."""
        sc = (Scenario().add_gpu().add_gpu()
              .add_process(pid=sleepers[0], gpu=0)
              .hang("nvmlDeviceGetTemperature", seconds=60, gpu=1))
        collector = NvmlCollector()
        collector.timeout_s = 30.0
        rec, m, elapsed = capture(sc, tmp_path, sim_lib, collector=collector,
                                  extra={"nvml.call_timeout_s": "1.5"})
        assert elapsed < 10, elapsed  # not the 30 s deadline
        assert rec["status"] == "partial"
        assert "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU) on GPU 1 did not return" in rec["error"]
        assert m["devices.json"]["devices"][1]["nvml"]["nvmlDeviceGetUUID"]["value"] == sc.gpu_uuid(1)

    def test_hanging_init_fails_the_collector_not_the_capture(self, sim_lib: Path, tmp_path: Path) -> None:
        sc = Scenario().add_gpu().hang("nvmlInit", seconds=60)
        collector = NvmlCollector()
        collector.timeout_s = 2.5
        rec, m, elapsed = capture(sc, tmp_path, sim_lib, collector=collector)
        assert elapsed < 8
        assert rec["status"] == "failed"
        assert "nvmlInit did not return" in rec["error"]
        assert m == {}

    def test_hanging_sampling_call_stops_sampling(self, sim_lib: Path, tmp_path: Path) -> None:
        sc = Scenario().add_gpu().hang("nvmlDeviceGetPowerUsage", seconds=60, gpu=0, from_s=1.5)
        rec, m, elapsed = capture(sc, tmp_path, sim_lib, duration_s=3.0, interval_s=1.0, timeout_s=20.0)
        assert elapsed < 15
        assert rec["status"] == "partial"
        assert "nvmlDeviceGetPowerUsage on GPU 0 did not return" in rec["error"]
        (timeout,) = lines(m, "timeout")
        assert timeout["missing"] == "timed_out"
        good = lines(m, "device", 0)
        assert good and all("value" in x["nvml"]["nvmlDeviceGetPowerUsage"] for x in good)
        assert all(x["tick"] < timeout["tick"] for x in good)
        assert json.dumps(m["devices.json"])  # the snapshot (before the hang) is whole
        assert m["devices.json"]["complete"] is True
