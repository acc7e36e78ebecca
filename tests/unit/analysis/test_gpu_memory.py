"""Ghost GPU memory: `gpu-memory-unattributed` (device memory used minus the listed processes')."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.analysis import analyze_bundles
from tests.support.analysis_bundles import GIB, BundleSpec
from tests.unit.analysis.conftest import Analyze, kinds, names, of_kind


def _ghost(leak: bool) -> BundleSpec:
    b = BundleSpec()
    b.gpu(0)
    b.process(50, "trainer", container=b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"]))

    def tick(s: float) -> tuple[float, int, dict[int, tuple[int, float | None]]]:
        if s < 10:
            return 80, 35 * GIB, {50: (35 * GIB, 80.0)}
        return 0, (35 * GIB if leak else 0), {}

    b.gpu_series(0, range(20), tick)
    return b


def test_memory_left_behind_by_an_exited_process(analyze: Analyze) -> None:
    (f,) = of_kind(analyze(_ghost(leak=True)), "gpu-memory-unattributed")
    assert f["metrics"]["gap_bytes"] == 35 * GIB and f["metrics"]["last_owner_pid"] == 50
    assert "appeared between 14:00:09Z and 14:00:10Z" in f["summary"]
    assert "only a GPU reset frees it" in f["summary"] and f["severity"] == "high"
    assert "trainer" in names(f, "culprit")


def _dstate(b: BundleSpec, processes: list[dict[str, object]]) -> None:
    b.add_json("proc/dstate.json", {"t": b.start + 19, "scanned": 300, "dstate_processes": len(processes),
                                    "processes": processes, "gpu_holders": []})


def test_an_unkillable_process_still_holding_the_gpu(analyze: Analyze) -> None:
    b = _ghost(leak=True)
    _dstate(b, [{"pid": 50, "comm": "trainer", "state": "D", "wchan": "uvm_va_space_destroy",
                 "nvidia_fds": [{"fd": 4, "target": "/dev/nvidiactl"}, {"fd": 5, "target": "/dev/nvidia0"}]},
                {"pid": 61, "comm": "kworker", "state": "D", "wchan": "io_schedule", "nvidia_fds": []}])
    (f,) = of_kind(analyze(b), "gpu-memory-unattributed")
    assert ("in uninterruptible sleep (state D), unkillable, holding NVIDIA device files open: PID 50 (trainer) "
            "waiting in uvm_va_space_destroy on /dev/nvidia0, /dev/nvidiactl (this GPU's minor number was not "
            "read, so which /dev/nvidiaN is its own is not known: every such process of the node is named): "
            "only a GPU reset or a reboot") in f["summary"], f["summary"]
    assert f["metrics"]["dstate_holders"] == "50" and "trainer" in names(f, "culprit")
    assert f["metrics"]["device_file"] is None
    assert "proc/dstate.json" in {e["member"] for e in f["evidence"]}


def _two_ghosts(minors: tuple[int, int] | None) -> BundleSpec:
    """Two GPUs, each left with 30 GiB no listed process holds; ``minors``: their /dev/nvidiaN."""
    b = BundleSpec()
    for i in (0, 1):
        b.gpu(i)
        if minors is not None:
            b.gpus[i]["nvml"]["nvmlDeviceGetMinorNumber"] = {"value": minors[i]}
        b.gpu_series(i, range(20), lambda s: (0, 30 * GIB, {}))
    b.process(50, "trainer", container=b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=1"]))
    b.process(70, "loader", container=b.container("loader", env=["NVIDIA_VISIBLE_DEVICES=all"]))
    _dstate(b, [{"pid": 50, "comm": "trainer", "state": "D", "wchan": "uvm_va_space_destroy",
                 "nvidia_fds": [{"fd": 4, "target": "/dev/nvidiactl"}, {"fd": 5, "target": "/dev/nvidia-uvm"},
                                {"fd": 6, "target": "/dev/nvidia0"}]},
                {"pid": 70, "comm": "loader", "state": "D", "wchan": "os_acquire_mutex",
                 "nvidia_fds": [{"fd": 3, "target": "/dev/nvidiactl"}, {"fd": 4, "target": "/dev/nvidia-uvm"}]}])
    return b


def test_a_stuck_process_is_named_on_the_gpu_whose_device_file_it_holds(analyze: Analyze) -> None:
    # the driver's minor numbers need not follow NVML's (PCI) order: GPU 0 is /dev/nvidia1 here
    found = {f["subjects"][0]["name"]: f for f in of_kind(analyze(_two_ghosts((1, 0))), "gpu-memory-unattributed")}
    g0, g1 = found["GPU 0"], found["GPU 1"]
    assert (g0["metrics"]["device_file"], g1["metrics"]["device_file"]) == ("/dev/nvidia1", "/dev/nvidia0")
    # PID 50 holds /dev/nvidia0: GPU 1's file, not GPU 0's; PID 70 holds no GPU's own file: on both
    assert g1["metrics"]["dstate_holders"] == "50, 70" and g0["metrics"]["dstate_holders"] == "70"
    assert "PID 50 (trainer) waiting in uvm_va_space_destroy on /dev/nvidia0, this GPU's device file" in g1["summary"]
    assert "PID 50" not in g0["summary"] and "trainer" not in names(g0, "culprit")
    assert ("PID 70 (loader) waiting in os_acquire_mutex on /dev/nvidia-uvm, /dev/nvidiactl (no GPU's own "
            "device file: which GPU is not known)") in g0["summary"]
    assert "minor number was not read" not in g0["summary"] + g1["summary"]
    (minor,) = [e for e in g1["evidence"] if e["locator"].endswith("nvmlDeviceGetMinorNumber/value")]
    assert minor["member"] == "nvml/devices.json" and minor["excerpt"] == "0"


def test_no_stuck_process_on_this_gpus_device_file(analyze: Analyze) -> None:
    b = _two_ghosts((0, 1))
    _dstate(b, [{"pid": 50, "comm": "trainer", "state": "D", "wchan": "uvm_va_space_destroy",
                 "nvidia_fds": [{"fd": 6, "target": "/dev/nvidia0"}]}])
    found = {f["subjects"][0]["name"]: f for f in of_kind(analyze(b), "gpu-memory-unattributed")}
    assert found["GPU 0"]["metrics"]["dstate_holders"] == "50"
    assert found["GPU 1"]["metrics"]["dstate_holders"] is None
    assert "no process in uninterruptible sleep holds /dev/nvidia1 (this GPU's device file) open" in found["GPU 1"]["summary"]


def test_without_minor_numbers_every_stuck_process_is_named_on_every_gpu(analyze: Analyze) -> None:
    for f in of_kind(analyze(_two_ghosts(None)), "gpu-memory-unattributed"):
        assert f["metrics"]["dstate_holders"] == "50, 70"
        assert "this GPU's minor number was not read" in f["summary"]


def test_no_holder_in_d_state_is_said_when_the_scan_found_none(analyze: Analyze) -> None:
    b = _ghost(leak=True)
    _dstate(b, [{"pid": 61, "comm": "kworker", "state": "D", "wchan": "io_schedule", "nvidia_fds": []}])
    (f,) = of_kind(analyze(b), "gpu-memory-unattributed")
    assert "no process in uninterruptible sleep holds /dev/nvidia* open; only a GPU reset frees it" in f["summary"]
    assert f["metrics"]["dstate_holders"] is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                            st.sampled_from(["pid", "comm", "wchan", "nvidia_fds", "target", "processes", "t", "x"]),
                            inner, max_size=5), max_leaves=14))
def test_garbage_dstate_never_raises(doc: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = _ghost(leak=True)
        b.add_json("proc/dstate.json", doc)
        out = analyze_bundles([b.write(Path(tmp))])
        assert not [lim for lim in out["limitations"] if "could not be read" in lim or lim.startswith("rule ")]


def test_memory_that_every_process_accounts_for_is_no_finding(analyze: Analyze) -> None:
    doc = analyze(_ghost(leak=False))
    assert "gpu-memory-unattributed" not in kinds(doc)
    assert any(r["kind"] == "gpu-memory-unattributed" for r in doc["ruled_out"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(used=st.lists(st.one_of(st.none(), st.integers(-(1 << 40), 1 << 40)), min_size=1, max_size=6),
       held=st.one_of(st.none(), st.integers(-(1 << 40), 1 << 40)))
def test_garbage_memory_readings_never_raise(used: list[int | None], held: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = BundleSpec()
        b.gpu(0)
        for i, u in enumerate(used):
            b.gpu_tick(0, b.start + i, 10, u if u is not None else 0, procs={7: (held, 5.0)})  # type: ignore[dict-item]
        doc = analyze_bundles([b.write(Path(tmp))])
        assert not [lim for lim in doc["limitations"] if "could not be read" in lim or lim.startswith("rule ")]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(minor=st.recursive(st.none() | st.booleans() | st.integers(-5, 1 << 40) | st.text(max_size=6),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                          max_leaves=6))
def test_garbage_minor_numbers_never_raise(minor: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        b = _two_ghosts((0, 1))
        b.gpus[0]["nvml"]["nvmlDeviceGetMinorNumber"] = minor if isinstance(minor, dict) else {"value": minor}
        out = analyze_bundles([b.write(Path(tmp))])
        assert not [lim for lim in out["limitations"] if "could not be read" in lim or lim.startswith("rule ")]
        assert len([f for f in out["findings"] if f["kind"] == "gpu-memory-unattributed"]) == 2
