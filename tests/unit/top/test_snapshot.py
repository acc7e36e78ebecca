"""The snapshot model of ``gpuforensics top``, driven by the recorder's records of real captures
(the sample bundles' members, replayed in the order a recorder receives them)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from forensics.analysis import analyze_bundles
from forensics.top.snapshot import Snapshot, Tracker, build_snapshot
from forensics.top.state import TopState
from tests.unit.record.test_live import SAMPLES, replay


def _snap(bundle: str, tracker: Tracker | None = None) -> tuple[TopState, Snapshot]:
    state = TopState()
    replay(SAMPLES / bundle, state)
    return state, build_snapshot(state, tracker or Tracker(), "replay")


def _culprits(bundle: Path, kind: str) -> set[str]:
    doc = analyze_bundles([bundle])
    return {s["id"] for f in doc["findings"] if f["kind"] == kind for s in f["subjects"]
            if s["role"] == "culprit" and s["type"] == "container"}


def test_each_gpu_process_is_named_with_its_grant_and_the_ungranted_one_is_marked() -> None:
    _, snap = _snap("unallocated-gpu-use.tgz")
    by_owner = {p.owner: p for p in snap.processes}
    assert set(by_owner) == {"trainer", "notebook"}
    nb, tr = by_owner["notebook"], by_owner["trainer"]
    assert (nb.mark, nb.grant, nb.grant_scope) == ("none", "none", "blanket")
    assert (tr.mark, tr.grant, tr.grant_scope) == ("", "env", "explicit")
    # the mark is the analysis' verdict, not top's own: the same containers are the culprits
    assert {p.container_id for p in snap.processes if p.mark == "none"} == \
        _culprits(SAMPLES / "unallocated-gpu-use.tgz", "unallocated-gpu-use")
    assert nb.used_memory_bytes == 62 << 30 and nb.sm_pct == 88 and nb.gpu_index == 0
    assert nb.user == "root" and nb.command == "sh"
    assert f"docker/containers/{nb.container_id}/inspect.json" in nb.evidence
    assert f"proc/{nb.pid}/cgroup" in nb.evidence


def test_gpus_carry_temperature_power_and_history() -> None:
    state, snap = _snap("unallocated-gpu-use.tgz")
    g0 = snap.gpus[0]
    assert g0.name == "NVIDIA H100 80GB HBM3" and g0.util_pct == 99
    assert g0.temperature_c is not None and g0.temperature_c > 30 and g0.power_w and g0.power_w > 100
    assert g0.history and g0.history[-1] == 99 and len(g0.history) >= 3
    assert g0.memory_total_bytes and g0.memory_used_bytes and g0.memory_used_bytes < g0.memory_total_bytes


def test_the_containers_docker_stats_half_cpu_throttling_memory() -> None:
    _, snap = _snap("cpu-throttled-loader.tgz")
    loader = next(p for p in snap.processes if p.owner == "loader")
    assert loader.throttled_pct is not None and loader.throttled_pct > 50
    assert loader.cpu_pct is not None and 0 < loader.cpu_pct < 400
    assert loader.memory_bytes and loader.memory_bytes > 0
    assert loader.cgroup and loader.container_id[:12] in loader.cgroup


def test_xids_are_counted_on_the_gpu_the_kernel_names_by_bus_id() -> None:
    _, snap = _snap("xid-fault.tgz")
    assert [(g.index, g.xids) for g in snap.gpus] == [(0, 0), (1, 1)]


def test_a_pods_process_is_named_namespace_and_pod() -> None:
    _, snap = _snap("k8s-pod-without-gpu-limit.tgz")
    assert {(p.owner, p.mark) for p in snap.processes} == {("ml/trainer-0", ""), ("research/notebook-alice", "none")}


def test_a_gpu_process_gone_and_a_dead_container_are_listed_as_exited_still_named() -> None:
    state = TopState()
    tracker = Tracker()
    replay(SAMPLES / "unallocated-gpu-use.tgz", state)
    snap = build_snapshot(state, tracker, "replay")
    nb = next(p for p in snap.processes if p.owner == "notebook")
    t = snap.gpus[0].history and max(p.used_memory_bytes or 0 for p in snap.processes)
    assert t
    # the notebook's process leaves the GPU, and Docker says its container died
    line = _last_device_line(SAMPLES / "unallocated-gpu-use.tgz", 0)
    line["processes"] = [p for p in line["processes"] if p["pid"] != nb.pid]
    line["t"] += 1.0
    state.feed(line["t"], 0.0, "nvml/samples.jsonl", "append", json.dumps(line) + "\n")
    event = {"Type": "container", "Action": "die", "Actor": {"ID": nb.container_id, "Attributes": {"name": "notebook"}},
             "time": int(line["t"])}
    state.feed(line["t"], 0.0, "docker/events.jsonl", "append", json.dumps(event) + "\n")
    after = build_snapshot(state, tracker, "replay", now=line["t"])  # the recording's clock
    assert [p.owner for p in after.processes] == ["trainer"]
    exited = {(r.kind, r.name) for r in after.exited}
    assert ("process", "notebook") in exited and ("container", "notebook") in exited
    proc = next(r for r in after.exited if r.kind == "process")
    assert (proc.pid, proc.gpu_index, proc.command) == (nb.pid, 0, "sh")
    # kept for keep_s, then dropped
    assert build_snapshot(state, tracker, "replay", now=after.t + 60).exited
    assert build_snapshot(state, tracker, "replay", now=after.t + tracker.keep_s + 1).exited == ()


def test_overlapping_exclusive_grants_are_marked_on_both(tmp_path: Path) -> None:
    """The notebook granted GPU 0 too (its NVIDIA_VISIBLE_DEVICES names it): two exclusive grants."""
    bundle = SAMPLES / "unallocated-gpu-use.tgz"
    _, before = _snap("unallocated-gpu-use.tgz")
    gpu0 = before.gpus[0].uuid
    nb = next(p for p in before.processes if p.owner == "notebook")
    out = tmp_path / "overlap.tgz"
    with tarfile.open(bundle) as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None  # type: ignore[union-attr]
            if data is not None and m.name.endswith(f"docker/containers/{nb.container_id}/inspect.json"):
                doc = json.loads(data)
                doc["Config"]["Env"] = [e for e in doc["Config"]["Env"] if not e.startswith("NVIDIA_VISIBLE_DEVICES=")] + \
                    [f"NVIDIA_VISIBLE_DEVICES={gpu0}"]
                data = json.dumps(doc).encode()
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    state = TopState()
    replay(out, state)
    snap = build_snapshot(state, Tracker(), "replay")
    assert {(p.owner, p.grant, p.mark) for p in snap.processes} == {("trainer", "env", "overlap"), ("notebook", "env", "overlap")}


def test_json_is_the_snapshot() -> None:
    _, snap = _snap("unallocated-gpu-use.tgz")
    doc = json.loads(json.dumps(snap.to_json(), default=str))
    assert {p["owner"] for p in doc["processes"]} == {"trainer", "notebook"}
    assert {p["mark"] for p in doc["processes"]} == {"none", ""}
    assert doc["gpus"][0]["uuid"].startswith("GPU-") and doc["source"] == "replay"


def _last_device_line(bundle: Path, gpu: int) -> dict:  # type: ignore[type-arg]
    with tarfile.open(bundle) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("nvml/samples.jsonl"))
        data = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
    lines = [json.loads(ln) for ln in data.splitlines() if ln.strip()]
    return [ln for ln in lines if ln.get("kind") == "device" and ln.get("gpu_index") == gpu][-1]


def test_a_container_the_cgroup_sampler_found_quiet_used_no_cpu() -> None:
    """The recorder's cgroup sampler writes no line for a cgroup whose CPU counter did not move:
    once it wrote a later tick's line for another cgroup, the quiet container's CPU % is 0."""
    state = TopState()
    replay(SAMPLES / "cpu-throttled-loader.tgz", state)
    loader = next(p for p in build_snapshot(state, Tracker(), "replay").processes if p.owner == "loader")
    assert loader.cpu_pct and loader.cpu_pct > 0
    with tarfile.open(SAMPLES / "cpu-throttled-loader.tgz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("cgroup/samples.jsonl"))
        lines = [json.loads(ln) for ln in tar.extractfile(member).read().decode().splitlines()]  # type: ignore[union-attr]
    other = next(ln for ln in reversed(lines) if loader.container_id not in ln["cgroup"])
    other["t"] = max(ln["t"] for ln in lines) + 1.0
    state.feed(other["t"], 0.0, "cgroup/samples.jsonl", "append", json.dumps(other) + "\n")
    quiet = next(p for p in build_snapshot(state, Tracker(), "replay").processes if p.owner == "loader")
    assert (quiet.cpu_pct, quiet.throttled_pct) == (0.0, 0.0)


def test_active_slowdown_reasons_are_the_last_ticks_and_idle_is_none() -> None:
    state = TopState()
    tracker = Tracker()
    replay(SAMPLES / "degraded-gpu-node.tgz", state, until_tick=6)
    during = build_snapshot(state, tracker, "replay")
    assert [(g.index, g.slowdown) for g in during.gpus] == [(0, ("HwThermalSlowdown",)), (1, ())]  # GpuIdle is none
    replay(SAMPLES / "degraded-gpu-node.tgz", state, from_tick=8)
    after = build_snapshot(state, tracker, "replay")
    assert [g.slowdown for g in after.gpus] == [(), ()]
    assert after.gpus[0].temperature_c == 89.0 and [g.xids for g in after.gpus] == [0, 2]
