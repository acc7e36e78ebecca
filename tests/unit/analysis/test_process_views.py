"""The shared views of the NVML process samples (forensics.analysis.process_index) and the readers
that take them: each view is of the series as it is when asked (a series changed after a view was
made gets a fresh one), and each reader's shortcut over regular columns (every PID on the same
ticks, once each) says exactly what the per-sample walk it replaces says, on regular samples and
on irregular ones (PIDs coming and going, a PID read twice on one tick, SM or memory unknown)."""

from __future__ import annotations

import random
from collections import defaultdict
from operator import attrgetter

import pytest

from forensics.analysis.findings import EvidenceRef
from forensics.analysis.model import Model
from forensics.analysis.rules import gpu_contention, gpu_memory, gpu_unattributed
from forensics.analysis.samples import GpuSample, ProcessGpuSample

T0 = 1_764_000_000.25
NODE, GPU = "n1", "GPU-0"
REF = EvidenceRef("b", "nvml/samples.jsonl", 1, None)


def _sample(pid: int, t: float, mem: int | None, sm: float | None, proc_index: int = 0) -> ProcessGpuSample:
    return ProcessGpuSample(NODE, GPU, pid, t, mem, sm, REF, proc_index)


def _samples(rng: random.Random, regular: bool, ticks: int = 40, pids: int = 6) -> list[ProcessGpuSample]:
    """Load order (tick by tick, PIDs in list order); irregular: PIDs absent at some ticks, a PID
    twice on one tick, SM and memory missing, SM shares that are not whole numbers."""
    out = []
    order = [700 + 3 * k for k in range(pids)]
    for i in range(ticks):
        t = T0 + i
        rng.shuffle(order)
        for pid in order:
            if not regular and rng.random() < 0.2:
                continue
            mem = rng.choice([0, 1 << 30, 3 << 30, 123456789])
            sm = rng.choice([0.0, 12.5, 33.0, 99.0, 100 / 3])
            if not regular:
                mem = None if rng.random() < 0.1 else mem
                sm = None if rng.random() < 0.2 else sm
            out.append(_sample(pid, t, mem, sm))
            if not regular and rng.random() < 0.05:
                out.append(_sample(pid, t + 1e-9, mem, sm))
    return out


def _model(samples: list[ProcessGpuSample]) -> Model:
    m = Model()
    m.extend(ProcessGpuSample, samples)
    return m


def test_views_group_by_gpu_and_pid_in_the_orders_readers_walk() -> None:
    ss = _samples(random.Random(1), regular=False)
    model = _model(ss)
    by_gpu = model.proc_samples_by_gpu()[(NODE, GPU)]
    assert by_gpu == sorted(ss, key=attrgetter("t", "pid"))
    by_pid = model.proc_samples_by_pid()[(NODE, GPU)]
    walked: dict[int, list[ProcessGpuSample]] = defaultdict(list)
    for s in by_gpu:  # the order a walk of the (time, PID) sorted samples meets them
        walked[s.pid].append(s)
    assert list(by_pid) == list(walked) and by_pid == walked
    cols = model.proc_columns()[(NODE, GPU)]
    for pid, col in cols.items():
        assert col.t == [s.t for s in by_pid[pid]]
        assert col.sm_util_pct == [s.sm_util_pct for s in by_pid[pid]]
        assert col.used_memory_bytes == [s.used_memory_bytes for s in by_pid[pid]]
        assert col.distinct == (len(set(col.t)) == len(col.t))
    assert model.nvml_pid(NODE, by_gpu[0].pid) and not model.nvml_pid(NODE, 1)


