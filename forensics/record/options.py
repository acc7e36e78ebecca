"""What ``gpuforensics record`` was asked to do: the options of one recorder run, checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import UsageError
from forensics.record.sources import SOURCE_NAMES
from forensics.ring import DEFAULT_MAX_BYTES, DEFAULT_RETENTION_S

if TYPE_CHECKING:
    from forensics.record.live.metrics import MetricsOptions
    from forensics.record.triggers import TriggerOptions

__all__ = ["RecordOptions"]


@dataclass(frozen=True)
class RecordOptions:
    """Everything ``gpuforensics record`` was asked to do."""

    ring: Path
    interval_s: float = 1.0
    max_bytes: int = DEFAULT_MAX_BYTES
    retention_s: float = DEFAULT_RETENTION_S
    sources: tuple[str, ...] = SOURCE_NAMES
    redact: bool = True
    nvml_library: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    duration_s: float = 0.0  # 0: until SIGTERM
    tick_timeout_s: float | None = None  # default: the interval
    hang_kill_s: float | None = None  # default: max(5 s, 5 intervals)
    clock_jump_s: float = 2.0
    retry_s: float = 5.0
    segment_bytes: int | None = None
    segment_age_s: float = 600.0
    nice: int = 10
    argv: tuple[str, ...] = ()
    triggers: TriggerOptions | None = None  # record --trigger (forensics.record.triggers)
    metrics: MetricsOptions | None = None  # record --metrics-addr (forensics.record.live.metrics)
    kubeconfig: str | None = None  # record --kubeconfig/--context/--node: the kubernetes source
    kube_context: str | None = None
    node_name: str | None = None

    def check(self) -> None:
        if not (0.05 <= self.interval_s <= 3600):
            raise UsageError(f"--interval must be between 0.05 and 3600 s, not {self.interval_s:g}")
        unknown = sorted(set(self.sources) - set(SOURCE_NAMES))
        if unknown:
            raise UsageError(f"unknown source {', '.join(unknown)} (known: {', '.join(SOURCE_NAMES)})")
        if not self.sources:
            raise UsageError("no source to record")
