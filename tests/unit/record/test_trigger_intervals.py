"""Cgroup rules at an evaluation interval: a rule on the cgroups' cumulative counters with duration
D looks every max(one tick, D / EVALUATIONS_PER_DURATION) (the shortest such D configured), reading
each cgroup's shares over the whole interval since its last look; the cgroup lines are kept as text
and parsed only then. The shares between two looks are those from every line, and a rule fires no
later than D + 2 intervals + 2 ticks after its condition began, never before it was seen to hold
for D."""

from __future__ import annotations

import random

import pytest

from forensics.record.live.state import LiveState
from forensics.record.triggers import Evaluator, parse_rules
from forensics.record.triggers.evaluate import EVALUATIONS_PER_DURATION, Firing
from tests.unit.record.test_trigger_changes import CID, PATH, T0, Cgroups

BENCH_RULES = ["gpu.util>90%:5m", "container.throttled>50%:2m", "psi.memory.some>20%:1m", "psi.io.full>10%:5m",
               "oom", "xid:79", "unallocated-gpu-use"]


def test_the_interval_follows_the_shortest_cgroup_rule() -> None:
    assert EVALUATIONS_PER_DURATION == 6
    assert Evaluator(parse_rules(BENCH_RULES)).cgroup_every_s == 10.0  # 1 m / 6
    assert Evaluator(parse_rules(BENCH_RULES), interval_s=15.0).cgroup_every_s == 15.0  # never under a tick
    assert Evaluator(parse_rules(BENCH_RULES), interval_s=4.0).cgroup_every_s == 8.0  # whole ticks, not over D / 6
    assert Evaluator(parse_rules([*BENCH_RULES, "container.throttled>50%:10s"])).cgroup_every_s == 1.0
    assert Evaluator(parse_rules(["gpu.util>90%:10s", "oom"])).cgroup_every_s is None  # no cgroup rule: never read


def _lines(rng: random.Random, cg: Cgroups, tick: int, paths: list[str]) -> list[str]:
    return [cg.line(p, tick, periods=rng.choice((0, 5, 10)), throttled=rng.randint(0, 5),
                    mem_stall_us=rng.randint(0, 900_000)) for p in paths]


def test_the_shares_between_sparse_looks_are_those_from_every_line() -> None:
    """Two live states fed the same lines (busy cgroups, each silent now and then, the host's root):
    the triggers read one every tick, the other every 7 ticks. The sparse shares over each 7 ticks
    are the per-tick ones combined (PSI weighted by time; throttling: the periods' counters), and
    what cgroups() shows (the last interval's shares) does not depend on how often they read."""
    rng = random.Random(15)
    paths = [f"/docker/{c:064x}" for c in range(5)]
    dense, sparse = LiveState(), LiveState()
    cg_d, cg_s = Cgroups(dense), Cgroups(sparse)
    per_tick: dict[str, list[tuple[float, float]]] = {}  # path -> (dt, memory some %) per dense row
    at_look: dict[str, dict[str, int]] = {}  # path -> its counters at the last sparse look
    checked = 0
    for tick in range(64):
        busy = [p for p in paths if rng.random() < 0.8 or tick == 0]
        lines = _lines(rng, cg_d, tick, busy)
        cg_s.counters = {k: dict(v) for k, v in cg_d.counters.items()}
        cg_d.tick(tick, *lines)
        cg_s.tick(tick, *lines)
        for path, _, t0, t, _, psi in dense.take_cgroup_rows()[0]:
            per_tick.setdefault(path, []).append((t - t0, psi[2] or 0.0))  # PSI_KEYS[2]: memory some
        if tick % 7:
            continue
        assert dense.cgroups() == sparse.cgroups() and dense.host_psi() == sparse.host_psi()
        rows, _, host = sparse.take_cgroup_rows()
        assert tick == 0 or (host is not None and host[1] - host[0] == 7.0)
        for path, _, t0, t, throttled, psi in rows:
            got = per_tick.pop(path)
            assert sum(dt for dt, _ in got) == pytest.approx(t - t0)
            assert psi[2] == pytest.approx(sum(dt * v for dt, v in got) / (t - t0))
            if path != "/":
                now, then = cg_d.counters[path], at_look[path]
                periods, throttled_periods = now["periods"] - then["periods"], now["throttled"] - then["throttled"]
                assert throttled == (pytest.approx(100.0 * throttled_periods / periods) if periods else 0.0)
                checked += 1
        assert not per_tick  # every cgroup the dense reader saw, the sparse one saw
        at_look = {k: dict(v) for k, v in cg_d.counters.items()}
    assert checked > 20


def _throttled_run(rule: str, start: int, ticks: int, dip: int | None = None) -> list[tuple[int, list[Firing]]]:
    """A container throttled 80 % from tick ``start`` on (calm before; calm again at tick ``dip``
    for one tick, if given), every tick evaluated; the firings per tick."""
    state = LiveState()
    ev = Evaluator(parse_rules([rule]))
    cg = Cgroups(state)
    out = []
    for tick in range(ticks):
        throttled = 8 if tick >= start and tick != dip else 0
        cg.tick(tick, cg.line(PATH, tick, periods=10, throttled=throttled))
        out.append((tick, ev.evaluate(state)))
    return out


@pytest.mark.parametrize("start", range(0, 12, 1))
def test_a_sparse_rule_fires_within_its_bound_and_never_early(start: int) -> None:
    rule, duration, every = "container.throttled>50%:1m", 60.0, 10.0
    got = [(tick, f) for tick, fs in _throttled_run(rule, start, 120) for f in fs]
    tick, first = got[0]
    assert first.subject == f"container {CID[:12]}"
    assert tick <= start + duration + 2 * every + 2  # the documented bound
    assert first.t - first.crossed_at >= duration  # seen to hold for D
    assert first.crossed_at >= T0 + start - every  # its first interval began at most one before


def test_a_sparse_rule_looks_every_interval_and_a_calm_interval_breaks_it() -> None:
    rule = "container.throttled>50%:1m"
    # a one-tick dip inside a 10 s interval is averaged: (9 x 80 % + 0 %) / 10 > 50 %, it still holds
    assert any(f for _, f in _throttled_run(rule, 0, 100, dip=35))
    # calm a whole interval: it starts again (fires only 60 s after the calm ends)
    state = LiveState()
    ev = Evaluator(parse_rules([rule]))
    cg = Cgroups(state)
    fired = []
    for tick in range(150):
        throttled = 0 if 30 <= tick < 45 else 8
        cg.tick(tick, cg.line(PATH, tick, periods=10, throttled=throttled))
        fired += [(tick, f) for f in ev.evaluate(state)]
    assert fired and fired[0][0] >= 45 + 60 and fired[0][1].crossed_at >= T0 + 40


def test_the_lines_are_parsed_only_when_the_cgroup_rules_look() -> None:
    state = LiveState()
    ev = Evaluator(parse_rules(["psi.memory.some>20%:1m", "gpu.util>90%:10s"]))
    cg = Cgroups(state)
    parsed = []
    for tick in range(31):
        cg.tick(tick, *(cg.line(f"/docker/{c:064x}", tick, periods=10, throttled=tick % 3) for c in range(20)))
        ev.evaluate(state)
        parsed.append(state._cgroups.parsed)
    # looks at ticks 0, 10, 20, 30: 21 lines each (the root's and 20 containers'), none between
    assert parsed[0] == parsed[9] == 21 and parsed[10] == parsed[19] == 42 and parsed[30] == 84