def test_a_view_of_a_changed_series_is_made_again() -> None:
    model = _model([_sample(700, T0, 1, 1.0), _sample(701, T0, 1, 1.0)])
    first = model.proc_samples_by_pid()[(NODE, GPU)]
    assert list(first) == [700, 701] and model.proc_samples_by_pid() is model.proc_samples_by_pid()
    model.add(_sample(702, T0 + 1, 1, 1.0))  # grown
    assert list(model.proc_samples_by_pid()[(NODE, GPU)]) == [700, 701, 702]
    assert model.nvml_pid(NODE, 702) and len(model.proc_columns()[(NODE, GPU)]) == 3
    model.series(ProcessGpuSample)[:] = [_sample(703, T0, 1, 1.0), _sample(701, T0, 1, 1.0),
                                         _sample(704, T0 + 1, 1, 1.0)]  # replaced in place, same length
    assert list(model.proc_samples_by_pid()[(NODE, GPU)]) == [701, 703, 704]
    assert not model.nvml_pid(NODE, 700) and model.proc_samples_by_gpu()[(NODE, GPU)][0].pid == 701


def _old_groups(pids: dict[int, list[ProcessGpuSample]], owner_of_pid: list[int]) -> list[tuple]:  # type: ignore[type-arg]
    """The contention rule's per-sample tick table as it was (the oracle)."""
    ticks: dict[float, dict[int, float]] = defaultdict(dict)
    has_sm: set[float] = set()
    for o, ss in zip(owner_of_pid, pids.values(), strict=True):
        for s in ss:
            row = ticks[s.t]
            if s.sm_util_pct is not None:
                has_sm.add(s.t)
                row[o] = row.get(o, 0.0) + s.sm_util_pct
            elif o not in row:
                row[o] = 0.0
    groups: dict[frozenset[int], list[float]] = defaultdict(list)
    for t, row in ticks.items():
        if t in has_sm:
            groups[frozenset(row)].append(t)
    out = []
    for members, ts in groups.items():
        sums = dict.fromkeys(members, 0.0)
        total = 0.0
        for t in ts:
            for o, v in ticks[t].items():
                sums[o] += v
                total += v
        out.append((members, ts, sums, total))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_contention_groups_by_column_are_the_tick_tables(seed: int) -> None:
    rng = random.Random(seed)
    ss = _samples(rng, regular=seed % 2 == 0)
    # (irregular but each PID once per tick: the column path with PIDs coming and going)
    ss = [s for s in ss if (s.t - T0) % 1 == 0] if seed % 4 == 1 else ss
    model = _model(ss)
    pids = model.proc_samples_by_pid()[(NODE, GPU)]
    cols = model.proc_columns()[(NODE, GPU)]
    one_each = list(range(len(pids)))
    assert gpu_contention._groups(pids, cols, one_each) == _old_groups(pids, one_each)
    shared = [k % 3 for k in range(len(pids))]  # owners of several PIDs: the per-sample table
    assert gpu_contention._groups(pids, cols, shared) == _old_groups(pids, shared)


def _old_totals(samples: list[ProcessGpuSample]) -> tuple[int, float | None]:
    mem: dict[float, int] = {}
    sm: dict[float, float] = {}
    for s in samples:
        mem[s.t] = mem.get(s.t, 0) + (s.used_memory_bytes or 0)
        if s.sm_util_pct is not None:
            sm[s.t] = sm.get(s.t, 0.0) + s.sm_util_pct
    return max(mem.values(), default=0), (sum(sm.values()) / len(sm) if sm else None)


@pytest.mark.parametrize("seed", range(12))
def test_unattributed_totals_by_column_are_the_per_sample_sums(seed: int) -> None:
    rng = random.Random(seed)
    ss = _samples(rng, regular=seed % 2 == 0)
    if seed % 3 == 0:
        ss = [s._replace(sm_util_pct=None) for s in ss]
    model = _model(ss)
    pids = model.proc_samples_by_pid()[(NODE, GPU)]
    members = sorted(pids.items())
    got = gpu_unattributed._per_tick_totals(model, NODE, GPU, members)
    assert got == _old_totals([s for _, m in members for s in m])
    # a PID's samples of which only some count as use: its own columns, not the view's
    part = [(pid, m[1:]) for pid, m in members if len(m) > 1]
    assert gpu_unattributed._per_tick_totals(model, NODE, GPU, part) == _old_totals([s for _, m in part for s in m])
    for pid, m in members:
        assert gpu_unattributed._per_tick_totals(model, NODE, GPU, [(pid, m)]) == _old_totals(m)


