"""The ``net`` source: the collector (net.py: discovery and the snapshot), its sampling tick
(tick.py: what is read and written each tick) and the link notifications that say which
interfaces' ``operstate`` to read (links.py). Parsing is ``forensics/parsing/netstat.py``."""

from forensics.collectors.net.net import COLLECTOR, TICK_IB_COUNTERS, NetCollector

__all__ = ["COLLECTOR", "TICK_IB_COUNTERS", "NetCollector"]
