"""The NVML sampler child's summaries (forensics.record.live.nvml): each GPU's process lists sent
once while they stay, named after; the live state must fold them as it folds the lines, fire and
clear ``unallocated-gpu-use`` as the processes come and go, and read a record's own lines when a
summary names lists it never got."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forensics.collectors.nvml.fast import SAMPLE_FIELDS, Samples
from forensics.record.live.nvml import _PID_SM, _sm_of, nvml_summary
from forensics.record.live.state import LiveState
from forensics.record.live.summaries import Summarizer
from forensics.record.protocol import decode_header, encode_header
from forensics.record.triggers import Evaluator, parse_rules
from tests.unit.record.test_live import SAMPLES, replay

NVML = "nvml/samples.jsonl"


class Child:
    """A sampler child's summarizer fed lines as the NVML sampler makes them: a process entry is
    the same object while its figures stay (forensics.collectors.nvml.encode.LineEncoder)."""

    def __init__(self) -> None:
        self.summarizer = Summarizer()
        self.entries: dict[str, dict[str, Any]] = {}
        self.sent: list[list[Any]] = []  # the device lines' summaries, as sent

    def __call__(self, member: str, line: Any) -> Any:
        if member == NVML and isinstance(line, dict) and isinstance(line.get("processes"), list):
            line["processes"] = [self.entries.setdefault(json.dumps(p, sort_keys=True), p) for p in line["processes"]]
        got = self.summarizer(member, line)
        if member == NVML and got is not None:
            self.sent.append(got)
        return got


def named(sent: list[list[Any]]) -> int:
    """Summaries that named their GPU's lists instead of sending them."""
    return sum(1 for s in sent if len(s) == 10 and s[8][0] is None)


def feed(state: LiveState, child: Child, lines: list[dict[str, Any]]) -> list[Any]:
    """One NVML record of ``lines`` through ``child``, as the recorder passes it; the summaries sent."""
    got = [x for x in (child(NVML, line) for line in lines) if x is not None]
    summary = decode_header(encode_header({"summary": got}))["summary"]
    state.feed(0.0, 0.0, NVML, "append", "".join(json.dumps(line) + "\n" for line in lines), summary)
    return got


def ended(state: LiveState) -> tuple[Any, ...]:
    state.refresh()
    return (state.gpus(), state.processes(), state.process_keys(), state.take_events(), state._nvml_tick, state.refreshes)


@pytest.mark.parametrize("bundle", sorted(SAMPLES.glob("*.tgz")), ids=lambda p: p.stem)
def test_the_childs_named_lists_fold_as_the_lines_do(bundle: Path) -> None:
    by_lines, by_child = LiveState(), LiveState()
    replay(bundle, by_lines)
    child = Child()
    replay(bundle, by_child, child=child)
    assert ended(by_child) == ended(by_lines)
    assert by_child.process_gen == by_lines.process_gen  # the (PID, GPU) set changed as often
    ticks = {s[0] for s in child.sent}
    if len(ticks) > 2 and any(s[8][0] for s in child.sent if len(s) == 10):
        assert named(child.sent) > 0  # processes that stayed were named, not sent again


