"""Kernel log: ``kernel/kmsg.txt`` and ``kernel/kmsg-window.txt`` (``/dev/kmsg`` records verbatim),
or the fallbacks ``kernel/dmesg.txt`` (``dmesg --raw``) and ``kernel/journal.jsonl``
(``journalctl -k -o json``), parsed again from raw with :mod:`forensics.parsing.kmsg`: OOM-kill
sequences (:mod:`forensics.parsing.oomkill`; memcg -> container via the cgroup path) and
``NVRM: Xid`` lines (:mod:`forensics.parsing.nvrm`; PCI id -> GPU via NVML's ``pciBusId``). Wall
time = boot time (``kernel/index.json`` clocks, else ``host/host.json``) plus the record's
microseconds since boot.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace

from forensics.analysis.events import GpuLostWitness, OomKill, XidEvent
from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.common import Loader, as_float, dig
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model
from forensics.analysis.ring_view import RING_PREFIX, RingSource, history_spans
from forensics.analysis.source import Source
from forensics.errors import ParseError
from forensics.parsing import kmsg, nvrm, oomkill
from forensics.parsing.attribution import attribute_path
from forensics.specs import host as host_spec
from forensics.specs import kernel as kernel_spec
from forensics.specs import procfs as procfs_spec

__all__ = ["LOADER", "load_kernel", "load_kernel_history"]

_SOURCES: tuple[tuple[str, Callable[[str], kmsg.KmsgRecord]], ...] = (
    (kernel_spec.KMSG, kmsg.parse_kmsg_record),
    (kernel_spec.KMSG_WINDOW, kmsg.parse_kmsg_record),
    (kernel_spec.DMESG, kmsg.parse_dmesg_raw_line),
    (kernel_spec.JOURNAL, kmsg.parse_journal_line),
)


# Substrings of every record the OOM tracker or the Xid parser can use.
_KEYWORDS = ("oom", "Killed process", "memory: usage", "Task in ", "Xid", "NVRM")


#: a boot time is taken only in [1970, 2242): a bundle is hostile input, and a time outside any
#: calendar (``1e300``) made every later date conversion raise
_LATEST = float(1 << 33)


def _plausible(t: float | None) -> float | None:
    return t if t is not None and math.isfinite(t) and 0.0 <= t < _LATEST else None


_ESCAPED = re.compile(r"\\x([0-9a-fA-F]{2})")


def _plain(message: str) -> str:
    """A message as text: /dev/kmsg writes bytes outside printable ASCII as ``\\xNN`` (a process
    named ``trainér``: ``train\\xc3\\xa9r``), ``dmesg`` and the journal as the text itself."""
    if "\\x" not in message:
        return message
    try:
        raw = _ESCAPED.sub(lambda m: chr(int(m[1], 16)), message).encode("latin-1")
    except UnicodeEncodeError:  # not kmsg's escaping alone
        return message
    return raw.decode("utf-8", "replace")


def _boot_time(src: Source) -> float | None:
    for member, path in ((kernel_spec.INDEX, ("clocks", "boot_time_unix")),
                         (host_spec.FACTS, ("clocks", "boot_time_from_monotonic_unix")),
                         (host_spec.FACTS, ("boot_time_unix",)),
                         (procfs_spec.INDEX, ("boot_time_unix",))):
        value = _plausible(as_float(dig(src.json(member), *path)))
        if value is not None:
            return value
    return None


def load_kernel(src: Source, model: Model, node: str, loading: LoadState) -> None:
    """The capture's own kernel log (its boot's records; where a ring follows, each one's key is kept
    in ``loading`` to compare the ring's with)."""
    _load(src, model, node, loading, history=False)


