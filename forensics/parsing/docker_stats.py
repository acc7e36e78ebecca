"""The block IO and network parts of a Docker stats frame (``GET /containers/{id}/stats``).

Engine API ``ContainerStatsResponse``: ``blkio_stats.io_service_bytes_recursive`` is a list of
``{"major": N, "minor": N, "op": OP, "value": N}``; the engine copies it from the container's
cgroup, so on cgroup v1 ``op`` is ``Read|Write|Sync|Async|Discard|Total`` (``blkio.throttle.
io_service_bytes``) and on v2 ``read|write`` (``io.stat`` rbytes/wbytes); a container that did no IO
has ``null``. ``networks`` maps each interface of the container's network namespace to
``rx_bytes, rx_packets, rx_errors, rx_dropped, tx_bytes, tx_packets, tx_errors, tx_dropped`` (absent
under ``--network none`` or ``host``).

Pure functions over the decoded JSON; anything malformed is left out, never raised.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NETWORK_COUNTERS", "blkio_bytes", "network_totals"]

NETWORK_COUNTERS = ("rx_bytes", "rx_packets", "rx_errors", "rx_dropped",
                    "tx_bytes", "tx_packets", "tx_errors", "tx_dropped")
_MAX_ENTRIES = 4096


def _count(value: Any) -> int | None:
    return value if value.__class__ is int and value >= 0 else None


def blkio_bytes(stats: Any) -> dict[str, tuple[int, int]] | None:
    """``{"MAJ:MIN": (read_bytes, write_bytes)}`` from ``blkio_stats.io_service_bytes_recursive``;
    None when the frame has no such list (no IO yet, or not a stats frame)."""
    blkio = stats.get("blkio_stats") if isinstance(stats, dict) else None
    entries = blkio.get("io_service_bytes_recursive") if isinstance(blkio, dict) else None
    if not isinstance(entries, list) or not entries:
        return None
    read: dict[str, int] = {}
    write: dict[str, int] = {}
    for entry in entries[:_MAX_ENTRIES]:
        if not isinstance(entry, dict):
            continue
        major, minor, value = _count(entry.get("major")), _count(entry.get("minor")), _count(entry.get("value"))
        op = entry.get("op")
        if major is None or minor is None or value is None or not isinstance(op, str):
            continue
        table = {"read": read, "write": write}.get(op.lower())
        if table is not None:
            device = f"{major}:{minor}"
            table[device] = table.get(device, 0) + value
    devices = sorted(set(read) | set(write))
    return {d: (read.get(d, 0), write.get(d, 0)) for d in devices} or None


def network_totals(stats: Any) -> dict[str, int] | None:
    """The ``networks`` counters summed over the container's interfaces; None when the frame has
    no ``networks`` (no network of its own)."""
    networks = stats.get("networks") if isinstance(stats, dict) else None
    if not isinstance(networks, dict) or not networks:
        return None
    total: dict[str, int] = {}
    for counters in list(networks.values())[:_MAX_ENTRIES]:
        if not isinstance(counters, dict):
            continue
        for name in NETWORK_COUNTERS:
            value = _count(counters.get(name))
            if value is not None:
                total[name] = total.get(name, 0) + value
    return total or None
