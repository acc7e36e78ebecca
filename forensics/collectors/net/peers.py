"""Which of this network namespace's veths has its peer in which other network namespace, asked of
the kernel over rtnetlink (``man 7 rtnetlink``): the host end of each container's veth pair, so the
net collector can tell from the host's ``/proc/net/dev`` line of that end whether the container's
end moved (``veth_get_stats64`` counts each end's received bytes and packets as the other's sent:
the two lines move together).

One ``RTM_GETLINK`` dump names each veth (``IFLA_INFO_KIND`` ``veth``) whose peer is in another
namespace, by that namespace's id as this namespace knows it (``IFLA_LINK_NETNSID``; the dump
assigns an id to a peer namespace that had none); one ``RTM_GETNSID`` per namespace, asked by a
descriptor of ``/proc/<pid>/ns/net`` whose inode is the namespace's (not by PID: a reused PID names
another namespace), gives that id. The answer is of the caller's own network namespace: its
``/proc/net/dev`` is ``/proc/self/net/dev``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from collections.abc import Iterable

__all__ = ["veth_peers"]

RTM_NEWLINK, RTM_GETLINK, RTM_NEWNSID, RTM_GETNSID = 16, 18, 88, 90
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFLA_IFNAME, IFLA_LINKINFO, IFLA_LINK_NETNSID = 3, 18, 37
IFLA_INFO_KIND = 1
NETNSA_NSID, NETNSA_FD = 1, 3
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
_ATTR = struct.Struct("=HH")  # rtattr: length, type
_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER


def _attrs(data: bytes, offset: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while offset + _ATTR.size <= end:
        length, kind = _ATTR.unpack_from(data, offset)
        if length < _ATTR.size or offset + length > end:
            break
        out[kind & _TYPE_MASK] = data[offset + _ATTR.size:offset + length]
        offset += (length + 3) & ~3
    return out


def _messages(sock: socket.socket, seq: int) -> Iterable[tuple[int, bytes, int]]:
    """(type, datagram, offset of the payload) of each reply to request ``seq``, to its end
    (``NLMSG_DONE``, or an error, or the one reply of a request that is not a dump)."""
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, flags, got, _ = _HEADER.unpack_from(data, offset)
            if length < _HEADER.size or offset + length > len(data):
                return
            if got == seq:
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    (code,) = struct.unpack_from("=i", data, offset + _HEADER.size)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                    return
                yield kind, data[offset:offset + length], _HEADER.size
                if not flags & 0x2:  # not NLM_F_MULTI: the only reply
                    return
            offset += (length + 3) & ~3


def _peer_veths(sock: socket.socket) -> dict[int, list[str]]:
    """Namespace id -> the veths here whose peer is in it."""
    sock.send(_HEADER.pack(_HEADER.size + 16, RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
              + struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0))
    out: dict[int, list[str]] = {}
    for kind, msg, start in _messages(sock, 1):
        if kind != RTM_NEWLINK:
            continue
        attrs = _attrs(msg, start + 16, len(msg))
        info = attrs.get(IFLA_LINKINFO)
        nsid = attrs.get(IFLA_LINK_NETNSID)
        name = attrs.get(IFLA_IFNAME)
        if info is None or nsid is None or name is None or len(nsid) != 4:
            continue  # not a link into another namespace
        if _attrs(info, 0, len(info)).get(IFLA_INFO_KIND, b"").rstrip(b"\0") != b"veth":
            continue
        (netnsid,) = struct.unpack("=i", nsid)
        if netnsid >= 0:
            out.setdefault(netnsid, []).append(name.rstrip(b"\0").decode("utf-8", "surrogateescape"))
    return out


def _nsid(sock: socket.socket, fd: int, seq: int) -> int | None:
    attr = _ATTR.pack(8, NETNSA_FD) + struct.pack("=I", fd)
    sock.send(_HEADER.pack(_HEADER.size + 4 + len(attr), RTM_GETNSID, NLM_F_REQUEST, seq, 0)
              + struct.pack("=Bxxx", socket.AF_UNSPEC) + attr)
    for kind, msg, start in _messages(sock, seq):
        if kind == RTM_NEWNSID:
            value = _attrs(msg, start + 4, len(msg)).get(NETNSA_NSID)
            if value is not None and len(value) == 4:
                (nsid,) = struct.unpack("=i", value)
                return nsid if nsid >= 0 else None
    return None


def veth_peers(namespaces: Iterable[tuple[int, int]]) -> dict[int, list[str]] | None:
    """For each ``(inode, pid)``: the names of the veths in the caller's network namespace whose
    peer is in network namespace ``inode`` (that of ``pid`` when asked); a namespace with none, or
    that could not be asked (its process gone, its namespace another by now), is left out. None
    where rtnetlink cannot be asked at all."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    except (OSError, AttributeError):
        return None
    with contextlib.closing(sock):
        try:
            sock.settimeout(2.0)
            sock.bind((0, 0))
            by_nsid = _peer_veths(sock)
        except OSError:
            return None
        out: dict[int, list[str]] = {}
        for seq, (inode, pid) in enumerate(namespaces, 2):
            try:
                fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if os.fstat(fd).st_ino != inode:
                    continue  # the PID is in another namespace now
                nsid = _nsid(sock, fd, seq)
            except OSError:
                continue
            finally:
                os.close(fd)
            if nsid is not None and nsid in by_nsid:
                out[inode] = by_nsid[nsid]
        return out
