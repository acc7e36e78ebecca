"""The live state's NVML part: what a sampler child sends of each ``nvml/samples.jsonl`` device line.

The NVML sampler child summarises each device line from its object as it appends it (the
recorder's live state then never parses the line's JSON), and the summary travels in the frame's
JSON header (forensics.record.child). A device line's summary is

``[tick, gpu_index, uuid, t, util_pct, memory used, memory total, lost, procs(, ref)]``

(index and UUID None when either is not valid), ``procs`` the line's processes as four lists in
NVML's order, ``[[PIDs], [MIG UUIDs] or None (no process on a MIG device), [used memory], [SM %]]``,
SM % as NVML gave it (a number, None without a sample): a few lists per GPU, not one per process.

:func:`nvml_summary` gives it whole (no ``ref``): the one reading of those lines, which the live
state also uses when it has to parse a line itself. :class:`NvmlSummarizer` is the child's: the
processes (PIDs, MIG UUIDs, memory) of a GPU rarely change from one tick to the next, only their SM
share does, so it names each GPU's process lists when it sends them (``ref``: the child's random
token and a count) and, while a GPU's processes stay the same, sends ``[None, None, None, [SM %]]``
with that ``ref`` instead: the header carries 512 SM figures a tick at 8 GPUs x 64 processes, not
2 kB of PIDs and memory per GPU, and the live state knows without comparing that the (PID, GPU) set
did not change. The live state resolves such an entry from the lists it kept for that GPU under
that ``ref``; one it cannot resolve (a restarted child, a record the sink dropped) makes it parse
the record's own bytes instead (forensics.record.live), so a lost summary never stands for wrong
figures.

Fast paths, each with the same answer as the general code: the NVML sampler's utilisation samples
(forensics.collectors.nvml.fast.Samples) carry their rows of ints, from which each PID's SM % is
one C-level dict build; a line whose process entries are the very objects of the last line of that
GPU (the sampler's encoder, forensics.collectors.nvml.encode, gives the same entry while a process'
figures stay, and never changes one) has the same processes, not read again. Entries made anew each
tick (the pynvml path) are read each tick, as before.
"""

from __future__ import annotations

import os
from operator import is_, itemgetter
from typing import Any

__all__ = ["NvmlSummarizer", "nvml_summary", "num", "value"]

_NUMBER = (int, float)
_DICT, _INT = {dict}, {int}
_STR_NONE, _INT_NONE = {str, type(None)}, {int, type(None)}
#: a utilisation sample row's PID and SM % (forensics.collectors.nvml.fast.SAMPLE_FIELDS order: the
#: live state is read by the CLI, which may not import collectors; a test holds the two together)
_PID_SM = itemgetter(0, 2)
_PID, _SM = itemgetter(0), itemgetter(2)
_UTIL_CALL = "nvmlDeviceGetProcessUtilization"


def value(nvml: dict[str, Any], call: str) -> Any:
    entry = nvml.get(call)
    return entry.get("value") if isinstance(entry, dict) else None


def num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def nvml_summary(line: dict[str, Any]) -> list[Any] | None:
    """A device line's summary (see the module docstring), whole; None for another kind of line."""
    got = _figures(line)
    if got is None:
        return None
    head, plist, samples = got
    if plist is None:
        return head
    sm_of = _sm_of(samples)
    head[8] = _processes_fast(plist, sm_of) or _processes(plist, sm_of)
    return head


def _figures(line: dict[str, Any]) -> tuple[list[Any], Any, Any] | None:
    """A device line's summary with ``procs`` not filled in, its process entries and its
    utilisation samples; ``(summary, None, None)`` for a line without a valid index and UUID (its
    summary whole)."""
    if line.get("kind") != "device":
        return None
    tick = line.get("tick") if isinstance(line.get("tick"), int) else None
    idx, uuid = line.get("gpu_index"), line.get("uuid")
    if not isinstance(idx, int) or not isinstance(uuid, str):
        return [tick, None, None, None, None, None, None, False, [[], None, [], []]], None, None
    nv_raw = line.get("nvml")
    nv: dict[str, Any] = nv_raw if isinstance(nv_raw, dict) else {}
    util = value(nv, "nvmlDeviceGetUtilizationRates")
    mem = value(nv, "nvmlDeviceGetMemoryInfo_v2") or value(nv, "nvmlDeviceGetMemoryInfo")
    lost = any(isinstance(e, dict) and e.get("missing") == "gpu_is_lost" for e in nv.values())
    head = [tick, idx, uuid, num(line.get("t")),
            num(util.get("gpu")) if isinstance(util, dict) else None,
            int(mem["used"]) if isinstance(mem, dict) and isinstance(mem.get("used"), int) else None,
            int(mem["total"]) if isinstance(mem, dict) and isinstance(mem.get("total"), int) else None,
            lost, None]
    return head, line.get("processes") or [], value(nv, _UTIL_CALL)


