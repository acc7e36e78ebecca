"""The docker collector against a real Docker Engine: what capture recorded, member by member.

One scenario (module scope) starts a handful of small busybox containers and captures once with the
docker collector (plus procfs, cgroups and kernel, whose evidence must point at the same
containers); the engine-failure tests use their own throwaway private engines.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis.events import LogSignal, LogTail
from forensics.bundle.reader import Bundle, open_bundle
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.docker.docker import COLLECTOR, DockerCollector
from tests.support import log_lines as L
from tests.support.docker_engine import (
    BUSYBOX_IMAGE,
    CUDA_LIKE_IMAGE,
    DockerEngine,
    build_images,
    start_engine,
    stop_engine,
)
from tests.support.polling import host_pids_with_cmdline, wait_for
from tests.support.private_daemon import EngineUnavailable

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SLEEP = ["sleep", "600"]


def skip_or_fail(reason: str) -> None:
    """Skip for something absent here; under CI=true, where it is expected, fail."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def _other_collectors() -> list[Any]:
    """procfs, cgroups and kernel collectors (another engineer's), when they exist."""
    out = []
    for mod in ("procfs", "cgroups", "kernel"):
        try:
            module = __import__(f"forensics.collectors.{mod}", fromlist=["COLLECTOR"])
        except ImportError:
            continue
        out.append(module.COLLECTOR)
    return out


def capture(engine: DockerEngine, out: Path, collectors: list[Any] | None = None,
            **options: Any) -> tuple[Bundle, float]:
    extra = {"docker.host": engine.docker_host, **options.pop("extra", {})}
    opts = CaptureOptions(timeout_s=options.pop("timeout_s", 60.0), extra=extra, **options)
    started = time.monotonic()
    result = run_capture(opts, out, collectors=collectors or [COLLECTOR])
    return open_bundle(result.path), time.monotonic() - started


def status(bundle: Bundle, name: str = "docker") -> dict[str, Any]:
    return next(c for c in bundle.collectors() if c["name"] == name)


def resolve_pointer(doc: Any, pointer: str) -> Any:
    for raw in pointer.split("/")[1:]:
        key = raw.replace("~1", "/").replace("~0", "~")
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return doc




