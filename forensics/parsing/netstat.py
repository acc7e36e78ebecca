"""Pure parsers for node network and disk counters.

Sources: ``/proc/net/dev`` (``man 5 proc``: two header lines, then ``iface: rx_bytes rx_packets
rx_errs rx_drop rx_fifo rx_frame rx_compressed rx_multicast tx_bytes tx_packets tx_errs tx_drop
tx_fifo tx_colls tx_carrier tx_compressed``), ``/proc/diskstats``
(``Documentation/admin-guide/iostats.rst``: ``major minor name`` then reads completed, merged,
sectors read, ms reading, writes completed, merged, sectors written, ms writing, in flight, ms
doing IO, weighted ms, ...), ``/sys/class/net/<if>/speed`` (Mb/s; -1 or EINVAL: unknown) and the
InfiniBand port files of ``Documentation/ABI/stable/sysfs-class-infiniband``: ``rate``
(``100 Gb/sec (4X EDR)``), ``state`` (``4: ACTIVE``), ``counters/*`` (one integer each;
``port_xmit_data``/``port_rcv_data`` count 32-bit words, i.e. octets divided by 4).

Every function takes the text as read and raises only :class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

import re

from forensics.errors import ParseError

__all__ = ["IB_DATA_WORD_BYTES", "NET_DEV_FIELDS", "net_dev_bytes", "net_dev_line", "parse_diskstats", "parse_ib_rate",
           "parse_ib_state", "parse_net_dev", "parse_speed_mbps"]

NET_DEV_FIELDS = ("rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "rx_fifo_errors", "rx_frame_errors",
                  "rx_compressed", "multicast", "tx_bytes", "tx_packets", "tx_errors", "tx_dropped",
                  "tx_fifo_errors", "collisions", "tx_carrier_errors", "tx_compressed")
IB_DATA_WORD_BYTES = 4  # port_xmit_data / port_rcv_data: "divided by 4" (32-bit words)
_MAX_LINES = 100_000


def _lines(text: object, what: str) -> list[str]:
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    lines = text.splitlines()
    if len(lines) > _MAX_LINES:
        raise ParseError(f"{what}: more than {_MAX_LINES} lines")
    return lines


def _int(token: str, what: str) -> int:
    if not token.isascii() or not token.isdigit() or len(token) > 40:
        raise ParseError(f"{what}: not a counter: {token[:40]!r}")
    return int(token)


def parse_net_dev(text: str, what: str = "/proc/net/dev") -> dict[str, dict[str, int]]:
    """``/proc/net/dev``: ``{iface: {rx_bytes, rx_packets, rx_errors, rx_dropped, ..., tx_bytes, ...}}``
    with the names of ``/sys/class/net/<if>/statistics``."""
    out: dict[str, dict[str, int]] = {}
    for number, line in enumerate(_lines(text, what), 1):
        name, sep, rest = line.partition(":")
        if not sep or "|" in line:
            if number <= 2:
                continue  # the two header lines
            raise ParseError(f"{what} line {number}: expected 'iface: counters': {line[:80]!r}")
        fields = rest.split()
        if len(fields) != len(NET_DEV_FIELDS) or not name.strip():
            raise ParseError(f"{what} line {number}: expected {len(NET_DEV_FIELDS)} counters: {line[:80]!r}")
        digits = "".join(fields)
        if digits.isdigit() and digits.isascii() and max(map(len, fields)) <= 40:  # the common case, fast
            out[name.strip()] = dict(zip(NET_DEV_FIELDS, map(int, fields), strict=True))
        else:
            out[name.strip()] = {k: _int(v, f"{what} line {number}") for k, v in zip(NET_DEV_FIELDS, fields, strict=True)}
    return out


def net_dev_line(line: bytes, what: str = "/proc/net/dev") -> tuple[str, int, int] | None:
    """One line of ``/proc/net/dev`` as read (bytes, no newline): ``(iface, rx_bytes, tx_bytes)``,
    or None for a header line (one with ``|``) or an empty one; checked as :func:`parse_net_dev`
    checks a line (sixteen ASCII counters, none longer than 40 digits). Raises ParseError."""
    if not line or b"|" in line:
        return None
    name, sep, rest = line.partition(b":")
    fields = rest.split()
    # bytes.isdigit: ASCII digits only; a kernel line's counters (u64: 20 digits at most) fit in 400
    if not sep or len(fields) != len(NET_DEV_FIELDS) or not name.strip() or not b"".join(fields).isdigit() \
            or (len(rest) > 400 and max(map(len, fields)) > 40):
        raise ParseError(f"{what}: expected 'iface: {len(NET_DEV_FIELDS)} counters': {line[:80]!r}")
    return name.strip().decode("utf-8", "replace"), int(fields[0]), int(fields[8])


def net_dev_bytes(text: str | bytes, what: str = "/proc/net/dev") -> dict[str, dict[str, int]]:
    """``/proc/net/dev`` (text, or the bytes as read) checked as :func:`parse_net_dev` checks it,
    giving only ``{iface: {rx_bytes, tx_bytes}}`` (what a rate needs; no dict of sixteen counters
    per interface)."""
    if isinstance(text, str):
        data = text.encode("utf-8", "surrogateescape")
    elif isinstance(text, bytes):
        data = text
    else:
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    out: dict[str, dict[str, int]] = {}
    lines = data.split(b"\n")
    if len(lines) > _MAX_LINES:
        raise ParseError(f"{what}: more than {_MAX_LINES} lines")
    for number, line in enumerate(lines, 1):
        if number > 2 and b"|" in line:
            raise ParseError(f"{what} line {number}: expected 'iface: counters': {line[:80]!r}")
        counts = net_dev_line(line, f"{what} line {number}")
        if counts is not None:
            out[counts[0]] = {"rx_bytes": counts[1], "tx_bytes": counts[2]}
    return out


def parse_diskstats(text: str, what: str = "/proc/diskstats") -> dict[str, dict[str, int | str]]:
    """``/proc/diskstats``: ``{name: {"device": "MAJ:MIN", "read_bytes", "write_bytes", "reads",
    "writes", "read_ms", "write_ms", "in_flight", "io_ms", "weighted_io_ms"}}`` (sectors of 512 bytes)."""
    out: dict[str, dict[str, int | str]] = {}
    for number, line in enumerate(_lines(text, what), 1):
        f = line.split()
        if not f:
            continue
        if len(f) < 14:
            raise ParseError(f"{what} line {number}: expected at least 14 fields: {line[:80]!r}")
        n = [_int(v, f"{what} line {number}") for v in f[3:14]]
        out[f[2]] = {"device": f"{_int(f[0], what)}:{_int(f[1], what)}", "reads": n[0], "read_bytes": n[2] * 512,
                     "read_ms": n[3], "writes": n[4], "write_bytes": n[6] * 512, "write_ms": n[7],
                     "in_flight": n[8], "io_ms": n[9], "weighted_io_ms": n[10]}
    return out


def parse_speed_mbps(text: str, what: str = "speed") -> int | None:
    """``/sys/class/net/<if>/speed``: Mb/s; None for ``-1`` or 0 (unknown: link down, virtual)."""
    value = text.strip() if isinstance(text, str) else ""
    if value.lstrip("-").isdigit() and value.isascii() and len(value) < 20:
        speed = int(value)
        return speed if speed > 0 else None
    raise ParseError(f"{what}: not a speed: {value[:40]!r}")


_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(Gb|Mb)/sec\b")


def parse_ib_rate(text: str, what: str = "rate") -> float:
    """An InfiniBand port's ``rate`` (``100 Gb/sec (4X EDR)``, ``2.5 Gb/sec (1X SDR)``) in bytes/s."""
    m = _RATE.match(text if isinstance(text, str) else "")
    if m is None:
        raise ParseError(f"{what}: expected 'N Gb/sec (...)': {str(text)[:40]!r}")
    bits = float(m.group(1)) * (1e9 if m.group(2) == "Gb" else 1e6)
    return bits / 8


def parse_ib_state(text: str, what: str = "state") -> str:
    """An InfiniBand port's ``state`` (``4: ACTIVE``) or ``phys_state`` (``5: LinkUp``): the name."""
    code, sep, name = (text if isinstance(text, str) else "").strip().partition(":")
    if not sep or not code.strip().isdigit() or not name.strip():
        raise ParseError(f"{what}: expected 'N: NAME': {str(text)[:40]!r}")
    return name.strip()
