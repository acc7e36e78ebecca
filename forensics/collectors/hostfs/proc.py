"""One streaming scan of ``/proc/*/cgroup``: each live PID's cgroup lines and attribution."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from forensics.collectors.hostfs.files import read_small
from forensics.errors import ParseError
from forensics.parsing.attribution import (
    Attribution,
    CgroupLine,
    attribute_path,
    attribute_proc_cgroup,
)

__all__ = ["ProcessCgroup", "ScanStats", "attributed_paths", "hierarchy_paths", "pid_dirs", "scan_proc_cgroups"]


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
