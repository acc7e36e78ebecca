"""The recorder's quiet check (activity gating) on v1 and v2 fixture hosts: every line the gated
collector writes is, byte for byte, the line a collector reading every file every tick writes for
that cgroup at that tick (``unchanged_until`` aside), whatever moved between ticks (activity files,
gauges, IO counters, a counter grown past what the check asks for, an activity file grown past half
a page and back, one that shrinks); and a quiet cgroup costs one ``pread`` per activity file
and nothing else. (The rules of gating: test_cgroup_gating.py.)"""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.collect.context import CollectContext, Tick
from forensics.collectors.cgroups import CgroupsCollector
from tests.support.host_evidence import DOCKER_SCOPE, fake_v2_host, make_context

STEP_S = 0.05
V1_PATH = "/docker/" + "5e" * 32
V1_FILES = {
    "cpu": {"cpu.stat": "nr_periods 10\nnr_throttled 2\nthrottled_time 1000\nnr_bursts 0\nburst_time 0\n",
            "cpu.cfs_quota_us": "50000\n", "cpu.cfs_period_us": "100000\n", "cpu.shares": "1024\n"},
    "cpuacct": {"cpuacct.usage": "123456789\n", "cpuacct.stat": "user 10\nsystem 2\n"},
    "memory": {"memory.usage_in_bytes": "1048576\n", "memory.limit_in_bytes": "9223372036854771712\n",
               "memory.max_usage_in_bytes": "2097152\n", "memory.failcnt": "0\n",
               "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
               "memory.stat": "cache 0\nrss 1048576\n", "cgroup.procs": "4242\n"},
    "pids": {"pids.current": "3\n", "pids.max": "max\n"},
    "blkio": {"blkio.throttle.io_service_bytes": "8:0 Read 4096\n8:0 Write 0\n8:0 Sync 4096\n8:0 Async 0\n"
              "8:0 Discard 0\n8:0 Total 4096\nTotal 4096\n",
              "blkio.throttle.io_serviced": "8:0 Read 1\n8:0 Write 0\n8:0 Sync 1\n8:0 Async 0\n"
              "8:0 Discard 0\n8:0 Total 1\nTotal 1\n"},
}


def fake_v1_host(root: Path) -> tuple[Path, Path]:
    """A v1 host (cpu, cpuacct, memory, pids and blkio each mounted apart, as on this project's
    hybrid test box) with one Docker-shaped cgroup. Returns (mountinfo, /proc/pressure)."""
    lines = []
    for n, (controller, files) in enumerate(V1_FILES.items()):
        mount = root / "cg" / controller
        for directory in (mount, mount / V1_PATH[1:]):
            directory.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (directory / name).write_text(text)
        lines.append(f"{30 + n} 1 0:{40 + n} / {mount} rw - cgroup cgroup rw,{controller}\n")
    mountinfo = root / "mountinfo"
    mountinfo.write_text("".join(lines))
    pressure = root / "pressure"
    pressure.mkdir()
    for resource in ("cpu", "memory", "io"):
        (pressure / resource).write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    return mountinfo, pressure


def _host(tmp_path: Path, layout: str) -> tuple[Path, Path, str, dict[str, Path]]:
    """(mountinfo, pressure, the container's path, its files by name)."""
    if layout == "v1":
        mountinfo, pressure = fake_v1_host(tmp_path)
        files = {name: tmp_path / "cg" / c / V1_PATH[1:] / name for c, names in V1_FILES.items() for name in names}
        return mountinfo, pressure, V1_PATH, files
    mountinfo, pressure = fake_v2_host(tmp_path)
    scope = tmp_path / "sys-fs-cgroup" / DOCKER_SCOPE[1:]
    (scope / "io.stat").write_text("8:0 rbytes=4096 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n")
    return mountinfo, pressure, DOCKER_SCOPE, {p.name: p for p in scope.iterdir() if p.is_file()}


def _pair(tmp_path: Path, mountinfo: Path, pressure: Path, path: str, idle_full_s: float
          ) -> dict[str, tuple[CgroupsCollector, CollectContext]]:
    pair = {}
    for name, gated in (("gated", True), ("every", False)):
        collector = CgroupsCollector(str(mountinfo), str(pressure), str(tmp_path / "noproc"))
        collector.activity_gating = gated
        pair[name] = collector, make_context(tmp_path / name, {"cgroup_paths": [path]}, interval_s=STEP_S,
                                             extra={"cgroups.idle_full_s": str(idle_full_s)})
    return pair