@dataclass
class Scenario:
    engine: DockerEngine
    bundle: Bundle
    ids: dict[str, str]
    exec_pid: int
    child_pid: int
    elapsed_s: float
    has_nvidia_runtime: bool

    def inspect(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = self.bundle.read_json(f"docker/containers/{self.ids[name]}/inspect.json")
        return data

    def allocation(self, name: str) -> dict[str, Any]:
        doc = self.bundle.read_json("docker/allocations.json")
        return next(a for a in doc["containers"] if a["container_id"] == self.ids[name])




@pytest.fixture(scope="module")
def scenario(docker_engine: DockerEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    e = docker_engine
    tag = uuid.uuid4().hex[:8]
    ids: dict[str, str] = {}

    def run(name: str, *args: str, verb: str = "run", image: str = BUSYBOX_IMAGE,
            cmd: list[str] | None = None) -> None:
        extra = ["-d"] if verb == "run" else []
        ids[name] = e.run_labelled(verb, *extra, "--name", f"gf-{tag}-{name}", "--network", "none",
                                   *args, image, *(cmd if cmd is not None else SLEEP))

    client = e.client()
    try:
        has_nvidia = "nvidia" in (client.info().get("Runtimes") or {})
    finally:
        client.close()
    try:
        # CPU: a busy loop in a child of the main process, under 0.2 CPU
        run("cpuhog", "--cpus", "0.2", cmd=["sh", "-c", "while :; do :; done & exec sleep 600"])
        # memory: the main process OOM-killed (the container exits with 137); see also
        # test_oom_four_ways_in_one_bundle for a child OOM-killed in a container that lives on
        run("oommain", "--memory", "32m", "--memory-swap", "32m",
            cmd=["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"])
        # GPU grants: created, not started (no GPU here), or started under nvidia=runc
        run("gpudev1", "--gpus", '"device=1"', verb="create")
        run("gpuall", "--gpus", "all", verb="create")
        run("privileged", "--privileged", verb="create")
        run("cdi", "--device", "nvidia.com/gpu=0", verb="create")
        run("nvenv", "--runtime", "nvidia" if has_nvidia else "runc", "-e", "NVIDIA_VISIBLE_DEVICES=0,GPU-8f2c1e4a-0b1c-4d2e",
            "-e", "DB_PASSWORD=hunter2-secret", cmd=["sh", "-c", "sleep 600; : --password=hunter3"])
        run("notebook", image=CUDA_LIKE_IMAGE)           # image ENV under the default runtime
        run("notebook-runc", "--runtime", "runc", image=CUDA_LIKE_IMAGE)
        # exec and child attribution
        run("tree", cmd=["sh", "-c", "sleep 601 & exec sleep 600"])
        # logs: a CUDA-style OOM line and a secret on stderr
        run("logger", cmd=["sh", "-c", "echo 'RuntimeError: CUDA out of memory. Tried to allocate "
                                       "2.00 GiB'; echo 'export API_TOKEN=tok-12345' >&2; "
                                       "exec sleep 600"])
        e.cli("exec", "-d", ids["tree"], "sleep", "602")
        exec_pid = wait_for(lambda: host_pids_with_cmdline(["sleep", "602"], ids["tree"]))[0]
        child_pid = wait_for(lambda: host_pids_with_cmdline(["sleep", "601"], ids["tree"]))[0]

        client = e.client()
        try:
            wait_for(lambda: client.inspect_container(ids["oommain"])["State"]["Status"] == "exited")
            # let the hog accumulate throttled periods (100 ms each)
            wait_for(lambda: client.stats(ids["cpuhog"], stream=False, one_shot=True)
                     ["cpu_stats"]["throttling_data"]["throttled_periods"] >= 5, timeout=20)
        finally:
            client.close()

        out = tmp_path_factory.mktemp("docker-bundle")
        bundle, elapsed = capture(e, out, [COLLECTOR, *_other_collectors()], lookback_s=600)
        yield Scenario(e, bundle, ids, exec_pid, child_pid, elapsed, has_nvidia)
    finally:
        for cid in ids.values():
            e.cli("rm", "-f", cid, check=False)


# ---------------------------------------------------------------------------------------------


class TestSnapshot:
    def test_collector_ok_and_members(self, scenario: Scenario) -> None:
        st = status(scenario.bundle)
        assert st["status"] == "ok", st
        for member in ("docker/info.json", "docker/version.json", "docker/engine.json",
                       "docker/containers.json", "docker/events.jsonl", "docker/allocations.json",
                       "docker/index.json"):
            assert scenario.bundle.has(member), member
        engine = scenario.bundle.read_json("docker/engine.json")
        assert engine["default_runtime"] == scenario.engine.default_runtime
        assert "nvidia" in engine["runtimes"] or engine["default_runtime"] != "nvidia"
        assert engine["cgroup_version"] in ("1", "2")

    def test_every_container_taken_with_inspect(self, scenario: Scenario) -> None:
        index = scenario.bundle.read_json("docker/index.json")
        for name, cid in scenario.ids.items():
            assert index["containers"][cid]["taken"], name
            doc = scenario.inspect(name)
            assert doc["Id"] == cid
        for name in ("cpuhog", "tree", "nvenv"):
            cid = scenario.ids[name]
            assert scenario.bundle.has(f"docker/containers/{cid}/top.json")
            assert scenario.bundle.has(f"docker/containers/{cid}/stats.json")
        image_id = scenario.inspect("notebook")["Image"]
        img = scenario.bundle.read_json(f"docker/images/{image_id.split(':')[1]}/inspect.json")
        assert "NVIDIA_VISIBLE_DEVICES=all" in img["Config"]["Env"]

    def test_cpu_hog_throttled_in_stats_and_cgroup(self, scenario: Scenario) -> None:
        cid = scenario.ids["cpuhog"]
        assert scenario.inspect("cpuhog")["HostConfig"]["NanoCpus"] == 200_000_000
        stats = scenario.bundle.read_json(f"docker/containers/{cid}/stats.json")
        throttling = stats["cpu_stats"]["throttling_data"]
        assert throttling["throttled_periods"] >= 5 and throttling["throttled_time"] > 0
        top = scenario.bundle.read_json(f"docker/containers/{cid}/top.json")
        assert top["Titles"][:6] == ["PID", "PPID", "USER", "%CPU", "RSS", "ELAPSED"]
        assert any("while" in row[-1] for row in top["Processes"])
        cpu_stats = [n for n in scenario.bundle.names()
                     if n.startswith("cgroup/") and cid in n and n.endswith("/cpu.stat")]
        if not cpu_stats:
            skip_or_fail("the cgroups collector recorded no cpu.stat for the container")
        text = scenario.bundle.read_text(cpu_stats[0])
        nr = int(re.search(r"nr_throttled (\d+)", text).group(1))  # type: ignore[union-attr]
        assert nr >= 5

    def test_oom_main_exited_in_window(self, scenario: Scenario) -> None:
        cid = scenario.ids["oommain"]
        state = scenario.inspect("oommain")["State"]
        assert state["OOMKilled"] is True and state["ExitCode"] == 137 and not state["Running"]
        events = [ev for _, ev in scenario.bundle.iter_jsonl("docker/events.jsonl")
                  if ev.get("Actor", {}).get("ID") == cid]
        actions = [ev["Action"] for ev in events]
        assert "oom" in actions and "die" in actions
        die = next(ev for ev in events if ev["Action"] == "die")
        assert die["Actor"]["Attributes"]["exitCode"] == "137"
        index = scenario.bundle.read_json("docker/index.json")
        assert index["containers"][cid]["why"].startswith("exited")
        assert scenario.bundle.has(f"docker/containers/{cid}/logs.txt")  # exited in the window

    def test_exec_and_child_attributed(self, scenario: Scenario) -> None:
        cid = scenario.ids["tree"]
        processes = scenario.bundle.read_json(f"docker/containers/{cid}/processes.json")
        state_pid = scenario.inspect("tree")["State"]["Pid"]
        pids = {int(p): v for p, v in processes["pids"].items()}
        for pid in (state_pid, scenario.child_pid, scenario.exec_pid):
            assert pid in pids, (pid, pids)
            assert any(s.endswith("/cgroup.procs") for s in pids[pid]["sources"])
        assert pids[scenario.child_pid]["ppid"] == state_pid
        assert pids[scenario.exec_pid]["ppid"] != state_pid  # exec'd by the shim, not a descendant
        hints = scenario.bundle.manifest["hints"]
        assert {scenario.exec_pid, scenario.child_pid} <= set(hints["pids"])
        assert scenario.bundle.read_json("docker/index.json")["containers"][cid]["taken"] is True
        assert "container_ids" not in hints  # nothing reads container ids: they are not handed on
        assert any(cid in p for p in hints["cgroup_paths"])
        assert any(src.startswith("exec:") for src in pids[scenario.exec_pid]["sources"])
        execs = [n for n in scenario.bundle.names() if n.startswith(f"docker/containers/{cid}/execs/")]
        assert execs
        exec_doc = scenario.bundle.read_json(execs[0])
        assert exec_doc["Pid"] == scenario.exec_pid
        assert exec_doc["ProcessConfig"]["arguments"] == ["602"]
        if not any(c["name"] == "procfs" for c in scenario.bundle.collectors()):
            return
        for pid in (scenario.child_pid, scenario.exec_pid):  # procfs followed the hint
            assert cid in scenario.bundle.read_text(f"proc/{pid}/cgroup")

    def test_logs_with_timestamps_redacted(self, scenario: Scenario) -> None:
        cid = scenario.ids["logger"]
        text = scenario.bundle.read_text(f"docker/containers/{cid}/logs.txt")
        lines = text.splitlines()
        assert any("CUDA out of memory" in line for line in lines)
        assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z ", line) for line in lines)
        assert "tok-12345" not in text and "API_TOKEN=<redacted:" in text

    def test_redaction(self, scenario: Scenario) -> None:
        for name in scenario.bundle.names():
            if name.startswith("docker/"):
                data = scenario.bundle.read_bytes(name)
                assert b"hunter2-secret" not in data and b"hunter3" not in data, name
        env = scenario.inspect("nvenv")["Config"]["Env"]
        assert "NVIDIA_VISIBLE_DEVICES=0,GPU-8f2c1e4a-0b1c-4d2e" in env
        assert any(v.startswith("DB_PASSWORD=<redacted:") for v in env)
        assert scenario.bundle.manifest["redaction"]["counts"]


class TestAllocations:
    def _check_sources(self, scenario: Scenario, name: str, alloc: dict[str, Any]) -> None:
        """Every source pointer resolves, in the captured member, to the quoted excerpt."""
        docs = {"container-inspect": scenario.inspect(name),
                "engine-info": scenario.bundle.read_json("docker/info.json")}
        image_id = docs["container-inspect"]["Image"].split(":")[1]
        docs["image-inspect"] = scenario.bundle.read_json(f"docker/images/{image_id}/inspect.json")
        for grant in alloc["grants"]:
            for src in grant["sources"]:
                value = resolve_pointer(docs[src["document"]], src["pointer"])
                assert json.loads(src["excerpt"]) == value, src

    def test_gpus_device_1_created(self, scenario: Scenario) -> None:
        a = scenario.allocation("gpudev1")
        assert a["scope"] == "devices" and a["devices"] == [{"id": "1", "kind": "index"}]
        assert a["origins"] == ["operator"]
        assert scenario.inspect("gpudev1")["State"]["Status"] == "created"
        self._check_sources(scenario, "gpudev1", a)

    def test_gpus_all_created(self, scenario: Scenario) -> None:
        a = scenario.allocation("gpuall")
        assert a["scope"] == "all"
        req = scenario.inspect("gpuall")["HostConfig"]["DeviceRequests"][0]
        assert req["Count"] == -1
        self._check_sources(scenario, "gpuall", a)

    def test_privileged_created(self, scenario: Scenario) -> None:
        a = scenario.allocation("privileged")
        assert a["scope"] == "all"
        assert any(g["mechanism"] == "privileged" for g in a["grants"])

    def test_cdi_created(self, scenario: Scenario) -> None:
        a = scenario.allocation("cdi")
        assert a["scope"] == "devices" and a["devices"][0]["id"] == "0"
        assert {g["mechanism"] for g in a["grants"]} >= {"cdi"}

    def test_runtime_nvidia_with_env_runs(self, scenario: Scenario) -> None:
        if not scenario.has_nvidia_runtime:
            reason = "the DOCKER_HOST engine has no nvidia runtime (dockerd --add-runtime nvidia=runc)"
            skip_or_fail(reason)
        a = scenario.allocation("nvenv")
        assert scenario.inspect("nvenv")["State"]["Running"] is True
        assert [d["id"] for d in a["devices"]] == ["0", "GPU-8f2c1e4a-0b1c-4d2e"]
        assert a["origins"][0] == "operator"
        self._check_sources(scenario, "nvenv", a)

    def test_image_env_under_default_runtime(self, scenario: Scenario) -> None:
        a = scenario.allocation("notebook")
        self._check_sources(scenario, "notebook", a)
        if scenario.engine.default_runtime == "nvidia":
            assert a["scope"] == "all"
            assert set(a["origins"]) == {"image", "engine-default-runtime"}
        else:  # an external engine with runc as default: the image's ENV has no effect
            assert a["scope"] == "none"
        b = scenario.allocation("notebook-runc")
        assert b["scope"] == "none"
        assert any(not g["effective"] and g["scope"] == "all" for g in b["grants"])

    def test_plain_container_has_no_gpu(self, scenario: Scenario) -> None:
        assert scenario.allocation("cpuhog")["scope"] == "none"


# ---------------------------------------------------------------------------------------------


@pytest.fixture
def throwaway_engine() -> Iterator[DockerEngine]:
    """A private engine these tests may stop, kill or freeze."""
    try:
        engine = start_engine(default_runtime="nvidia")
    except EngineUnavailable as exc:
        skip_or_fail(f"cannot start a private engine: {exc}")
    try:
        build_images(engine)
        for i in range(3):
            engine.run_labelled("run", "-d", "--network", "none", BUSYBOX_IMAGE, *SLEEP)
            engine.run_labelled("create", "--name", f"created-{i}", BUSYBOX_IMAGE)
        yield engine
    finally:
        if engine.pid is not None:
            try:
                os.kill(engine.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        stop_engine(engine)


class _StopEngineMidway(DockerCollector):
    """The real collector; the engine is stopped (or frozen) right after the container list."""

    def __init__(self, pid: int, sig: signal.Signals) -> None:
        super().__init__()
        self.pid, self.sig = pid, sig

    @staticmethod
    def _choose_real(listing: list[Any], start: Any) -> list[dict[str, Any]]:
        return DockerCollector._choose(listing, start)

    def _choose(self, listing: list[Any], start: Any) -> list[dict[str, Any]]:  # type: ignore[override]
        os.kill(self.pid, self.sig)
        if self.sig == signal.SIGKILL:
            wait_for(lambda: not os.path.exists(f"/proc/{self.pid}/cmdline")
                     or open(f"/proc/{self.pid}/stat").read().split()[2] == "Z", timeout=10)
        return self._choose_real(listing, start)


class TestEngineFailures:
    def test_engine_killed_mid_capture(self, throwaway_engine: DockerEngine, tmp_path: Path) -> None:
        assert throwaway_engine.pid is not None
        collector = _StopEngineMidway(throwaway_engine.pid, signal.SIGKILL)
        bundle, elapsed = capture(throwaway_engine, tmp_path, [collector], timeout_s=20,
                                  extra={"docker.call_timeout_s": "2"})
        st = status(bundle)
        assert st["status"] == "partial", st
        assert "engine calls failed" in st["error"]
        assert bundle.has("docker/containers.json") and bundle.has("docker/index.json")
        assert elapsed < 20

    def test_engine_frozen_mid_capture_costs_its_deadline(self, throwaway_engine: DockerEngine,
                                                          tmp_path: Path) -> None:
        assert throwaway_engine.pid is not None
        collector = _StopEngineMidway(throwaway_engine.pid, signal.SIGSTOP)
        bundle, elapsed = capture(throwaway_engine, tmp_path, [collector], timeout_s=30,
                                  extra={"docker.call_timeout_s": "2"})
        st = status(bundle)
        assert st["status"] == "partial", st
        index = bundle.read_json("docker/index.json")
        assert any(c["error"] for c in index["calls"])
        assert elapsed < 15, elapsed  # per-call timeouts, not the 30 s collector deadline

    def test_engine_frozen_before_capture(self, throwaway_engine: DockerEngine, tmp_path: Path) -> None:
        assert throwaway_engine.pid is not None
        os.kill(throwaway_engine.pid, signal.SIGSTOP)
        bundle, elapsed = capture(throwaway_engine, tmp_path, [COLLECTOR], timeout_s=20,
                                  extra={"docker.call_timeout_s": "1"})
        st = status(bundle)
        assert st["status"] == "failed" and "timed out" in st["error"], st
        assert elapsed < 10

    def test_no_engine_is_unavailable(self, tmp_path: Path) -> None:
        missing = DockerEngine(docker_host=f"unix://{tmp_path}/nothing.sock", private=False)
        bundle, _ = capture(missing, tmp_path, [COLLECTOR], timeout_s=10)
        st = status(bundle)
        assert st["status"] == "unavailable" and "no Docker engine" in st["error"], st


def test_oom_four_ways_in_one_bundle(docker_engine: DockerEngine, tmp_path: Path) -> None:
    """A child OOM-killed under --memory 32m: the oom event, the cgroup's OOM counter and the
    kernel's OOM line (snapshot, container still running), then State.OOMKilled once the container
    exits during the sampling window (inspect-end.json): one bundle, one container."""
    e = docker_engine
    cid = e.run_labelled(
        "run", "-d", "--network", "none", "--memory", "32m", "--memory-swap", "32m", BUSYBOX_IMAGE,
        "sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1; "
                    "while [ ! -e /tmp/stop ]; do sleep 0.2; done")
    try:
        client = e.client()
        try:
            wait_for(lambda: any(ev for ev in client.events(
                since=int(time.time()) - 60, until=int(time.time()) + 1, decode=True,
                filters={"container": cid, "event": "oom"})))
        finally:
            client.close()

        def progress(msg: str) -> None:
            if msg.startswith("sampling"):  # every snapshot is taken: now the container exits
                e.cli("exec", cid, "touch", "/tmp/stop")

        opts = CaptureOptions(timeout_s=60, duration_s=2.0, interval_s=1.0, lookback_s=600,
                              extra={"docker.host": e.docker_host})
        result = run_capture(opts, tmp_path, collectors=[COLLECTOR, *_other_collectors()],
                             progress=progress)
        bundle = open_bundle(result.path)
        assert status(bundle)["status"] == "ok", status(bundle)

        running = bundle.read_json(f"docker/containers/{cid}/inspect.json")["State"]
        assert running["Running"] is True
        events = [ev for _, ev in bundle.iter_jsonl("docker/events.jsonl")]
        assert any(ev.get("Action") == "oom" and ev["Actor"]["ID"] == cid for ev in events)

        end = bundle.read_json(f"docker/containers/{cid}/inspect-end.json")["State"]
        assert end["OOMKilled"] is True and end["Running"] is False
        window = [ev for _, ev in bundle.iter_jsonl("docker/window/events.jsonl")]
        assert any(ev.get("Action") == "die" and ev["Actor"]["ID"] == cid for ev in window)

        samples = [ev for _, ev in bundle.iter_jsonl("docker/samples.jsonl")]
        assert all(isinstance(ev["t"], float) for ev in samples)

        counters = [n for n in bundle.names() if n.startswith("cgroup/") and cid in n
                    and (n.endswith("/memory.oom_control") or n.endswith("/memory.events"))]
        assert counters, "the cgroups collector recorded no OOM counter for the container"
        text = bundle.read_text(counters[0])
        assert int(re.search(r"oom_kill (\d+)", text).group(1)) >= 1  # type: ignore[union-attr]

        kernel = status(bundle, "kernel")
        if kernel["status"] not in ("ok", "partial") or not bundle.has("kernel/kmsg.txt"):
            skip_or_fail(f"no kernel log here: {kernel.get('error')}")
        kmsg = bundle.read_text("kernel/kmsg.txt")
        assert re.search(rf"oom-kill:.*task_memcg=[^,]*{cid}", kmsg)
    finally:
        e.cli("rm", "-f", cid, check=False)


def test_sampling_keeps_the_newest_stats_frame(docker_engine: DockerEngine, tmp_path: Path) -> None:
    cid = docker_engine.run_labelled("run", "-d", "--network", "none", BUSYBOX_IMAGE, *SLEEP)
    try:
        bundle, elapsed = capture(docker_engine, tmp_path, [COLLECTOR], duration_s=3.0,
                                  interval_s=1.0)
        assert status(bundle)["status"] == "ok", status(bundle)
        mine = [ev for _, ev in bundle.iter_jsonl("docker/samples.jsonl")
                if ev.get("container_id") == cid]
        with_frames = [ev for ev in mine if ev["stats"] is not None]
        assert len({ev["tick"] for ev in with_frames}) >= 2, mine
        assert len({ev["stats"]["read"] for ev in with_frames}) >= 2  # fresh frames, not one
        assert all(ev["stats"]["id"] == cid and "memory_stats" in ev["stats"] for ev in with_frames)
        assert elapsed < 15
    finally:
        docker_engine.cli("rm", "-f", cid, check=False)


def test_sampling_a_busy_engine_ends_inside_its_deadline(docker_engine: DockerEngine,
                                                          tmp_path: Path) -> None:
    """Twelve running containers, twelve stats streams: ending them must not take a second each
    (closing a stream whose reader waits for the engine's next frame once cost ~0.5 s a stream,
    and a 3 s window with 11 containers ran past the 9 s sampling deadline)."""
    ids = [docker_engine.run_labelled("run", "-d", "--network", "none", BUSYBOX_IMAGE, *SLEEP)
           for _ in range(12)]
    try:
        bundle, _ = capture(docker_engine, tmp_path, [COLLECTOR], duration_s=3.0, interval_s=1.0)
        record = status(bundle)
        assert record["status"] == "ok", record
        assert record["sampling"]["ticks"] == 4 and not record["sampling"]["errors"], record
        # the window's own length, its grace and one interval; closing 12 streams one after
        # another at ~0.5 s each does not fit
        assert record["duration_s"] < 3.0 + 5.0 + 1.0, record
        sampled = {ev["container_id"] for _, ev in bundle.iter_jsonl("docker/samples.jsonl")
                   if ev["stats"] is not None}
        assert set(ids) <= sampled
    finally:
        docker_engine.cli("rm", "-f", *ids, check=False)


def test_containers_that_ended_before_the_window_are_left_out(docker_engine: DockerEngine,
                                                               tmp_path: Path) -> None:
    from datetime import UTC, datetime

    old = docker_engine.run_labelled("run", "-d", "--network", "none", BUSYBOX_IMAGE, "true")
    try:
        client = docker_engine.client()
        try:
            wait_for(lambda: client.inspect_container(old)["State"]["Status"] == "exited")
        finally:
            client.close()
        time.sleep(1.1)
        bundle, _ = capture(docker_engine, tmp_path, [COLLECTOR], since=datetime.now(UTC))
        index = bundle.read_json("docker/index.json")
        assert index["containers"][old]["taken"] is False
        assert "before the window" in index["containers"][old]["why"]
        assert not [n for n in bundle.names() if n.startswith(f"docker/containers/{old}/")]
        assert not any(old in p for p in bundle.manifest["hints"].get("cgroup_paths", []))
        assert status(bundle)["status"] == "ok"
    finally:
        docker_engine.cli("rm", "-f", old, check=False)


class _RemoveOneMidway(DockerCollector):
    """The real collector; one container is removed right after the list (a real race)."""

    def __init__(self, engine: DockerEngine, cid: str) -> None:
        super().__init__()
        self.engine, self.cid = engine, cid

    def _choose(self, listing: list[Any], start: Any) -> list[dict[str, Any]]:  # type: ignore[override]
        self.engine.cli("rm", "-f", self.cid)
        return DockerCollector._choose(listing, start)


def test_container_removed_during_capture_is_a_race_not_a_failure(
        docker_engine: DockerEngine, tmp_path: Path) -> None:
    keep = docker_engine.run_labelled("run", "-d", "--network", "none", BUSYBOX_IMAGE, *SLEEP)
    gone = docker_engine.run_labelled("run", "-d", "--network", "none", BUSYBOX_IMAGE, *SLEEP)
    try:
        bundle, _ = capture(docker_engine, tmp_path, [_RemoveOneMidway(docker_engine, gone)])
        assert status(bundle)["status"] == "ok", status(bundle)
        calls = [c for c in bundle.read_json("docker/index.json")["calls"] if c["subject"] == gone]
        assert calls and all(c["race"] for c in calls if c["error"])
        assert any(c["error"] for c in calls)
        assert bundle.has(f"docker/containers/{keep}/inspect.json")
    finally:
        for cid in (keep, gone):
            docker_engine.cli("rm", "-f", cid, check=False)


@dataclass
class WorkloadLogs:
    bundle: Bundle
    ids: dict[str, str]
    printed: dict[str, float]  # when the workload containers were started (host clock)


@pytest.fixture(scope="module")
def workload_logs(docker_engine: DockerEngine, tmp_path_factory: pytest.TempPathFactory,
                  scenario: Scenario) -> Iterator[WorkloadLogs]:
    """The workload's own words, real published lines a second apart, and a log larger than
    logs.max_bytes (1000 lines of 400 bytes: the newest 256 KiB are kept). Started after
    ``scenario`` took its bundle, so that bundle (and its collector's time budget) stays as it was."""
    e = docker_engine
    tag = uuid.uuid4().hex[:8]
    ids: dict[str, str] = {}
    try:
        printed = {"ranklog": time.time()}
        ids["ranklog"] = e.run_labelled(
            "run", "-d", "--name", f"gf-{tag}-ranklog", "--network", "none",
            "-e", f"L1={L.NCCL_COMM_INIT.text}", "-e", f"L2={L.ILLEGAL_ADDRESS.text.splitlines()[0]}", BUSYBOX_IMAGE,
            "sh", "-c", 'echo "$L1"; sleep 1; echo "$L2" >&2; echo RANKLOG-DONE; exec sleep 600')
        ids["chatty"] = e.run_labelled(
            "run", "-d", "--name", f"gf-{tag}-chatty", "--network", "none", BUSYBOX_IMAGE,
            "sh", "-c", 'x=$(printf "%0400d" 0); i=0; while [ $i -lt 999 ]; do echo "[rank0]: step $i $x"; '
                        'i=$((i+1)); done; echo CHATTY-LAST; exec sleep 600')
        client = e.client()
        try:
            wait_for(lambda: b"RANKLOG-DONE" in client.logs(ids["ranklog"]))
            wait_for(lambda: b"CHATTY-LAST" in client.logs(ids["chatty"]))
        finally:
            client.close()
        # the scenario's containers are still there: room for all their calls on a busy machine
        bundle, _ = capture(e, tmp_path_factory.mktemp("docker-logs"), [COLLECTOR], lookback_s=600, timeout_s=180.0,
                            extra={"docker.call_timeout_s": "30"})
        calls = bundle.read_json("docker/index.json")["calls"]
        assert not [c for c in calls if c["subject"] in ids.values() and c["error"]], calls
        yield WorkloadLogs(bundle, ids, printed)
    finally:
        for cid in ids.values():
            e.cli("rm", "-f", cid, check=False)


class TestWorkloadLogs:
    def test_real_lines_become_signals_at_the_engine_times(self, workload_logs: WorkloadLogs) -> None:
        from forensics.analysis import build_model
        from forensics.parsing.logsignals.cuda import CudaFault
        from forensics.parsing.logsignals.nccl import NcclCommInit

        cid = workload_logs.ids["ranklog"]
        model = build_model([workload_logs.bundle.path])
        sigs = [s.signal for s in model.series(LogSignal) if s.container_id == cid]
        comm = next(s for s in sigs if isinstance(s, NcclCommInit))
        fault = next(s for s in sigs if isinstance(s, CudaFault))
        assert comm.rank == 36 and comm.nranks == 64 and fault.fault == "illegal-memory-access"
        assert comm.t is not None and fault.t is not None
        start = workload_logs.printed["ranklog"]
        assert start - 1 <= comm.t < fault.t <= start + 30 and fault.t - comm.t >= 0.9  # the sleep 1 between
        (tail,) = [t for t in model.series(LogTail) if t.container_id == cid]
        assert tail.t is not None and tail.t >= fault.t

    def test_newest_max_bytes_kept(self, workload_logs: WorkloadLogs) -> None:
        cid = workload_logs.ids["chatty"]
        data = workload_logs.bundle.read_bytes(f"docker/containers/{cid}/logs.txt")
        assert 200 * 1024 < len(data) <= 256 * 1024 and data.endswith(b" CHATTY-LAST\n")
        assert re.match(rb"^\d{4}-\d\d-\d\dT[0-9:.]+Z \[rank0\]: step \d+ 0{400}\n", data)  # a whole line first
        logs = workload_logs.bundle.read_json("docker/index.json")["containers"][cid]["logs"]
        assert logs["kept_bytes"] == len(data) and logs["dropped_oldest_bytes"] > 0
        assert logs["received_bytes"] == logs["kept_bytes"] + logs["dropped_oldest_bytes"]