def _sm_of(samples: Any) -> dict[Any, Any]:
    """Each PID's SM % in a line's utilisation samples: as NVML gave it (0 when not a number); one
    sample per PID is the common answer; with several, each PID's newest (``timeStamp``) wins, the
    later on a tie."""
    rows = getattr(samples, "rows", None)  # fast.Samples: a list of the samples' dicts, and them as rows of ints
    if type(samples) is not list and isinstance(samples, list) and type(rows) is list and len(rows) == len(samples):
        got = dict(map(_PID_SM, rows))
        if len(got) == len(rows) and set(map(type, got.values())) <= _INT:
            return got
    samples = [u for u in samples if type(u) is dict] if isinstance(samples, list) else []
    sm_of = {u.get("pid"): (v or 0) if type(v := u.get("smUtil")) in _NUMBER else 0 for u in samples}
    if len(sm_of) < len(samples):
        newest: dict[Any, dict[str, Any]] = {}
        for u in samples:
            prev = newest.get(u.get("pid"))
            if prev is None or _stamp(u) >= _stamp(prev):
                newest[u.get("pid")] = u
        sm_of = {pid: (v or 0) if type(v := u.get("smUtil")) in _NUMBER else 0 for pid, u in newest.items()}
    return sm_of


def _processes(plist: Any, sm_of: dict[Any, Any]) -> list[Any]:
    """A device line's processes as ``[PIDs, MIG UUIDs or None, used memory, SM %]`` (entries
    without an integer PID left out, other values None where not of their type)."""
    pids: list[int] = []
    migs: list[str | None] = []
    used: list[int | None] = []
    sms: list[Any] = []
    for p in plist if type(plist) is list else ():
        if type(p) is dict and type(pid := p.get("pid")) is int:
            held, mig = p.get("usedGpuMemory"), p.get("mig_uuid")
            pids.append(pid)
            migs.append(mig if type(mig) is str else None)
            used.append(held if type(held) is int else None)
            sms.append(sm_of.get(pid))
    return [pids, None if migs.count(None) == len(migs) else migs, used, sms]


def _processes_fast(plist: Any, sm_of: dict[Any, Any]) -> list[Any] | None:
    """:func:`_processes` for the common line (every entry a dict with an integer PID, memory an
    integer or None, MIG UUID a string or None), one comprehension per field; None for any other."""
    if type(plist) is not list or not plist or set(map(type, plist)) != _DICT:
        return None
    try:
        pids = [p["pid"] for p in plist]
    except KeyError:
        return None
    migs = [p.get("mig_uuid") for p in plist]
    used = [p.get("usedGpuMemory") for p in plist]
    if set(map(type, pids)) != _INT or not set(map(type, migs)) <= _STR_NONE or not set(map(type, used)) <= _INT_NONE:
        return None
    return [pids, None if migs.count(None) == len(migs) else migs, used, list(map(sm_of.get, pids))]


def _stamp(sample: dict[str, Any]) -> int:
    ts = sample.get("timeStamp")
    return ts if type(ts) is int else 0


class NvmlSummarizer:
    """One sampler child's device-line summaries, each GPU's process lists sent once while they stay
    the same (see the module docstring). Bounded: one kept line's entries per GPU index."""

    max_gpus = 1024  # GPU indexes kept (a machine has a few; the bound is for a confused sampler)

    def __init__(self) -> None:
        self.token = os.urandom(6).hex()  # this child's: a restarted child's refs are never its
        self._count = 0
        # GPU index -> (its last line's process entries, copied; their ref; their PIDs)
        self._last: dict[int, tuple[list[Any], str, list[Any]]] = {}
        # GPU index -> (its samples' PID column, the named PIDs, where each PID's sample is in it)
        self._order: dict[int, tuple[list[Any], list[Any], list[int]]] = {}

    def __call__(self, line: dict[str, Any]) -> list[Any] | None:
        got = _figures(line)
        if got is None:
            return None
        head, plist, samples = got
        if plist is None:
            return head
        idx = head[1]
        last = self._last.get(idx)
        if last is not None and type(plist) is list and len(plist) == len(last[0]) and all(map(is_, plist, last[0])):
            head[8] = [None, None, None, self._sms(idx, samples, last[2])]
            head.append(last[1])
            return head
        sm_of = _sm_of(samples)
        procs = _processes_fast(plist, sm_of) or _processes(plist, sm_of)
        self._count += 1
        ref = f"{self.token}.{self._count}"
        if type(plist) is list:
            if len(self._last) >= self.max_gpus and idx not in self._last:
                self._last.clear()
                self._order.clear()
            self._last[idx] = (list(plist), ref, procs[0])
        head[8] = procs
        head.append(ref)
        return head

    def _sms(self, idx: int, samples: Any, pids: list[Any]) -> list[Any]:
        """The SM % of each of ``pids`` (a GPU's named PIDs) in a line's samples, as
        :func:`_sm_of` gives them. The sampler's rows (fast.Samples) in the same PID order as the
        last tick's, each PID once (the common answer, tick after tick), are read by the positions
        found then, three C-level passes, no dict."""
        rows = getattr(samples, "rows", None)
        if type(samples) is not list and isinstance(samples, list) and type(rows) is list and len(rows) == len(samples):
            column = list(map(_PID, rows))
            kept = self._order.get(idx)
            if kept is not None and kept[1] is pids and kept[0] == column:
                shares = list(map(_SM, rows))
                shares.append(None)  # a PID without a sample
                if set(map(type, shares)) <= _INT_NONE:
                    return list(map(shares.__getitem__, kept[2]))
            at = {pid: n for n, pid in enumerate(column)}
            if len(at) == len(column):
                self._order[idx] = (column, pids, [at.get(pid, len(column)) for pid in pids])
        sm_of = _sm_of(samples)
        return list(map(sm_of.get, pids))
