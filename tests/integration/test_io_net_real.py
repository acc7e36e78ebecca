"""Block IO and network evidence from real parts: a container whose reads really are throttled
(``--device-read-bps`` on the block device under the engine's data root, O_DIRECT reads so the page
cache cannot hide it), captured with the docker, cgroups and net collectors and analyzed; and
captured again without the cgroups collector, where the engine's own stats (``blkio_stats``) and
the container's ``HostConfig`` limit must tell the same story."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.bundle.reader import open_bundle
from forensics.capture.context import CaptureOptions
from forensics.capture.runner import run_capture
from forensics.collectors.cgroups import COLLECTOR as CGROUPS
from forensics.collectors.docker.docker import COLLECTOR as DOCKER
from forensics.collectors.net import COLLECTOR as NET
from forensics.parsing.docker_stats import blkio_bytes
from tests.support.docker_engine import BUSYBOX_IMAGE, DockerEngine

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


def _wait(predicate: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"condition not met within {timeout} s")


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
        _wait(lambda: e.cli("exec", cid, "test", "-e", "/tmp/ready", check=False).returncode == 0)
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
