"""Hardware and driver faults: the Xid catalog, bursts (cause -> consequences), GPUs that fell off the
bus in every form, GPUs NVML did not enumerate, memory health and the driver's recovery action; each
with a case that must fire, one that must not, and garbage that must never raise."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis import analyze_bundles
from forensics.parsing.nvrm import BusLossJoiner, fell_off_bus
from forensics.parsing.xid_catalog import CATALOG_URL, caused_by, xid_info
from tests.support.analysis_bundles import GIB, T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind

XID79 = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _v(value: Any) -> dict[str, Any]:
    return {"value": value}


class TestCatalog:
    def test_every_code_of_the_ampere_catalog_is_there_with_its_action(self) -> None:
        for code in range(1, 173):
            assert xid_info(code).known, code
        x79 = xid_info(79)
        assert (x79.mnemonic, x79.immediate, x79.investigatory) == (
            "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "CONTACT_SUPPORT")
        assert x79.source == CATALOG_URL and x79.action.startswith("RESTART_BM: restart the bare-metal node")
        assert xid_info(48).immediate == "WORKFLOW_XID_48" and xid_info(95).immediate == "RESET_GPU"

    def test_a_code_outside_the_catalog_is_not_invented(self) -> None:
        info = xid_info(9999)
        assert not info.known and info.description == "not in NVIDIA's Xid catalog" and info.immediate == ""

    def test_links_come_from_the_catalog_and_only_where_it_says(self) -> None:
        assert caused_by(45, {79}) is not None  # "preemptive cleanup, due to previous errors"
        assert caused_by(45, set()) is None and caused_by(45, {45}) is None  # alone: a cause
        assert caused_by(63, {48}) is not None and caused_by(63, {13}) is None
        assert caused_by(171, {48}) is not None


class TestBursts:
    def _burst(self) -> BundleSpec:
        b = BundleSpec()
        b.gpu(0)
        b.kmsg(T0 + 5, "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python, An uncorrectable double bit error")
        b.kmsg(T0 + 6, "NVRM: Xid (PCI:0000:3b:00): 45, pid=4242, name=python, Ch 00000010")
        b.kmsg(T0 + 9, "NVRM: Xid (PCI:0000:3b:00): 45, pid=4343, name=worker, Ch 00000011")
        b.kmsg(T0 + 10, "NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
                        "marked for remapping, reset gpu to activate.")
        b.kmsg(T0 + 11, "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
                        "(GPU Reset Required)")
        return b

    def test_first_xid_is_the_cause_and_the_rest_are_its_consequences(self, analyze: Analyze) -> None:
        (f,) = of_kind(analyze(self._burst()), "gpu-xid-fault")
        m = f["metrics"]
        assert m["xid"] == 48 and m["action"] == "WORKFLOW_XID_48" and f["severity"] == "critical"
        assert m["consequences"] == "Xid 45 (2x), Xid 63 (1x), Xid 154 (1x)"
        assert "Preemptive cleanup" in m["consequence_links"] and "ECC memory errors" in m["consequence_links"]
        assert m["recovery_action"] == "GPU Reset Required (0x1)" and "GPU Reset Required" in f["summary"]
        assert len(f["evidence"]) == 5

    def test_each_pid_gets_its_own_records_time(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.kmsg(T0 + 5, "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics Exception")
        b.kmsg(T0 + 20, "NVRM: Xid (PCI:0000:3b:00): 13, pid=4343, name=worker, Graphics Exception")
        (f,) = of_kind(analyze(b), "gpu-xid-fault")
        times = {s["id"]: s["time"] for s in f["subjects"] if s["type"] == "process"}
        assert times == {"4242": "2025-11-29T14:00:05Z", "4343": "2025-11-29T14:00:20Z"}, f["subjects"]
        assert "4242 (python) at 14:00:05Z" in f["summary"] and "4343 (worker) at 14:00:20Z" in f["summary"]

    def test_victims_harm_is_worded_at_their_own_time(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.process(4242, "python", container=b.container("a", env=["NVIDIA_VISIBLE_DEVICES=0"]))
        b.process(4343, "worker", container=b.container("b", env=["NVIDIA_VISIBLE_DEVICES=0"]))
        b.gpu_series(0, range(0, 60), lambda s: (50, 2 * GIB, {4242: (GIB, 25.0), 4343: (GIB, 25.0)}))
        b.kmsg(T0 + 5, "NVRM: Xid (PCI:0000:3b:00): 46, pid=4242, name=python, GPU stopped processing")
        b.kmsg(T0 + 50, "NVRM: Xid (PCI:0000:3b:00): 46, pid=4343, name=worker, GPU stopped processing")
        doc = analyze(b)
        impact = doc["verdict"]["impact"]
        assert "a: hit by Xid 46 on GPU 0 at 14:00:05Z" in impact, impact
        assert "b: hit by Xid 46 on GPU 0 at 14:00:50Z" in impact, impact

    def test_a_lone_xid_45_is_its_own_cause(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.kmsg(T0 + 5, "NVRM: Xid (PCI:0000:3b:00): 45, pid=4242, name=python, Ch 00000010")
        (f,) = of_kind(analyze(b), "gpu-xid-fault")
        assert f["metrics"]["xid"] == 45 and f["metrics"]["consequences"] is None

    def test_xids_further_apart_than_the_burst_window_are_separate_causes(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.kmsg(T0 + 5, "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python, DBE")
        b.kmsg(T0 + 50, "NVRM: Xid (PCI:0000:3b:00): 45, pid=4242, name=python, Ch 00000010")
        assert sorted(f["metrics"]["xid"] for f in of_kind(analyze(b), "gpu-xid-fault")) == [45, 48]


class TestFellOffTheBus:
    def test_message_forms_from_public_driver_logs(self) -> None:
        assert fell_off_bus("NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.") == "0000:a1:00.0"
        assert fell_off_bus("NVRM: GPU at 0000:01:00.0 has fallen off the bus.") == "0000:01:00.0"
        one = ("NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has"
               "\\x0aNVRM: fallen off the bus and is not responding to commands.")
        assert fell_off_bus(one) == "0000:b3:00.0"
        assert fell_off_bus(XID79.format(bus="86")) is None  # an Xid: parsed as an Xid
        assert fell_off_bus("NVRM: GPU at PCI:0000:a1:00: GPU-979426f2-893a-7cbb-c4cf-81472f89a462") is None

    def test_continuation_records_are_joined_and_stale_ones_dropped(self) -> None:
        j = BusLossJoiner()
        assert j.feed(0, "NVRM: The NVIDIA GPU 0000:b3:00.0", "a") is None
        assert j.feed(10, "NVRM: (PCI ID: 10de:26b5) installed in this system has", "b") is None
        assert j.feed(20, "NVRM: fallen off the bus and is not responding to commands.", "c") == (
            "0000:b3:00.0", ["a", "b", "c"])
        j.feed(0, "NVRM: The NVIDIA GPU 0000:b3:00.0", "a")
        assert j.feed(10_000_000, "NVRM: fallen off the bus and is not responding to commands.", "c") is None

    def test_one_finding_per_gpu_with_every_witness(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpu(1)  # PCI 0000:86:00.0
        b.gpu_tick(1, T0 + 3, 50, GIB)
        b.kmsg(T0 + 7, XID79.format(bus="86"))
        b.kmsg(T0 + 7.1, "NVRM: GPU 0000:86:00.0: GPU has fallen off the bus.")
        b.kmsg(T0 + 7.2, "NVRM: Xid (PCI:0000:86:00): 45, pid=4242, name=python, Ch 00000010")
        b.nvml_xid_event(1, T0 + 7.3, 79)
        lost = {"missing": "gpu_is_lost", "error": "NVMLError_GpuIsLost", "nvml_return": 15, "message": "GPU is lost"}
        for s in (8, 9, 10):
            b.add_jsonl("nvml/samples.jsonl", {"kind": "device", "tick": s, "t": T0 + s, "gpu_index": 1,
                                               "uuid": b.gpus[1]["nvml"]["nvmlDeviceGetUUID"]["value"],
                                               "nvml": {"nvmlDeviceGetUtilizationRates": lost}, "processes": []})
        doc = analyze(b)
        (f,) = of_kind(doc, "gpu-lost")
        assert f["severity"] == "critical" and "GPU 1" in names(f, "witness", "gpu")
        assert f["metrics"]["witness_sources"] == "kernel-nvrm,kernel-xid,nvml,nvml-event"
        assert "Xid 45 (1x)" in f["metrics"]["consequences"] and "gpu-xid-fault" not in kinds(doc)
        assert "GpuIsLost from 14:00:08Z to 14:00:10Z" in f["summary"]
        assert {e["member"] for e in f["evidence"]} == {"kernel/kmsg.txt", "nvml/events.jsonl", "nvml/samples.jsonl"}

    def test_split_records_without_an_xid_number(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.kmsg(T0 + 7, "NVRM: The NVIDIA GPU 0000:3b:00.0")
        b.kmsg(T0 + 7, "NVRM: (PCI ID: 10de:2330) installed in this system has")
        b.kmsg(T0 + 7, "NVRM: fallen off the bus and is not responding to commands.")
        (f,) = of_kind(analyze(b), "gpu-lost")
        assert "GPU 0" in names(f, "witness", "gpu") and len(f["evidence"]) == 3
        assert f["metrics"]["witness_sources"] == "kernel-nvrm"

    def test_an_unenumerated_address_is_a_vanished_gpu_never_pinned_on_others(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        c = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
        b.process(4242, "python", container=c)
        b.gpu_series(0, range(0, 30), lambda s: (90, 10 * GIB, {4242: (10 * GIB, 90.0)}))
        b.kmsg(T0 + 7, XID79.format(bus="c1").replace("pid='<unknown>', name=<unknown>", "pid=4242, name=python"))
        b.kmsg(T0 + 9, XID79.format(bus="c2"))
        doc = analyze(b)
        found = of_kind(doc, "gpu-lost")
        assert sorted(f["metrics"]["pci_bus_id"] for f in found) == ["0000:c1:00.0", "0000:c2:00.0"]
        for f in found:
            assert f["metrics"]["gpu_enumerated"] == 0 and "did not enumerate" in f["summary"]
            assert not {"trainer", "GPU 0"} & {s["name"] for s in f["subjects"]}, f["subjects"]
        (c1,) = [f for f in found if f["metrics"]["pci_bus_id"] == "0000:c1:00.0"]
        (proc,) = [s for s in c1["subjects"] if s["type"] == "process"]
        assert proc["id"] == "4242" and proc["role"] == "victim" and proc["name"] == "python"

    def test_no_witness_no_finding(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.kmsg(T0 + 7, "NVRM: GPU at PCI:0000:3b:00: GPU-979426f2-893a-7cbb-c4cf-81472f89a462")
        b.gpu_tick(0, T0 + 3, 50, GIB)
        assert "gpu-lost" not in kinds(analyze(b))


def _health(b: BundleSpec, index: int, *, pending: int = 0, failure: int = 0, unc_volatile: int = 0,
            unc_rows: int = 0, recovery: int | None = None) -> dict[str, Any]:
    nvml = {
        "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED,NVML_VOLATILE_ECC)": _v(unc_volatile),
        "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED,NVML_AGGREGATE_ECC)": _v(unc_volatile),
        "nvmlDeviceGetRemappedRows": {"value": [0, unc_rows, pending, failure],
                                      "decoded": {"corrRows": 0, "uncRows": unc_rows, "isPending": pending,
                                                  "failureOccurred": failure}},
        "nvmlDeviceGetPcieReplayCounter": _v(0),
    }
    if recovery is not None:
        nvml["nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"] = _v(recovery)
    return nvml


class TestMemoryHealth:
    def test_a_remap_pending_that_appeared_during_the_window_needs_a_reset(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpus[0]["nvml"].update(_health(b, 0))
        b.add_json("nvml/health_end.json", {"t": T0 + 60, "devices": [
            {"index": 0, "nvml": _health(b, 0, pending=1, unc_volatile=2, unc_rows=1)}]})
        (f,) = of_kind(analyze(b), "gpu-memory-health")
        assert f["metrics"]["verdict"] == "reset-needed" and f["severity"] == "critical"
        assert "remap_pending 0 -> 1" in f["metrics"]["moved"] and "GPU 0 needs a reset" in f["summary"]
        assert {e["member"] for e in f["evidence"]} == {"nvml/devices.json", "nvml/health_end.json"}

    def test_a_failed_row_remapping_is_an_rma_candidate(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpus[0]["nvml"].update(_health(b, 0, failure=1, unc_rows=3))
        (f,) = of_kind(analyze(b), "gpu-memory-health")
        assert f["metrics"]["verdict"] == "rma-candidate" and f["severity"] == "critical"
        assert "read once" in f["summary"]

    def test_clean_counters_are_no_finding(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpus[0]["nvml"].update(_health(b, 0))
        b.add_json("nvml/health_end.json", {"t": T0 + 60, "devices": [{"index": 0, "nvml": _health(b, 0)}]})
        doc = analyze(b)
        assert "gpu-memory-health" not in kinds(doc) and "gpu-recovery-action" not in kinds(doc)
        (r,) = [r for r in doc["ruled_out"] if r["kind"] == "gpu-memory-health"]
        assert "for the 1 GPU(s) of" in r["statement"] and "at the start and end of the window" in r["statement"]

    def test_the_drivers_recovery_action_decoded(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        b.gpus[0]["nvml"].update(_health(b, 0, recovery=2))
        (f,) = of_kind(analyze(b), "gpu-recovery-action")
        assert f["severity"] == "critical" and "node reboot" in f["summary"]


_GARBAGE_LINES = st.lists(st.one_of(
    st.text(max_size=120),
    st.builds(lambda bus, code, rest: f"NVRM: Xid (PCI:{bus}): {code}, {rest}",
              st.text(max_size=14), st.integers(-5, 100000), st.text(max_size=40)),
    st.sampled_from(["NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: fallen off the bus and is not responding",
                     "NVRM: GPU zz:00.0: GPU has fallen off the bus.", "NVRM: GPU at 0000:01:00.0 has fallen off the bus."]),
), max_size=8)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_GARBAGE_LINES, health=_JSON, remap=_JSON)
def test_garbage_fault_inputs_never_raise(lines: list[str], health: Any, remap: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = BundleSpec()
        b.gpu(0)
        b.gpus[0]["nvml"]["nvmlDeviceGetRemappedRows"] = remap
        for i, text in enumerate(lines):
            b.kmsg(T0 + i, text.replace("\n", " "))
        b.add_json("nvml/health_end.json", health)
        b.add_jsonl("nvml/samples.jsonl", {"kind": "device", "t": T0, "gpu_index": 0, "nvml": health})
        doc = analyze_bundles([b.write(Path(tmp))])
        assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
        json.dumps(doc)
