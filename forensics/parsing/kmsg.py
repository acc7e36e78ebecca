"""Pure parsers for the kernel log: ``/dev/kmsg`` records, ``dmesg --raw`` and journald fallbacks,
OOM-kill sequences and NVIDIA Xid lines.

Sources:

* ``/dev/kmsg`` (``Documentation/ABI/testing/dev-kmsg``): each ``read()`` returns one record
  ``prio,seq,ts_usec,flag[,more];message\\n`` followed by optional dictionary lines
  `` KEY=value\\n`` (leading space). ``prio`` = facility * 8 + level; ``ts_usec`` is the printk
  clock in microseconds since boot (CLOCK_MONOTONIC-like: it stops during suspend); non-printable
  bytes in the message are escaped as ``\\xNN`` by the kernel, so a record is always one line.
* ``dmesg --raw``: ``<prio>[seconds.micros] message``; ``journalctl -k -o json``: one JSON object
  per line with ``MESSAGE``, ``PRIORITY``, ``SYSLOG_FACILITY``, ``_SOURCE_MONOTONIC_TIMESTAMP``.
* OOM killer (``mm/oom_kill.c``, ``mm/memcontrol.c``): ``<comm> invoked oom-killer: gfp_mask=..,
  order=.., oom_score_adj=..``; ``memory: usage NkB, limit NkB, failcnt N``;
  ``oom-kill:constraint=..,nodemask=..,cpuset=..,mems_allowed=..,oom_memcg=..,task_memcg=..,
  task=<comm>,pid=<n>,uid=<n>``; ``Memory cgroup out of memory: Killed process <pid> (<comm>)
  total-vm:NkB, anon-rss:NkB, file-rss:NkB, shmem-rss:NkB, UID:<n> pgtables:NkB
  oom_score_adj:<n>`` (``Out of memory:`` for a host-wide OOM); kernels before 4.19 print
  ``Task in <memcg> killed as a result of limit of <memcg>`` instead of the ``oom-kill:`` line.
* NVIDIA driver: ``NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, text``
  (older drivers omit ``PCI:`` and the pid/name part).

Everything streams: records are produced one by one and the OOM tracker holds one sequence at a
time, so a million-record log is parsed in bounded memory. Parsers raise only
:class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from forensics.errors import ParseError

__all__ = [
    "XID_DESCRIPTIONS",
    "DriverMessage",
    "KmsgRecord",
    "OomKill",
    "OomTracker",
    "XidEvent",
    "iter_dmesg_raw",
    "iter_journal_json",
    "iter_kmsg",
    "BusLossJoiner",
    "fell_off_bus",
    "normalize_pci_bus_id",
    "parse_dmesg_raw_line",
    "parse_driver_message",
    "parse_journal_line",
    "parse_kmsg_record",
    "parse_xid",
    "wall_time_iso",
    "wall_time_unix",
]

_MAX_MESSAGE_CHARS = 64 * 1024  # a printk record is at most ~1 KiB; anything longer is not one


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


def _nonneg_int(token: str, what: str) -> int:
    if not token or len(token) > 20 or not token.isascii() or not token.isdigit():
        raise ParseError(f"{what}: not a non-negative integer: {token[:30]!r}")
    return int(token)


def _header(line: str) -> tuple[int, int, int, str, str]:
    """``(prio, seq, ts_usec, flags, message)`` of a record's first line; ParseError if bad."""
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
            yield KmsgRecord(prio >> 3, prio & 7, seq, ts_usec, flags, message, tuple(extra))
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
    micros = round(wall_time_unix(ts_usec, boot_time_unix) * 1e6) if abs(ts_usec) < 10**17 else -1
    if micros < 0 or micros >= 253402300800 * 10**6:  # before 1970 or after 9999
        raise ParseError(f"timestamp out of range: {ts_usec} us after boot")
    second, fraction = divmod(micros, 1_000_000)
    cached_second, prefix = _ISO_SECOND[0]
    if second != cached_second:
        prefix = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _ISO_SECOND[0] = (second, prefix)
    return f"{prefix}.{fraction:06d}Z"


# ---------------------------------------------------------------- OOM

