"""What the kernel collector derives from the records, one record at a time: the OOM kills, Xid
events and driver messages (forensics/parsing/oomkill.py, nvrm.py) and each record's
``kernel/records.jsonl`` line (JSON with the record's wall-clock time).

:class:`Derived` is the one place those are accumulated and the records.jsonl text is cut into
appends; :func:`derive` feeds it a stream of :class:`~forensics.parsing.kmsg.KmsgRecord` (the
``dmesg``/``journalctl`` fallbacks), forensics/collectors/kernel/blocks.py a whole /dev/kmsg dump
a decoded block at a time.
"""

from __future__ import annotations

import json.encoder
from collections.abc import Callable, Iterable
from dataclasses import asdict, fields
from typing import Any

from forensics.errors import ParseError
from forensics.parsing import kmsg, nvrm, oomkill
from forensics.parsing.attribution import attribute_path

__all__ = ["Derived", "derive", "fields_json", "oom_json", "record_line"]

DERIVED_CHUNK = 20_000  # records.jsonl lines written per append
MAX_DRIVER_MESSAGES = 10_000
MAX_EVENTS = 100_000


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


encode_string = json.encoder.encode_basestring  # json.dumps(s, ensure_ascii=False), without
# building an encoder per call


def fields_json(fields: Iterable[tuple[str, str]]) -> str:
    """A record's dictionary as its records.jsonl line carries it (``"fields": {...}, ``; ``""``
    for none): as dumps_json(dict(fields)) writes it (sorted keys, the last of a key twice)."""
    pairs = ", ".join(f"{encode_string(k)}: {encode_string(v)}" for k, v in sorted(dict(fields).items()))
    return f'"fields": {{{pairs}}}, ' if pairs or fields else ""


def record_line(record: kmsg.KmsgRecord, time_iso: str) -> str:
    """One ``records.jsonl`` line: the same JSON ``dumps_json(..., indent=None)`` makes (sorted
    keys), written out directly because a ring buffer can hold a million records."""
    message = encode_string(record.message)
    seq = "null" if record.seq is None else str(record.seq)
    fields = fields_json(record.fields) if record.fields else ""
    return (f'{{"facility": {record.facility}, {fields}"level": {record.level}, '
            f'"message": {message}, "seq": {seq}, "time": "{time_iso}", '
            f'"ts_usec": {record.ts_usec}}}')


_XID_FIELDS = tuple(f.name for f in fields(nvrm.XidEvent))
_DRIVER_FIELDS = tuple(f.name for f in fields(nvrm.DriverMessage))


def _flat_dict(item: object, names: tuple[str, ...]) -> dict[str, Any]:
    """``asdict`` of a dataclass whose fields are all scalars (nothing to copy deeply)."""
    return {name: getattr(item, name) for name in names}


class Derived:
    """Accumulates what one pass over the records yields (bounded), and hands the records.jsonl
    text to ``write_lines`` in appends of DERIVED_CHUNK lines (None: the text is not made)."""

    def __init__(self, boot: float, write_lines: Callable[[str], Any] | None = None) -> None:
        self.boot = boot
        self.tracker = oomkill.OomTracker()
        self.ooms: list[dict[str, Any]] = []
        self.xids: list[dict[str, Any]] = []
        self.driver: list[dict[str, Any]] = []
        self.count = 0
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.last_seq: int | None = None
        self.write_lines = write_lines
        self._lines: list[str] = []  # records.jsonl lines not yet written

    def parse(self, record: kmsg.KmsgRecord) -> None:
        """Run one record through the OOM tracker, the Xid and the driver-message parsers."""
        kill = self.tracker.feed(record)
        if kill is not None and len(self.ooms) < MAX_EVENTS:
            self.ooms.append(oom_json(kill, self.boot))
        xid = nvrm.parse_xid(record)
        if xid is not None and len(self.xids) < MAX_EVENTS:
            item = _flat_dict(xid, _XID_FIELDS)
            item["time"] = kmsg.wall_time_iso(xid.ts_usec, self.boot)
            self.xids.append(item)
        driver = nvrm.parse_driver_message(record)
        if driver is not None and len(self.driver) < MAX_DRIVER_MESSAGES:
            item = _flat_dict(driver, _DRIVER_FIELDS)
            item["time"] = kmsg.wall_time_iso(driver.ts_usec, self.boot)
            self.driver.append(item)

    def feed(self, record: kmsg.KmsgRecord) -> None:
        """Consume one record: count it, parse it, and add its ``records.jsonl`` line."""
        self.count += 1
        ts = record.ts_usec
        if self.first_ts is None:
            self.first_ts = ts
        self.last_ts = ts
        if record.seq is not None:
            self.last_seq = record.seq
        self.parse(record)
        line = record_line(record, kmsg.wall_time_iso(ts, self.boot))
        if self.write_lines is not None:
            self._lines.append(line)
            if len(self._lines) >= DERIVED_CHUNK:
                self._write_chunks()

    def add_lines(self, lines: list[str]) -> None:
        """Append records.jsonl lines made elsewhere (the block parser), in record order."""
        if self.write_lines is not None:
            self._lines += lines
            if len(self._lines) >= DERIVED_CHUNK:
                self._write_chunks()

    def _write_chunks(self) -> None:
        assert self.write_lines is not None
        pending = self._lines
        start = 0
        while len(pending) - start >= DERIVED_CHUNK:
            self.write_lines("\n".join(pending[start:start + DERIVED_CHUNK]) + "\n")
            start += DERIVED_CHUNK
        del pending[:start]

    def finish(self) -> Derived:
        """Write the records.jsonl lines still held; return self."""
        if self.write_lines is not None and self._lines:
            self.write_lines("\n".join(self._lines) + "\n")
            self._lines = []
        return self


def derive(records: Iterable[kmsg.KmsgRecord], boot: float,
           write_lines: Callable[[str], Any] | None = None) -> Derived:
    """Run records through the OOM tracker, Xid and driver parsers. ``write_lines`` receives
    ``records.jsonl`` text in chunks (None: not produced)."""
    derived = Derived(boot, write_lines)
    for record in records:
        derived.feed(record)
    return derived.finish()
