"""The ``kernel`` source: the collector (collector.py: /dev/kmsg and its fallbacks, the window
sampler), what is derived from the records (derived.py: OOM kills, Xid events, driver messages,
records.jsonl) and the block-at-a-time derivation of a /dev/kmsg dump (blocks.py). Parsing is
forensics/parsing/kmsg.py, oomkill.py and nvrm.py."""

from forensics.collectors.kernel.collector import COLLECTOR, KernelCollector, clock_readings

__all__ = ["COLLECTOR", "KernelCollector", "clock_readings"]
