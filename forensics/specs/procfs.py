"""``procfs``: per-process evidence and PID -> container/pod attribution (bundle members ``proc/*``)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, SourceSpec, setting
from forensics.specs.hints import CGROUP_PATHS, PIDS, PROCFS_RECORDED_PIDS
from forensics.specs.roles import PROCESS_TABLE

__all__ = ["DSTATE", "INDEX", "PREFIX", "RANK_ENV_NAMES", "SPEC", "WINDOW", "ProcfsSettings", "pid_member"]

PREFIX = "proc/"
INDEX = "proc/index.json"
WINDOW = "proc/window.jsonl"
DSTATE = "proc/dstate.json"  # processes in uninterruptible sleep, and which hold /dev/nvidia* open
# a distributed job's rank identity in a process's environment (torchrun / torch.distributed set
# them), kept verbatim by the redactor and recorded as ``rank_env`` in proc/index.json
RANK_ENV_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "NODE_RANK", "GROUP_RANK")


def pid_member(pid: int | str, name: str = "") -> str:
    """``proc/<pid>/<name>`` (``proc/<pid>`` without a name): ``stat``, ``status``, ``cgroup``,
    ``cmdline``, ``environ``, ``ns.json``."""
    return f"{PREFIX}{pid}/{name}" if name else f"{PREFIX}{pid}"


@dataclass(frozen=True)
class ProcfsSettings:
    max_pids: int = setting("positive-int", "processes whose /proc files are stored", 2000)
    max_window_pids: int = setting("positive-int", "processes born during the window that are stored", 2000)


SPEC = SourceSpec(
    name="procfs", order=30, collector="forensics.collectors.procfs", settings=ProcfsSettings,
    absence=Absence("no /proc data: GPU processes cannot be joined to containers"),
    publishes=(CGROUP_PATHS, PROCFS_RECORDED_PIDS), reads=(PIDS, PROCFS_RECORDED_PIDS),
    roles=(PROCESS_TABLE,),
)
