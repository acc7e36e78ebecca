"""The recorder's cgroups driver re-planning over real cgroups (v1 cpu, cpuacct, memory, pids,
Docker-shaped paths made here and removed afterwards), driven tick by tick as its sampler child
drives it: a removed container's cgroup gets its error line the very next tick, a new container's
cgroup is planned within ``replan_s``, and the re-plan keeps the descriptors of the cgroups planned
again (none is opened again)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forensics.collect.context import Tick
from forensics.record.child import RecordSink
from forensics.record.sources import CgroupsDriver
from tests.support.env import is_root, need
from tests.support.host_evidence import make_context
from tests.support.v1_cgroups import HIERARCHIES, V1, enter_command, make_dirs, remove_dirs

pytestmark = [pytest.mark.root]
REPLAN_S = 1.0
STEP_S = 0.2


class Host:
    def __init__(self) -> None:
        self.tag = f"gpuforensics-replan-{os.getpid()}-{secrets.token_hex(3)}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> str:
        """A container: its cgroup in every hierarchy and one sleeping process in it."""
        path = f"/{self.tag}/docker-{secrets.token_hex(32)}.scope"
        make_dirs(path)
        proc = self.procs[path] = subprocess.Popen(["sh", "-c", f"{enter_command(path)}; exec sleep 600"])
        deadline = time.monotonic() + 10  # in its cgroups before anyone looks (as runc does it)
        while f"memory:{path}" not in Path(f"/proc/{proc.pid}/cgroup").read_text().replace("memory,", ""):
            assert time.monotonic() < deadline, "the container's process never entered its cgroup"
            time.sleep(0.01)
        while "sleep" not in Path(f"/proc/{proc.pid}/cmdline").read_text():
            assert time.monotonic() < deadline, "the container's process never became sleep"
            time.sleep(0.01)
        return path

    def remove(self, path: str) -> None:
        proc = self.procs.pop(path)
        proc.kill()
        proc.wait(timeout=10)
        remove_dirs(path)


@pytest.fixture
def drivers() -> Iterator[list[CgroupsDriver]]:
    """The drivers a test made: their kept descriptors (every container cgroup's files on the host,
    thousands on a busy one) closed whatever the outcome, or the test process runs out of them."""
    made: list[CgroupsDriver] = []
    yield made
    for driver in made:
        driver.collector._files.close()


@pytest.fixture
def host() -> Iterator[Host]:
    need(is_root(), "root (creates cgroups)")
    need(all((V1 / h / "cgroup.procs").exists() for h in HIERARCHIES), "cgroup v1 cpu, cpuacct, memory, pids")
    made = Host()
    try:
        yield made
    finally:
        for path in list(made.procs):
            made.remove(path)
        for h in HIERARCHIES:
            try:
                (V1 / h / made.tag).rmdir()
            except OSError:
                pass
        assert not any((V1 / h / made.tag).exists() for h in HIERARCHIES)


def test_removed_at_once_new_within_replan_s_and_the_others_kept_open(host: Host, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      drivers: list[CgroupsDriver]) -> None:
    kept_one, gone = host.start(), host.start()
    driver = CgroupsDriver()
    drivers.append(driver)
    driver.replan_s = REPLAN_S
    sink = RecordSink()
    ctx = make_context(tmp_path, interval_s=STEP_S)
    ctx.sink = sink  # as the sampler child's
    driver.start(ctx)
    index = 0

    def tick() -> dict[str, dict[str, Any]]:
        """One tick; this tick's line of each cgroup."""
        nonlocal index
        driver.tick(ctx, Tick(index, time.time()))
        index += 1
        time.sleep(STEP_S)
        lines = [json.loads(line) for rec in sink.take_bytes() for line in rec[4].splitlines()]
        return {line["cgroup"]: line for line in lines}

    first = tick()
    assert kept_one in first and gone in first  # found by the /proc scan, planned at the first tick
    plan = driver.collector._plan
    kept_files = [f[3] for t in plan if t.path == kept_one for f in t.files]
    gone_files = [f[3] for t in plan if t.path == gone for f in t.files]
    assert kept_files and gone_files

    host.remove(gone)
    removed = tick()  # the very next tick, before any re-plan
    assert "removed" in json.dumps(removed[gone]["errors"]), removed[gone]

    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    new = host.start()
    started = time.monotonic()
    seen: dict[str, dict[str, Any]] = {}
    while new not in seen:
        assert time.monotonic() - started < REPLAN_S + 3.0, "the new container was not planned within replan_s"
        seen = tick()
    monkeypatch.undo()
    assert driver.collector._plan is not plan  # planned again: the new container is in, the removed one out
    assert [t.path for t in driver.collector._plan if t.path in (kept_one, gone, new)] == [kept_one, new]
    assert not set(opened) & set(kept_files)  # the container planned again was not opened again
    assert all(driver.collector._files.descriptor(f) is None for f in gone_files)  # the removed one's closed
    assert "errors" not in seen[new] and seen[new]["values"]["memory"]
    driver.collector.end_sampling(ctx)


def test_a_gpu_process_cgroup_that_is_gone_is_forgotten(host: Host, tmp_path: Path,
                                                        drivers: list[CgroupsDriver]) -> None:
    """A GPU process's cgroup handed over by the procfs source is planned even when no /proc scan
    finds it; once its directories are gone it must leave the plan, not stay there for the rest of
    the recorder's life with an empty line every tick (GPU jobs come and go all day)."""
    from forensics.specs.hints import CGROUP_PATHS

    path = f"/{host.tag}/docker-{secrets.token_hex(32)}.scope"  # no process in it: no scan finds it
    make_dirs(path)
    driver = CgroupsDriver()
    drivers.append(driver)
    driver.replan_s = REPLAN_S
    sink = RecordSink()
    ctx = make_context(tmp_path, interval_s=STEP_S)
    ctx.sink = sink
    driver.start(ctx)
    CGROUP_PATHS.publish(ctx, [path])
    driver.tick(ctx, Tick(0, time.time()))
    assert path in driver.extra and path in [t.path for t in driver.collector._plan]
    for h in HIERARCHIES:
        (V1 / h / path.lstrip("/")).rmdir()
    started, index = time.monotonic(), 1
    while path in driver.extra:
        assert time.monotonic() - started < REPLAN_S + 3.0, "the gone cgroup stayed planned"
        driver.tick(ctx, Tick(index, time.time()))
        index += 1
        time.sleep(STEP_S)
    sink.take_bytes()
    driver.tick(ctx, Tick(index, time.time()))
    lines = [json.loads(line) for rec in sink.take_bytes() for line in rec[4].splitlines()]
    assert path not in {line["cgroup"] for line in lines}
    driver.collector.end_sampling(ctx)