def test_ghost_memory_by_column_is_the_per_tick_walk() -> None:
    ss = _samples(random.Random(5), regular=True)
    gpu = [GpuSample(NODE, GPU, T0 + i, 50.0, (20 << 30) + i, 80 << 30, 0, 40.0, 100.0, REF) for i in range(-2, 42)]
    gpu.insert(3, gpu[3]._replace(memory_used_bytes=None))
    model = _model(ss)
    rows = gpu_memory._by_columns(model, NODE, GPU, gpu)
    assert rows is not None and rows == gpu_memory._by_tick(model, NODE, GPU, gpu)
    assert rows[0][2] == rows[-1][2] == set()  # no process at -2 s nor at 41 s
    assert rows[-3][2] == {700 + 3 * k for k in range(6)} and rows[-3][0].t == T0 + 39
    snap = EvidenceRef("b", "nvml/processes.json", 0, None)  # the snapshot's list: listed, without an index
    snapshot = _model([*ss, *(_sample(700 + 3 * k, T0 + 40, 7, None, proc_index=-1)._replace(ref=snap)
                              for k in range(6))])
    rows = gpu_memory._by_columns(snapshot, NODE, GPU, gpu)
    assert rows is not None and rows == gpu_memory._by_tick(snapshot, NODE, GPU, gpu) and rows[-2][2]
    unlisted = _model([*ss, _sample(999, T0 + 3, 5, 1.0, proc_index=-1)])
    assert gpu_memory._by_columns(unlisted, NODE, GPU, gpu) is None  # irregular: the walk decides
    unknown = _model([s._replace(used_memory_bytes=None) if s.t == T0 + 7 else s for s in ss])
    assert gpu_memory._by_columns(unknown, NODE, GPU, gpu) is None


def _old_series(model: Model, samples: list[ProcessGpuSample]) -> dict:  # type: ignore[type-arg]
    """below-baseline's per-owner SM series as it was (the oracle), as parallel lists."""
    rows: dict = defaultdict(dict)  # type: ignore[type-arg]
    for s in samples:
        if s.sm_util_pct is None:
            continue
        row = rows[model.joins.owner(NODE, s.pid).subject]
        got = row.get(s.t)
        if got is None:
            row[s.t] = [s.sm_util_pct, s]
        else:
            got[0] += s.sm_util_pct
    return {who: ([t for t, _ in sorted(row.items())], [v for _, (v, _) in sorted(row.items())],
                  [f for _, (_, f) in sorted(row.items())]) for who, row in rows.items()}


@pytest.mark.parametrize("seed", range(8))
def test_baseline_series_and_active_owners_are_the_per_sample_walks(seed: int) -> None:
    from forensics.analysis.joins import resolve_joins
    from forensics.analysis.rules import baseline_drop

    model = _model(_samples(random.Random(seed), regular=seed % 2 == 0))
    resolve_joins(model)
    pids = model.proc_samples_by_pid()[(NODE, GPU)]
    assert baseline_drop._series(model, NODE, GPU, pids) == _old_series(model, model.proc_samples_by_gpu()[(NODE, GPU)])
    for threshold in (0.0, 20.0, 101.0):
        active = model.joins.active_owners(threshold)[(NODE, GPU)]
        want: dict[int, list[ProcessGpuSample]] = defaultdict(list)
        for s in model.proc_samples_by_gpu()[(NODE, GPU)]:
            mem, sm = s.used_memory_bytes, s.sm_util_pct
            if (mem is None and sm is None) or (mem or 0) > 0 or (sm or 0) >= threshold:
                want[s.pid].append(s)
        assert [(int(who.id), ss) for who, (_, ss) in active.items()] == list(want.items())
        for _, ss in active.values():
            assert ss is not pids[ss[0].pid]  # a copy: a reader extending it leaves the view alone
