"""Processes in uninterruptible sleep (state ``D``) that hold an NVIDIA device file open.

A process stuck in the driver (``D`` in ``/proc/<pid>/stat``, the kernel function it waits in from
``/proc/<pid>/wchan``) cannot be killed, and keeps its GPU memory until it leaves the driver: the
"memory used, no process listed" case that only a reset or reboot ends. Its open files are the
targets of ``readlink /proc/<pid>/fd/<n>``; those under ``/dev/nvidia`` (``/dev/nvidia0``,
``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-caps/...``) tie it to the GPU driver.

Only ``stat``, ``wchan`` and the fd links are read: none of them takes the process's memory-map
lock, which a process stuck in the driver may hold (reading its ``cmdline`` or ``environ`` could
then block the reader too, so they are not read here). At most ``max_fds`` links per process and
``max_processes`` processes are read.
"""

from __future__ import annotations

import os
from typing import Any

from forensics.errors import ParseError
from forensics.hostfs.files import describe_os_error, read_small
from forensics.hostfs.proc import pid_dirs
from forensics.parsing.procfs import parse_stat

__all__ = ["NVIDIA_DEVICE_PREFIX", "scan_dstate_gpu_holders"]

NVIDIA_DEVICE_PREFIX = "/dev/nvidia"


def _nvidia_fds(base: str, max_fds: int) -> tuple[list[dict[str, Any]], str | None, bool]:
    """(the fds whose target is an NVIDIA device file, why the fds could not be listed, cut short)."""
    found: list[dict[str, Any]] = []
    try:
        names = os.listdir(f"{base}/fd")
    except OSError as error:
        return found, describe_os_error(error), False
    numbers = sorted(int(n) for n in names if n.isdigit())
    for fd in numbers[:max_fds]:
        try:
            target = os.readlink(f"{base}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith(NVIDIA_DEVICE_PREFIX):
            found.append({"fd": fd, "target": target})
    return found, None, len(numbers) > max_fds


def scan_dstate_gpu_holders(proc_root: str = "/proc", max_processes: int = 256,
                            max_fds: int = 4096) -> dict[str, Any]:
    """Every process in state D (its comm, wchan) and, of those, which hold ``/dev/nvidia*`` open."""
    scanned = in_d = 0
    dstate: list[dict[str, Any]] = []
    for pid in pid_dirs(proc_root):
        base = f"{proc_root}/{pid}"
        try:
            stat = parse_stat(read_small(f"{base}/stat", 1 << 16).decode("utf-8", "replace"))
        except (OSError, ParseError):
            continue
        scanned += 1
        if stat.state != "D":
            continue
        in_d += 1
        if len(dstate) >= max_processes:
            continue
        entry: dict[str, Any] = {"pid": pid, "comm": stat.comm, "state": stat.state}
        try:
            entry["wchan"] = read_small(f"{base}/wchan", 256).decode("utf-8", "replace") or None
        except OSError as error:
            entry["wchan_error"] = describe_os_error(error)
        fds, error_text, cut = _nvidia_fds(base, max_fds)
        entry["nvidia_fds"] = fds
        if error_text is not None:
            entry["fd_error"] = error_text
        if cut:
            entry["fds_cut_at"] = max_fds
        dstate.append(entry)
    return {"scanned": scanned, "max_processes": max_processes,
            "dstate_processes": in_d,
            "processes": dstate,
            "gpu_holders": [e["pid"] for e in dstate if e["nvidia_fds"]]}
