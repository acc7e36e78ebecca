"""What the recorder keeps follows what exists now, not everything it ever saw: containers, cgroups
and GPU processes come and go all day on a node, and a structure keyed by every one of them ever
seen grows for the recorder's life (issue 14: flat memory over hours of churn). Each test drives
many keys through one structure and asserts its size stays bounded."""

from __future__ import annotations

import json
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from forensics.bundle import redact
from forensics.bundle.redact import Redactor
from forensics.collect.context import CaptureOptions, CollectContext, Tick
from forensics.collectors.docker import follow
from forensics.record import sources
from forensics.record.child import RecordSink
from forensics.record.live.cgroups import CgroupFold
from forensics.record.live.exposition import ProcessLines, Snapshot
from forensics.record.live.state import LiveState
from forensics.record.live.views import NO_GRANT, UNKNOWN_OWNER, ProcessLive
from forensics.specs.docker import container_member


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def _ctx(sink: Any) -> CollectContext:
    return CollectContext(CaptureOptions(interval_s=1.0, timeout_s=5.0), sink, Redactor(enabled=False), {}, None, "t")


class _FakeProcfs:
    def __init__(self) -> None:
        self.recorded: list[int] = []

    def record_pid(self, ctx: CollectContext, pid: int, reasons: list[str], t: float) -> dict[str, Any]:
        self.recorded.append(pid)
        return {"pid": pid, "attribution": {"cgroup_path": f"/docker/{pid:064x}"}}