def load_kernel_history(view: RingSource, model: Model, node: str, loading: LoadState) -> None:
    """The kernel records the flight recorder followed (``ring/kernel/kmsg-window.txt``, rebuilt from
    the ring's segments) that the capture's own kernel log does not hold: the ones from before a
    reboot, or those a busy kernel buffer overwrote before the capture read it; all of them when the
    capture read no kernel log. Run after the capture's own (:func:`load_kernel`), so a record in both
    is cited where the capture read it. Each record's wall time is its microseconds since boot plus
    the boot time of the recorder run that followed it (that run's wall minus monotonic clock), not
    the capture's boot: after a reboot they differ."""
    if view.rebuilt is None:  # whole ring members of an older capture: no run to take a boot from
        return
    if _load(view, model, node, loading, history=True):
        folder = view.prefix + "kernel/"
        model.node(node).history_held[folder] = history_spans(view).get(folder)


def _load(src: Source, model: Model, node: str, loading: LoadState, history: bool) -> bool:
    """Read the kernel log members ``src`` holds; False when it holds none."""
    boot = None if history else _boot_time(src)
    present = [m for m, _ in _SOURCES if src.has(m)]
    if not present:
        return False
    if boot is None and not history:
        model.limit(f"{node}: no boot time in the bundle: kernel log events have no wall-clock time")
    info = model.node(node)
    info.members_used.setdefault("kernel", src.ref(present[0], 0, None).member)  # its bundle path
    boot_at = src.boot_time_at if history and isinstance(src, RingSource) else None
    # the capture's own records, kept to compare the ring's with: only where a ring follows (load_source)
    keep = not history and node in loading.kernel_keys
    captured = loading.kernel_keys.get(node, set())
    captured_lines = loading.kernel_lines.get(node, set())
    raw_kmsg = {member: parse is kmsg.parse_kmsg_record for member, parse in _SOURCES}  # the same text in the ring
    seen_seq: set[int] = set()
    seen_keys: set[tuple[int, str]]
    seen_lines: set[str]
    seen_keys, seen_lines = loading.kernel_history_seen.get(node, (set(), set())) if history else (set(), set())
    tracker = oomkill.OomTracker()
    oom_lines: list[tuple[int, str]] = []  # (line, text) of the OOM sequence in progress
    bus = nvrm.BusLossJoiner()  # fell-off-the-bus messages without an Xid number, continuations joined
    count = 0
    bad = 0
    for member, parse in _SOURCES:
        lines = src.text_lines(member, cache=False)
        if lines is None:
            continue
        for no, line in enumerate(lines, 1):
            if not line.strip() or line[:1] == " ":
                continue
            if not any(k in line for k in _KEYWORDS):  # a record no rule reads: counted, not parsed
                if history:  # (logs can hold millions); the ring's copy of one the capture read is not
                    if line in captured_lines or line in seen_lines:  # counted, nor a record the recorder
                        continue  # read again (from the start of /dev/kmsg, after a reboot)
                    seen_lines.add(line)
                elif keep and raw_kmsg[member]:
                    captured_lines.add(line)
                count += 1
                continue
            try:
                record = parse(line)
            except ParseError:
                bad += 1
                continue
            # one record whichever format read it (made only where a ring's records are compared)
            key = (record.ts_usec, _plain(record.message)) if history or keep else (0, "")
            dup = False  # a ring record the capture's log holds too: only the OOM sequence reads it
            if history:  # records of several boots: not the sequence numbers, which start again at boot
                if key in seen_keys:
                    continue
                seen_keys.add(key)
                dup = key in captured
                booted = _plausible(boot_at(member, no)) if boot_at is not None else None
            else:
                if record.seq is not None:
                    if record.seq in seen_seq:
                        continue
                    seen_seq.add(record.seq)
                if keep:
                    captured.add(key)
                booted = boot
            count += not dup
            t = _plausible(booted + record.ts_usec / 1e6) if booted is not None else None
            msg = record.message
            if "oom" in msg or "Killed process" in msg or msg.startswith(("memory: usage", "Task in ")):
                if "invoked oom-killer" in msg:
                    oom_lines = []
                oom_lines.append((no, line))
            kill = tracker.feed(record)
            if kill is not None:
                if dup:  # the capture's log closes this OOM sequence: it may lack its start, the ring has it
                    _complete_oom(src, model, node, member, kill, oom_lines)
                else:
                    _add_oom(src, model, node, member, kill, t, oom_lines)
                oom_lines = []
            if dup:
                continue
            lost = bus.feed(record.ts_usec, msg, (no, line, t, msg))
            if lost is not None:
                _add_bus_loss(src, model, node, member, lost)
            xid = nvrm.parse_xid(record)
            if xid is not None:
                gpu = model.gpu_by_pci(node, xid.pci_bus_id) if xid.pci_bus_id else None
                model.add(XidEvent(node, t, xid.xid, xid.pci_bus_id, gpu.uuid if gpu else None,
                                           xid.pid, xid.process_name, msg, src.ev_line(member, no, line),
                                           xid.gpu_instance_id))
    info.kernel_records += count
    if bad:
        src.problems.append(f"{src.name}: kernel log: {bad} unparsable line(s) skipped")
    return True