def test_unallocated_use_fires_on_a_new_pid_and_clears_on_exit_with_named_lists() -> None:
    """The trainer alone (granted), named tick after tick; the notebook's PID comes (no grant: the
    rule fires), stays (named again: it keeps firing), and goes (the rule clears)."""
    state, child = LiveState(), Child()
    ev = Evaluator(parse_rules(["unallocated-gpu-use"]))
    replay(SAMPLES / "unallocated-gpu-use.tgz", state, until_tick=3, child=child)
    state.refresh()
    assert ev.evaluate(state) == [] and named(child.sent) >= 4  # ticks 1-3: the trainer's lists named
    before = state.process_gen
    replay(SAMPLES / "unallocated-gpu-use.tgz", state, from_tick=4, child=child)
    assert state.process_gen > before and state.refresh()  # the new PID: the set changed, attribution ran
    [f] = ev.evaluate(state)
    assert "notebook" in f.subject and "without a grant" in f.summary
    nb = next(p for p in state.processes() if p.owner.container_name == "notebook")
    assert f.value == nb.sm_util_pct  # the SM share that came with the named lists
    last = state._nvml_tick[1][-1]
    lines = [json.loads(ln) for ln in (last if isinstance(last, str) else last.decode()).splitlines()]
    tick, t = lines[0]["tick"], lines[0]["t"]
    for step in (1, 2):  # the same processes again: named, and still firing
        n = len(child.sent)
        feed(state, child, [{**ln, "tick": tick + step, "t": t + step} for ln in lines])
        assert named(child.sent[n:]) == len(lines)
        state.refresh()
        [f] = ev.evaluate(state)
        assert "notebook" in f.subject
    gone = [{**ln, "tick": tick + 3, "t": t + 3, "processes": [p for p in ln["processes"] if p["pid"] != nb.pid]}
            for ln in lines]
    gen = state.process_gen
    sent = feed(state, child, gone)
    assert any(s[8][0] is not None for s in sent)  # its GPU's lists sent again, without the notebook
    assert state.process_gen > gen and nb.pid not in {k[0] for k in state.process_keys()}
    state.refresh()
    assert ev.evaluate(state) == []
    feed(state, child, [{**ln, "tick": tick + 4, "t": t + 4} for ln in gone])
    state.refresh()
    assert ev.evaluate(state) == [] and state.process_gen == gen + 1


def test_a_summary_naming_lists_never_received_is_read_from_the_records_lines() -> None:
    """A record the sink dropped (its summary sent the lists), or a restarted child (its names are
    new): the live state reads that record's lines, then takes the names again."""
    lines = [{"kind": "device", "tick": 1, "t": 100.0, "gpu_index": g, "uuid": f"GPU-{g}",
              "nvml": {"nvmlDeviceGetUtilizationRates": {"value": {"gpu": 50 + g}},
                       "nvmlDeviceGetProcessUtilization": {"value": [{"pid": 10 + g, "smUtil": 7, "timeStamp": 1}]}},
              "processes": [{"pid": 10 + g, "usedGpuMemory": 1 << 20, "mig_uuid": None}]} for g in range(2)]

    def tick(n: int) -> list[dict[str, Any]]:
        return [{**ln, "tick": n, "t": 100.0 + n,
                 "nvml": {**ln["nvml"], "nvmlDeviceGetProcessUtilization": {"value": [
                     {"pid": 10 + ln["gpu_index"], "smUtil": 7 * n, "timeStamp": n}]}}} for ln in lines]

    whole, lossy, child = LiveState(), LiveState(), Child()
    first = tick(1)
    feed(whole, child, first)  # lossy never gets tick 1 (the lists were in it)
    for n in (2, 3):
        records = tick(n)
        sent = feed(whole, child, records)
        assert named(sent) == 2
        lossy.feed(0.0, 0.0, NVML, "append", "".join(json.dumps(x) + "\n" for x in records),
                   decode_header(encode_header({"summary": sent}))["summary"])
        # tick 2 read from its lines, the names learned from it: tick 3 resolved by them
        assert {i: (ref, lists[:3]) for i, (ref, lists) in lossy._nvml_refs.items()} == \
            {i: (ref, lists[:3]) for i, (ref, lists) in whole._nvml_refs.items()}
        assert ended(lossy)[:3] == ended(whole)[:3]
        assert [p.sm_util_pct for p in lossy.processes()] == [7.0 * n] * 2
    restarted = Child()  # new names: lists sent whole again, then named
    for n in (4, 5):
        records = tick(n)
        sent = feed(lossy, restarted, records)
        whole.feed(0.0, 0.0, NVML, "append", "".join(json.dumps(x) + "\n" for x in records),
                   decode_header(encode_header({"summary": sent}))["summary"])
    assert named(restarted.sent) == 2 and ended(lossy)[:3] == ended(whole)[:3]
    assert [p.sm_util_pct for p in lossy.processes()] == [35.0] * 2


