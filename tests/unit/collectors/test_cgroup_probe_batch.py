"""The quiet check done for every cgroup at once (forensics.hostfs.probes.ProbeBatch):
which owners it says moved, in place updates of one owner's probe among many, a failed read
blamed on its owner only; and, through the collector, many cgroups whose activity files move in
turn still get, each, the line a reader of every file writes at that tick."""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.collect.context import Tick
from forensics.collectors.cgroups import CgroupsCollector
from forensics.hostfs.probes import Probe, ProbeBatch
from tests.support.host_evidence import make_context
from tests.unit.collectors.test_cgroup_quiet_check import V1_FILES, _bump


def _owner(tmp_path: Path, name: str, texts: list[bytes]) -> tuple[list[Path], Probe]:
    paths, probe = [], []
    for n, text in enumerate(texts):
        path = tmp_path / f"{name}-{n}"
        path.write_bytes(text)
        fd = os.open(path, os.O_RDONLY)
        paths.append(path)
        probe.append((fd, text, len(text) + 64))
    return paths, tuple(probe)


def test_the_batch_says_who_moved_with_what_was_read(tmp_path: Path) -> None:
    batch = ProbeBatch()
    owners = {key: _owner(tmp_path, f"o{key}", [b"usage %d\n" % key, b"oom_kill 0\n"]) for key in range(5)}
    for key, (_, probe) in owners.items():
        batch.set(key, probe)
    assert batch.read() == {}
    owners[3][0][1].write_bytes(b"oom_kill 1\n")
    assert batch.read() == {3: [b"usage 3\n", b"oom_kill 1\n"]}
    # owner 3's line was written with those bytes: its probe is replaced in place, among the others
    batch.set(3, ((owners[3][1][0][0], b"usage 3\n", 72), (owners[3][1][1][0], b"oom_kill 1\n", 75)))
    assert batch.read() == {}
    owners[0][0][0].write_bytes(b"usage 100\n")
    owners[4][0][0].write_bytes(b"usage 400\n")
    assert batch.read() == {0: [b"usage 100\n", b"oom_kill 0\n"], 4: [b"usage 400\n", b"oom_kill 0\n"]}
    batch.set(0, None)  # leaves: never read again
    batch.set(4, ((owners[4][1][0][0], b"usage 400\n", 74),))  # fewer descriptors: rebuilt
    assert batch.read() == {}
    assert len(batch) == 4
    owners[0][0][1].write_bytes(b"oom_kill 9\n")
    assert batch.read() == {}


def test_a_failed_read_is_blamed_on_its_owner_and_the_others_are_still_judged(tmp_path: Path) -> None:
    batch = ProbeBatch()
    owners = {key: _owner(tmp_path, f"o{key}", [b"a %d\n" % key, b"b %d\n" % key]) for key in range(4)}
    for key, (_, probe) in owners.items():
        batch.set(key, probe)
    os.close(owners[1][1][1][0])  # as a removed cgroup's file answers: an error
    owners[2][0][0].write_bytes(b"a 22\n")
    assert batch.read() == {1: None, 2: [b"a 22\n", b"b 2\n"]}


def test_a_long_answer_is_returned_as_read(tmp_path: Path) -> None:
    batch = ProbeBatch()
    paths, probe = _owner(tmp_path, "o", [b"usage 1\n"])
    batch.set(7, probe)
    paths[0].write_bytes(b"usage " + b"9" * 200 + b"\n")
    (read,) = batch.read()[7] or [b""]
    assert len(read) == probe[0][2]  # cut at the asked size: the caller reads that file again


def _v1_host(root: Path, paths: list[str]) -> tuple[Path, Path]:
    """fake_v1_host of test_cgroup_quiet_check with several Docker-shaped cgroups."""
    lines = []
    for n, (controller, files) in enumerate(V1_FILES.items()):
        mount = root / "cg" / controller
        for directory in [mount] + [mount / p[1:] for p in paths]:
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


@pytest.mark.parametrize("seed", range(3))
def test_many_cgroups_moving_in_turn_each_get_the_every_file_line(tmp_path: Path, seed: int) -> None:
    paths = [f"/docker/{n:02x}" + "7" * 62 for n in range(6)]
    mountinfo, pressure = _v1_host(tmp_path, paths)
    pair: dict[str, tuple[CgroupsCollector, Any]] = {}
    for name, gating in (("gated", True), ("every", False)):
        collector = CgroupsCollector(str(mountinfo), str(pressure), str(tmp_path / "noproc"))
        collector.activity_gating = gating
        pair[name] = collector, make_context(tmp_path / name, {"cgroup_paths": paths}, interval_s=0.05,
                                             extra={"cgroups.idle_full_s": "0.5"})
    rng = random.Random(f"batch-{seed}")
    activity = ("cpu/cpu.stat", "cpuacct/cpuacct.usage", "memory/memory.oom_control")
    others = ("memory/memory.usage_in_bytes", "pids/pids.current", "blkio/blkio.throttle.io_serviced")
    moved: dict[str, set[int]] = {p: set() for p in paths}
    for index in range(40):
        for path in rng.sample(paths, rng.randint(0, 3)):
            name = rng.choice(activity + others)
            controller, file = name.split("/")
            _bump(tmp_path / "cg" / controller / path[1:] / file, rng)
            if name in activity:
                moved[path].add(index)
        if index == 25:  # one grows past what the check asks for: read again in full
            target = tmp_path / "cg" / "cpuacct" / paths[2][1:] / "cpuacct.usage"
            target.write_text(target.read_text().strip() + "0" * 80 + "\n")
            moved[paths[2]].add(index)
        now = Tick(index, time.time())
        for collector, ctx in pair.values():
            collector.sample(ctx, now)
        time.sleep(0.05)
    for collector, ctx in pair.values():
        collector.end_sampling(ctx)
    text = {name: (tmp_path / name / "cgroup/samples.jsonl").read_bytes().splitlines() for name in pair}
    for path in paths:
        def lines(name: str, path: str = path) -> dict[int, bytes]:
            mine = [line for line in text[name] if line.startswith(b'{"cgroup": "' + path.encode() + b'"')]
            return {int(re.search(rb'"tick": (\d+)', line).group(1)): line for line in mine}  # type: ignore[union-attr]
        gated, every = lines("gated"), lines("every")
        assert sorted(every) == list(range(40))
        assert moved[path] <= set(gated), (path, sorted(moved[path] - set(gated)))  # each move at its tick
        assert len(gated) < 40
        for tick, line in gated.items():
            assert re.sub(rb'"unchanged_until": [0-9.e+]+, ', b"", line) == every[tick], (path, tick)
