"""The docker collector against a real podman (4.3, rootful) through its Docker-compatible API
service (``DOCKER_HOST=unix://.../podman.sock``): the Docker scenarios, on podman's cgroup layout
(``/libpod_parent/libpod-<id>`` under the cgroupfs manager).

Containers are made with the podman CLI on the service's storage, as on a podman host:
a CPU hog under 0.2 CPU, a main process OOM-killed under 32 MiB, the cuda-like image
(``NVIDIA_VISIBLE_DEVICES=all`` in its ENV), a container with a secret in its env, and a tree
with a child process (attributed by its cgroup, not by the main PID).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.bundle.reader import Bundle, open_bundle
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.docker.docker import COLLECTOR
from tests.support.podman_engine import BUSYBOX_REF, CUDA_LIKE_REF, PodmanEngine, podman_engine
from tests.support.polling import host_pids_with_cmdline, wait_for

__all__ = ["podman_engine"]

pytestmark = [pytest.mark.slow, pytest.mark.root]


@dataclass
class Podman:
    engine: PodmanEngine
    bundle: Bundle
    analysis: dict[str, Any]
    ids: dict[str, str]
    child_pid: int

    def inspect(self, name: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.bundle.read_json(f"docker/containers/{self.ids[name]}/inspect.json")
        return doc






def _nr_throttled(cid: str) -> int:
    for path in (f"/sys/fs/cgroup/cpu/libpod_parent/libpod-{cid}/cpu.stat",
                 f"/sys/fs/cgroup/libpod_parent/libpod-{cid}/cpu.stat"):
        if os.path.exists(path):
            for line in Path(path).read_text().splitlines():
                if line.startswith(("nr_throttled", "throttled_periods")):
                    return int(line.split()[1])
    return 0


def _collectors() -> list[Any]:
    from forensics.collectors.cgroups import CgroupsCollector
    from forensics.collectors.kernel import COLLECTOR as KERNEL
    from forensics.collectors.procfs import ProcfsCollector

    return [COLLECTOR, ProcfsCollector(), CgroupsCollector(), KERNEL]


@pytest.fixture(scope="module")
def podman(podman_engine: PodmanEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    e = podman_engine
    tag = uuid.uuid4().hex[:8]
    ids: dict[str, str] = {}

    def run(name: str, *args: str, image: str = BUSYBOX_REF, cmd: tuple[str, ...] = ("sleep", "600")) -> None:
        proc = e.podman("run", "-d", "--name", f"gf-{tag}-{name}", *args, image, *cmd)
        ids[name] = proc.stdout.strip().splitlines()[-1]

    try:
        run("cpuhog", "--cpus", "0.2", cmd=("sh", "-c", "while :; do :; done & exec sleep 600"))
        run("oommain", "--memory", "32m", "--memory-swap", "32m",
            cmd=("dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"))
        run("notebook", image=CUDA_LIKE_REF)
        run("nvenv", "-e", "NVIDIA_VISIBLE_DEVICES=0", "-e", "DB_PASSWORD=hunter2-secret")
        run("tree", cmd=("sh", "-c", "sleep 601 & exec sleep 600"))
        child = wait_for(lambda: host_pids_with_cmdline(["sleep", "601"], ids["tree"]))[0]
        client = e.client()
        try:
            wait_for(lambda: client.inspect_container(ids["oommain"])["State"]["Status"] == "exited")
            # podman 4.3's compat stats report throttling_data as zeros on cgroup v1: the
            # kernel's cpu.stat is the evidence
            wait_for(lambda: _nr_throttled(ids["cpuhog"]) >= 5, timeout=30)
        finally:
            client.close()
        out = tmp_path_factory.mktemp("podman-bundle")
        result = run_capture(CaptureOptions(timeout_s=90, lookback_s=600, duration_s=3, interval_s=1,
                                            extra={"docker.host": e.docker_host}),
                             out, collectors=_collectors())
        yield Podman(e, open_bundle(result.path), analyze_bundles([result.path]), ids, child)
    finally:
        e.podman("rm", "-f", "-t", "0", *ids.values(), check=False)


def _status(bundle: Bundle, name: str) -> dict[str, Any]:
    return next(c for c in bundle.collectors() if c["name"] == name)


def test_podman_answered_and_the_manifest_says_so(podman: Podman) -> None:
    st = _status(podman.bundle, "docker")
    assert st["status"] in ("ok", "partial"), st
    engine = podman.bundle.read_json("docker/engine.json")
    assert engine["engine"] == "podman"
    assert any(n.startswith("engine: podman 4.") for n in st.get("notes", [])), st


def test_every_container_inspected_with_podman_cgroups(podman: Podman) -> None:
    for name, cid in podman.ids.items():
        assert podman.inspect(name)["Id"] == cid, name
    img = podman.inspect("notebook")["Config"]["Env"]
    assert "NVIDIA_VISIBLE_DEVICES=all" in img


def test_cpu_hog_throttled(podman: Podman) -> None:
    cid = podman.ids["cpuhog"]
    assert podman.bundle.has(f"docker/containers/{cid}/stats.json")
    cpu_stats = [n for n in podman.bundle.names()
                 if n.startswith("cgroup/") and cid in n and n.endswith("/cpu.stat")]
    assert cpu_stats, "the cgroups collector found the libpod cgroup"
    assert "nr_throttled" in podman.bundle.read_text(cpu_stats[0])
    findings = [f for f in podman.analysis["findings"] if f["kind"] == "cpu-throttling"]
    assert any(s.get("id") == cid for f in findings for s in f["subjects"]), findings


def test_oom_killed_main(podman: Podman) -> None:
    state = podman.inspect("oommain")["State"]
    assert state["ExitCode"] == 137 and not state["Running"]
    cid = podman.ids["oommain"]
    findings = [f for f in podman.analysis["findings"] if f["kind"] == "oom-kill"]
    assert any(s.get("id") == cid and f["severity"] == "high"
               for f in findings for s in f["subjects"]), [f["summary"] for f in findings]


def test_child_process_attributed_by_libpod_cgroup(podman: Podman) -> None:
    text = podman.bundle.read_text(f"proc/{podman.child_pid}/cgroup")
    assert f"libpod-{podman.ids['tree']}" in text
    from forensics.parsing.attribution import attribute_proc_cgroup

    attribution, _ = attribute_proc_cgroup(text)
    assert (attribution.runtime, attribution.container_id) == ("podman", podman.ids["tree"])


def test_secret_redacted(podman: Podman) -> None:
    assert not any(b"hunter2-secret" in podman.bundle.read_bytes(m) for m in podman.bundle.names())
    env = podman.inspect("nvenv")["Config"]["Env"]
    assert "NVIDIA_VISIBLE_DEVICES=0" in env
    assert any(v.startswith("DB_PASSWORD=<redacted:") for v in env)