def test_the_samples_rows_give_each_pids_sm_share_as_the_dicts_do() -> None:
    assert _PID_SM(SAMPLE_FIELDS) == ("pid", "smUtil")  # the row layout the live state reads
    rows = [(10, 5, 30, 1, 0, 0), (11, 5, 0, 1, 0, 0), (12, 5, 99, 1, 0, 0)]
    dicts = [dict(zip(SAMPLE_FIELDS, r, strict=True)) for r in rows]
    fast = Samples(dicts)
    fast.rows = rows
    assert _sm_of(fast) == _sm_of(list(dicts)) == {10: 30, 11: 0, 12: 99}
    twice = rows + [(10, 9, 44, 1, 0, 0)]  # a PID sampled twice: its newest sample, both ways
    fast = Samples([dict(zip(SAMPLE_FIELDS, r, strict=True)) for r in twice])
    fast.rows = twice
    assert _sm_of(fast) == _sm_of(list(fast)) == {10: 44, 11: 0, 12: 99}
    line = {"kind": "device", "tick": 1, "t": 1.0, "gpu_index": 0, "uuid": "GPU-0", "processes": [
        {"pid": 12, "usedGpuMemory": 5}], "nvml": {"nvmlDeviceGetProcessUtilization": {"value": fast}}}
    assert nvml_summary(line)[8] == [[12], None, [5], [99]]


def test_the_childs_summaries_resolve_to_the_whole_ones_whatever_the_samples_do() -> None:
    """Processes that stay, come and go; samples in NVML's order or another, missing, twice for a
    PID, as the sampler's rows or plain dicts: a named summary with its GPU's named lists put back
    is the whole summary of the same line, tick after tick."""
    import random

    rnd = random.Random(15)
    child = Summarizer()
    entries: dict[tuple[int, int], dict[str, Any]] = {}
    kept: dict[int, tuple[str, list[Any]]] = {}
    pids = {g: [100 * g + i for i in range(6)] for g in range(3)}
    fast_named = 0
    for tick in range(200):
        for g in range(3):
            if rnd.random() < 0.1:  # a process comes or goes
                pids[g] = sorted(set(pids[g]) ^ {100 * g + rnd.randrange(12)})
            plist = [entries.setdefault((pid, 1 << 20), {"pid": pid, "usedGpuMemory": 1 << 20, "mig_uuid": None})
                     for pid in pids[g]]
            sampled = [pid for pid in pids[g] if rnd.random() < 0.9]
            if tick % 7 == 3:
                rnd.shuffle(sampled)
            if tick % 11 == 5 and sampled:
                sampled.append(sampled[0])  # a PID sampled twice
            rows = [(pid, tick * 10 + n, rnd.randrange(101), 0, 0, 0) for n, pid in enumerate(sampled)]
            dicts = [dict(zip(SAMPLE_FIELDS, r, strict=True)) for r in rows]
            samples: Any = dicts
            if tick % 5:
                samples = Samples(dicts)
                samples.rows = rows
            line = {"kind": "device", "tick": tick, "t": float(tick), "gpu_index": g, "uuid": f"GPU-{g}",
                    "nvml": {"nvmlDeviceGetProcessUtilization": {"value": samples}}, "processes": plist}
            got = child(NVML, line)
            assert got is not None and len(got) == 10
            ref, procs = got[9], got[8]
            if procs[0] is None:
                assert kept[g][0] == ref
                lists = kept[g][1]
                procs = [lists[0], lists[1], lists[2], procs[3]]
                fast_named += type(samples) is Samples
            else:
                kept[g] = (ref, procs)
            assert [*got[:8], procs] == nvml_summary(line), (tick, g)
    assert fast_named > 100
