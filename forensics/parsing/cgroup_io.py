"""Pure parsers for the block IO files of a cgroup (v1 ``blkio``, v2 ``io``).

Sources (kernel docs ``Documentation/admin-guide/cgroup-v2.rst`` "IO" and
``cgroup-v1/blkio-controller.rst``): v2 ``io.stat`` (``MAJ:MIN rbytes= wbytes= rios= wios= dbytes=
dios=``), ``io.max`` (``MAJ:MIN rbps= wbps= riops= wiops=``, ``max`` = unlimited); v1
``blkio.throttle.io_service_bytes`` and ``blkio.throttle.io_serviced`` (``MAJ:MIN
Read|Write|Sync|Async|Discard|Total N``, then ``Total N``; the CFQ/BFQ
``blkio[.bfq].io_service_bytes`` read the same), ``blkio.throttle.read_bps_device``/
``write_bps_device`` (``MAJ:MIN N``).

Every function takes the text as read and raises only :class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

from forensics.errors import ParseError
from forensics.parsing.cgroupfs import text_of, to_int

__all__ = ["parse_blkio_limits", "parse_blkio_stat", "parse_io_max", "parse_io_stat"]


_IO_LINES = 4096  # devices per io file: far more than any host has


def _device(token: str, what: str, number: int) -> str:
    major, sep, minor = token.partition(":")
    if not sep or not major.isdigit() or not minor.isdigit() or not token.isascii():
        raise ParseError(f"{what} line {number}: expected MAJ:MIN, got {token[:40]!r}")
    return token


def _io_lines(text: str, what: str) -> list[tuple[int, list[str]]]:
    lines = [(n, line.split()) for n, line in enumerate(text_of(text, what).splitlines(), 1) if line.strip()]
    if len(lines) > _IO_LINES:
        raise ParseError(f"{what}: more than {_IO_LINES} lines")
    return lines


def _io_stat_fast(text: object) -> dict[str, dict[str, int]] | None:
    """The common ``io.stat``: a few lines of ``MAJ:MIN key=digits...``; None for anything else
    (the checked path then reads it, and says what is wrong)."""
    if not isinstance(text, str) or not text.isascii() or len(text) > 1 << 16:
        return None
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        major, sep, minor = fields[0].partition(":")
        if not sep or not major.isdigit() or not minor.isdigit():
            return None
        values: dict[str, int] = {}
        for pair in fields[1:]:
            key, sep, raw = pair.partition("=")
            if not sep or not key or not raw.isdigit() or len(raw) > 40:
                return None
            values[key] = int(raw)
        out[fields[0]] = values
    return out


def parse_io_stat(text: str, what: str = "io.stat") -> dict[str, dict[str, int]]:
    """v2 ``io.stat``: ``{"MAJ:MIN": {"rbytes": N, "wbytes": N, "rios": N, "wios": N, ...}}``
    (every ``key=value`` of the line; newer kernels add ``dbytes``/``dios`` and, with
    ``io.latency``/``io.cost``, more)."""
    out: dict[str, dict[str, int]] = {}
    fast = _io_stat_fast(text)
    if fast is not None:
        return fast
    for number, fields in _io_lines(text, what):
        device = _device(fields[0], what, number)
        values: dict[str, int] = {}
        for pair in fields[1:]:
            key, sep, raw = pair.partition("=")
            if not sep or not key:
                raise ParseError(f"{what} line {number}: expected key=value, got {pair[:40]!r}")
            if raw.replace(".", "", 1).isdigit() and "." in raw:
                continue  # io.latency's avg_lat=/win= style decimals are not counters
            values[key] = to_int(raw, f"{what} line {number}")
        out[device] = values
    return out


def parse_io_max(text: str, what: str = "io.max") -> dict[str, dict[str, int | None]]:
    """v2 ``io.max``: ``{"MAJ:MIN": {"rbps": N|None, "wbps": .., "riops": .., "wiops": ..}}``,
    None = ``max`` (unlimited); a device without limits has no line."""
    out: dict[str, dict[str, int | None]] = {}
    for number, fields in _io_lines(text, what):
        device = _device(fields[0], what, number)
        limits: dict[str, int | None] = {}
        for pair in fields[1:]:
            key, sep, raw = pair.partition("=")
            if key not in ("rbps", "wbps", "riops", "wiops") or not sep:
                raise ParseError(f"{what} line {number}: unexpected {pair[:40]!r}")
            limits[key] = None if raw == "max" else to_int(raw, f"{what} line {number}")
        out[device] = limits
    return out


_BLKIO_OPS = {"Read": "read", "Write": "write", "Sync": "sync", "Async": "async",
              "Discard": "discard", "Total": "total"}


def parse_blkio_stat(text: str, what: str = "blkio.throttle.io_service_bytes") -> dict[str, dict[str, int]]:
    """v1 ``blkio.throttle.io_service_bytes``/``io_serviced`` (and the CFQ/BFQ files of the same
    shape): ``{"MAJ:MIN": {"read": N, "write": N, "sync": .., "async": .., "discard": .., "total": ..}}``;
    the closing ``Total N`` line (all devices) is left out."""
    out: dict[str, dict[str, int]] = {}
    fields_all = text.split() if isinstance(text, str) and text.isascii() and len(text) <= 1 << 18 else None
    if fields_all and len(fields_all) % 3 == 2 and fields_all[-2] == "Total" and fields_all[-1].isdigit():
        # the common file: "MAJ:MIN Op N" lines, then "Total N"; anything else takes the checked path
        for i in range(0, len(fields_all) - 2, 3):
            device, op, raw = fields_all[i:i + 3]
            name = _BLKIO_OPS.get(op)
            major, sep, minor = device.partition(":")
            if name is None or not sep or not major.isdigit() or not minor.isdigit() \
                    or not raw.isdigit() or len(raw) > 40:
                out = {}
                break
            out.setdefault(device, {})[name] = int(raw)
        else:
            if text.count("\n") <= _IO_LINES:
                return out
            out = {}
    for number, fields in _io_lines(text, what):
        if len(fields) == 2 and fields[0] == "Total":
            to_int(fields[1], f"{what} line {number}")
            continue
        if len(fields) != 3 or fields[1] not in _BLKIO_OPS:
            raise ParseError(f"{what} line {number}: expected 'MAJ:MIN Op N': {' '.join(fields)[:80]!r}")
        device = _device(fields[0], what, number)
        out.setdefault(device, {})[_BLKIO_OPS[fields[1]]] = to_int(fields[2], f"{what} line {number}")
    return out


def parse_blkio_limits(text: str, what: str = "blkio.throttle.read_bps_device") -> dict[str, int]:
    """v1 ``blkio.throttle.{read,write}_{bps,iops}_device``: ``{"MAJ:MIN": N}`` (no line: no limit)."""
    out: dict[str, int] = {}
    for number, fields in _io_lines(text, what):
        if len(fields) != 2:
            raise ParseError(f"{what} line {number}: expected 'MAJ:MIN N'")
        out[_device(fields[0], what, number)] = to_int(fields[1], f"{what} line {number}")
    return out
