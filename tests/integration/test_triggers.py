"""Triggers with real parts: a real container on the simulated GPU at 99 % with
``--trigger gpu.util>90%:10s``, and a real container OOM-killed with ``--trigger oom``."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from tests.support import docker_engine as de
from tests.support.env import is_root, need
from tests.support.nvmlsim import Scenario, subprocess_env
from tests.support.nvmlsim import fixtures as nvf
from tests.support.record_support import (
    start_recorder,
    stop_recorder,
    wait_bundles,
    wait_for_writer,
)
from tests.support.ring_bundle import ring_member

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow, pytest.mark.docker]
GIB = 1 << 30


def _manifest(bundle: Path) -> dict[str, Any]:
    return json.loads(subprocess.run(["tar", "-xOzf", str(bundle), "--wildcards", "*/manifest.json"],
                                     capture_output=True, check=True).stdout)


def _iso(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_gpu_util_trigger_captures_once_with_the_lead_up(docker_engine: de.DockerEngine, sim_lib: Path,
                                                          tmp_path: Path) -> None:
    name = f"hog-{os.getpid()}"
    cid = docker_engine.run_labelled("run", "-d", "--name", name, de.CUDA_LIKE_IMAGE, "sleep", "300")
    rec = None
    try:
        pid = int(docker_engine.cli("inspect", "-f", "{{.State.Pid}}", cid).stdout.strip())
        sc = Scenario()
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 99)], memory_total_bytes=80 * GIB)
        sc.add_process(pid=pid, gpu=0, used_memory_bytes=20 * GIB, sm_util=[(0, 99)], mem_util=40)
        env = subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)
        env["DOCKER_HOST"] = docker_engine.docker_host
        ring, bundles = tmp_path / "ring", tmp_path / "bundles"
        rec = start_recorder(ring, env=env, interval_s=1.0, nvml_library=str(sim_lib),
                             sources=["nvml", "procfs", "cgroups", "docker"],
                             triggers={"rules": ["gpu.util>90%:10s"], "bundles": str(bundles),
                                       "trigger_duration_s": 5.0, "cooldown_s": 900.0})
        wait_for_writer(ring, rec)
        started = time.time()
        found = wait_bundles(bundles, 1, 90, rec)
        assert len(found) == 1, rec.poll()
        (bundle,) = found
        trig = _manifest(bundle)["trigger"]
        assert trig["name"] == "gpu.util>90%:10s" and trig["value"] == 99.0
        assert trig["subject"].startswith("GPU 0 ")
        fired, crossed = _iso(trig["fired_at"]), _iso(trig["crossed_at"])
        assert fired - crossed >= 10.0
        assert bundle.stat().st_mtime - fired < 30.0  # the bundle within 30 s of the firing
        # the ring's history in the bundle covers the lead-up (the 10 s the condition held)
        ring_ticks = [s["t"] for s in map(json.loads, ring_member(bundle, "ring/nvml/samples.jsonl").splitlines())
                      if s.get("kind") == "device"]
        assert ring_ticks and min(ring_ticks) <= crossed + 1.0 and min(ring_ticks) >= started - 5
        # the condition stays true: no second bundle inside the cooldown
        time.sleep(20)
        assert len(list(bundles.glob("gpuforensics-*.tgz"))) == 1
        status, err = stop_recorder(rec)
        rule = status["triggers"]["rules"]["gpu.util>90%:10s"]
        assert rule["captured"] == 1 and rule["suppressed"] >= 10, status
        lines = [ln for ln in err.splitlines() if "trigger gpu.util>90%:10s fired" in ln]
        assert len(lines) == 1 and str(bundle) in lines[0], err[-3000:]
        doc = analyze_bundles([bundle])
        assert any(f["kind"] == "unallocated-gpu-use" and any(s.get("name") == name for s in f["subjects"])
                   for f in doc["findings"]), [f["kind"] for f in doc["findings"]]
    finally:
        if rec is not None and rec.poll() is None:
            rec.kill()
            rec.communicate(timeout=10)
        docker_engine.cli("rm", "-f", cid, check=False)


def test_oom_trigger_bundle_names_the_killed_container(docker_engine: de.DockerEngine, tmp_path: Path) -> None:
    need(is_root() and os.access("/dev/kmsg", os.R_OK), "following /dev/kmsg needs root")
    ring, bundles = tmp_path / "ring", tmp_path / "bundles"
    rec = start_recorder(ring, env={"DOCKER_HOST": docker_engine.docker_host}, interval_s=0.5,
                         sources=["kernel", "cgroups", "docker", "procfs"],
                         triggers={"rules": ["oom"], "bundles": str(bundles), "trigger_duration_s": 2.0})
    name = f"oomer-{os.getpid()}"
    cid = ""
    try:
        wait_for_writer(ring, rec)
        time.sleep(1.5)  # the kernel sampler is at the end of /dev/kmsg
        cid = docker_engine.run_labelled(
            "run", "-d", "--name", name, "--network", "none", "--memory", "32m", "--memory-swap", "32m",
            de.BUSYBOX_IMAGE, "sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1; sleep 120")
        # the host's kernel log is shared: another OOM kill on this machine may fire a bundle of its
        # own during the window; only the bundle whose trigger names this container is this test's
        deadline = time.monotonic() + 90
        found: list[Path] = []
        while not found and time.monotonic() < deadline and rec.poll() is None:
            found = [b for b in wait_bundles(bundles, 1, 1, rec)
                     if cid[:12] in _manifest(b)["trigger"].get("subject", "")]
        assert len(found) == 1, (rec.poll(), sorted(bundles.glob("gpuforensics-*.tgz")))
        trig = _manifest(found[0])["trigger"]
        assert trig["name"] == "oom" and cid[:12] in trig["subject"], trig
        doc = analyze_bundles(found)
        ooms = [f for f in doc["findings"] if f["kind"] == "oom-kill"]
        assert any(any(s["type"] == "container" and (s.get("name") == name or s["id"] == cid) for s in f["subjects"])
                   for f in ooms), [(f["kind"], f["summary"]) for f in doc["findings"]]
        stop_recorder(rec)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.communicate(timeout=10)
        if cid:
            docker_engine.cli("rm", "-f", cid, check=False)
