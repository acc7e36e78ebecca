"""The kernel collector's derivation as it was before the block parser (main at 9c34916:
forensics/collectors/kernel.py's ``derive``, ``Derived``, ``record_line``, ``oom_json`` and
``_lines``, forensics/parsing/kmsg.py's ``iter_kmsg`` and ``_header``), kept verbatim as the
reference tests/unit/collectors/test_kernel_blocks.py compares the block parser
(forensics/collectors/kernel/blocks.py) with. The module constants are its limits, for tests
to make small."""

from __future__ import annotations

import json
import json.encoder
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from typing import Any

from forensics.errors import ParseError
from forensics.parsing import kmsg, nvrm, oomkill
from forensics.parsing.attribution import attribute_path
from forensics.parsing.kmsg import KmsgRecord

_DERIVED_CHUNK = 20_000  # records.jsonl lines written per append
_MAX_DRIVER_MESSAGES = 10_000
_MAX_EVENTS = 100_000
_MAX_MESSAGE_CHARS = 64 * 1024
_new_record = tuple.__new__

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



def _link_memcg(path: str | None) -> dict[str, Any] | None:
    if not path:
        return None
    try:
        return attribute_path(path).to_json()
    except ParseError:
        return {"cgroup_path": path, "kind": "unknown"}


def oom_json(kill: oomkill.OomKill, boot: float) -> dict[str, Any]:
    """An OOM kill as stored in ``kernel/oom.json``: the parsed fields, wall time, attribution."""
    item = asdict(kill)
    item["seqs"] = list(kill.seqs)
    item["time"] = kmsg.wall_time_iso(kill.ts_usec, boot)
    item["task_attribution"] = _link_memcg(kill.task_memcg)
    item["oom_attribution"] = _link_memcg(kill.oom_memcg)
    return item


_encode_string = json.encoder.encode_basestring  # json.dumps(s, ensure_ascii=False), without
# building an encoder per call


def record_line(record: kmsg.KmsgRecord, time_iso: str) -> str:
    """One ``records.jsonl`` line: the same JSON ``dumps_json(..., indent=None)`` makes (sorted
    keys), written out directly because a ring buffer can hold a million records."""
    message = _encode_string(record.message)
    seq = "null" if record.seq is None else str(record.seq)
    fields = ""
    if record.fields:  # as dumps_json(dict(fields)) writes them (sorted keys, the last of a key twice)
        fields = ", ".join(f"{_encode_string(k)}: {_encode_string(v)}" for k, v in sorted(dict(record.fields).items()))
        fields = f'"fields": {{{fields}}}, '
    return (f'{{"facility": {record.facility}, {fields}"level": {record.level}, '
            f'"message": {message}, "seq": {seq}, "time": "{time_iso}", '
            f'"ts_usec": {record.ts_usec}}}')


class Derived:
    """Accumulates what one pass over the records yields (bounded)."""

    def __init__(self, boot: float) -> None:
        self.boot = boot
        self.tracker = oomkill.OomTracker()
        self.ooms: list[dict[str, Any]] = []
        self.xids: list[dict[str, Any]] = []
        self.driver: list[dict[str, Any]] = []
        self.count = 0
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.last_seq: int | None = None

    def feed(self, record: kmsg.KmsgRecord) -> str:
        """Consume one record; return its ``records.jsonl`` line (JSON, no newline)."""
        self.count += 1
        ts = record.ts_usec
        if self.first_ts is None:
            self.first_ts = ts
        self.last_ts = ts
        if record.seq is not None:
            self.last_seq = record.seq
        kill = self.tracker.feed(record)
        if kill is not None and len(self.ooms) < _MAX_EVENTS:
            self.ooms.append(oom_json(kill, self.boot))
        xid = nvrm.parse_xid(record)
        if xid is not None and len(self.xids) < _MAX_EVENTS:
            item = asdict(xid)
            item["time"] = kmsg.wall_time_iso(xid.ts_usec, self.boot)
            self.xids.append(item)
        driver = nvrm.parse_driver_message(record)
        if driver is not None and len(self.driver) < _MAX_DRIVER_MESSAGES:
            item = asdict(driver)
            item["time"] = kmsg.wall_time_iso(driver.ts_usec, self.boot)
            self.driver.append(item)
        return record_line(record, kmsg.wall_time_iso(ts, self.boot))


def derive(records: Iterable[kmsg.KmsgRecord], boot: float,
           write_lines: Any = None) -> Derived:
    """Run records through the OOM tracker, Xid and driver parsers. ``write_lines`` receives
    ``records.jsonl`` text in chunks (None: not produced)."""
    derived = Derived(boot)
    chunk: list[str] = []
    for record in records:
        line = derived.feed(record)
        if write_lines is not None:
            chunk.append(line)
            if len(chunk) >= _DERIVED_CHUNK:
                write_lines("\n".join(chunk) + "\n")
                chunk = []
    if write_lines is not None and chunk:
        write_lines("\n".join(chunk) + "\n")
    return derived



def _lines(raw: bytes, block: int = 1 << 20) -> Iterator[str]:
    """Decode lines block by block (about 1 MiB at a time, cut at a newline): bounded extra
    memory whatever the size of the log, without a decode call per line."""
    start = 0
    size = len(raw)
    while start < size:
        end = raw.find(b"\n", min(start + block, size) - 1)
        end = size if end < 0 else end + 1
        parts = raw[start:end].decode("utf-8", "replace").split("\n")
        last = parts.pop()  # "" when the block ends with a newline
        for part in parts:
            yield part + "\n"
        if last:
            yield last
        start = end
