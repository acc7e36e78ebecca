"""Pure parsers for the kernel log: ``/dev/kmsg`` records, ``dmesg --raw`` and journald fallbacks,
and the records' wall-clock times. What the records say is read by forensics/parsing/oomkill.py
(OOM-kill sequences) and forensics/parsing/nvrm.py (NVIDIA driver messages: Xids, a GPU fallen off
the bus).

Sources:

* ``/dev/kmsg`` (``Documentation/ABI/testing/dev-kmsg``): each ``read()`` returns one record
  ``prio,seq,ts_usec,flag[,more];message\\n`` followed by optional dictionary lines
  `` KEY=value\\n`` (leading space). ``prio`` = facility * 8 + level; ``ts_usec`` is the printk
  clock in microseconds since boot (CLOCK_MONOTONIC-like: it stops during suspend); non-printable
  bytes in the message are escaped as ``\\xNN`` by the kernel, so a record is always one line.
* ``dmesg --raw``: ``<prio>[seconds.micros] message``; ``journalctl -k -o json``: one JSON object
  per line with ``MESSAGE``, ``PRIORITY``, ``SYSLOG_FACILITY``, ``_SOURCE_MONOTONIC_TIMESTAMP``.

Everything streams: records are produced one by one, so a million-record log is parsed in bounded
memory. Parsers raise only :class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import NamedTuple

from forensics.errors import ParseError

__all__ = [
    "MAX_MESSAGE_CHARS",
    "KmsgRecord",
    "iter_dmesg_raw",
    "iter_journal_json",
    "iter_kmsg",
    "parse_dmesg_raw_line",
    "parse_journal_line",
    "parse_kmsg_record",
    "wall_time_iso",
    "wall_time_unix",
]

MAX_MESSAGE_CHARS = 64 * 1024  # a printk record is at most ~1 KiB; anything longer is not one
_MAX_MESSAGE_CHARS = MAX_MESSAGE_CHARS


class KmsgRecord(NamedTuple):
    """One kernel log record. ``seq`` is None when the source has none (dmesg text).

    ``fields`` holds the dictionary lines (``SUBSYSTEM=pci``, ``DEVICE=+pci:0000:3b:00.0``).
    """

    facility: int
    level: int
    seq: int | None
    ts_usec: int
    flags: str
    message: str
    fields: tuple[tuple[str, str], ...] = ()


_new_record = tuple.__new__


def _nonneg_int(token: str, what: str) -> int:
    if not token or len(token) > 20 or not token.isascii() or not token.isdigit():
        raise ParseError(f"{what}: not a non-negative integer: {token[:30]!r}")
    return int(token)


#: a well-formed record line as :func:`_header` reads one (an ASCII ``prio,seq,ts,flags[,more]``
#: before the first ``;``, then a message of one line, at most _MAX_MESSAGE_CHARS): matched in one
#: call; a line it does not match goes through the checks below, which say what is wrong with it
_RECORD = re.compile(r"([0-9]{1,4}),([0-9]{1,20}),([0-9]{1,20}),([\x00-\x2b\x2d-\x3a\x3c-\x7f]*)"
                     r"(?:,[\x00-\x3a\x3c-\x7f]*)?;(.{0," + str(_MAX_MESSAGE_CHARS) + r"})\n?\Z")


def _header(line: str) -> tuple[int, int, int, str, str]:
    """``(prio, seq, ts_usec, flags, message)`` of a record's first line; ParseError if bad."""
    found = _RECORD.match(line)
    if found is not None:
        prio, seq, ts, flags, message = found.groups()
        return int(prio), int(seq), int(ts), flags, message
    header, sep, message = line.partition(";")
    if not sep:
        raise ParseError(f"kmsg: no ';' after the header: {line[:80]!r}")
    parts = header.split(",", 4)
    if len(parts) < 4:
        raise ParseError(f"kmsg: header needs prio,seq,ts,flag: {header[:80]!r}")
    prio, seq, ts = parts[0], parts[1], parts[2]
    if not (prio.isdigit() and seq.isdigit() and ts.isdigit() and header.isascii()
            and len(seq) <= 20 and len(ts) <= 20 and len(prio) <= 4):
        raise ParseError(f"kmsg: prio, seq and timestamp must be non-negative integers: "
                         f"{header[:80]!r}")
    if message[-1:] == "\n":
        message = message[:-1]
    if len(message) > _MAX_MESSAGE_CHARS or "\n" in message:
        raise ParseError("kmsg: message is not a single record line")
    return int(prio), int(seq), int(ts), parts[3], message


