"""One streaming scan of ``/proc/*/cgroup``: each live PID's cgroup lines and attribution; and
:class:`ContainerPidScan`, the same scan repeated (the recorder's re-plan) reading only what may
have changed."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from forensics.errors import ParseError
from forensics.hostfs.files import read_small
from forensics.parsing.attribution import (
    Attribution,
    CgroupLine,
    attribute_path,
    attribute_proc_cgroup,
)

__all__ = ["ContainerPidScan", "ProcessCgroup", "ScanStats", "attributed_paths", "hierarchy_paths", "pid_dirs", "scan_proc_cgroups"]


@dataclass(frozen=True)
class ProcessCgroup:
    """One PID's ``/proc/<pid>/cgroup``: the verbatim bytes, its lines and attribution."""

    pid: int
    raw: bytes
    lines: tuple[CgroupLine, ...]
    attribution: Attribution


@dataclass
class ScanStats:
    """What a /proc scan saw (counts only)."""

    scanned: int = 0
    vanished: int = 0
    denied: int = 0
    unparsable: int = 0


def pid_dirs(proc_root: str) -> Iterator[int]:
    """The PIDs listed under ``proc_root``."""
    with os.scandir(proc_root) as entries:
        for entry in entries:
            if entry.name.isdigit():
                yield int(entry.name)


def scan_proc_cgroups(
    proc_root: str = "/proc", stats: ScanStats | None = None
) -> Iterator[ProcessCgroup]:
    """Read ``/proc/*/cgroup`` once, streaming one :class:`ProcessCgroup` per live PID.

    PIDs that exit meanwhile are counted in ``stats.vanished``; unreadable ones in ``denied``.
    """
    stats = stats if stats is not None else ScanStats()
    for pid in pid_dirs(proc_root):
        stats.scanned += 1
        try:
            raw = read_small(f"{proc_root}/{pid}/cgroup", 1 << 16)
        except PermissionError:
            stats.denied += 1
            continue
        except OSError:
            stats.vanished += 1
            continue
        if not raw:  # a zombie or a PID that exited between listdir and read
            stats.vanished += 1
            continue
        try:
            attribution, lines = attribute_proc_cgroup(raw.decode("utf-8", "replace"))
        except ParseError:
            stats.unparsable += 1
            continue
        yield ProcessCgroup(pid, raw, lines, attribution)


def attributed_paths(entry: ProcessCgroup) -> list[str]:
    """The distinct cgroup paths of a process that name a container or pod (one per hierarchy
    where they differ, e.g. v1 ``/docker/<id>`` and v2 ``/system.slice/docker-<id>.scope``)."""
    paths: list[str] = []
    for line in entry.lines:
        if line.path in paths:
            continue
        if attribute_path(line.path).kind in ("container", "pod"):
            paths.append(line.path)
    return paths


def hierarchy_paths(lines: tuple[CgroupLine, ...]) -> dict[str, str]:
    """``{"unified": path, "memory": path, "cpu,cpuacct": path, ...}`` from cgroup lines."""
    return {("unified" if ln.is_v2 else ",".join(ln.controllers) or str(ln.hierarchy_id)): ln.path
            for ln in lines}


class ContainerPidScan:
    """The container and pod cgroup paths of every live PID, scanned again and again (the recorder
    asks every ``replan_s``), reading ``/proc/<pid>/cgroup`` only where it may have changed.

    A PID's cgroup changes only when the process is migrated, and a PID number names another
    process only after the first one was reaped. One ``scandir`` of ``/proc`` lists the PIDs with
    their directory's inode: a new inode (a new process, the PID reused) is read at once; a process
    is read again at the scan after its first (a process is moved, by runc or systemd, right after
    its fork: one caught before its move is seen again moved), and then at least every
    ``reread_s``, for later migrations. A file read with the same bytes as before is not parsed
    again. :meth:`paths` is what a full :func:`scan_proc_cgroups` would give, in PID order."""

    def __init__(self, proc_root: str = "/proc", reread_s: float = 60.0) -> None:
        self.proc_root = proc_root
        self.reread_s = reread_s
        # pid -> (directory inode, the cgroup file's bytes, its container/pod paths, reads, when last read)
        self._seen: dict[int, tuple[int, bytes, tuple[str, ...], int, float]] = {}
        self.reads = 0  # files read over all scans (benchmarks, tests)

    def paths(self) -> list[str]:
        """The distinct container and pod cgroup paths of the live PIDs (each PID's in line order)."""
        now = time.monotonic()
        seen, kept = self._seen, {}
        found: dict[str, None] = {}
        with os.scandir(self.proc_root) as entries:
            for entry in entries:
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                try:
                    inode = entry.inode()
                except OSError:
                    continue
                was = seen.get(pid)
                if was is not None and was[0] == inode and was[3] >= 2 and now - was[4] < self.reread_s:
                    kept[pid] = was
                else:
                    try:
                        raw = read_small(f"{self.proc_root}/{pid}/cgroup", 1 << 16)
                    except OSError:  # exited, or not ours to read: as the scan, no paths
                        continue
                    self.reads += 1
                    if not raw:  # a zombie
                        continue
                    if was is not None and was[0] == inode and was[1] == raw:
                        paths = was[2]
                    else:
                        paths = self._parse(pid, raw)
                    reads = was[3] + 1 if was is not None and was[0] == inode else 1
                    kept[pid] = was = (inode, raw, paths, reads, now)
                for path in was[2]:
                    found[path] = None
        self._seen = kept  # PIDs no longer listed are forgotten
        return list(found)

    @staticmethod
    def _parse(pid: int, raw: bytes) -> tuple[str, ...]:
        try:
            attribution, lines = attribute_proc_cgroup(raw.decode("utf-8", "replace"))
        except ParseError:
            return ()
        if attribution.kind not in ("container", "pod"):
            return ()
        return tuple(attributed_paths(ProcessCgroup(pid, raw, lines, attribution)))
