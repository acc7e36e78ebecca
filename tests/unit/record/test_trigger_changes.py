"""Triggers over what changed: a cgroup that sends nothing for some ticks (its sampler sends no line
for a cgroup whose CPU counter did not move), a line that repeats its cgroup's last counters (not
parsed again: it must not hide a change), and ``unallocated-gpu-use`` looking at the processes
without a grant only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forensics.bundle.sink import dumps_json
from forensics.record.live.state import LiveState
from forensics.record.live.summaries import summarize
from forensics.record.triggers import Evaluator, TriggerEngine, TriggerOptions, parse_rules
from tests.unit.record.test_live import replay

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_bundles"
CID = "ab" * 32
PATH = f"/docker/{CID}"
T0 = 1_800_000_000.0


class Cgroups:
    """A cgroup sampler's lines, built as the cgroups collector builds them (sorted keys, one
    line per cgroup, the host root's with ``host_pressure``), fed as its records' bytes."""

    def __init__(self, state: LiveState) -> None:
        self.state = state
        self.counters: dict[str, dict[str, int]] = {}

    def line(self, path: str, tick: int, periods: int = 0, throttled: int = 0, mem_stall_us: int = 0,
             extra: dict[str, Any] | None = None) -> str:
        c = self.counters.setdefault(path, {"periods": 0, "throttled": 0, "mem": 0})
        c["periods"] += periods
        c["throttled"] += throttled
        c["mem"] += mem_stall_us
        pressure = {r: {"full_total_usec": 0, "some_total_usec": c["mem"] if r == "memory" else 0}
                    for r in ("cpu", "io", "memory")}
        values: dict[str, Any] = {"cpu": {"nr_periods": c["periods"], "nr_throttled": c["throttled"],
                                          "usage_ns": c["periods"] * 1000}, "pressure": pressure}
        if path == "/":
            values["host_pressure"] = pressure
        return dumps_json({"cgroup": path, "t": T0 + tick, "tick": tick, "time": f"tick {tick}", "values": values,
                           **(extra or {})})

    def tick(self, tick: int, *lines: str) -> None:
        root = self.line("/", tick, periods=10, mem_stall_us=1000)  # the root always ran
        self.state.feed(T0 + tick, 0.0, "cgroup/samples.jsonl", "append", "\n".join((root, *lines)) + "\n")


def _run(rules: list[str], ticks: list[tuple[str, ...] | None], max_gap_s: float = 10.0) -> list[list[Any]]:
    """Feed one tick per entry (the lines of the container's cgroup, None: none at all, not even
    the root's) and evaluate after each; the firings per tick."""
    state = LiveState()
    ev = Evaluator(parse_rules(rules), max_gap_s=max_gap_s)
    cg = Cgroups(state)
    out = []
    for tick, spec in enumerate(ticks):
        if spec is not None:
            cg.tick(tick, *(cg.line(PATH, tick, **json.loads(s)) for s in spec))
        out.append(ev.evaluate(state))
    return out


THROTTLED = '{"periods": 10, "throttled": 8}'  # 80 % of its periods
CALM = '{"periods": 10, "throttled": 0}'


def test_a_throttled_container_that_goes_silent_was_not_throttled_then() -> None:
    rule = "container.throttled>50%:3s"
    # throttled every tick: holds from t=1 (the first interval), fires at t=4
    steady = _run([rule], [(CALM,)] + [(THROTTLED,)] * 6)
    assert [bool(f) for f in steady] == [False] * 4 + [True] * 3
    assert steady[4][0].subject == f"container {CID[:12]}" and steady[4][0].crossed_at == T0 + 1
    # throttled in bursts, silent (idle: no line while the root's came) in between: the next
    # interval's share is still 80 % of the periods it ran, but it never held for 3 s
    bursts = _run([rule], [(CALM,), (THROTTLED,), (THROTTLED,), (), (THROTTLED,), (THROTTLED,), (), (THROTTLED,),
                           (THROTTLED,)])
    assert not any(bursts)
    # after a silence it holds again from its next interval, and fires 3 s later
    back = _run([rule], [(CALM,), (THROTTLED,), (), (THROTTLED,), (THROTTLED,), (THROTTLED,), (THROTTLED,)])
    assert [bool(f) for f in back] == [False] * 6 + [True]
    assert back[6][0].crossed_at == T0 + 3


def test_a_silent_cgroup_sampler_is_no_evidence_either_way() -> None:
    """No line at all (the cgroup sampler did not answer: not even the root's): the condition was
    not seen; a hold neither extends nor breaks, and the next interval covers the gap."""
    rule = "container.throttled>50%:3s"
    got = _run([rule], [(CALM,), (THROTTLED,), (THROTTLED,), None, (THROTTLED,), (THROTTLED,)])
    assert [bool(f) for f in got] == [False] * 4 + [True] * 2
    assert got[4][0].crossed_at == T0 + 1


def test_an_idle_container_meets_a_below_rule_and_keeps_it_while_silent() -> None:
    rule = "container.throttled<5%:4s"
    got = _run([rule], [(CALM,), (CALM,), (), (), (), (), (THROTTLED,), ()])
    assert [bool(f) for f in got] == [False] * 5 + [True, False, False]
    assert got[5][0].crossed_at == T0 + 1 and got[5][0].value == 0.0
    # silent longer than max_gap_s: not sampled any more (gone), no figure
    gone = _run([rule], [(CALM,), (CALM,)] + [()] * 8, max_gap_s=2.0)
    assert not any(gone)


def test_pressure_across_a_silence_is_read_over_the_whole_interval() -> None:
    """PSI of a cgroup whose CPU counter did not move is not known to be nil (tasks blocked on IO
    run no CPU): its hold neither extends nor breaks while silent, and the next line's share
    covers the whole interval since its last one."""
    rule = "psi.memory.some>20%:3s"
    stalled = '{"periods": 10, "mem_stall_us": 500000}'  # 50 % of a second
    got = _run([rule], [(stalled,), (stalled,), (), ('{"periods": 10, "mem_stall_us": 1000000}',), (stalled,)])
    assert [bool(f) for f in got] == [False] * 4 + [True]  # 1 s of stall over the 2 s since t=1: 50 %
    assert got[4][0].crossed_at == T0 + 1
    quiet = _run([rule], [(stalled,), (stalled,), (), ('{"periods": 10, "mem_stall_us": 100000}',), (stalled,)])
    assert not any(quiet)  # 5 % over those 2 s: the hold broke


def test_a_repeated_line_is_not_parsed_again_and_a_change_is_seen() -> None:
    state = LiveState()
    cg = Cgroups(state)
    cg.tick(0, cg.line(PATH, 0, periods=10))
    state.cgroups()  # read every tick (the lines are folded when read)
    for tick in range(1, 6):  # the same counters every tick: one parse, then none
        cg.tick(tick, cg.line(PATH, tick))
        state.cgroups()
    parsed = state._cgroups.parsed
    [row] = [c for c in state.cgroups() if c.path == PATH]
    assert (row.t, row.throttled_pct, row.psi_pct["memory"]["some"]) == (T0 + 5, 0.0, 0.0)
    cg.tick(6, cg.line(PATH, 6, periods=5, throttled=1))  # the CPU counters moved, nothing else
    [row] = [c for c in state.cgroups() if c.path == PATH]
    assert (row.throttled_pct, row.psi_pct["memory"]["some"]) == (20.0, 0.0)
    cg.tick(7, cg.line(PATH, 7, periods=4, throttled=2))
    [row] = [c for c in state.cgroups() if c.path == PATH]
    assert (row.t, row.throttled_pct) == (T0 + 7, 50.0)
    cg.tick(8, cg.line(PATH, 8, mem_stall_us=250_000))
    [row] = [c for c in state.cgroups() if c.path == PATH]
    assert row.psi_pct["memory"]["some"] == 25.0
    assert state._cgroups.parsed == parsed + 2 * 3  # the root's and the container's lines of ticks 6-8
    # a key the line did not have before, outside its values: the line is read whole
    cg.tick(9, cg.line(PATH, 9, extra={"errors": {"unified/cpu.stat": "permission denied"}}))
    cg.tick(10, cg.line(PATH, 10, periods=10, throttled=10, extra={"unit": "x"}))
    [row] = [c for c in state.cgroups() if c.path == PATH]
    assert (row.t, row.throttled_pct) == (T0 + 10, 100.0)


def test_repeated_lines_fold_as_their_summaries_do() -> None:
    """The lines (some repeating their cgroup's counters) and their summaries end in the same rows."""
    states = []
    for summaries in (False, True):
        state = LiveState()
        cg = Cgroups(state)
        for tick in range(12):
            lines = [cg.line("/", tick, periods=10, mem_stall_us=tick % 3 * 1000)]
            lines += [cg.line(f"/docker/{c:064x}", tick, periods=10 * (tick % (c + 1) == 0), throttled=tick % 2)
                      for c in range(4)]
            if summaries:
                got = [summarize("cgroup/samples.jsonl", json.loads(ln)) for ln in lines]
                state.feed(0.0, 0.0, "cgroup/samples.jsonl", "append", "\n".join(lines) + "\n",
                           json.loads(json.dumps(got)))
            else:
                state.feed(0.0, 0.0, "cgroup/samples.jsonl", "append", "\n".join(lines) + "\n")
        states.append((state.cgroups(), state.host_psi(), state.cgroup_rows()))
    assert states[0] == states[1] and states[0][0]


def test_unallocated_use_is_looked_for_among_the_processes_without_a_grant() -> None:
    state = LiveState()
    ev = Evaluator(parse_rules(["unallocated-gpu-use"]))
    replay(SAMPLES / "unallocated-gpu-use.tgz", state, until_tick=2)
    state.refresh()
    assert ev.evaluate(state) == []  # the trainer alone, granted
    replay(SAMPLES / "unallocated-gpu-use.tgz", state, from_tick=3)
    state.refresh()
    [f] = ev.evaluate(state)
    assert "notebook" in f.subject and "without a grant" in f.summary
    nb = next(p for p in state.processes() if p.owner.container_name == "notebook")
    # the notebook's process stops using the GPU (no memory, no SM): nothing to fire on
    line = {"kind": "device", "tick": 10_000, "t": nb.t + 1, "gpu_index": nb.gpu_index, "uuid": nb.gpu_uuid,
            "nvml": {}, "processes": [{"pid": nb.pid, "usedGpuMemory": 0, "mig_uuid": nb.mig_uuid}]}
    state.feed(0.0, 0.0, "nvml/samples.jsonl", "append", json.dumps(line) + "\n")
    state.refresh()
    assert ev.evaluate(state) == []
    line["tick"], line["processes"][0]["usedGpuMemory"] = 10_001, 1 << 30  # type: ignore[index]
    state.feed(0.0, 0.0, "nvml/samples.jsonl", "append", json.dumps(line) + "\n")
    state.refresh()
    [f] = ev.evaluate(state)
    assert "notebook" in f.subject


def test_a_quiet_cgroup_stays_sampled_for_as_long_as_the_recorder_leaves_it_quiet(tmp_path: Path) -> None:
    """With ``--set cgroups.idle_full_s=30`` the recorder reads a cgroup whose CPU counter did not
    move only every ~30 s; a container blocked on memory all along must keep its pressure hold across
    those silences (the engine's "not sampled any more" bound follows the setting), or a
    ``psi...:30s`` rule could never fire on exactly the container it is for."""
    rule = "psi.memory.some>20%:30s"
    opts = TriggerOptions(rules=parse_rules([rule]), bundles=tmp_path / "bundles", cooldown_s=60.0,
                          capture_args={"only": ["host"], "duration_s": 0.0})
    opts.check()
    engine = TriggerEngine(opts, LiveState(), lambda _: None, ring=tmp_path / "ring", interval_s=1.0,
                           extra={"cgroups.idle_full_s": "30"})
    assert engine.evaluator.max_gap_s >= 30.0
    assert engine.evaluator.cgroup_every_s == 5.0  # 30 s / 6, at the recorder's interval
    stalled = '{"periods": 10, "mem_stall_us": 500000}'  # 50 % of each second
    quiet_25s = '{"periods": 10, "mem_stall_us": 12500000}'  # 50 % of the 25 s since its last line
    ticks: list[tuple[str, ...] | None] = [(stalled,), (stalled,)] + [()] * 24 + [(quiet_25s,)] + [(stalled,)] * 7
    got = _run([rule], ticks, max_gap_s=engine.evaluator.max_gap_s)
    # a 30 s rule looks every 5 s: its hold starts where the shares it first saw begin (t=0)
    assert any(got) and next(f for f in got if f)[0].crossed_at == T0
    assert not any(_run([rule], ticks, max_gap_s=10.0))  # the old bound: the hold broke at every silence
