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

__all__ = ["COLLECTOR_MODULES", "BrokenCollector", "NotSelected", "collector_name", "load_collectors"]

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


# collector names that differ from their module's last component
_NAMES = {"forensics.collectors.podresources_collector": "podresources"}


def collector_name(module: str) -> str:
    """The name a registry module's collector goes by (``--only``/``--skip``), known without importing it."""
    return _NAMES.get(module, module.rsplit(".", 1)[-1])


@dataclass
class NotSelected:
    """A collector left out by ``--only``/``--skip``: never imported, recorded as skipped."""

    name: str
    order: int = 0
    timeout_s: float = 0.0

    def snapshot(self, ctx: CollectContext) -> None:  # pragma: no cover - never run
        raise RuntimeError(f"collector {self.name} was not selected")


@dataclass
class BrokenCollector:
    """Stands in for a collector module that failed to import, so it costs only itself."""

    name: str
    error: str
    order: int = 10_000
    timeout_s: float = 1.0

    def snapshot(self, ctx: CollectContext) -> None:
        raise RuntimeError(self.error)


def load_collectors(
    modules: tuple[str, ...] = COLLECTOR_MODULES,
    only: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
) -> list[Any]:
    """Import each listed module that exists and return its ``COLLECTOR``, sorted by ``order``.

    With ``only``/``skip``, modules of collectors that will not run are not imported at all (a
    ``--only host`` capture does not pay for the docker or kubernetes clients); they are returned
    as :class:`NotSelected` so the manifest still lists them.
    """
    found: list[Any] = []
    for pos, mod_name in enumerate(modules):
        if importlib.util.find_spec(mod_name) is None:
            continue
        short = collector_name(mod_name)
        if (only and short not in only) or short in skip:
            found.append((pos, NotSelected(short, order=pos * 10)))
            continue
        try:
            module = importlib.import_module(mod_name)
            collector = module.COLLECTOR
        except Exception as exc:  # a broken collector module must not break capture
            found.append((pos, BrokenCollector(short, f"cannot load collector module {mod_name}: {exc}")))
            continue
        found.append((pos, collector))
    found.sort(key=lambda pc: (getattr(pc[1], "order", 1000), pc[0]))
    return [c for _, c in found]