@dataclass(frozen=True)
class OomKill:
    """One OOM kill, assembled from the records of its sequence.

    ``scope`` is ``memcg`` (a cgroup limit was hit: ``Memory cgroup out of memory``) or
    ``global`` (the host ran out: ``Out of memory``). ``oom_memcg`` is the cgroup whose limit
    was hit, ``task_memcg`` the victim's own cgroup (both relative to the memory hierarchy root).
    Sizes are bytes (the kernel prints kB). ``seqs`` lists the kmsg sequence numbers used.
    """

    ts_usec: int
    scope: str
    pid: int
    comm: str
    invoker_comm: str | None = None
    gfp_mask: str | None = None
    order: int | None = None
    constraint: str | None = None
    oom_memcg: str | None = None
    task_memcg: str | None = None
    uid: int | None = None
    total_vm_bytes: int | None = None
    anon_rss_bytes: int | None = None
    file_rss_bytes: int | None = None
    shmem_rss_bytes: int | None = None
    pgtables_bytes: int | None = None
    oom_score_adj: int | None = None
    memcg_usage_bytes: int | None = None
    memcg_limit_bytes: int | None = None
    memcg_failcnt: int | None = None
    seqs: tuple[int, ...] = field(default_factory=tuple)


_INVOKED = re.compile(r"^(.*) invoked oom-killer: gfp_mask=([^,]*), order=(-?\d+)")
_MEMCG_USAGE = re.compile(r"^memory: usage (\d+)kB, limit (\d+)kB, failcnt (\d+)")
_TASK_IN = re.compile(r"^Task in (\S+) killed as a result of limit of (\S+)")
_OOM_KILL_TAIL = re.compile(r",task=(.*),pid=(\d+),uid=(\d+)$")
_KILLED = re.compile(
    r"^(?:(Memory cgroup out of memory|Out of memory[^:]*): )?Killed process (\d+) \((.*)\)(.*)$"
)
_KILL_PROCESS = re.compile(r"^(Memory cgroup out of memory|Out of memory[^:]*): Kill process ")
_KILLED_KV = re.compile(r"([A-Za-z_-]+):(-?\d+)(kB)?")


class OomTracker:
    """Feed records in order; :meth:`feed` returns an :class:`OomKill` when a sequence ends.

    Holds only the sequence in progress (bounded memory). A ``Killed process`` line without the
    earlier lines still yields a kill with the fields it carries.
    """

    def __init__(self) -> None:
        self._state: dict[str, object] = {}
        self._seqs: list[int] = []

    def feed(self, record: KmsgRecord) -> OomKill | None:
        """Consume one record; return the kill it completes, if any."""
        message = record.message
        if "oom" not in message and "Kill" not in message and not message.startswith(
            ("memory: usage", "Task in ")
        ):
            return None
        invoked = _INVOKED.match(message)
        if invoked:
            self._state = {"invoker_comm": invoked.group(1), "gfp_mask": invoked.group(2),
                           "order": int(invoked.group(3))}
            self._seqs = []
            self._note(record)
            return None
        usage = _MEMCG_USAGE.match(message)
        if usage:
            self._state.update(memcg_usage_bytes=int(usage.group(1)) * 1024,
                               memcg_limit_bytes=int(usage.group(2)) * 1024,
                               memcg_failcnt=int(usage.group(3)))
            self._note(record)
            return None
        task_in = _TASK_IN.match(message)
        if task_in:
            self._state.update(task_memcg=task_in.group(1), oom_memcg=task_in.group(2))
            self._note(record)
            return None
        if message.startswith("oom-kill:"):
            self._state.update(_parse_oom_kill_line(message))
            self._note(record)
            return None
        kill_process = _KILL_PROCESS.match(message)
        if kill_process:  # kernels before 4.19: "Kill process N (comm) score S or sacrifice child"
            self._state["scope"] = _scope(kill_process.group(1))
            self._note(record)
            return None
        killed = _KILLED.match(message)
        if not killed:
            return None
        self._note(record)
        values = {k.lower(): int(v) * (1024 if kb else 1)
                  for k, v, kb in _KILLED_KV.findall(killed.group(4))}
        state = self._state
        pid = int(killed.group(2))
        if state.get("task_pid") not in (None, pid):
            state = {}  # the oom-kill: line named another victim: do not mix the two
        kill = OomKill(
            ts_usec=record.ts_usec,
            scope=(_scope(killed.group(1)) if killed.group(1)
                   else _opt_str(state.get("scope")) or (
                       "memcg" if state.get("oom_memcg") or state.get("constraint") == "CONSTRAINT_MEMCG"
                       else "global")),
            pid=pid,
            comm=killed.group(3),
            invoker_comm=_opt_str(state.get("invoker_comm")),
            gfp_mask=_opt_str(state.get("gfp_mask")),
            order=_opt_int(state.get("order")),
            constraint=_opt_str(state.get("constraint")),
            oom_memcg=_opt_str(state.get("oom_memcg")),
            task_memcg=_opt_str(state.get("task_memcg")),
            uid=values.get("uid", _opt_int(state.get("uid"))),
            total_vm_bytes=values.get("total-vm"),
            anon_rss_bytes=values.get("anon-rss"),
            file_rss_bytes=values.get("file-rss"),
            shmem_rss_bytes=values.get("shmem-rss"),
            pgtables_bytes=values.get("pgtables"),
            oom_score_adj=values.get("oom_score_adj"),
            memcg_usage_bytes=_opt_int(state.get("memcg_usage_bytes")),
            memcg_limit_bytes=_opt_int(state.get("memcg_limit_bytes")),
            memcg_failcnt=_opt_int(state.get("memcg_failcnt")),
            seqs=tuple(self._seqs),
        )
        self._state = {}
        self._seqs = []
        return kill

    def _note(self, record: KmsgRecord) -> None:
        if record.seq is not None and len(self._seqs) < 16:
            self._seqs.append(record.seq)


