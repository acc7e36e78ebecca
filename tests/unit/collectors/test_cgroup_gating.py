"""The recorder's activity gating of cgroup sampling on a v2 fixture host: a quiet cgroup gets a
line at most every ``cgroups.idle_full_s``, a moved CPU or OOM counter gets one that very tick (with
``unchanged_until``), the host root and capture's own sampling read
everything every tick. (Real cgroups and the recorder: tests/integration/test_cgroup_gating.py.)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from forensics.collect.context import CollectContext, Tick
from forensics.collectors.cgroups import CgroupsCollector
from tests.support.host_evidence import DOCKER_SCOPE, fake_v2_host, make_context, read_jsonl

STEP_S = 0.1


def _setup(tmp_path: Path, idle_full_s: float, gated: bool = True) -> tuple[CgroupsCollector, CollectContext, Path]:
    mountinfo, pressure = fake_v2_host(tmp_path)
    collector = CgroupsCollector(str(mountinfo), str(pressure), str(tmp_path / "noproc"))
    collector.activity_gating = gated
    ctx = make_context(tmp_path / "stage", {"cgroup_paths": [DOCKER_SCOPE]},
                       interval_s=STEP_S, extra={"cgroups.idle_full_s": str(idle_full_s)})
    return collector, ctx, tmp_path / "sys-fs-cgroup" / DOCKER_SCOPE[1:]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _run(collector: CgroupsCollector, ctx: CollectContext, ticks: int, before: Any = None) -> list[float]:
    """``ticks`` ticks STEP_S apart (``before(index)`` runs before each); their wall times."""
    times = []
    for index in range(ticks):
        if before is not None:
            before(index)
        times.append(time.time())
        collector.sample(ctx, Tick(index, times[-1]))
        time.sleep(STEP_S)
    collector.end_sampling(ctx)
    return times


def _lines(tmp_path: Path, path: str) -> list[dict[str, Any]]:
    return [line for line in read_jsonl(tmp_path / "stage", "cgroup/samples.jsonl") if line["cgroup"] == path]


def test_a_quiet_cgroup_gets_a_line_at_most_every_idle_full_s(tmp_path: Path) -> None:
    collector, ctx, scope = _setup(tmp_path, idle_full_s=0.6)
    # memory.current is a gauge, not an activity file: a change alone waits for the next full read
    times = _run(collector, ctx, 24, lambda i: i == 2 and _edit(scope / "memory.current", "\n", "0\n"))
    root, docker = _lines(tmp_path, "/"), _lines(tmp_path, DOCKER_SCOPE)
    assert [line["tick"] for line in root] == list(range(24))  # the host root: every tick
    ticks = [line["tick"] for line in docker]
    assert ticks[0] == 0 and 3 <= len(ticks) <= 24 // 3, ticks
    gaps = [b["t"] - a["t"] for a, b in zip(docker, docker[1:], strict=False)]
    assert max(gaps) <= 0.6 + STEP_S, gaps  # at most idle_full_s apart (a late tick aside)
    assert "unchanged_until" not in docker[0]
    for line in docker[1:]:  # each says when its activity files were last read unchanged: the tick before
        assert line["unchanged_until"] == times[line["tick"] - 1]
    assert docker[0]["values"] == {**docker[1]["values"], "memory": docker[0]["values"]["memory"]}
    first_after = next(line for line in docker if line["tick"] > 2)
    assert first_after["values"]["memory"]["current_bytes"] == docker[0]["values"]["memory"]["current_bytes"] * 10


def test_a_moved_cpu_or_oom_counter_gets_a_line_that_very_tick(tmp_path: Path) -> None:
    collector, ctx, scope = _setup(tmp_path, idle_full_s=30.0)
    usage = (scope / "cpu.stat").read_text().split("usage_usec ", 1)[1].split("\n", 1)[0]

    def before(index: int) -> None:
        if index == 4:  # the container ran
            _edit(scope / "cpu.stat", f"usage_usec {usage}\n", f"usage_usec {int(usage) + 1500}\n")
        if index == 7:  # an OOM kill (the victim's exit may even not show in its CPU)
            _edit(scope / "memory.events", "oom_kill 3\n", "oom_kill 4\n")
        if index == 8:  # an activity file longer than half a page: read through to its end
            with open(scope / "cpu.stat", "a") as f:
                f.write("".join(f"nr_extra_{n} {n}\n" for n in range(300)))

    times = _run(collector, ctx, 10, before)
    docker = _lines(tmp_path, DOCKER_SCOPE)
    assert [line["tick"] for line in docker] == [0, 4, 7, 8]
    assert [line.get("unchanged_until") for line in docker] == [None, times[3], times[6], None]
    assert docker[1]["values"]["cpu"]["usage_ns"] == (int(usage) + 1500) * 1000
    assert docker[1]["values"]["pressure"] and docker[1]["values"]["pids"]  # the other files read too
    assert docker[2]["values"]["memory"]["events"]["oom_kill"] == 4
    assert docker[3]["values"]["cpu"]["usage_ns"] == docker[1]["values"]["cpu"]["usage_ns"]


def test_capture_sampling_and_a_bound_at_the_interval_read_every_tick(tmp_path: Path) -> None:
    for gated, bound in ((False, 30.0), (True, STEP_S)):
        work = tmp_path / f"{gated}"
        collector, ctx, _ = _setup(work, idle_full_s=bound, gated=gated)
        _run(collector, ctx, 5)
        docker = _lines(work, DOCKER_SCOPE)
        assert [line["tick"] for line in docker] == [0, 1, 2, 3, 4]
        assert not any("unchanged_until" in line for line in docker)


def test_a_cgroup_gone_from_the_plan_is_forgotten_at_the_next_plan(tmp_path: Path) -> None:
    """A node's containers come and go all day: what gating keeps of a cgroup (its activity files
    bytes) must go with it, or the recorder grows with every container it ever saw."""
    collector, ctx, scope = _setup(tmp_path, idle_full_s=5.0)
    for index in range(3):
        collector.sample(ctx, Tick(index, time.time()))
    assert DOCKER_SCOPE in collector._quiet
    ctx.hints["cgroup_paths"] = []  # the container is gone: the recorder plans again without it
    (tmp_path / "noproc").mkdir()  # (and finds no GPU process in a cgroup either)
    collector.replan(ctx)
    collector.sample(ctx, Tick(3, time.time()))
    assert DOCKER_SCOPE not in collector._quiet
    collector.end_sampling(ctx)
