"""The hints collectors hand to the ones after them (``ctx.publish`` / ``ctx.hint``), typed.

Each key is declared once here; a spec names the keys its collector publishes and reads.
"""

from __future__ import annotations

from forensics.specs.base import Hint

__all__ = ["CGROUP_PATHS", "GPU_PIDS", "KMSG_LAST_SEQ", "KUBE_NODE", "PIDS", "PROCFS_RECORDED_PIDS"]

PIDS = Hint("pids", int, "processes of interest: GPU users (nvml) and container processes (docker)")
GPU_PIDS = Hint("gpu_pids", int, "processes on a GPU (nvml), in this host's PID namespace")
CGROUP_PATHS = Hint("cgroup_paths", str, "cgroup paths of interest, relative to the cgroup root")
PROCFS_RECORDED_PIDS = Hint("procfs_recorded_pids", int,
                            "PIDs whose /proc files the snapshot stored (the window skips them)")
KMSG_LAST_SEQ = Hint("kmsg_last_seq", int, "the last kernel ring-buffer sequence number the snapshot read "
                     "(the sampler reads after it; -1: from the start; the recorder's comes from its ring)")
KUBE_NODE = Hint("kube_node", str, "the Kubernetes Node the snapshot read (the end of the window reads it again)")
