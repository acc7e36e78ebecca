"""Which interfaces' ``operstate`` may have moved since the last tick, from the kernel's link
notifications (rtnetlink multicast group ``RTMGRP_LINK``, ``man 7 rtnetlink``), so that a node with a
veth per container does not read 200 ``operstate`` files a tick to find them all as they were.

Every change of an interface's operational state goes through the kernel's link watch, which
announces it with ``RTM_NEWLINK`` (``netdev_state_change``); flags (up/down), renames and removal
are announced too (``RTM_NEWLINK``/``RTM_DELLINK``). The socket is opened before the first tick
reads every ``operstate``, so nothing between that read and the first notification is missed; a
notification names the interface by index, and its ``operstate`` file is read that tick (the file
as the kernel wrote it stays the evidence: the notification only says when to read). When the
socket's buffer overran (``ENOBUFS``: notifications were lost) every interface is read that tick.

The notifications are of the capture's own network namespace, so they are used only when the
sysfs tree read is of that namespace: every interface read has, in this namespace, the same
name, index and hardware address (compared for 6-byte, Ethernet-type addresses only: for IPoIB sysfs
has 20 bytes and ``SIOCGIFHWADDR`` 6, for tun or wireguard sysfs none and the ioctl zeros; those
by name and index), and at least one with an Ethernet-type address is not a loopback (two
namespaces with only ``lo`` each cannot be told apart). Otherwise (a tree laid out elsewhere, another namespace's
sysfs), or without netlink, every ``operstate`` is read every tick.
"""

from __future__ import annotations

import contextlib
import fcntl
import socket
import struct

from forensics.hostfs.files import read_small

__all__ = ["LinkWatch"]

RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
_SIOCGIFHWADDR = 0x8927
_NLMSG_HEADER = struct.Struct("=IHHII")
_MAX_RECV = 256  # datagrams drained a tick; more wait for the next (which then reads them)


def _own_hwaddr(sock: socket.socket, name: str) -> str | None:
    try:
        reply = fcntl.ioctl(sock.fileno(), _SIOCGIFHWADDR, struct.pack("16s24x", name.encode()[:15]))
    except OSError:
        return None
    return ":".join(f"{b:02x}" for b in reply[18:24])


class LinkWatch:
    """The interfaces (by name) whose link changed since the last :meth:`moved`; None from
    :meth:`open` where the notifications cannot stand for reading every ``operstate``."""

    def __init__(self, sock: socket.socket, by_index: dict[int, str]) -> None:
        self._sock = sock
        self._by_index = by_index

    @classmethod
    def open(cls, sysfs_root: str, interfaces: list[str]) -> LinkWatch | None:
        """Subscribe to link notifications if ``sysfs_root``'s interfaces are this namespace's."""
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                                 socket.NETLINK_ROUTE)
        except (OSError, AttributeError):
            return None
        try:
            sock.bind((0, RTMGRP_LINK))  # before anything is read: a change from now on is announced
            by_index = cls._same_namespace(sysfs_root, interfaces)
        except OSError:
            by_index = None
        if by_index is None:
            sock.close()
            return None
        return cls(sock, by_index)

    @staticmethod
    def _same_namespace(sysfs_root: str, interfaces: list[str]) -> dict[int, str] | None:
        own = {name: index for index, name in socket.if_nameindex()}
        by_index: dict[int, str] = {}
        distinct = False
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            for name in interfaces:
                base = f"{sysfs_root}/class/net/{name}"
                try:
                    index = int(read_small(f"{base}/ifindex", 64).strip())
                    address = read_small(f"{base}/address", 256).decode("ascii", "replace").strip().lower()
                except (OSError, ValueError):
                    return None
                if own.get(name) != index:
                    return None
                if address.count(":") != 5:  # not an Ethernet-type address: SIOCGIFHWADDR gives 6 bytes
                    by_index[index] = name  # (IPoIB's 20 in sysfs; tun, wireguard: none in sysfs, zeros)
                    continue
                if _own_hwaddr(probe, name) != address:
                    return None
                by_index[index] = name
                distinct = distinct or (name != "lo" and address.strip("0:") != "")
        return by_index if distinct else None

    def moved(self) -> set[str] | None:
        """The interfaces named by notifications since the last call; None: read every interface
        (notifications were lost, or one named an index not known here: an interface made since,
        perhaps under a name read here)."""
        names: set[str] = set()
        for _ in range(_MAX_RECV):
            try:
                data = self._sock.recv(1 << 16)
            except BlockingIOError:
                return names
            except OSError:  # ENOBUFS: some were lost
                return None
            offset = 0
            while offset + _NLMSG_HEADER.size + 8 <= len(data):
                length, kind = _NLMSG_HEADER.unpack_from(data, offset)[:2]
                if kind in (RTM_NEWLINK, RTM_DELLINK):  # ifinfomsg: family, pad, type, index
                    (index,) = struct.unpack_from("=i", data, offset + _NLMSG_HEADER.size + 4)
                    name = self._by_index.get(index)
                    if name is None:
                        return None
                    names.add(name)
                if length < _NLMSG_HEADER.size:
                    break
                offset += (length + 3) & ~3
        return None  # more than a tick's worth: read them all

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
