"""The simulated NVML itself: builder, scenario writer, and the NVML semantics tests rely on."""

from __future__ import annotations

import ctypes
import tempfile
import time
from pathlib import Path

import pynvml
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.nvmlsim import Scenario, activate, build_library
from tests.support.nvmlsim import fixtures as nvf
from tests.support.nvmlsim.build import LIBRARY_NAME

sim_lib = nvf.sim_lib
nvml_clean = nvf.nvml_clean
pytestmark = pytest.mark.usefixtures("nvml_clean")


def _init(lib: Path, sc: Scenario, tmp: Path) -> None:
    activate(sc.write(tmp / "sc.tsv"))
    with pynvml.libLoadLock:
        pynvml.nvmlLib = ctypes.CDLL(str(lib))
        pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlInit()


class TestBuild:
    def test_cached_by_source_hash(self, sim_lib: Path) -> None:
        before = sim_lib.stat().st_mtime_ns
        again = build_library(sim_lib.parent)
        assert again == sim_lib and again.name == LIBRARY_NAME
        assert again.stat().st_mtime_ns == before  # not rebuilt

    def test_rebuilt_when_stamp_differs(self, sim_lib: Path, tmp_path: Path) -> None:
        lib = build_library(tmp_path)
        (tmp_path / (LIBRARY_NAME + ".sha256")).write_text("stale\n")
        first = lib.stat().st_mtime_ns
        time.sleep(0.01)
        assert build_library(tmp_path).stat().st_mtime_ns != first

    def test_exports_only_nvml_symbols(self, sim_lib: Path) -> None:
        lib = ctypes.CDLL(str(sim_lib))
        assert hasattr(lib, "nvmlDeviceGetComputeRunningProcesses_v3")
        assert not hasattr(lib, "load_scenario")  # helpers stay private


class TestScenario:
    def test_rejects_strings_that_break_the_format(self) -> None:
        with pytest.raises(ValueError):
            Scenario().add_gpu(name="bad\tname")

    def test_unknown_gpu(self) -> None:
        with pytest.raises(ValueError, match="no GPU 3"):
            Scenario().add_gpu().add_process(pid=1, gpu=3)

    def test_bad_file_makes_init_fail(self, sim_lib: Path, tmp_path: Path) -> None:
        bad = tmp_path / "bad.tsv"
        bad.write_text("nvmlsim\t1\nwhatever\tx=1\n")
        activate(bad)
        with pynvml.libLoadLock:
            pynvml.nvmlLib = ctypes.CDLL(str(sim_lib))
        with pytest.raises(pynvml.NVMLError_Unknown):
            pynvml.nvmlInit()

    def test_no_scenario_is_driver_not_loaded(self, sim_lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("NVMLSIM_SCENARIO", raising=False)
        with pynvml.libLoadLock:
            pynvml.nvmlLib = ctypes.CDLL(str(sim_lib))
        with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
            pynvml.nvmlInit()


class TestSemantics:
    def test_memory_v2_checks_the_struct_version(self, sim_lib: Path, tmp_path: Path) -> None:
        _init(sim_lib, Scenario().add_gpu(), tmp_path)
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
            pynvml.nvmlDeviceGetMemoryInfo(h, version=0x01000028)
        assert pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).version == pynvml.nvmlMemory_v2

    def test_process_utilization_honours_last_seen(self, sim_lib: Path, tmp_path: Path) -> None:
        sc = Scenario(util_period_s=0.2, util_buffer_samples=5).add_gpu().add_process(
            pid=4242, gpu=0, sm_util=[(-10, 30)])
        _init(sim_lib, sc, tmp_path)
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        first = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
        assert 4 <= len(first) <= 5 and all(s.pid == 4242 and s.smUtil == 30 for s in first)
        newest = max(s.timeStamp for s in first)
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetProcessUtilization(h, newest + 10**7)  # nothing newer than the future
        time.sleep(0.45)
        later = pynvml.nvmlDeviceGetProcessUtilization(h, newest)
        assert later and all(s.timeStamp > newest for s in later)

    def test_lost_gpu_answers_gpu_is_lost_everywhere(self, sim_lib: Path, tmp_path: Path) -> None:
        _init(sim_lib, Scenario().add_gpu().add_gpu().lose_gpu(gpu=0, at_s=-1), tmp_path)
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(1)).startswith("GPU-")

    def test_injected_hang_sleeps_then_answers(self, sim_lib: Path, tmp_path: Path) -> None:
        _init(sim_lib, Scenario().add_gpu(power_mw=1234).hang("nvmlDeviceGetPowerUsage", seconds=0.3), tmp_path)
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        t0 = time.monotonic()
        assert pynvml.nvmlDeviceGetPowerUsage(h) == 1234
        assert time.monotonic() - t0 >= 0.3

    def test_events_only_after_registration(self, sim_lib: Path, tmp_path: Path) -> None:
        sc = Scenario().add_gpu().add_xid(gpu=0, at_s=-0.5, code=13).add_xid(gpu=0, at_s=0.3, code=31)
        _init(sim_lib, sc, tmp_path)
        es = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, es)
        data = pynvml.nvmlEventSetWait(es, 2000)
        assert (data.eventType, data.eventData) == (8, 31)
        with pytest.raises(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait(es, 20)
        pynvml.nvmlEventSetFree(es)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), 1 << 40, pynvml.nvmlEventSetCreate())


PIDS = st.integers(min_value=5_000_000, max_value=5_000_100)  # above any pid_max: never live


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpus=st.integers(1, 3),
       procs=st.lists(st.tuples(PIDS, st.integers(0, 2), st.integers(0, 1 << 40),
                                st.sampled_from(["compute", "graphics", "mps"])), max_size=12))
def test_collector_reports_every_process_exactly(sim_lib: Path, gpus: int,
                                                 procs: list[tuple[int, int, int, str]]) -> None:
    """Whatever the scenario, processes.json lists each simulated process with its memory."""
    sc = Scenario()
    for _ in range(gpus):
        sc.add_gpu()
    for pid, gpu, mem, kind in procs:
        sc.add_process(pid=pid, gpu=gpu % gpus, used_memory_bytes=mem, kind=kind)
    nvf.shutdown_all()
    with tempfile.TemporaryDirectory() as tmp:
        _ctx, m = nvf.snapshot(sc, Path(tmp), sim_lib)
    got = sorted((p["pid"], p["gpu_index"], p["used_memory_bytes"], p["type"]) for p in m["processes.json"]["processes"])
    want = sorted((pid, gpu % gpus, mem, kind) for pid, gpu, mem, kind in procs)
    assert got == want
    expected = "no_processes" if not procs else "mismatch"
    assert m["processes.json"]["pid_namespace"]["status"] == expected
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
