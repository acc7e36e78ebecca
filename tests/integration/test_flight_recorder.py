"""The flight recorder with real parts: a real container on the simulated GPU, a restarted
private dockerd, a hung simulated NVML, a full tmpfs, SIGKILLs of the recorder."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.analysis import analyze_bundles
from forensics.ring import RingReader
from tests.support import docker_engine as de
from tests.support.env import is_root, need
from tests.support.nvmlsim import Scenario, subprocess_env
from tests.support.nvmlsim import fixtures as nvf
from tests.support.private_daemon import terminate
from tests.support.record_support import (
    members,
    record_lines,
    ring_events,
    start_recorder,
    wait_for_writer,
)

sim_lib = nvf.sim_lib
pytestmark = [pytest.mark.slow]
GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_recorder_left(monkeypatch: pytest.MonkeyPatch):
    """Every recorder a test starts is stopped (killed by PID) when the test ends, pass or fail."""
    started: list[subprocess.Popen[str]] = []
    original = start_recorder

    def tracked(*args, **kwargs):
        proc = original(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setitem(globals(), "start_recorder", tracked)
    yield
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


def _stop(proc: subprocess.Popen[str], timeout: float = 10.0) -> tuple[dict, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), err


@pytest.mark.docker
def test_container_gone_before_capture_is_named_with_grant_and_gpu_use(
        docker_engine: de.DockerEngine, sim_lib: Path, tmp_path: Path) -> None:
    """A container runs a process on GPU 0 for 8 s and exits; the recorder was running; a capture
    --since 2m afterwards, and the analysis names the container, its grant and its GPU use in a
    finding that began before the capture."""
    name = f"notebook-{os.getpid()}"
    cid = docker_engine.run_labelled("run", "-d", "--name", name, de.CUDA_LIKE_IMAGE, "sleep", "8")
    try:
        pid = int(docker_engine.cli("inspect", "-f", "{{.State.Pid}}", cid).stdout.strip())
        sc = Scenario()
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 97)], memory_total_bytes=80 * GIB)
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=0, memory_total_bytes=80 * GIB)
        sc.add_process(pid=pid, gpu=0, used_memory_bytes=60 * GIB, sm_util=[(0, 92)], mem_util=50, end_s=7.5)
        env = subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)
        env["DOCKER_HOST"] = docker_engine.docker_host
        ring = tmp_path / "ring"
        rec = start_recorder(ring, env=env, interval_s=0.5, nvml_library=str(sim_lib),
                             sources=["nvml", "procfs", "cgroups", "docker"])
        wait_for_writer(ring, rec)
        docker_engine.cli("wait", cid, timeout=30)
        time.sleep(2.0)
        out = tmp_path / "out"
        out.mkdir()
        cap_env = {**env, "GPUFORENSICS_RING": str(ring), "PYTHONPATH": str(ROOT)}
        cap = subprocess.run([sys.executable, "-m", "forensics", "capture", "--since", "2m", "-o", str(out),
                              "--nvml-library", str(sim_lib), "--quiet"],
                             env=cap_env, capture_output=True, text=True, timeout=120)
        status, _err = _stop(rec)
        assert cap.returncode == 0, cap.stderr[-3000:]
        assert status["sources"]["nvml"]["ticks"] > 5, status
        (bundle,) = out.glob("*.tgz")
        doc = analyze_bundles([bundle])
        named = [f for f in doc["findings"]
                 if any(s["type"] == "container" and s.get("name") == name for s in f["subjects"])
                 and any(e["member"].startswith("ring/nvml/") for e in f["evidence"])]
        assert named, [(f["kind"], f["summary"]) for f in doc["findings"]]
        f = named[0]
        assert f["before_capture_s"] > 2, f
        assert "before capture" in f["summary"], f["summary"]
        assert "GPU 0" in f["summary"] and "NVIDIA_VISIBLE_DEVICES" in json.dumps(f), f
        members_cited = {e["member"] for e in f["evidence"]}
        assert any(m.startswith("ring/docker/containers/") for m in members_cited) or \
            any(m.startswith("ring/proc/") for m in members_cited), members_cited
        manifest = {c["name"]: c for c in json.loads(subprocess.run(
            ["tar", "-xOzf", str(bundle), "--wildcards", "*/manifest.json"], capture_output=True,
            check=True).stdout)["collectors"]}
        assert manifest["ring"]["status"] == "ok", manifest["ring"]
    finally:
        docker_engine.cli("rm", "-f", cid, check=False)


@pytest.mark.docker
def test_restarted_dockerd_is_a_recorded_gap(tmp_path: Path) -> None:
    need(is_root() and os.path.exists(de.DOCKERD), "a private dockerd needs root and dockerd")
    engine = de.start_engine(default_runtime="runc")
    try:
        ring = tmp_path / "ring"
        rec = start_recorder(ring, env={"DOCKER_HOST": engine.docker_host}, interval_s=0.5,
                             sources=["docker", "cgroups"])
        wait_for_writer(ring, rec)
        time.sleep(3.0)
        assert engine.proc is not None
        args = list(engine.proc.args)  # type: ignore[arg-type]
        terminate(engine.pid or 0, engine.proc)
        time.sleep(1.0)
        log = open(engine.tmpdir / "dockerd.log", "ab")  # type: ignore[operator]
        engine.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        log.close()
        engine.pid = engine.proc.pid
        deadline = time.monotonic() + 30
        while de._ping(engine.docker_host) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        engine.cli("run", "--rm", "--label", f"{de.TEST_LABEL}=1", "--name", "after-restart",
                   "--network", "none", _busybox(engine), "true", check=False)
        time.sleep(3.0)
        _stop(rec)
        gaps = [e for e in ring_events(ring) if e["kind"] == "gap" and e["source"] == "docker"]
        assert len(gaps) == 1 and gaps[0]["to"] > gaps[0]["from"], ring_events(ring)
        info_writes = [r for r in members(ring, "docker/info.json")]
        assert info_writes  # the engine was asked again after reconnecting
        cgroup_ticks = [r for r in members(ring, "cgroup/samples.jsonl")]
        assert len(cgroup_ticks) >= 10  # the other sources never stopped
    finally:
        de.stop_engine(engine)


def test_a_source_that_cannot_start_is_said_once(tmp_path: Path) -> None:
    """On a node with no Docker engine and no Kubernetes configuration, the recorder says so once
    each in its events: the docker follower (it retries, and looked recorded before: no event said
    that nothing was), and the kubernetes source (retried with a backoff: a `source unavailable`
    event at every retry before)."""
    ring = tmp_path / "ring"
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "HOME": str(tmp_path), "KUBECONFIG": "",
           "KUBERNETES_SERVICE_HOST": ""}
    rec = start_recorder(ring, env=env, interval_s=0.2, hang_kill_s=1.0, sources=["docker", "kubernetes"])
    wait_for_writer(ring, rec)
    time.sleep(8.0)  # the kubernetes source is retried after 1, 2 and 4 s
    status, _ = _stop(rec)
    events = ring_events(ring)
    kube = [e for e in events if e["kind"] == "source" and e["source"] == "kubernetes"]
    assert status["sources"]["kubernetes"]["restarts"] >= 3, status  # retried meanwhile
    assert len(kube) == 1 and kube[0]["status"] == "unavailable", kube
    notes = [e for e in events if e["kind"] == "note" and e["source"] == "docker"]
    assert len(notes) == 1 and "no Docker engine answers" in notes[0]["text"], events


def _busybox(engine: de.DockerEngine) -> str:
    images = de.build_images(engine)
    return images.get(de.BUSYBOX_IMAGE, de.BUSYBOX_IMAGE) if isinstance(images, dict) else de.BUSYBOX_IMAGE


def test_hung_nvml_skips_gpu_figures_only(sim_lib: Path, tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        sc = Scenario()
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=50)
        sc.add_process(pid=sleeper.pid, gpu=0, used_memory_bytes=GIB, sm_util=50)
        sc.hang("nvmlDeviceGetTemperature", seconds=60, gpu=0, from_s=3.0, to_s=6.0)
        env = subprocess_env(sc.write(tmp_path / "sc.tsv"), sim_lib)
        ring = tmp_path / "ring"
        rec = start_recorder(ring, env=env, interval_s=0.5, nvml_library=str(sim_lib),
                             sources=["nvml", "cgroups"], tick_timeout_s=0.5, hang_kill_s=2.0)
        wait_for_writer(ring, rec)
        time.sleep(11.0)
        status, _ = _stop(rec)
        t0 = float(json.loads(next(iter(members(ring, "recorder/events.jsonl"))).data)["t"])
        cg = [r.t for r in members(ring, "cgroup/samples.jsonl")]
        nv = [r.t for r in members(ring, "nvml/samples.jsonl")
              if any(line.get("kind") == "device" for line in record_lines(r))]
        # the cgroup sampler ticked all along (no hole over 1.5 s), NVML has a hole and came back
        assert max(b - a for a, b in zip(cg, cg[1:], strict=False)) < 1.5, cg
        assert max(b - a for a, b in zip(nv, nv[1:], strict=False)) > 2.0
        assert nv[-1] > t0 + 7.0, (t0, nv)
        assert status["sources"]["nvml"]["restarts"] >= 1
        assert any(e["kind"] == "gap" and e["source"] == "nvml" for e in ring_events(ring))
    finally:
        sleeper.kill()
        sleeper.wait()


def test_full_disk_keeps_running_logs_once_and_resumes(tmp_path: Path) -> None:
    need(is_root(), "mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", str(mnt)], check=True)
    try:
        ring = mnt / "ring"
        rec = start_recorder(ring, interval_s=0.2, sources=["cgroups"], max_bytes=256 << 10, retry_s=0.5)
        wait_for_writer(ring, rec)
        time.sleep(1.5)
        filler = mnt / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        time.sleep(2.5)
        filler.unlink()
        time.sleep(2.0)
        status, err = _stop(rec)
        assert err.count("cannot write the ring") == 1, err
        assert err.count("ring writable again") == 1, err
        gaps = [e for e in ring_events(ring) if e["kind"] == "gap" and e["source"] == "ring"]
        assert len(gaps) == 1 and gaps[0]["dropped_records"] > 0
        after = [r for r in members(ring, "cgroup/samples.jsonl") if r.t > gaps[0]["to"]]
        assert after  # writing resumed
        assert not RingReader(ring).report.problems
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_recorder_kill_9_leaves_no_child_and_an_intact_ring(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    rnd = random.Random(9)
    for _ in range(4):
        rec = start_recorder(ring, interval_s=0.2, sources=["cgroups", "procfs"])
        wait_for_writer(ring, rec)
        time.sleep(rnd.uniform(0.5, 1.5))
        children = subprocess.run(["pgrep", "-P", str(rec.pid)], capture_output=True, text=True).stdout.split()
        os.kill(rec.pid, signal.SIGKILL)
        rec.wait()
        time.sleep(0.3)
        for child in children:
            assert not os.path.exists(f"/proc/{child}") or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    reader = RingReader(ring)
    runs = {r.run for r in reader.records()}
    assert len(runs) == 4 and not reader.report.problems


def test_kernel_records_resume_across_runs_and_a_reboot(tmp_path: Path) -> None:
    """The real /dev/kmsg. A ring whose last kernel record is of a previous boot (number 10^9: the
    old boot's count means nothing now): this boot's records, written before the recorder started,
    are recorded. A second run of this boot records what the kernel logged between the runs, once."""
    need(is_root() and os.access("/dev/kmsg", os.R_OK | os.W_OK), "/dev/kmsg readable and writable (root)")
    from forensics.record.sources import DELTA_MEMBERS
    from forensics.ring import RingWriter
    from forensics.ring import writer as ring_writer
    from forensics.specs.kernel import KMSG_WINDOW

    ring = tmp_path / "ring"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ring_writer, "boot_id", lambda: "a-previous-boot")
        w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
        w.append([(time.time() - 600, 1e6, KMSG_WINDOW, "append", b"6,1000000000,999000000,-;the old boot\n")])
        w.close()

    def marker(n: int) -> str:
        text = f"gpuforensics-test kmsg resume {n} {os.getpid()} {time.time()}"
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write(text + "\n")
        return text

    def kernel_text() -> str:
        return "".join(r.data.decode("utf-8", "replace") for r in members(ring, KMSG_WINDOW))

    before = marker(1)
    rec = start_recorder(ring, interval_s=0.2, duration_s=2.0, sources=["kernel"], nice=0)
    _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err[-3000:]
    assert kernel_text().count(before) == 1
    between = marker(2)
    rec = start_recorder(ring, interval_s=0.2, duration_s=2.0, sources=["kernel"], nice=0)
    _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err[-3000:]
    text = kernel_text()
    assert text.count(between) == 1 and text.count(before) == 1
