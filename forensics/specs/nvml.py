"""``nvml``: what NVML says about every GPU and the processes on it (bundle members ``nvml/*``)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, SourceSpec, setting
from forensics.specs.hints import GPU_PIDS, PIDS
from forensics.specs.roles import GPU_DEVICES

__all__ = [
    "ACCOUNTING", "ACCOUNTING_END", "DEVICES", "EVENTS", "HEALTH_END", "PROCESSES", "SAMPLES", "SPEC", "NvmlSettings"]

DEVICES = "nvml/devices.json"
PROCESSES = "nvml/processes.json"
ACCOUNTING = "nvml/accounting.json"
ACCOUNTING_END = "nvml/accounting_end.json"
EVENTS = "nvml/events.jsonl"
SAMPLES = "nvml/samples.jsonl"
HEALTH_END = "nvml/health_end.json"  # the health counters read again after sampling


@dataclass(frozen=True)
class NvmlSettings:
    call_timeout_s: float = setting("positive-seconds",
                                    "how long one NVML call may hang before the GPU is taken as wedged", 10.0)


SPEC = SourceSpec(
    name="nvml", order=10, collector="forensics.collectors.nvml.nvml", settings=NvmlSettings,
    absence=Absence("no NVML data: GPU attribution not possible"),
    publishes=(PIDS, GPU_PIDS), roles=(GPU_DEVICES,),
)
