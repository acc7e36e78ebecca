"""``record --metrics-addr`` with real parts: two real containers on the simulated GPU (one granted
GPU 0 by NVIDIA_VISIBLE_DEVICES, one reaching it through its image's blanket ``all``), the
recorder's endpoint scraped by a real Prometheus (Debian's package, started on loopback with a
temporary config and data dir), and PromQL answering for the unallocated container."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.support import docker_engine as de
from tests.support.nvmlsim import Scenario, subprocess_env
from tests.support.nvmlsim import fixtures as nvf
from tests.support.prometheus_server import PrometheusServer, prometheus_factory
from tests.support.record_support import start_recorder, wait_for_writer

sim_lib = nvf.sim_lib
prometheus_factory = prometheus_factory
pytestmark = [pytest.mark.slow, pytest.mark.docker]
GIB = 1 << 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _query(prom: PrometheusServer, promql: str) -> list[dict[str, Any]]:
    doc = json.loads(prom.query("/api/v1/query?query=" + urllib.parse.quote(promql)))
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def _wait_query(prom: PrometheusServer, promql: str, timeout_s: float, rec: subprocess.Popen[str]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and rec.poll() is None:
        found = _query(prom, promql)
        if found:
            return found
        time.sleep(0.5)
    return _query(prom, promql)


def test_prometheus_scrape_names_the_unallocated_container(
        docker_engine: de.DockerEngine, sim_lib: Path, tmp_path: Path,
        prometheus_factory: Any) -> None:
    trainer, notebook = f"trainer-{os.getpid()}", f"notebook-{os.getpid()}"
    gpu0 = "GPU-00000000-0000-4000-8000-000000000000"
    cids: list[str] = []
    rec = None
    try:
        cids.append(docker_engine.run_labelled("run", "-d", "--name", trainer, "-e", f"NVIDIA_VISIBLE_DEVICES={gpu0}",
                                               de.CUDA_LIKE_IMAGE, "sleep", "300"))
        cids.append(docker_engine.run_labelled("run", "-d", "--name", notebook, de.CUDA_LIKE_IMAGE, "sleep", "300"))
        pids = [int(docker_engine.cli("inspect", "-f", "{{.State.Pid}}", c).stdout.strip()) for c in cids]
        sc = Scenario()
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", uuid=gpu0, gpu_util=[(0, 99)], memory_total_bytes=80 * GIB)
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=0, memory_total_bytes=80 * GIB)
        sc.add_process(pid=pids[0], gpu=0, used_memory_bytes=20 * GIB, sm_util=[(0, 30)], mem_util=20)
        sc.add_process(pid=pids[1], gpu=0, used_memory_bytes=50 * GIB, sm_util=[(0, 65)], mem_util=40)
        env = subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)
        env["DOCKER_HOST"] = docker_engine.docker_host
        port = _free_port()
        ring = tmp_path / "ring"
        rec = start_recorder(ring, env=env, interval_s=0.5, nvml_library=str(sim_lib),
                             sources=["nvml", "procfs", "cgroups", "docker"],
                             metrics={"host": "127.0.0.1", "port": port})
        wait_for_writer(ring, rec)
        prom = prometheus_factory(scrape=[f"127.0.0.1:{port}"])

        found = _wait_query(prom, f'gpuforensics_process_gpu_memory_bytes{{container="{notebook}"}}', 60, rec)
        assert len(found) == 1, found
        series = found[0]["metric"]
        assert series["allocated"] == "false" and series["grant"] == "blanket", series
        assert series["gpu"] == "0" and series["gpu_uuid"] == gpu0 and series["pid"] == str(pids[1]), series
        assert series["container_id"] == cids[1] and series["owner"] == "container", series
        assert float(found[0]["value"][1]) == 50 * GIB

        # what an alert would ask: GPU memory held by owners not granted the GPU, by container
        unallocated = _query(prom, 'sum by (container) (gpuforensics_process_gpu_memory_bytes{allocated="false"})')
        assert [r["metric"]["container"] for r in unallocated] == [notebook], unallocated
        granted = _query(prom, f'gpuforensics_process_gpu_memory_bytes{{container="{trainer}"}}')
        assert [(r["metric"]["allocated"], r["metric"]["grant"]) for r in granted] == [("true", "explicit")], granted
        sm = _wait_query(prom, 'gpuforensics_process_sm_utilization_percent{gpu="0"}', 30, rec)
        assert sorted((r["metric"]["container"], float(r["value"][1])) for r in sm) == \
            sorted([(trainer, 30.0), (notebook, 65.0)]), sm

        gpu = _query(prom, f'gpuforensics_gpu_utilization_percent{{gpu_uuid="{gpu0}"}}')
        assert [float(r["value"][1]) for r in gpu] == [99.0], gpu
        assert _query(prom, 'gpuforensics_gpu_processes{gpu="0",allocated="false"} == 1'), "per-GPU count"
        # the recorder's own cost, as Prometheus scraped it
        assert _query(prom, "gpuforensics_recorder_tick_duration_seconds_count > 0")
        assert _query(prom, 'gpuforensics_recorder_source_up{source="nvml"} == 1')
        assert _query(prom, "gpuforensics_recorder_ring_bytes > 0")
        up = _query(prom, 'up{job="gpuforensics"}')
        assert [r["value"][1] for r in up] == ["1"], up

        rec.send_signal(signal.SIGTERM)
        out, err = rec.communicate(timeout=60)
        assert rec.returncode == 0, err[-3000:]
        assert f"metrics on http://127.0.0.1:{port}/metrics" in err
        with pytest.raises(OSError):  # the endpoint went with the recorder
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if rec is not None and rec.poll() is None:
            rec.kill()
            rec.communicate(timeout=10)
        for c in cids:
            docker_engine.cli("rm", "-f", c, check=False)
