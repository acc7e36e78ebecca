"""The rules: small pure functions ``(Model, AnalysisConfig) -> list[Finding]``, one module per family."""

from __future__ import annotations

from collections.abc import Callable

from forensics.analysis.findings import Finding
from forensics.analysis.model import Model
from forensics.analysis.rules.cpu import cpu_throttling, pressure_stall
from forensics.analysis.rules.gpu_allocation import (
    overlapping_gpu_allocation,
    unallocated_gpu_use,
    unattributed_gpu_process,
)
from forensics.analysis.rules.gpu_contention import gpu_compute_hog, gpu_memory_pressure
from forensics.analysis.rules.gpu_health import gpu_clock_throttle, gpu_xid_fault
from forensics.analysis.rules.oom import oom_kill
from forensics.analysis.thresholds import AnalysisConfig

__all__ = ["RULES", "Rule"]

Rule = Callable[[Model, AnalysisConfig], list[Finding]]

# kind -> rule; the order is the order findings are produced in before time-sorting.
RULES: dict[str, Rule] = {
    "unallocated-gpu-use": unallocated_gpu_use,
    "overlapping-gpu-allocation": overlapping_gpu_allocation,
    "unattributed-gpu-process": unattributed_gpu_process,
    "gpu-compute-hog": gpu_compute_hog,
    "gpu-memory-pressure": gpu_memory_pressure,
    "cpu-throttling": cpu_throttling,
    "oom-kill": oom_kill,
    "gpu-xid-fault": gpu_xid_fault,
    "gpu-clock-throttle": gpu_clock_throttle,
    "pressure-stall": pressure_stall,
}
