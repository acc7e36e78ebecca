"""What ``cluster capture`` was asked to do: the nodes, the capture's arguments, the deadlines.

A module of its own: the node selection (selection.py) and the run (run.py) both read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["CAPTURE_POD_SELECTOR", "ClusterCaptureOptions"]

CAPTURE_POD_SELECTOR = "app.kubernetes.io/name=gpuforensics,app.kubernetes.io/component=capture"


@dataclass(frozen=True)
class ClusterCaptureOptions:
    """What to capture where. At most one of ``nodes``, ``selector``, ``pods_of``; none means the
    GPU nodes (labelled ``nvidia.com/gpu.present=true``, the DaemonSet's ``nodeSelector``) and
    any other node that runs a capture pod."""

    out_dir: Path
    namespace: str = "gpuforensics"
    nodes: tuple[str, ...] = ()
    selector: str | None = None
    pods_of: str | None = None  # "NAMESPACE/LABEL-SELECTOR"
    parallel: int = 16
    duration_s: float = 0.0
    interval_s: float = 1.0
    since: str | None = None
    capture_timeout_s: float = 120.0
    node_timeout_s: float | None = None  # default: duration + capture timeout + 60 s for the transfer
    job: bool = False
    image: str | None = None
    job_start_timeout_s: float = 120.0
    capture_args: tuple[str, ...] = ()
    kubeconfig: str | None = None
    context: str | None = None
    pod_selector: str = CAPTURE_POD_SELECTOR
    container: str = "capture"

    def node_deadline_s(self) -> float:
        if self.node_timeout_s is not None:
            return self.node_timeout_s
        return self.duration_s + self.capture_timeout_s + 60.0

    def capture_command(self, node: str) -> list[str]:
        """What runs in the pod: the bundle's bytes on stdout, the node named explicitly."""
        cmd = ["gpuforensics", "capture", "--output", "-", "--node", node,
               "--duration", f"{self.duration_s:g}", "--interval", f"{self.interval_s:g}",
               "--timeout", f"{self.capture_timeout_s:g}"]
        if self.since:
            cmd += ["--since", self.since]
        return cmd + list(self.capture_args)
