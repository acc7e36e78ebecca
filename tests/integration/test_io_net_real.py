"""Block IO and network evidence from real parts: a container whose reads really are throttled
(``--device-read-bps`` on the block device under the engine's data root, O_DIRECT reads so the page
cache cannot hide it), captured with the docker, cgroups and net collectors and analyzed; and
captured again without the cgroups collector, where the engine's own stats (``blkio_stats``) and
the container's ``HostConfig`` limit must tell the same story. And a veth pair the test creates, one
end in a container's network namespace: the container's traffic on its own counters, and the host
end taken down and up while sampling is a ``network-errors`` finding."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.bundle.reader import open_bundle
from forensics.capture.runner import run_capture
from forensics.collect.context import CaptureOptions
from forensics.collectors.cgroups import COLLECTOR as CGROUPS
from forensics.collectors.docker.docker import COLLECTOR as DOCKER
from forensics.collectors.net import COLLECTOR as NET
from forensics.parsing.docker_stats import blkio_bytes
from forensics.parsing.netstat import net_dev_line, parse_net_dev
from tests.support.docker_engine import BUSYBOX_IMAGE, DockerEngine
from tests.support.kube_exec import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LIMIT_BPS = 1024 * 1024  # docker's "1mb"


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def _backing_device(path: str) -> tuple[str, str]:
    """The block device node under ``path`` (``/dev/vda``) and its ``MAJ:MIN``, from mountinfo."""
    dev = os.stat(path).st_dev
    want = f"{os.major(dev)}:{os.minor(dev)}"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[2] == want:
            source = line.split(" - ", 1)[1].split()[1]
            if source.startswith("/dev/") and os.path.exists(source):
                return source, want
    _skip_or_fail(f"the engine's data root {path} is not on a block device node (device {want})")
    raise AssertionError("unreachable")


@dataclass
class Reader:
    engine: DockerEngine
    cid: str
    majmin: str


@pytest.fixture(scope="module")
def reader(docker_engine: DockerEngine) -> Iterator[Reader]:
    e = docker_engine
    root = e.cli("info", "--format", "{{.DockerRootDir}}").stdout.strip()
    device, majmin = _backing_device(root)
    # 4 MiB written with O_DIRECT, then read back with O_DIRECT in a loop: every read reaches the
    # device, and the blkio/io.max throttle holds it to LIMIT_BPS
    cid = e.run_labelled(
        "run", "-d", "--network", "none", "--device-read-bps", f"{device}:1mb", BUSYBOX_IMAGE,
        "sh", "-c", "dd if=/dev/urandom of=/tmp/data bs=1M count=4 oflag=direct 2>/dev/null && touch /tmp/ready; "
                    "while :; do dd if=/tmp/data of=/dev/null bs=64k iflag=direct 2>/dev/null; done")
    try:
        assert wait_for(lambda: e.cli("exec", cid, "test", "-e", "/tmp/ready", check=False).returncode == 0, 30)
        time.sleep(1.0)  # the loop is reading: the first sampling interval is already throttled
        yield Reader(e, cid, majmin)
    finally:
        e.cli("rm", "-f", cid, check=False)


def _capture(r: Reader, out: Path, collectors: list[Any]) -> Path:
    opts = CaptureOptions(timeout_s=90, duration_s=4.0, interval_s=1.0, lookback_s=600,
                          extra={"docker.host": r.engine.docker_host})
    return run_capture(opts, out, collectors=collectors).path


def _the_stall(doc: dict[str, Any], r: Reader) -> dict[str, Any]:
    stalls = [f for f in doc["findings"] if f["kind"] == "io-stall"]
    assert len(stalls) == 1, [(f["kind"], f["summary"]) for f in doc["findings"]]
    (f,) = stalls
    victims = [s for s in f["subjects"] if s["role"] == "victim" and s["type"] == "container"]
    assert [s["id"] for s in victims] == [r.cid], f["subjects"]
    assert f"device {r.majmin}" in f["summary"] and "against 1.0 MiB/s" in f["summary"], f["summary"]
    # the throttle bit: the rate it names is the limit's, not the device's
    m = re.search(r"\(([0-9.]+) (KiB|MiB)/s against 1\.0 MiB/s\)", f["summary"])
    assert m is not None, f["summary"]
    rate = float(m.group(1)) * (1024 if m.group(2) == "KiB" else 1024 * 1024)
    assert 0.8 * LIMIT_BPS <= rate <= 1.1 * LIMIT_BPS, f["summary"]
    assert f["metrics"]["pinned_intervals"] >= 2, f["metrics"]
    # no GPU here: pinned at its limit with no GPU known to starve is the low form
    assert f["severity"] == "low" and f["metrics"]["gpu_starved"] is False
    return f


def test_a_throttled_reader_is_an_io_stall_with_its_limit(reader: Reader, tmp_path: Path) -> None:
    path = _capture(reader, tmp_path, [DOCKER, CGROUPS, NET])
    bundle = open_bundle(path)
    statuses = {c["name"]: c["status"] for c in bundle.collectors()}
    assert statuses["docker"] == "ok" and statuses["cgroups"] in ("ok", "partial"), statuses
    # the limit, as the kernel holds it, is in the bundle verbatim
    limit_members = [n for n in bundle.names() if reader.cid in n and (
        n.endswith("/blkio.throttle.read_bps_device") or n.endswith("/io.max"))]
    assert limit_members, [n for n in bundle.names() if reader.cid in n]
    assert any(f"{reader.majmin} " in bundle.read_text(n) and str(LIMIT_BPS) in bundle.read_text(n)
               for n in limit_members)
    f = _the_stall(analyze_bundles([path]), reader)
    members = {ev["member"] for ev in f["evidence"]}
    assert "cgroup/samples.jsonl" in members and "cgroup/index.json" in members, members


def test_without_the_cgroups_collector_the_engine_stats_tell_it(reader: Reader, tmp_path: Path) -> None:
    path = _capture(reader, tmp_path, [DOCKER, NET])
    bundle = open_bundle(path)
    frames = [rec["stats"] for _, rec in bundle.iter_jsonl("docker/samples.jsonl")
              if rec.get("container_id") == reader.cid and rec.get("stats")]
    reads = [blkio_bytes(fr)[reader.majmin][0] for fr in frames if blkio_bytes(fr)]  # type: ignore[index]
    assert len(reads) >= 3 and reads == sorted(reads) and reads[-1] > reads[0], reads
    f = _the_stall(analyze_bundles([path]), reader)
    members = {ev["member"] for ev in f["evidence"]}
    assert "docker/samples.jsonl" in members, members
    assert f"docker/containers/{reader.cid}/inspect.json" in members, members
    assert any("io_service_bytes_recursive" in ev["excerpt"] for ev in f["evidence"])


# ---------------------------------------------------------------------------------------------
# a veth pair: one end in the host's namespace, the other in a container's, traffic between them


class _Sink(threading.Thread):
    """A TCP listener on the host end that reads and discards whatever the container sends."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.server = socket.create_server((address, 0))
        self.server.settimeout(0.5)
        self.port = self.server.getsockname()[1]
        self.received = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(0.5)
                while not self.stop.is_set():
                    try:
                        chunk = conn.recv(1 << 16)
                    except TimeoutError:
                        continue
                    except OSError:
                        break
                    if not chunk:
                        break
                    self.received += len(chunk)

    def close(self) -> None:
        self.stop.set()
        self.server.close()
        self.join(5)


