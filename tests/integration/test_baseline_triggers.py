"""Baseline triggers with real parts: real containers on the simulated GPU, the recorder run as a
user runs it.

- a trainer at 95 % SM that falls to 40 % (something else took its GPU) is caught by
  ``container.gpu.sm<baseline:10s`` and missed by ``gpu.util<10%``; the bundle's manifest quotes the
  baseline beside the value; a container that started a moment ago is reported as too young;
- a nightly job's routine peak, seen at this time of day on three earlier days in the recorder's
  ring, is not fired on by ``gpu.util>baseline:10s``; the same peak against a ring whose nightly
  job ran twelve hours away is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.ring.writer import RingWriter
from forensics.thresholds import config_from_mapping
from tests.support import docker_engine as de
from tests.support.nvmlsim import Scenario, subprocess_env
from tests.support.nvmlsim import fixtures as nvf
from tests.support.record_support import (
    start_recorder,
    stop_recorder,
    wait_bundles,
    wait_for_writer,
)

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow, pytest.mark.docker]
GIB = 1 << 30
DAY_S = 86400.0
#: the thresholds file (record --config, analyze --config) for a test minutes long: 5 s means, 90 s of history
FAST = {"baseline_bucket_s": 5, "baseline_min_history_s": 90, "baseline_min_buckets": 10, "baseline_window_s": 600}


def _manifest(bundle: Path) -> dict[str, Any]:
    return json.loads(subprocess.run(["tar", "-xOzf", str(bundle), "--wildcards", "*/manifest.json"],
                                     capture_output=True, check=True).stdout)


def _pid(engine: de.DockerEngine, cid: str) -> int:
    return int(engine.cli("inspect", "-f", "{{.State.Pid}}", cid).stdout.strip())


def test_a_fall_from_95_to_40_is_caught_by_the_baseline_and_missed_by_a_fixed_threshold(
        docker_engine: de.DockerEngine, sim_lib: Path, tmp_path: Path) -> None:
    trainer, young = f"trainer-{os.getpid()}", f"young-{os.getpid()}"
    cids = [docker_engine.run_labelled("run", "-d", "--name", n, de.CUDA_LIKE_IMAGE, "sleep", "400")
            for n in (trainer, young)]
    rec = None
    try:
        sc = Scenario()
        fall_s = 120.0
        sc.add_gpu(gpu_util=[(0, 95), (fall_s, 40)], memory_total_bytes=80 * GIB)
        sc.add_gpu(gpu_util=[(0, 50)], memory_total_bytes=80 * GIB)
        sc.add_process(pid=_pid(docker_engine, cids[0]), gpu=0, used_memory_bytes=20 * GIB,
                       sm_util=[(0, 95), (fall_s, 40)])
        # a workload that starts after the fall: too young for a baseline while the test runs
        sc.add_process(pid=_pid(docker_engine, cids[1]), gpu=1, used_memory_bytes=GIB,
                       sm_util=[(0, 30)], start_s=fall_s + 10)
        env = subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)
        env["DOCKER_HOST"] = docker_engine.docker_host
        ring, bundles = tmp_path / "ring", tmp_path / "bundles"
        rules = ["container.gpu.sm<baseline:10s", "gpu.util<10%"]
        rec = start_recorder(ring, env=env, interval_s=1.0, nvml_library=str(sim_lib),
                             sources=["nvml", "procfs", "cgroups", "docker"],
                             triggers={"rules": rules, "bundles": str(bundles), "trigger_duration_s": 3.0,
                                       "cooldown_s": 900.0,
                                       "config": FAST})
        wait_for_writer(ring, rec)
        found = wait_bundles(bundles, 1, fall_s + 90, rec)
        assert len(found) == 1, rec.poll()
        trig = _manifest(found[0])["trigger"]
        assert trig["name"] == "container.gpu.sm<baseline:10s" and trig["kind"] == "baseline"
        assert trig["value"] == 40.0 and trainer in trig["subject"], trig
        base = trig["baseline"]
        assert base["median"] == 95.0 and base["window_s"] == 600 and base["key"] == f"container {trainer} image {de.CUDA_LIKE_IMAGE}"
        assert base["limit"] == 85.0 and not base["by_time_of_day"] and base["history_s"] >= 90
        assert "normal 95-95%" in trig["summary"]
        status, _err = stop_recorder(rec)
        # the bundle carries the history the baseline was taken from; the analysis measures the
        # trainer's fall against its own normal, though no fixed threshold fired
        doc = analyze_bundles([found[0]], config_from_mapping(FAST))
        (drop,) = [f for f in doc["findings"] if f["kind"] == "below-baseline"]
        assert [s["name"] for s in drop["subjects"] if s["role"] == "victim"] == [trainer], drop["subjects"]
        assert not [s for s in drop["subjects"] if s["role"] == "culprit"]
        assert drop["metrics"]["sm_pct"] == 40.0 and drop["metrics"]["baseline_median_pct"] == 95.0
        assert f"{trainer}'s SM share on GPU 0 40%, its normal 95-95% over the last" in drop["summary"], drop["summary"]
        assert any(e["member"].startswith("ring/") for e in drop["evidence"])
        # with the default settings (an hour of history needed) the same bundle's trainer is too young:
        # no finding, and the limitations say so
        plain = analyze_bundles([found[0]])
        assert not [f for f in plain["findings"] if f["kind"] == "below-baseline"]
        assert any(f"below-baseline: {trainer}'s SM share on GPU 0 not compared with its normal: insufficient history: "
                   in str(lim) for lim in plain["limitations"]), plain["limitations"]
        # the report draws the trainer's normal range on GPU 0's chart
        out = tmp_path / "report"
        config = tmp_path / "thresholds.json"
        config.write_text(json.dumps(FAST))
        subprocess.run([sys.executable, "-m", "forensics", "analyze", str(found[0]), "--config", str(config),
                        "-f", "html,pdf", "-o", str(out)],
                       check=True, capture_output=True, timeout=300)
        html = next(out.glob("*.html")).read_text()
        assert "baseline-0-0" in html and f"{trainer} normal 95-95%" in html
        assert list(out.glob("*.pdf"))
        rules_status = status["triggers"]["rules"]
        assert rules_status["container.gpu.sm<baseline:10s"]["captured"] == 1
        assert not rules_status["gpu.util<10%"].get("fired"), rules_status  # 40 % never crossed "< 10 %"
        young_key = f"container {young} image {de.CUDA_LIKE_IMAGE}"
        said = status["triggers"]["baselines"]["container.gpu.sm"][young_key]
        assert said["insufficient_history"].startswith("insufficient history: "), said
        assert said["history_s"] < 90 and said["need_s"] == 90
        assert status["triggers"]["baseline_insufficient"]["container.gpu.sm<baseline:10s"] > 0
    finally:
        if rec is not None and rec.poll() is None:
            rec.kill()
            rec.communicate(timeout=10)
        for cid in cids:
            docker_engine.cli("rm", "-f", cid, check=False)


def _device_line(t: float, uuid: str, util: float) -> bytes:
    """A ``nvml/samples.jsonl`` device line as the NVML sampler writes it (the fields the live state reads)."""
    return (json.dumps({"kind": "device", "tick": int(t), "t": t, "gpu_index": 0, "uuid": uuid,
                        "nvml": {"nvmlDeviceGetUtilizationRates": {"value": {"gpu": util, "memory": 0}},
                                 "nvmlDeviceGetMemoryInfo_v2": {"value": {"used": 1 << 30, "total": 80 * GIB}}},
                        "processes": []}) + "\n").encode()


def _nightly_history(ring: Path, uuid: str, now: float, peak_offset_s: float) -> None:
    """Three days of one line a minute: 90 % for two hours around ``now + peak_offset_s``'s time of
    day (a nightly batch job), 5 % otherwise."""
    w = RingWriter(ring, retention_s=8 * DAY_S).open()
    t = now - 3 * DAY_S - 1800
    batch = []
    while t < now - 120:
        dist = abs(((t - now - peak_offset_s) + DAY_S / 2) % DAY_S - DAY_S / 2)
        batch.append((t, t - now + 4 * DAY_S, "nvml/samples.jsonl", "append", _device_line(t, uuid, 90.0 if dist < 3600 else 5.0)))
        t += 60.0
    w.append(batch)
    w.close()


@pytest.mark.parametrize(("peak_offset_s", "fires"), [(0.0, False), (DAY_S / 2, True)])
def test_a_nightly_jobs_routine_peak_is_not_fired_on(docker_engine: de.DockerEngine, sim_lib: Path,
                                                      tmp_path: Path, peak_offset_s: float, fires: bool) -> None:
    name = f"nightly-{os.getpid()}"
    cid = docker_engine.run_labelled("run", "-d", "--name", name, de.CUDA_LIKE_IMAGE, "sleep", "300")
    rec = None
    try:
        sc = Scenario()
        sc.add_gpu(gpu_util=[(0, 90)], memory_total_bytes=80 * GIB)
        sc.add_process(pid=_pid(docker_engine, cid), gpu=0, used_memory_bytes=20 * GIB, sm_util=[(0, 90)])
        ring, bundles = tmp_path / "ring", tmp_path / "bundles"
        _nightly_history(ring, sc.gpu_uuid(0), time.time(), peak_offset_s)
        env = subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)
        env["DOCKER_HOST"] = docker_engine.docker_host
        rec = start_recorder(ring, env=env, interval_s=1.0, nvml_library=str(sim_lib), retention_s=8 * DAY_S,
                             sources=["nvml", "procfs", "docker"],
                             triggers={"rules": ["gpu.util>baseline:10s"], "bundles": str(bundles),
                                       "trigger_duration_s": 3.0, "cooldown_s": 900.0})
        wait_for_writer(ring, rec)
        found = wait_bundles(bundles, 1, 90 if fires else 40, rec)
        status, err = stop_recorder(rec)
        base = next(iter(status["triggers"]["baselines"]["gpu.util"].values()))
        assert base["by_time_of_day"] and base["days"] == 3, base
        if fires:  # the peak twelve hours from its usual time: news
            assert len(found) == 1, err[-2000:]
            trig = _manifest(found[0])["trigger"]
            assert trig["value"] == 90.0 and trig["baseline"]["median"] == 5.0 and trig["baseline"]["by_time_of_day"]
        else:  # its usual time: its normal
            assert found == [] and base["median"] == 90.0, base
            assert not status["triggers"]["rules"]["gpu.util>baseline:10s"].get("fired")
    finally:
        if rec is not None and rec.poll() is None:
            rec.kill()
            rec.communicate(timeout=10)
        docker_engine.cli("rm", "-f", cid, check=False)
