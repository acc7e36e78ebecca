"""The roles a source plays for the analysis, typed: what a rule asks of a node ("was the kernel log
read?", "did a container runtime describe the containers?") without naming the sources that answer.

Each role is declared once: here when several sources may play it or several rules ask it, or
beside its spec when only that source plays it (``specs/<source>.py``); a spec names the roles its
source plays (``SourceSpec.roles``), and a rule asks
:meth:`forensics.analysis.model.Model.has_role` or declares a kind's ``needs`` with these
constants, never a list of source names. A new source of an existing role (another
container runtime) declares it in its spec and every rule that asks the role counts it; a role
no spec declares is an error where it is asked (``tests/unit/specs/test_roles.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CGROUP_COUNTERS", "CONTAINER_RUNTIME", "GPU_DEVICES", "KERNEL_LOG", "NET_COUNTERS", "ORCHESTRATOR",
    "PROCESS_TABLE", "Role",
]


@dataclass(frozen=True)
class Role:
    """A question of the analysis that a source answers when it was read (status ok or partial)."""

    name: str
    help: str

    def __str__(self) -> str:
        return self.name


GPU_DEVICES = Role("gpu-devices", "the node's GPUs as the driver enumerates them, their samples and the processes on them")
CONTAINER_RUNTIME = Role("container-runtime", "the node's containers (Docker, podman, a CRI runtime): ids, names, "
                         "state and GPU grants")
ORCHESTRATOR = Role("orchestrator", "the node's pods: their containers, GPU limits and statuses")
PROCESS_TABLE = Role("process-table", "each process's cgroup, name and environment (PID -> container)")
CGROUP_COUNTERS = Role("cgroup-counters", "the containers' CPU, memory, I/O and pressure counters")
NET_COUNTERS = Role("net-counters", "the node's network and disk links and their counters")
KERNEL_LOG = Role("kernel-log", "the kernel's log: OOM kills, Xids, GPUs fallen off the bus")