def _ip(*args: str, netns_pid: int | None = None) -> None:
    cmd = ["ip", *args] if netns_pid is None else ["nsenter", "-t", str(netns_pid), "-n", "ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=10)


def test_veth_traffic_is_the_containers_and_a_flap_is_a_network_error(docker_engine: DockerEngine,
                                                                     tmp_path: Path) -> None:
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        _skip_or_fail("needs ip (iproute2) and nsenter (util-linux)")
    e = docker_engine
    tag = uuid.uuid4().hex[:6]
    host_if, peer_if = f"gfv{tag}h", f"gfv{tag}c"
    net = f"10.213.{int(tag[:2], 16)}"
    cid = e.run_labelled("run", "-d", "--network", "none", BUSYBOX_IMAGE, "sleep", "600")
    sink: _Sink | None = None
    try:
        pid = int(e.cli("inspect", "--format", "{{.State.Pid}}", cid).stdout.strip())
        try:
            _ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        except subprocess.CalledProcessError as exc:
            _skip_or_fail(f"cannot create a veth pair here: {exc.stderr.decode(errors='replace').strip()}")
        _ip("link", "set", peer_if, "netns", str(pid))
        _ip("addr", "add", f"{net}.1/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("addr", "add", f"{net}.2/30", "dev", peer_if, netns_pid=pid)
        _ip("link", "set", peer_if, "up", netns_pid=pid)
        assert wait_for(lambda: Path(f"/sys/class/net/{host_if}/operstate").read_text().strip() == "up", 30)
        sink = _Sink(f"{net}.1")
        sink.start()
        # the container sends 8 MiB a round, again and again, to the host end
        e.cli("exec", "-d", cid, "sh", "-c",
              f"while :; do dd if=/dev/zero bs=64k count=128 2>/dev/null | nc {net}.1 {sink.port}; sleep 0.2; done")
        assert wait_for(lambda: sink is not None and sink.received > 0, 30)

        def flap() -> None:  # down for two ticks, then up again, while sampling
            time.sleep(3.3)
            _ip("link", "set", host_if, "down")
            time.sleep(2.2)
            _ip("link", "set", host_if, "up")

        flapper = threading.Thread(target=flap, daemon=True)

        def progress(msg: str) -> None:
            if msg.startswith("sampling") and not flapper.is_alive() and flapper.ident is None:
                flapper.start()

        opts = CaptureOptions(timeout_s=90, duration_s=8.0, interval_s=1.0, lookback_s=600,
                              extra={"docker.host": e.docker_host})
        path = run_capture(opts, tmp_path, collectors=[DOCKER, NET], progress=progress).path
        flapper.join(10)
        bundle = open_bundle(path)

        # the host end as the kernel reports it: a veth's speed and its state
        index = bundle.read_json("net/index.json")
        assert index["interfaces"][host_if]["speed_mbps"] == 10000, index["interfaces"][host_if]
        (ns,) = [n for n in index["namespaces"] if n["container_id"] == cid]
        assert peer_if in ns["interfaces"], ns
        lines = [rec for _, rec in bundle.iter_jsonl("net/samples.jsonl")]
        # each line writes a state when it moved (links) and a /proc/net/dev line when it moved (net_dev)
        states: list[str | None] = []
        received_by_tick: list[int | None] = []
        for rec in lines:
            moved = rec["links"].get(host_if)
            states.append(moved["operstate"] if moved is not None else states[-1] if states else None)
            line = rec["net_dev"].get(host_if)
            counts = net_dev_line(line.encode()) if line is not None else None
            received_by_tick.append(counts[1] if counts else received_by_tick[-1] if received_by_tick else None)
        assert "down" in states and states[0] == "up" and states[-1] == "up", states
        assert 3 <= sum(1 for rec in lines if host_if in rec["links"]) < len(lines), lines  # written when it moved
        # before the flap: the container's own counters moved, and what it sent the host end received
        up = lines[:states.index("down")]
        inode = str(ns["inode"])
        mine = [(received_by_tick[i], parse_net_dev(rec["netns"][inode]["dev"])[peer_if]["tx_bytes"])
                for i, rec in enumerate(up) if inode in rec["netns"]]
        assert len(mine) >= 2, up
        received, sent = mine[-1][0] - mine[0][0], mine[-1][1] - mine[0][1]
        assert sent >= 1 << 20 and abs(received - sent) <= 0.1 * sent, mine

        doc = analyze_bundles([path])
        errors = [f for f in doc["findings"] if f["kind"] == "network-errors" and f["metrics"]["link"] == host_if]
        assert len(errors) == 1, [(f["kind"], f["summary"]) for f in doc["findings"]]
        (f,) = errors
        assert f["metrics"]["flapped"] is True and f["severity"] == "high", f
        assert f"interface {host_if}" in f["summary"] and "down" in f["summary"], f["summary"]
        assert all(ev["member"] == "net/samples.jsonl" for ev in f["evidence"]), f["evidence"]
        # 10 Gb/s was never near: no saturation named for it
        assert not [g for g in doc["findings"] if g["kind"] == "network-saturation"
                    and g["metrics"]["link"] == host_if]
    finally:
        if sink is not None:
            sink.close()
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=10, check=False)
        e.cli("rm", "-f", cid, check=False)