def parse_kmsg_record(line: str) -> KmsgRecord:
    """Parse the first line of a ``/dev/kmsg`` record (``prio,seq,ts,flag[,..];message``)."""
    if not isinstance(line, str):
        raise ParseError(f"kmsg: expected text, got {type(line).__name__}")
    prio, seq, ts_usec, flags, message = _header(line)
    return KmsgRecord(prio >> 3, prio & 7, seq, ts_usec, flags, message)


def iter_kmsg(
    lines: Iterable[str],
    on_error: Callable[[int, ParseError], None] | None = None,
) -> Iterator[KmsgRecord]:
    """Stream records from ``/dev/kmsg`` text (e.g. ``kernel/kmsg.txt``): one line per record,
    dictionary lines (leading space) attached to the record before them.

    A bad line raises ParseError, or, with ``on_error``, is reported (line number, error) and
    skipped so one damaged line does not lose the rest of the log.
    """
    pending: tuple[int, int, int, str, str] | None = None
    extra: list[tuple[str, str]] = []
    for number, line in enumerate(lines, 1):
        if line[:1] == " ":
            if pending is None:
                error = ParseError(f"kmsg line {number}: dictionary line without a record")
                if on_error is None:
                    raise error
                on_error(number, error)
                continue
            key, _, value = line[1:].rstrip("\n").partition("=")
            if len(extra) < 64:
                extra.append((key, value))
            continue
        try:
            header = _header(line)
        except ParseError as error:
            if not line.strip():
                continue
            if on_error is None:
                raise
            on_error(number, error)
            continue
        if pending is not None:
            prio, seq, ts_usec, flags, message = pending
            # tuple.__new__ straight (KmsgRecord is a NamedTuple): one per record of a million
            yield _new_record(KmsgRecord, (prio >> 3, prio & 7, seq, ts_usec, flags, message, tuple(extra)))
            if extra:
                extra = []
        pending = header
    if pending is not None:
        prio, seq, ts_usec, flags, message = pending
        yield KmsgRecord(prio >> 3, prio & 7, seq, ts_usec, flags, message, tuple(extra))


_DMESG_RAW = re.compile(r"^<(\d{1,4})>\[\s*(\d{1,12})\.(\d{1,9})\] ?(.*)$", re.DOTALL)


def parse_dmesg_raw_line(line: str) -> KmsgRecord:
    """One ``dmesg --raw`` line: ``<6>[   12.345678] message`` (no sequence number)."""
    if not isinstance(line, str):
        raise ParseError(f"dmesg: expected text, got {type(line).__name__}")
    found = _DMESG_RAW.match(line.rstrip("\n"))
    if not found or len(line) > _MAX_MESSAGE_CHARS:
        raise ParseError(f"dmesg --raw: not '<prio>[seconds] message': {line[:80]!r}")
    prio = int(found.group(1))
    micros = int(found.group(3).ljust(6, "0")[:6])
    ts_usec = int(found.group(2)) * 1_000_000 + micros
    return KmsgRecord(prio >> 3, prio & 7, None, ts_usec, "-", found.group(4))