def _bump(path: Path, rng: random.Random, by: int | None = None) -> None:
    """Add to the first number of the file (its length may change, as a kernel counter's does)."""
    text = path.read_text()
    match = re.search(r"\d+", text)
    assert match is not None
    number = int(match.group()) + (by if by is not None else rng.randint(1, 10 ** rng.randint(1, 6)))
    path.write_text(text[:match.start()] + str(number) + text[match.end():])


def _lines(stage: Path, path: str) -> dict[int, bytes]:
    out = {}
    for line in (stage / "cgroup/samples.jsonl").read_bytes().splitlines():
        if line.startswith(b'{"cgroup": "' + path.encode() + b'"'):
            tick = int(re.search(rb'"tick": (\d+)', line).group(1))  # type: ignore[union-attr]
            out[tick] = line
    return out


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_every_gated_line_is_the_line_of_a_reader_of_every_file(tmp_path: Path, layout: str) -> None:
    mountinfo, pressure, path, files = _host(tmp_path, layout)
    pair = _pair(tmp_path, mountinfo, pressure, path, idle_full_s=0.4)
    activity = [n for n in ("cpu.stat", "cpuacct.usage", "memory.events", "memory.oom_control") if n in files]
    others = [n for n in ("memory.current", "memory.usage_in_bytes", "memory.failcnt", "pids.current", "io.stat",
                          "blkio.throttle.io_service_bytes", "blkio.throttle.io_serviced") if n in files]
    rng = random.Random(f"quiet-check-{layout}")
    long_file = files[activity[0]]
    kept_text = long_file.read_text()
    for index in range(60):
        if index == 20:  # an activity file's counter grows far past what the quiet check asks for
            long_file.write_text(kept_text.replace("\n", "0" * 40 + "\n", 1))
        elif index == 24:  # past half a page (read to its end, no descriptor kept), then back
            long_file.write_text(kept_text + "".join(f"nr_extra_{n} {n}\n" for n in range(300)))
        elif index == 27:
            long_file.write_text(kept_text)
        elif index == 33:  # an activity file that shrinks (a counter reset by hand), then the next one moves
            files[activity[-1]].write_text(files[activity[-1]].read_text().replace("0\n", "\n", 1))
        elif index == 34:
            _bump(files[activity[-1]], rng, 1)
        elif index % 3 == 0 and rng.random() < 0.6:
            _bump(files[rng.choice(activity)], rng)
        elif index % 3 == 1 and rng.random() < 0.6:
            _bump(files[rng.choice(others)], rng)  # a gauge or IO counter alone: seen at the next line
        now = Tick(index, time.time())
        for collector, ctx in pair.values():
            collector.sample(ctx, now)
        time.sleep(STEP_S)
    for collector, ctx in pair.values():
        collector.end_sampling(ctx)
    gated, every = _lines(tmp_path / "gated", path), _lines(tmp_path / "every", path)
    assert sorted(every) == list(range(60))
    assert 8 < len(gated) < 50, sorted(gated)
    for tick, line in gated.items():
        assert re.sub(rb'"unchanged_until": [0-9.e+]+, ', b"", line) == every[tick], tick
    for tick in (20, 24, 27, 33, 34):  # each activity file change got its line at that very tick
        assert tick in gated, sorted(gated)


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_a_quiet_cgroup_costs_one_pread_per_activity_file(tmp_path: Path, layout: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    mountinfo, pressure, path, files = _host(tmp_path, layout)
    collector, ctx = _pair(tmp_path, mountinfo, pressure, path, idle_full_s=30.0)["gated"]
    for index in range(3):
        collector.sample(ctx, Tick(index, time.time()))
    (target,) = [t for t in collector._plan or () if t.path == path]
    mine = {fd for fd in (collector._files.descriptor(f[3]) for f in target.files) if fd is not None}
    gate = {fd for fd in (collector._files.descriptor(target.files[i][3]) for i in target.gate) if fd is not None}
    assert len(gate) == len(target.gate) == (3 if layout == "v1" else 2)
    read: list[int] = []
    opened: list[str] = []
    real_pread, real_open = os.pread, os.open

    def pread(fd: int, size: int, offset: int) -> bytes:
        read.append(fd)
        return real_pread(fd, size, offset)

    def open_(name: str, *args: Any, **kwargs: Any) -> int:
        opened.append(str(name))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "open", open_)
    collector.sample(ctx, Tick(3, time.time()))
    monkeypatch.undo()
    assert sorted(fd for fd in read if fd in mine) == sorted(gate)
    assert not [p for p in opened if path.strip("/") in p]
    collector.end_sampling(ctx)