def _scope(prefix: str) -> str:
    return "memcg" if prefix.startswith("Memory cgroup") else "global"


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _parse_oom_kill_line(message: str) -> dict[str, object]:
    body = message[len("oom-kill:"):]
    result: dict[str, object] = {}
    tail = _OOM_KILL_TAIL.search(body)
    if tail:
        result.update(task_comm=tail.group(1), task_pid=int(tail.group(2)),
                      uid=int(tail.group(3)))
        body = body[:tail.start()]
    for item in body.split(","):
        key, sep, value = item.partition("=")
        if sep and key in ("constraint", "oom_memcg", "task_memcg", "cpuset", "nodemask"):
            result[key] = value
    return result


# ---------------------------------------------------------------- NVIDIA

XID_DESCRIPTIONS: dict[int, str] = {
    13: "graphics engine exception (application)",
    31: "GPU memory page fault (application)",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error (GPU reset needed)",
    119: "GSP RPC timeout",
    120: "GSP error",
    154: "GPU recovery action changed",
}


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` line. ``pci_bus_id`` is normalised (``0000:3b:00.0``) to be matched with
    NVML's ``pciBusId`` (``00000000:3B:00.0``) through :func:`normalize_pci_bus_id`.
    ``pid``/``process_name`` are None when the driver printed ``<unknown>`` or nothing."""

    ts_usec: int
    seq: int | None
    pci_bus_id: str
    xid: int
    pid: int | None
    process_name: str | None
    text: str
    description: str | None


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([^)]{1,32})\): (\d{1,5}),\s?(.*)$")
_XID_PID = re.compile(r"^pid='?([^,']*)'?, name=([^,]*),\s?(.*)$")


def normalize_pci_bus_id(text: str) -> str:
    """``0000:3b:00``, ``00000000:3B:00.0`` or ``3b:00.0`` -> ``0000:3b:00.0`` (domain, bus,
    device, function; lower-case). Raises ParseError for anything else."""
    if not isinstance(text, str):
        raise ParseError("PCI bus id: expected text")
    found = re.fullmatch(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?",
                         text.strip())
    if not found:
        raise ParseError(f"PCI bus id: {text[:40]!r}")
    domain = int(found.group(1) or "0", 16)
    if domain > 0xFFFF:
        raise ParseError(f"PCI domain out of range: {text[:40]!r}")
    return (f"{domain:04x}:{int(found.group(2), 16):02x}:{int(found.group(3), 16):02x}."
            f"{int(found.group(4) or '0')}")


def parse_xid(record: KmsgRecord) -> XidEvent | None:
    """The Xid event in a record, or None when the record is not an Xid line."""
    if "Xid" not in record.message:
        return None
    found = _XID.search(record.message)
    if not found:
        return None
    try:
        bus = normalize_pci_bus_id(found.group(1))
    except ParseError:
        bus = found.group(1).strip()
    xid = int(found.group(2))
    rest = found.group(3)
    pid: int | None = None
    name: str | None = None
    details = _XID_PID.match(rest)
    if details:
        pid_text, name_text, rest = details.groups()
        pid = int(pid_text) if pid_text.isascii() and pid_text.isdigit() else None
        name = None if name_text in ("<unknown>", "") else name_text
    return XidEvent(record.ts_usec, record.seq, bus, xid, pid, name, rest,
                    XID_DESCRIPTIONS.get(xid))


@dataclass(frozen=True)
class DriverMessage:
    """A GPU driver message that is not an Xid (``NVRM:``, ``nvidia``, ``nvidia-nvlink`` ...)
    at warning level or above, or any ``NVRM:`` line."""

    ts_usec: int
    seq: int | None
    level: int
    message: str


_DRIVER_PREFIXES = ("NVRM:", "nvidia", "NVRM ", "nvrm:")


def parse_driver_message(record: KmsgRecord) -> DriverMessage | None:
    """The record as a GPU driver message, or None (Xid lines are left to :func:`parse_xid`)."""
    message = record.message
    if not message.startswith(_DRIVER_PREFIXES) or "NVRM: Xid" in message:
        return None
    if not message.startswith("NVRM") and record.level > 4:
        return None
    return DriverMessage(record.ts_usec, record.seq, record.level, message)


# "GPU has fallen off the bus" as the driver prints it without an Xid number (forms seen in public
# driver logs): ``NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.`` (akash-network/support#209),
# ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.`` (Bumblebee-Project/Bumblebee#554), and
# ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5) installed in this system has`` /
# ``NVRM: fallen off the bus and is not responding to commands.`` (NVIDIA/NVSentinel#155,
# leptonai/gpud#1209), one record with embedded newlines or one record per line.
_BUS_PCI = r"((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_FELL_OFF = (
    re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?" + _BUS_PCI + r":? (?:GPU )?has fallen off the bus"),
    re.compile(r"NVRM: The NVIDIA GPU " + _BUS_PCI + r"\b.*?fallen off the bus", re.DOTALL),
)
_THE_GPU = re.compile(r"NVRM: The NVIDIA GPU " + _BUS_PCI + r"\b")


def fell_off_bus(message: str) -> str | None:
    """The PCI address (``0000:b3:00.0``) of a fell-off-the-bus message that has no Xid number, else None."""
    if "NVRM: Xid" in message or "fallen off the bus" not in message:
        return None
    text = message.replace("\\x0a", "\n")
    for pattern in _FELL_OFF:
        found = pattern.search(text)
        if found:
            try:
                return normalize_pci_bus_id(found.group(1))
            except ParseError:
                return found.group(1).lower()
    return None


class BusLossJoiner:
    """Joins the continuation records of a multi-record fell-off-the-bus message.

    Feed every driver record in log order; :meth:`feed` returns ``(pci, first_key, keys)`` when a
    record completes a message (the keys of the records it spans, as the caller gave them), else None.
    A message is one record, or a ``The NVIDIA GPU <pci>`` record and the ``NVRM:`` records that follow
    it within ``window_usec`` until one says ``fallen off the bus`` (at most ``max_records``)."""

    def __init__(self, window_usec: int = 2_000_000, max_records: int = 4) -> None:
        self.window_usec = window_usec
        self.max_records = max_records
        self._parts: list[str] = []
        self._keys: list[object] = []
        self._start = 0

    def feed(self, ts_usec: int, message: str, key: object) -> tuple[str, list[object]] | None:
        if not message.startswith("NVRM"):
            return None
        if self._parts and (ts_usec - self._start > self.window_usec or len(self._parts) >= self.max_records):
            self._parts, self._keys = [], []
        whole = fell_off_bus(message)
        if whole is not None:
            self._parts, self._keys = [], []
            return whole, [key]
        if _THE_GPU.search(message):
            self._parts, self._keys, self._start = [message], [key], ts_usec
            return None
        if not self._parts:
            return None
        self._parts.append(message)
        self._keys.append(key)
        joined = fell_off_bus("\n".join(self._parts))
        if joined is not None:
            keys = self._keys
            self._parts, self._keys = [], []
            return joined, keys
        return None
