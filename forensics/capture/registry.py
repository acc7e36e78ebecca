"""The collectors capture knows, in order of volatility (RFC 3227): most volatile first.

GPU process tables change fastest, then containers and their processes, cgroup counters, the
kernel ring buffer (it wraps), cluster state, and last the slow, stable host facts.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

from forensics.capture.context import CollectContext

__all__ = ["COLLECTOR_MODULES", "BrokenCollector", "load_collectors"]

COLLECTOR_MODULES: tuple[str, ...] = (
    "forensics.collectors.nvml",
    "forensics.collectors.docker",
    "forensics.collectors.procfs",
    "forensics.collectors.cgroups",
    "forensics.collectors.kernel",
    "forensics.collectors.kubernetes",
    "forensics.collectors.podresources_collector",
    "forensics.collectors.host",
)


@dataclass
class BrokenCollector:
    """Stands in for a collector module that failed to import, so it costs only itself."""

    name: str
    error: str
    order: int = 10_000
    timeout_s: float = 1.0

    def snapshot(self, ctx: CollectContext) -> None:
        raise RuntimeError(self.error)


def load_collectors(modules: tuple[str, ...] = COLLECTOR_MODULES) -> list[Any]:
    """Import each listed module that exists and return its ``COLLECTOR``, sorted by ``order``."""
    found: list[Any] = []
    for pos, mod_name in enumerate(modules):
        if importlib.util.find_spec(mod_name) is None:
            continue
        short = mod_name.rsplit(".", 1)[-1]
        try:
            module = importlib.import_module(mod_name)
            collector = module.COLLECTOR
        except Exception as exc:  # a broken collector module must not break capture
            found.append((pos, BrokenCollector(short, f"cannot load collector module {mod_name}: {exc}")))
            continue
        found.append((pos, collector))
    found.sort(key=lambda pc: (getattr(pc[1], "order", 1000), pc[0]))
    return [c for _, c in found]
