"""Container-like cgroups made by the tests on this host's cgroup v1 hierarchies (Docker's layout
under a private parent), and removed again: what the recorder's cgroup tests read for real."""

from __future__ import annotations

import time
from pathlib import Path

V1 = Path("/sys/fs/cgroup")
HIERARCHIES = ("cpu", "cpuacct", "memory", "pids")


def make_dirs(path: str) -> None:
    """The cgroup ``path`` (``/<parent>/docker-<id>.scope``) in every hierarchy."""
    for h in HIERARCHIES:
        (V1 / h / path.lstrip("/")).mkdir(parents=True)


def enter_command(path: str) -> str:
    """Shell that moves the shell itself into ``path`` in every hierarchy (then ``exec`` the workload)."""
    return "; ".join(f'echo $$ > "{V1 / h}{path}/cgroup.procs"' for h in HIERARCHIES)


def remove_dirs(path: str) -> None:
    """Remove ``path`` from every hierarchy, waiting (up to 5 s each) for its last task to be reaped."""
    for h in HIERARCHIES:
        d = V1 / h / path.lstrip("/")
        for _ in range(50):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