def _add_bus_loss(src: Source, model: Model, node: str, member: str, lost: tuple[str, list[object]]) -> None:
    """A fell-off-the-bus message naming its PCI address without an Xid number (all its records cited)."""
    pci, keys = lost
    records = [k for k in keys if isinstance(k, tuple)]
    gpu = model.gpu_by_pci(node, pci)
    t = next((r[2] for r in records if isinstance(r[2], float)), None)
    model.add(GpuLostWitness(
        node, t, pci, gpu.uuid if gpu else None, "kernel-nvrm",
        " ".join(str(r[3]).replace("\\x0a", " ") for r in records),
        tuple(src.ev_line(member, r[0], r[1]) for r in records)))


def _attribution(kill: oomkill.OomKill) -> tuple[str | None, str | None]:
    """The container id and pod uid the OOM's memory cgroup names (None where it names none)."""
    memcg = kill.task_memcg or kill.oom_memcg
    if memcg:
        try:
            att = attribute_path(memcg)
            return att.container_id, att.pod_uid
        except ParseError:
            pass
    return None, None


def _oom_evidence(src: Source, member: str, lines: list[tuple[int, str]]) -> tuple[Evidence, ...]:
    wanted = [(no, line) for no, line in lines
              if "oom-kill:" in line or "Killed process" in line or "memory: usage" in line]
    return tuple(src.ev_line(member, no, line) for no, line in (wanted or lines)[-3:])


def _complete_oom(src: Source, model: Model, node: str, member: str, kill: oomkill.OomKill,
                  lines: list[tuple[int, str]]) -> None:
    """The capture's kill of the same process whose sequence lost its start (its kernel buffer
    overwrote the memory cgroup lines before the capture read it) gets them from the ring's."""
    if not (kill.task_memcg or kill.oom_memcg):
        return
    for i, o in enumerate(model.series(OomKill)):
        if (o.node == node and o.source == "kernel" and o.pid == kill.pid and o.task_memcg is None
                and o.container_id is None and not any(e.member.startswith(RING_PREFIX) for e in o.evidence)):
            cid, pod = _attribution(kill)
            model.series(OomKill)[i] = replace(
                o, container_id=cid, pod_uid=pod, global_oom=kill.scope == "global",
                usage_bytes=kill.memcg_usage_bytes if o.usage_bytes is None else o.usage_bytes,
                limit_bytes=kill.memcg_limit_bytes if o.limit_bytes is None else o.limit_bytes,
                task_memcg=kill.task_memcg, evidence=(*_oom_evidence(src, member, lines)[:-1], *o.evidence))
            return


def _add_oom(src: Source, model: Model, node: str, member: str, kill: oomkill.OomKill, t: float | None,
             lines: list[tuple[int, str]]) -> None:
    cid, pod = _attribution(kill)
    evidence = _oom_evidence(src, member, lines)
    model.add(OomKill(
        node=node, t=t, pid=kill.pid, comm=kill.comm, container_id=cid, pod_uid=pod,
        global_oom=kill.scope == "global", usage_bytes=kill.memcg_usage_bytes,
        limit_bytes=kill.memcg_limit_bytes, task_memcg=kill.task_memcg, source="kernel",
        evidence=evidence))


# needs: Xid lines name PCI bus ids that resolve to NVML's GPUs
LOADER = Loader("kernel", load_kernel, needs=("nvml",))
