"""``gpuforensics top --once`` (text) and ``--once --json`` through the CLI, on the simulated NVML:
sampled by top itself, or read from a running recorder's ring (no second NVML sampler)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.nvmlsim import Scenario, subprocess_env
from tests.support.nvmlsim import fixtures as nvf
from tests.support.record_support import start_recorder, wait_for_writer

sim_lib = nvf.sim_lib
GIB = 1 << 30


@pytest.fixture
def scenario(tmp_path: Path, sim_lib: Path) -> tuple[dict[str, str], subprocess.Popen[bytes]]:
    holder = subprocess.Popen(["sleep", "120"])
    sc = Scenario()
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 77)], memory_total_bytes=80 * GIB)
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=0, memory_total_bytes=80 * GIB)
    sc.add_process(pid=holder.pid, gpu=1, used_memory_bytes=12 * GIB, sm_util=[(0, 45)], mem_util=10)
    env = {**os.environ, **subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)}
    yield env, holder
    holder.kill()
    holder.wait()


def _top(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", "top", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def test_once_prints_one_snapshot_as_text(scenario: tuple[dict[str, str], subprocess.Popen[bytes]], tmp_path: Path,
                                          sim_lib: Path) -> None:
    env, holder = scenario
    proc = _top(env, "--once", "--ring", str(tmp_path / "no-ring"), "--nvml-library", str(sim_lib), "--width", "100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("gpuforensics top") and "2 GPUs  1 GPU processes  sampled by top" in lines[0]
    assert all(len(ln) <= 100 for ln in lines)
    gpu0 = next(ln for ln in lines if ln.lstrip().startswith("0 H100"))
    assert " 77% " in gpu0 and "0.0/80.0" in gpu0
    row = next(ln for ln in lines if ln.lstrip().startswith(str(holder.pid)))
    assert "12.0 GiB" in row and "45%" in row
    assert "RECENTLY EXITED (0)" in proc.stdout


def test_without_a_terminal_top_falls_back_to_once(scenario: tuple[dict[str, str], subprocess.Popen[bytes]],
                                                   tmp_path: Path, sim_lib: Path) -> None:
    env, holder = scenario
    proc = _top({**env, "TERM": "dumb"}, "--ring", str(tmp_path / "no-ring"), "--nvml-library", str(sim_lib))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("gpuforensics top") and str(holder.pid) in proc.stdout


def test_once_json_is_the_snapshot(scenario: tuple[dict[str, str], subprocess.Popen[bytes]], tmp_path: Path,
                                   sim_lib: Path) -> None:
    env, holder = scenario
    proc = _top(env, "--once", "--json", "--ring", str(tmp_path / "no-ring"), "--nvml-library", str(sim_lib))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["source"] == "sampled by top"
    assert [(g["index"], g["util_pct"], g["name"]) for g in doc["gpus"]] == \
        [(0, 77.0, "NVIDIA H100 80GB HBM3"), (1, 0.0, "NVIDIA H100 80GB HBM3")]
    (p,) = doc["processes"]
    assert (p["pid"], p["gpu_index"], p["used_memory_bytes"], p["sm_pct"]) == (holder.pid, 1, 12 * GIB, 45.0)
    assert p["command"] == "sleep" and p["owner_kind"] == "process" and p["owner"] == "-"
    assert f"proc/{holder.pid}/status" in p["evidence"]


def test_with_a_recorder_running_top_reads_its_ring_and_calls_no_nvml(tmp_path: Path, sim_lib: Path) -> None:
    """And what the ring saw end before top started is listed as exited, still named."""
    holder, brief = subprocess.Popen(["sleep", "120"]), subprocess.Popen(["sleep", "120"])
    sc = Scenario()
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 77)], memory_total_bytes=80 * GIB)
    sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=0, memory_total_bytes=80 * GIB)
    sc.add_process(pid=holder.pid, gpu=1, used_memory_bytes=12 * GIB, sm_util=[(0, 45)], mem_util=10)
    sc.add_process(pid=brief.pid, gpu=0, used_memory_bytes=3 * GIB, sm_util=[(0, 5)], end_s=6.0)
    env = {**os.environ, **subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)}
    ring = tmp_path / "ring"
    rec = start_recorder(ring, env=env, interval_s=0.5, nvml_library=str(sim_lib), sources=["nvml", "procfs", "cgroups"])
    try:
        wait_for_writer(ring, rec)
        doc: dict = {}  # type: ignore[type-arg]
        for _ in range(60):  # until the brief process has come and gone in the ring
            # a library that does not exist: only the ring can show the GPUs
            proc = _top(env, "--once", "--json", "--ring", str(ring), "--nvml-library", str(tmp_path / "no-libnvidia-ml.so"))
            assert proc.returncode == 0, proc.stderr[-3000:]
            doc = json.loads(proc.stdout)
            if doc["exited"] and doc["processes"] and doc["processes"][0]["command"]:
                break
            time.sleep(0.5)
        assert doc["source"] == f"recorder ring {ring}"
        assert [g["util_pct"] for g in doc["gpus"]] == [77.0, 0.0]
        (p,) = doc["processes"]
        assert (p["pid"], p["gpu_index"], p["command"]) == (holder.pid, 1, "sleep")
        (gone,) = doc["exited"]
        assert (gone["kind"], gone["pid"], gone["gpu_index"], gone["command"]) == ("process", brief.pid, 0, "sleep")
    finally:
        rec.terminate()
        rec.communicate(timeout=30)
        for p_ in (holder, brief):
            p_.kill()
            p_.wait()


def test_bad_options_are_one_line_usage_errors(tmp_path: Path) -> None:
    proc = _top(dict(os.environ), "--once", "--interval", "0")
    assert proc.returncode == 2 and "--interval" in proc.stderr
    proc = _top(dict(os.environ), "--once", "--set", "nvml.nope=1", "--ring", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.startswith("gpuforensics: error:") and len(proc.stderr.splitlines()) == 1
