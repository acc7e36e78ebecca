"""The views of the NVML process samples the rules, the joins and the document share, built once.

An hour of flight-recorder history at 8 GPUs x 64 processes is 1.8 million
:class:`~forensics.analysis.samples.ProcessGpuSample` records: every pass over them costs, so each
view is made once per model, on first use, by :class:`ProcessViews` (``Model.process_views``), and
readers take what they need from it instead of regrouping the series each:

- :meth:`ProcessViews.by_pid`: per GPU, each PID's samples in time order (the order the joins,
  the contention and baseline rules and the document's series walk them);
- :meth:`ProcessViews.by_gpu`: per GPU, its samples in (time, PID) order (readers that look at
  ticks across processes);
- :meth:`ProcessViews.columns`: the same per PID as columns (times, SM %, memory): most readers
  want a figure of every sample of a process, and take it from here in one C-level slice instead
  of an attribute read per sample each;
- :meth:`ProcessViews.nvml_pids`: the (node, PID) NVML listed.

A view is of the series as it was when the view was made: the model's series only grow while
loading, and views are asked for after it. A reader that finds the series changed since a view
was made gets a fresh one (each view notes the series' length and its first and last record), so a
stale view is never handed out. The lists a view hands out are shared: readers must not change them.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import islice
from operator import attrgetter, itemgetter, le
from typing import Any, NamedTuple

from forensics.analysis.samples import ProcessGpuSample
from forensics.specs.nvml import SAMPLES as SAMPLES_MEMBER

__all__ = ["ByPid", "Columns", "PidColumns", "ProcessViews"]

_BY_TIME_PID = attrgetter("t", "pid")
_GPU_PID = itemgetter(0, 1, 2)  # (node, GPU UUID, PID) of a ProcessGpuSample

#: (node, GPU UUID) -> PID -> its samples in time order; PIDs in the order they are first seen on
#: that GPU (by time, then PID): the order a walk of the (time, PID) sorted samples meets them
ByPid = dict[tuple[str, str], dict[int, list[ProcessGpuSample]]]



class PidColumns(NamedTuple):
    """One PID's samples on one GPU as columns, in the order of :meth:`ProcessViews.by_pid`."""

    t: list[float]
    sm_util_pct: list[float | None]
    used_memory_bytes: list[int | None]
    distinct: bool  # no two samples at the same time (one reading per tick: the usual case)
    all_listed: bool  # every sample from a process list: a sampled line's (``proc_index`` >= 0) or a snapshot's


#: (node, GPU UUID) -> PID -> its columns (same keys and order as :data:`ByPid`)
Columns = dict[tuple[str, str], dict[int, PidColumns]]


def _all_listed(samples: list[ProcessGpuSample], proc_index: list[int]) -> bool:
    """Whether every sample was in a process list: a sampled line's (an index in its
    ``processes``) or the snapshot's (``nvml/processes.json``, no index); a sampled line's PID
    that only ``nvmlDeviceGetProcessUtilization`` named (-1) was not."""
    if min(proc_index, default=0) >= 0:
        return True
    if min(proc_index) < -1:
        return False
    i = -1
    for _ in range(proc_index.count(-1)):  # (the few without an index, found in C)
        i = proc_index.index(-1, i + 1)
        if samples[i].ref.member == SAMPLES_MEMBER:
            return False
    return True


class ProcessViews:
    """The views of one series of process samples (see the module docstring)."""

    __slots__ = ("_built", "_series")

    def __init__(self, series: list[ProcessGpuSample]) -> None:
        self._series = series
        self._built: dict[str, tuple[tuple[int, int, int], Any]] = {}

    def _stamp(self) -> tuple[int, int, int]:
        s = self._series
        return (len(s), id(s[0]), id(s[-1])) if s else (0, 0, 0)

    def _view(self, name: str) -> Any:
        stamp = self._stamp()
        got = self._built.get(name)
        if got is None or got[0] != stamp:
            got = self._built[name] = (stamp, getattr(self, "_make_" + name)())
        return got[1]

    def by_pid(self) -> ByPid:
        """(node, GPU UUID) -> PID -> its samples in time order (see :data:`ByPid`)."""
        return self._view("by_pid")  # type: ignore[no-any-return]

    def by_gpu(self) -> dict[tuple[str, str], list[ProcessGpuSample]]:
        """(node, GPU UUID) -> its samples in (time, PID) order."""
        return self._view("by_gpu")  # type: ignore[no-any-return]

    def columns(self) -> Columns:
        """(node, GPU UUID) -> PID -> its samples' figures as columns (see :class:`PidColumns`)."""
        return self._view("columns")  # type: ignore[no-any-return]

    def nvml_pids(self) -> frozenset[tuple[str, int]]:
        """The (node, PID) NVML listed on any GPU."""
        return self._view("nvml_pids")  # type: ignore[no-any-return]

    def _make_by_pid(self) -> ByPid:
        return self._view("grouped")[0]  # type: ignore[no-any-return]

    def _make_columns(self) -> Columns:
        return self._view("grouped")[1]  # type: ignore[no-any-return]

    def _make_grouped(self) -> tuple[ByPid, Columns]:
        """By PID and as columns in one pass, in load order: the samples are read where they lie
        in memory, one after another (reading them PID by PID afterwards, a column at a time, costs
        a cache miss per sample: seconds for an hour of ring)."""
        groups: dict[tuple[str, str, int], tuple[list[Any], ...]] = {}
        get = groups.get
        for s in self._series:
            key = _GPU_PID(s)
            g = get(key)
            if g is None:
                g = groups[key] = ([], [], [], [], [])
            g[0].append(s)
            g[1].append(s[3])  # t
            g[2].append(s[5])  # sm_util_pct
            g[3].append(s[4])  # used_memory_bytes
            g[4].append(s[7])  # proc_index
        per_gpu: dict[tuple[str, str], list[tuple[float, int, tuple[list[Any], ...]]]] = defaultdict(list)
        for (node, uuid, pid), g in groups.items():
            ts = g[1]
            if not all(map(le, ts, islice(ts, 1, None))):  # (in load order already, but for several bundles)
                order = sorted(range(len(ts)), key=ts.__getitem__)  # stable, as the old sort of the samples
                g = tuple([col[i] for i in order] for col in g)
            per_gpu[(node, uuid)].append((g[1][0], pid, g))
        by_pid: ByPid = {}
        columns: Columns = {}
        for gpu, pids in per_gpu.items():
            pids.sort(key=itemgetter(0, 1))
            by_pid[gpu] = {pid: g[0] for _, pid, g in pids}
            columns[gpu] = {pid: PidColumns(g[1], g[2], g[3], len(set(g[1])) == len(g[1]), _all_listed(g[0], g[4]))
                            for _, pid, g in pids}
        return by_pid, columns

    def _make_by_gpu(self) -> dict[tuple[str, str], list[ProcessGpuSample]]:
        out: dict[tuple[str, str], list[ProcessGpuSample]] = defaultdict(list)
        for s in self._series:  # in load order (nearly sorted: the sort below is cheap)
            out[(s.node, s.gpu_uuid)].append(s)
        for v in out.values():
            v.sort(key=_BY_TIME_PID)  # (a C key: once per process sample)
        return dict(out)

    def _make_nvml_pids(self) -> frozenset[tuple[str, int]]:
        return frozenset((node, pid) for (node, _), pids in self.by_pid().items() for pid in pids)
