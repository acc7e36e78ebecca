"""scripts/device-check, as a dry run against the simulated NVML (no GPU on this machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.nvmlsim import Scenario
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def workload() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "120"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def run_check(sim_lib: Path, tmp_path: Path, sc: Scenario, pid: int) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NVMLSIM_SCENARIO=str(sc.write(tmp_path / "sc.tsv")),
               DEVICE_CHECK_NVML_LIBRARY=str(sim_lib), DEVICE_CHECK_WORKLOAD_PID=str(pid),
               DEVICE_CHECK_DURATION="2", DEVICE_CHECK_OUT=str(tmp_path / "out"),
               PYTHON=sys.executable)  # the interpreter running the tests, not whatever python3 PATH finds
    return subprocess.run(["bash", str(ROOT / "scripts" / "device-check")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_passes_when_the_workload_is_seen(sim_lib: Path, tmp_path: Path, workload: int) -> None:
    sc = Scenario().add_gpu(gpu_util=90).add_process(pid=workload, gpu=0, used_memory_bytes=1 << 30,
                                                     sm_util=[(-5, 80)], mem_util=30)
    res = run_check(sim_lib, tmp_path, sc, workload)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "device-check: PASS" in res.stdout
    assert f"workload pid {workload} in processes.json" in res.stdout


def test_fails_when_the_workload_holds_no_gpu_memory(sim_lib: Path, tmp_path: Path, workload: int) -> None:
    sc = Scenario().add_gpu().add_process(pid=workload, gpu=0, used_memory_bytes=0, sm_util=10)
    res = run_check(sim_lib, tmp_path, sc, workload)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "has no GPU memory" in res.stdout


def test_fails_when_the_workload_is_absent(sim_lib: Path, tmp_path: Path, workload: int) -> None:
    res = run_check(sim_lib, tmp_path, Scenario().add_gpu(), workload)
    assert res.returncode == 1
    assert "not in nvml/processes.json" in res.stdout