def test_the_procfs_driver_forgets_pids_attributed_long_ago(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(sources, "time", types.SimpleNamespace(monotonic=clock.monotonic, time=clock.time))
    driver = sources.ProcfsDriver()
    driver.collector = fake = _FakeProcfs()
    ctx = _ctx(RecordSink())
    pid = 1
    for tick in range(3000):  # 5 new GPU processes a second for 50 minutes
        ctx.hints[sources.ATTRIBUTE_PIDS.key] = [*range(pid, pid + 5), pid, *([pid - 1] if tick else [])]  # some twice
        pid += 5
        driver.tick(ctx, Tick(index=tick, time_unix=clock.now))
        ctx.sink.take_bytes()
        ctx.published.clear()
        clock.now += 1.0
        assert len(driver.done) <= 5 * (driver.forget_s + 1)
    assert fake.recorded == list(range(1, pid))  # each once, those handed over twice included
    # a PID handed over again once forgotten (NVML had not listed it for 30 s: a new process
    # under a reused number) is attributed again
    ctx.hints[sources.ATTRIBUTE_PIDS.key] = [1]
    driver.tick(ctx, Tick(index=3000, time_unix=clock.now))
    assert fake.recorded[-1] == 1


def _cgroup_line(path: str, t: float, tick: int) -> str:
    return json.dumps({"cgroup": path, "t": t, "tick": tick, "time": "x",
                       "values": {"cpu": {"nr_periods": 10, "nr_throttled": 1}}}, sort_keys=True)


def test_the_cgroup_fold_forgets_cgroups_gone_a_while() -> None:
    fold = CgroupFold(json.loads, lambda path: path[-12:], forget_s=600.0)
    live = [f"/docker/{i:064x}" for i in range(100)]
    nxt = 100
    t = 1.7e9
    for tick in range(4000):  # 100 containers, 2 replaced every second for more than an hour
        fold.lines(("\n".join(_cgroup_line(p, t, tick) for p in live) + "\n").encode())
        if tick % 10 == 0:  # cgroup rules look every 10 s (a 1 m rule); between looks the lines are kept unparsed
            fold.fold()
        live = live[2:] + [f"/docker/{nxt:064x}", f"/docker/{nxt + 1:064x}"]
        nxt += 2
        t += 1.0
        bound = 100 + 2 * (fold.forget_s * 1.25 + 2)  # those of the last forget_s, swept every quarter of it
        assert len(fold._by_path) <= bound and len(fold._text) <= bound and len(fold._pending) <= 100 + 2 * 10
    assert {r[0] for r in fold.rows()} >= set(live[:-4])  # what is there now (sampled twice) is all there
    assert len(fold.rows()) <= bound


def test_the_live_state_keeps_no_container_id_per_cgroup_ever_seen() -> None:
    state = LiveState()
    t = 1.7e9
    for i in range(3000):
        state.feed(t + i, 0.0, "cgroup/samples.jsonl", "append",
                   (_cgroup_line(f"/docker/{i:064x}", t + i, i) + "\n").encode())
    assert len(state._cgroups._by_path) + len(state._cgroups._pending) <= 2 * (1 + state._cgroups.forget_s * 1.25)  # nobody read: still swept
    assert not [v for v in vars(state).values() if isinstance(v, dict) and len(v) > 1000]


def test_live_events_nobody_takes_are_kept_up_to_a_bound() -> None:
    state = LiveState()
    line = json.dumps({"type": "oom", "pid": 7, "comm": "x", "time": "2026-01-01T00:00:00Z"}) + "\n"
    for _ in range(state.max_events + 500):  # a metrics endpoint and no triggers: nobody takes them
        state.feed(0.0, 0.0, "kernel/window.jsonl", "append", line.encode())
    assert len(state._events) == state.max_events
    assert len(state.take_events()) == state.max_events and state.take_events() == []


def test_the_process_label_strings_kept_are_those_of_the_last_scrape() -> None:
    lines = ProcessLines()
    pid = 1
    for _ in range(500):  # 64 processes, 8 replaced by new PIDs between scrapes
        procs = tuple(ProcessLive(p, 0, "GPU-0", None, 10.0, 1 << 20, 5.0, UNKNOWN_OWNER, NO_GRANT)
                      for p in range(pid, pid + 64))
        text = lines.render(Snapshot(t=10.0, processes=procs), stale_before=0.0)
        assert f'pid="{pid + 63}"' in text
        assert len(lines._labels) == 64
        pid += 8
    again = lines.render(Snapshot(t=10.0, processes=procs), stale_before=0.0)
    assert again == text  # the same bytes from the kept strings


def test_the_redactors_clean_text_memory_is_bounded() -> None:
    r = Redactor(enabled=True, key=b"k" * 32)
    for i in range(3 * redact._CLEAN_TEXTS_MAX):  # a new container's labels, a new process's texts
        assert r.text(f"container-{i} is plain") == f"container-{i} is plain"
        assert len(r._clean_texts) <= redact._CLEAN_TEXTS_MAX
    assert "container-0 is plain" not in r._clean_texts  # started over: the recent ones are kept


def test_the_record_sink_keeps_nothing_per_member_once_taken() -> None:
    sink = RecordSink()
    for pid in range(5000):
        sink.write_bytes(f"proc/{pid}/status", b"x")
        if pid % 100 == 0:
            sink.take_bytes()
    sink.take_bytes()
    assert not [k for k, v in vars(sink).items() if isinstance(v, (set, dict, list)) and v]


class _Engine:
    """Just enough of a Docker client: ``n`` containers created, started, stopped and removed."""

    def __init__(self, follower: follow.DockerFollower, n: int) -> None:
        self.follower, self.n = follower, n
        self.alive: set[str] = set()

    def info(self) -> dict[str, Any]:
        return {"ID": "engine"}

    def version(self) -> dict[str, Any]:
        return {"Version": "27.0"}

    def containers(self) -> list[dict[str, Any]]:
        return []

    def inspect_container(self, cid: str) -> dict[str, Any]:
        if cid not in self.alive:
            raise RuntimeError("No such container")
        return {"Id": cid, "State": {"Status": "running"}, "Config": {"Labels": {"n": cid[:8]}}}

    def events(self, since: int, decode: bool) -> Iterator[dict[str, Any]]:
        t = 1.7e9
        for i in range(self.n):
            cid = f"{i:064x}"
            for action in ("create", "start", "die", "destroy"):
                if action == "create":
                    self.alive.add(cid)
                elif action == "destroy":
                    self.alive.discard(cid)
                t += 0.25
                yield {"Type": "container", "Action": action, "Actor": {"ID": cid}, "timeNano": int(t * 1e9)}
        self.follower._stop.set()

    def close(self) -> None:
        pass


def test_the_docker_follower_forgets_removed_containers_and_old_events(monkeypatch: pytest.MonkeyPatch) -> None:
    follower = follow.DockerFollower()
    engine = _Engine(follower, 2000)
    monkeypatch.setattr(follow, "connect", lambda settings: engine)
    sink = RecordSink()
    ctx = _ctx(sink)
    follower._run(ctx)
    records = sink.take_bytes()
    events = [line for r in records if r[2] == "docker/events.jsonl" for line in r[4].splitlines()]
    assert len(events) == 4 * 2000  # every event written once
    assert sum(1 for r in records if r[2].endswith("/inspect.json")) >= 2000  # each container inspected
    assert container_member(f"{1999:064x}", "inspect.json") not in follower._written
    assert len(follower._written) <= 2 + 2  # the engine's info and version (and no container left)
    assert len(follower._events) <= 4 * (follow.REPLAY_S + 2)  # one event every 0.25 s, the last REPLAY_S


def test_docker_events_replayed_after_a_reconnect_are_written_once() -> None:
    follower = follow.DockerFollower()
    t0 = time.time()
    follower._remember_event("a", t0, t0)
    follower._remember_event("b", t0 + 1000, t0 + 1000)  # "a" is long before the resume point now
    assert list(follower._events) == ["b"]
    follower._remember_event("c", t0 + 1001, t0 + 1001)
    assert list(follower._events) == ["b", "c"]


def test_the_recorder_forgets_gpu_pids_gone_a_minute_and_attributes_a_returning_pid_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics.record import recorder as recorder_module

    clock = _Clock()
    monkeypatch.setattr(recorder_module, "time", types.SimpleNamespace(monotonic=clock.monotonic, time=clock.time))
    rec = recorder_module.Recorder.__new__(recorder_module.Recorder)  # only the PID bookkeeping
    rec.seen_pids, rec.queued, rec._pids_swept = {}, {}, clock.now
    for tick in range(3600):  # 64 GPU processes, 2 replaced by new PIDs every second for an hour
        rec._gpu_pids(list(range(100_000 + 2 * tick, 100_000 + 2 * tick + 64)))
        clock.now += 1.0
        assert len(rec.seen_pids) <= 64 + 2 * 121
    assert len(rec.queued["attribute_pids"]) == 64 + 2 * 3599  # each PID attributed once, when first seen
    rec.queued["attribute_pids"].clear()
    rec._gpu_pids([100_000])  # that PID again, gone an hour: a new process, attributed again
    rec._gpu_pids([100_000])
    assert rec.queued["attribute_pids"] == [100_000]


def test_the_cgroup_fold_forgets_a_gone_cgroup_within_a_minute() -> None:
    # issue 14: the fold kept every cgroup sampled in the last 10 minutes (600 s x 5 containers
    # replaced a second: 3000 gone cgroups' lines); a living cgroup gets a line at least every
    # cgroups.idle_full_s (10 s), so one silent for three times the longest gap seen (at least
    # 60 s) is gone
    fold = CgroupFold(json.loads, lambda path: path[-12:])
    live = [f"/docker/{i:064x}" for i in range(50)]
    nxt = 50
    t = 1.7e9
    for tick in range(2000):  # 50 containers, 5 replaced every second; the quiet half has a line every 10 s
        lines = [_cgroup_line(p, t, tick) for n, p in enumerate(live) if n % 2 == 0 or (tick + n) % 10 == 0]
        fold.lines(("\n".join(lines) + "\n").encode())
        if tick % 10 == 0:
            fold.fold()
        live = live[5:] + [f"/docker/{i:064x}" for i in range(nxt, nxt + 5)]
        nxt += 5
        t += 1.0
        assert fold.horizon <= 60.0
        bound = 50 + 5 * (60.0 * 1.25 + 10)  # those of the last minute, swept every quarter of it
        assert len(fold._by_path) <= bound and len(fold._text) <= bound and len(fold._fresh) <= bound
        assert len(fold._gone) <= 5 * (fold.forget_s + 10)  # a path and a time each, for forget_s
    assert fold.horizon == 60.0


def test_a_quiet_cgroup_silent_longer_than_the_horizon_lengthens_it() -> None:
    # cgroups.idle_full_s set to 5 minutes: a quiet cgroup's line comes every 300 s, after the
    # fold took it for gone; once back, the horizon is three of its silences, and it has a row
    fold = CgroupFold(json.loads, lambda path: path[-12:])
    busy, quiet = "/docker/" + "a" * 64, "/docker/" + "b" * 64
    t = 1.7e9
    for tick in range(1300):
        lines = [_cgroup_line(busy, t, tick)] + ([_cgroup_line(quiet, t, tick)] if tick % 300 == 0 else [])
        fold.lines(("\n".join(lines) + "\n").encode())
        fold.fold()
        t += 1.0
    assert fold.horizon == 600.0  # three silences of 300 s, at most forget_s
    assert {r[0] for r in fold.rows()} == {busy, quiet}


def test_the_live_state_drops_the_proc_files_of_gpu_pids_gone_a_minute() -> None:
    state = LiveState()
    assert state.forget_s == 60.0
    t = 1.7e9
    pids = list(range(1000, 1064))
    nxt = 1064
    for tick in range(900):  # 64 GPU processes, 2 replaced by new PIDs every second for 15 minutes
        for pid in pids[-2:] if tick else pids:  # the procfs sampler records a new GPU PID's files
            for name in ("cgroup", "status", "cmdline"):
                state.feed(t, 0.0, f"proc/{pid}/{name}", "write", f"0::/docker/{pid:064x}\n")
        summary = [[tick, 0, "GPU-0", t, 50.0, 1 << 30, 1 << 34, False,
                    [list(pids), None, [1 << 20] * len(pids), [5] * len(pids)]]]
        state.feed(t, 0.0, "nvml/samples.jsonl", "append", b"", summary)
        state.refresh()
        pids = pids[2:] + [nxt, nxt + 1]
        nxt += 2
        t += 1.0
        bound = 64 + 2 * (60 + 2)  # listed now, or gone in the last minute
        assert len(state._pid_seen) <= bound and len(state._known_pids) <= bound
        assert len(state._identity) <= 3 * bound


def test_the_live_state_drops_the_members_of_containers_destroyed_a_minute_ago() -> None:
    # a gone container's inspect was kept until the 64 MB cap on identity bytes
    state = LiveState()
    t = 1.7e9
    for i in range(400):  # a container created (inspect written) and one destroyed every second
        cid = f"{i:064x}"
        state.feed(t, 0.0, container_member(cid, "inspect.json"), "write", json.dumps({"Id": cid, "Name": f"/c{i}"}))
        if i >= 10:
            gone = f"{i - 10:064x}"
            state.feed(t, 0.0, "docker/events.jsonl", "append", json.dumps(
                {"Type": "container", "Action": "destroy", "Actor": {"ID": gone}, "timeNano": int(t * 1e9)}) + "\n")
        state.refresh()
        t += 1.0
        assert len(state._identity) <= 10 + state.forget_s + 2 and len(state._destroyed) <= state.forget_s + 2
    assert container_member(f"{399:064x}", "inspect.json") in state._identity  # those running now are kept
    assert state.container_name(f"{399:064x}") == "c399"


def test_a_quiet_cgroups_line_after_quiet_ticks_keys_as_its_other_lines() -> None:
    """The cgroup sampler's layout (forensics/collectors/cgroups.py): a line after quiet ticks says
    ``unchanged_until`` between the cgroup and ``t``. 200 idle cgroups, one line each every 10 ticks,
    each of those after quiet ticks: one kept text per cgroup, and a line whose counters repeat is
    not parsed again."""
    fold = CgroupFold(json.loads, lambda path: path[-12:], forget_s=600.0)
    paths = [f"/docker/{i:064x}" for i in range(200)]
    t = 1.7e9
    for tick in range(3000):
        lines = [json.dumps({"cgroup": p, "unchanged_until": t - 1.0, "t": t, "tick": tick, "time": "x",
                             "values": {"cpu": {"nr_periods": 10, "nr_throttled": 1}}})
                 for n, p in enumerate(paths) if (tick + n) % 10 == 0]
        fold.lines(("\n".join(lines) + "\n").encode())
        fold.fold()
        t += 1.0
    assert len(fold._text) <= len(paths)
    assert fold.parsed <= 2 * len(paths)  # each cgroup's first line (and not one per line: 60 000)
    assert len(fold.rows()) == len(paths)


def _churn_records(ticks: int, t0: float) -> list[tuple[float, float, str, str, bytes]]:
    """cgroup/samples.jsonl as the sampler writes it, one record a tick: 200 cgroups, 5 of them
    removed and 5 new ones made every second."""
    out = []
    live = list(range(200))
    nxt = 200
    for tick in range(ticks):
        lines = "".join(f'{{"cgroup": "/docker/{k:064x}", "t": {t0 + tick}, "tick": {tick}, "time": "x{tick}", '
                        f'"values": {{"cpu": {{"usage_ns": {k * 1000 + (tick if k % 7 == 0 else 0)}}}, '
                        f'"memory": {{"current_bytes": {k << 20}, "oom_kill": 0}}, "pids": 1}}}}\n' for k in live)
        out.append((t0 + tick, 1000.0 + tick, "cgroup/samples.jsonl", "append", lines.encode()))
        live = live[5:] + list(range(nxt, nxt + 5))
        nxt += 5
    return out


def test_the_rings_change_only_encoder_forgets_the_lines_of_gone_cgroups(tmp_path: Any) -> None:
    """The writer's encoder keeps each key's previous line to store the next one as its changes;
    under churn (5 containers a second) it kept every gone cgroup's line until the segment rotated
    (3000 lines in a 10-minute segment). Now a key not seen for a minute is forgotten, and
    what was written still reads back byte for byte."""
    from forensics.ring import RingReader, RingWriter

    t0 = float(int(time.time()) - 3600)
    recs = _churn_records(900, t0)
    w = RingWriter(tmp_path / "ring", max_bytes=256 << 20, segment_bytes=64 << 20, segment_age_s=1e6,
                   delta_members=["cgroup/samples.jsonl"]).open()
    for rec in recs:
        w.append([rec])
        enc = w._encoders["cgroup/samples.jsonl"]
        assert enc.keys_kept <= 200 + 5 * (enc.horizon_s * 1.25 + 1)  # those there now, and a minute's gone ones
    assert enc.horizon_s == 60.0  # no key's lines came further apart than a tick
    w.close()
    reader = RingReader(tmp_path / "ring")
    assert len(reader.segments()) == 1  # all of it in one segment: the encoder was never reset
    assert [r.data for r in reader.records()] == [d for *_, d in recs]
    assert not reader.report.problems


def test_hints_no_recorded_source_reads_are_not_queued(tmp_path: Any) -> None:
    """``record --sources nvml,procfs``: the procfs child's cgroup paths have no cgroups child to
    take them, and with ``--sources nvml`` the GPU PIDs no procfs child to attribute them: a day of
    them would be kept for nobody. With every source, both are queued for their reader."""
    from forensics.record.options import RecordOptions
    from forensics.record.protocol import Answer
    from forensics.record.recorder import Recorder

    def feed(rec: Recorder) -> None:
        for tick in range(100):
            rec._handle(rec.sources["procfs"] if "procfs" in rec.sources else rec.sources["nvml"],
                        Answer("hello", hints={"cgroup_paths": [f"/kubepods/pod{tick}/c"]}))
            rec._handle(rec.sources["nvml"], Answer("hello", hints={"gpu_pids": [1000 + tick]}))

    lonely = Recorder(RecordOptions(ring=tmp_path / "a", sources=("nvml", "procfs")), log=lambda _: None)
    feed(lonely)
    assert "cgroup_paths" not in lonely.queued and len(lonely.queued["attribute_pids"]) == 100
    alone = Recorder(RecordOptions(ring=tmp_path / "b", sources=("nvml",)), log=lambda _: None)
    feed(alone)
    assert not any(alone.queued.values()), alone.queued
    every = Recorder(RecordOptions(ring=tmp_path / "c", sources=("nvml", "procfs", "cgroups")), log=lambda _: None)
    feed(every)
    assert len(every.queued["cgroup_paths"]) == 100 and len(every.queued["attribute_pids"]) == 100


def test_a_recorder_stepped_with_no_ring_keeps_no_record_and_writes_nothing(tmp_path: Any) -> None:
    """``gpuforensics top``'s own samplers: the recorder driven by ``step`` (never ``run``) hands
    its records to the live state and keeps none (there is no ring to write them to)."""
    from forensics.record.options import RecordOptions
    from forensics.record.recorder import Recorder

    ring = tmp_path / "ring"
    rec = Recorder(RecordOptions(ring=ring, sources=("procfs", "cgroups"), interval_s=0.2), log=lambda _: None)
    seen: list[str] = []
    rec.live = types.SimpleNamespace(feed=lambda t, mono, member, op, data, summary=None: seen.append(member))  # type: ignore[assignment]
    try:
        index = 0
        end = time.monotonic() + 20
        while time.monotonic() < end and (index < 3 or not rec.settled()):
            rec.step(index, time.monotonic() + 0.2)
            index += 1
    finally:
        rec.close()
    assert rec.settled() and rec.status()["sources"]["procfs"]["ticks"] >= 1
    assert seen and rec.records_written >= len(seen) and not rec.pending
    assert not ring.exists()