def iter_dmesg_raw(
    lines: Iterable[str], on_error: Callable[[int, ParseError], None] | None = None
) -> Iterator[KmsgRecord]:
    """Stream ``dmesg --raw`` output; lines without a ``<prio>[ts]`` prefix continue the
    previous message (dmesg prints multi-line messages that way) or are reported via on_error."""
    pending: KmsgRecord | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = parse_dmesg_raw_line(line)
        except ParseError as error:
            if pending is not None and not line.startswith("<"):
                pending = pending._replace(message=pending.message + "\n" + line.rstrip("\n"))
                continue
            if on_error is None:
                raise
            on_error(number, error)
            continue
        if pending is not None:
            yield pending
        pending = record
    if pending is not None:
        yield pending


def parse_journal_line(line: str) -> KmsgRecord:
    """One line of ``journalctl -k -o json``. A binary MESSAGE (a list of byte values) is
    decoded as UTF-8 with replacement; ``_SOURCE_MONOTONIC_TIMESTAMP`` is the kernel's own stamp
    (``__MONOTONIC_TIMESTAMP`` otherwise). ``seq`` is None (journald's cursor is not kmsg's)."""
    try:
        entry = json.loads(line)
    except (ValueError, TypeError, RecursionError) as error:
        raise ParseError(f"journal json: {error}") from None
    if not isinstance(entry, dict):
        raise ParseError("journal json: not an object")
    message = entry.get("MESSAGE")
    if isinstance(message, list):
        if not all(isinstance(b, int) and 0 <= b < 256 for b in message):
            raise ParseError("journal json: MESSAGE list is not bytes")
        message = bytes(message).decode("utf-8", "replace")
    if not isinstance(message, str):
        raise ParseError("journal json: no MESSAGE text")
    stamp = entry.get("_SOURCE_MONOTONIC_TIMESTAMP") or entry.get("__MONOTONIC_TIMESTAMP")
    priority = entry.get("PRIORITY", "6")
    facility = entry.get("SYSLOG_FACILITY", "0")
    if not all(isinstance(v, str) for v in (stamp, priority, facility)):
        raise ParseError("journal json: timestamp, PRIORITY and SYSLOG_FACILITY must be strings")
    assert isinstance(stamp, str) and isinstance(priority, str) and isinstance(facility, str)
    level = _nonneg_int(priority, "journal PRIORITY")
    if level > 7:
        raise ParseError(f"journal PRIORITY out of range: {level}")
    return KmsgRecord(_nonneg_int(facility, "journal SYSLOG_FACILITY"), level, None,
                      _nonneg_int(stamp, "journal timestamp"), "-",
                      message.rstrip("\n")[:_MAX_MESSAGE_CHARS])


def iter_journal_json(
    lines: Iterable[str], on_error: Callable[[int, ParseError], None] | None = None
) -> Iterator[KmsgRecord]:
    """Stream ``journalctl -k -o json`` output."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield parse_journal_line(line)
        except ParseError as error:
            if on_error is None:
                raise
            on_error(number, error)


def wall_time_unix(ts_usec: int, boot_time_unix: float) -> float:
    """Approximate wall-clock time of a record: boot time + ts_usec. Drifts, and is wrong by
    the suspended time on hosts that were suspended since boot."""
    return boot_time_unix + ts_usec / 1e6


_ISO_SECOND: list[tuple[int, str]] = [(-1, "")]  # the last whole second formatted (pure memo)


def wall_time_iso(ts_usec: int, boot_time_unix: float) -> str:
    """:func:`wall_time_unix` as ISO 8601 UTC with microseconds and ``Z``."""
    # boot_time_unix + ts_usec / 1e6 is wall_time_unix's, written out: called once per record
    micros = round((boot_time_unix + ts_usec / 1e6) * 1e6) if -10**17 < ts_usec < 10**17 else -1
    if micros < 0 or micros >= 253402300800 * 10**6:  # before 1970 or after 9999
        raise ParseError(f"timestamp out of range: {ts_usec} us after boot")
    second = micros // 1_000_000
    cached_second, prefix = _ISO_SECOND[0]
    if second != cached_second:
        prefix = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _ISO_SECOND[0] = (second, prefix)
    return f"{prefix}.{micros - second * 1_000_000:06d}Z"
