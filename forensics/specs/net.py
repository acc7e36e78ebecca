"""``net``: network interfaces, InfiniBand/RoCE ports, disks and per-container network counters
(bundle members ``net/*``)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, Excuse, SourceSpec, setting
from forensics.specs.hints import PIDS
from forensics.specs.roles import NET_COUNTERS

__all__ = ["INDEX", "PREFIX", "SAMPLES", "SPEC", "NetSettings", "ib_member", "iface_member",
           "netns_member", "proc_member"]

PREFIX = "net/"
INDEX = "net/index.json"
SAMPLES = "net/samples.jsonl"


def proc_member(name: str) -> str:
    """``net/proc/<name>``: a verbatim node file (``net_dev`` for /proc/net/dev, ``diskstats``)."""
    return f"net/proc/{name}"


def iface_member(iface: str, file: str) -> str:
    """``net/class/net/<if>/<file>`` (``speed``, ``operstate``, ``statistics/rx_bytes``...)."""
    return f"net/class/net/{iface}/{file}"


def ib_member(device: str, port: str, file: str) -> str:
    """``net/class/infiniband/<dev>/ports/<n>/<file>`` (``rate``, ``state``, ``counters/<c>``,
    ``hw_counters/<c>``)."""
    return f"net/class/infiniband/{device}/ports/{port}/{file}"


def netns_member(inode: int) -> str:
    """``net/netns/<inode>/dev``: ``/proc/<pid>/net/dev`` of one process of that network namespace."""
    return f"net/netns/{inode}/dev"


@dataclass(frozen=True)
class NetSettings:
    sysfs_root: str = setting("path", "the sysfs tree holding class/net and class/infiniband "
                              "(a capture pod: /host/sys)", "/sys")
    proc_root: str = setting("path", "the proc tree holding net/dev, diskstats and <pid>/net/dev", "/proc")
    max_interfaces: int = setting("positive-int", "network interfaces and InfiniBand ports read", 256)
    max_namespaces: int = setting("positive-int", "container network namespaces read", 1000)
    quiet_namespaces: bool = setting(
        "bool", "leave a quiet container network namespace (only lo and one veth whose host end's /proc/net/dev "
        "line did not move) unread for up to idle_full_s; off: every namespace every tick", False)
    idle_full_s: float = setting(
        "positive-seconds", "with quiet_namespaces: a namespace with only lo "
        "and one veth whose host end's /proc/net/dev line did not move is read at least this often; at or under "
        "the interval, every namespace every tick (docs/bundle-format/net.md)", 10.0)


SPEC = SourceSpec(
    name="net", order=37, collector="forensics.collectors.net.net", settings=NetSettings,
    absence=Absence("no network or disk counters: link saturation and link errors cannot be assessed",
                    (Excuse(frozenset({None}), "the bundle predates the net source"),)),
    reads=(PIDS,), roles=(NET_COUNTERS,),
)
