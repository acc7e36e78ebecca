"""The kernel collector's derivation of a whole ``/dev/kmsg`` dump (``kernel/kmsg.txt``), a decoded
block of records at a time: the same :class:`~forensics.collectors.kernel.derived.Derived` (records
count, OOM kills, Xid events, driver messages, records.jsonl text) as feeding it the records of
``kmsg.iter_kmsg(_lines(raw), on_error)`` one by one, byte for byte, at a fraction of the cost
per record (a ring buffer holds up to a million records).

How a block is read (a block is about 1 MiB, cut after a newline that is not followed by a
dictionary line, so a record and its dictionary lines are in one block):

* one ``findall`` of :data:`_BLOCK` cuts it into rows: a record's prio, sequence number,
  timestamp, flags, message and the dictionary lines that follow it; or, for a line that is not
  a well-formed record (a bad header, a blank line, a dictionary line after a bad line, a message
  over 64 KiB), that line alone;
* a block with no such line (and no number written with a leading zero, no timestamp of more than
  17 digits, a boot time that puts every timestamp in wall_time_iso's range) is *clean*: its
  records.jsonl lines are made by one comprehension over the rows (the message escaped by the C
  JSON encoder, the wall time by kmsg.wall_time_iso's float arithmetic and a memo of each
  second's text), and only the records a parser can act on are made into records and parsed:
  those whose message contains ``oom``, ``Kill`` or ``Xid`` or starts with a prefix the OOM
  tracker or the driver-message parser reads (found by ``str.find`` over the block's messages; a
  superset does no harm; on every other record the three parsers return None and keep no state);
* any other block is cut in parts of about 16 KiB, each tried again; a part that is not clean
  either is read line by line by :meth:`KmsgBlocks.line`, with the rules of
  ``iter_kmsg`` (errors named by line number, dictionary lines given to the record before them,
  a timestamp out of range raising as wall_time_iso does).

The last record of every block is held until the next block starts (as ``iter_kmsg`` holds it
until the next header), so dictionary lines that reach it later are still its own.
tests/unit/collectors/test_kernel_blocks.py compares the two paths on generated, hostile logs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from operator import itemgetter

from forensics.collectors.kernel.derived import (
    MAX_DRIVER_MESSAGES,
    Derived,
    encode_string,
    fields_json,
)
from forensics.errors import ParseError
from forensics.parsing import kmsg

__all__ = ["KmsgBlocks", "blocks", "derive_kmsg"]

BLOCK_BYTES = 1 << 20  # as _lines: 256 KiB blocks were 5-10% slower (and 6 MiB less at the peak)
_MAX_FIELDS = 64  # dictionary lines kept per record, as iter_kmsg keeps them
_MAX_MICROS = 253402300800 * 10**6  # 10000-01-01: wall_time_iso's range
_MAX_TS = 10**17  # wall_time_iso's range of ts_usec
_CUT = re.compile(rb"\n(?! )")
_CUT_TEXT = re.compile(r"\n(?! )")

#: a well-formed record and the dictionary lines after it, in the columns (prio, seq, ts, flags,
#: message, dictionary lines); or (7th column) one line that is not. What kmsg._RECORD matches on a
#: line, with the newline excluded from the header's classes (a line never has one inside) and the
#: timestamp cut to 17 digits (wall_time_iso's range; a longer one is left to the line by line path)
_BLOCK = re.compile(
    r"([0-9]{1,4}),([0-9]{1,20}),([0-9]{1,17}),"
    r"([\x00-\x09\x0b-\x2b\x2d-\x3a\x3c-\x7f]*)(?:,[\x00-\x09\x0b-\x3a\x3c-\x7f]*)?;"
    r"([^\n]{0," + str(kmsg.MAX_MESSAGE_CHARS) + r"})\n((?: [^\n]*\n)*)"
    r"|([^\n]*\n)")
#: a record line whose sequence number or timestamp has a leading zero (records.jsonl writes the
#: number): such a block is read line by line
_LEADING_ZERO = re.compile(r"^[0-9]{1,4},(?:0[0-9]|[0-9]{1,20},0[0-9])", re.MULTILINE)

#: what a message must contain, or start with, for a parser to read it (oomkill.OomTracker.feed,
#: nvrm.parse_xid, nvrm.parse_driver_message return None on any other, and keep no state)
_ANYWHERE = ("oom", "Kill", "Xid")
_OOM_STARTS = ("memory: usage", "Task in ")
_DRIVER_STARTS = ("NVRM:", "nvidia", "NVRM ", "nvrm:")


def blocks(raw: bytes, size: int = BLOCK_BYTES) -> Iterator[str]:
    """``raw`` decoded (UTF-8, errors replaced) about ``size`` bytes at a time, each block cut
    after a newline that is not followed by a dictionary line (a space). Decoding stops at a
    newline either way, so the text is the same as decoding ``raw`` whole."""
    start = 0
    end_of_raw = len(raw)
    while start < end_of_raw:
        found = _CUT.search(raw, min(start + size, end_of_raw) - 1)
        end = end_of_raw if found is None else found.end()
        yield raw[start:end].decode("utf-8", "replace")
        start = end


def _cut_text(text: str, size: int) -> Iterator[str]:
    """``text`` in parts of about ``size`` characters, cut as :func:`blocks` cuts."""
    start = 0
    end_of_text = len(text)
    while start < end_of_text:
        found = _CUT_TEXT.search(text, min(start + size, end_of_text) - 1)
        end = end_of_text if found is None else found.end()
        yield text[start:end]
        start = end


def _pairs(text: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of dictionary lines (`` KEY=value\\n`` each), at most 64."""
    pairs: list[tuple[str, str]] = []
    for line in text.split("\n")[:_MAX_FIELDS]:
        if line:
            key, _, value = line[1:].partition("=")
            pairs.append((key, value))
    return pairs


class _Memo(dict[str, str]):
    """A dict that makes a missing value with ``make`` (one call per distinct key)."""

    def __init__(self, make: Callable[[str], str]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: str) -> str:
        value = self[key] = self.make(key)
        return value


class _NotClean(Exception):
    """Raised inside the comprehension of a block that has a line that is not a record."""


def _prio(prio: str) -> int:
    if not prio:  # the 7th column's row: a line that is not a record
        raise _NotClean
    return int(prio)


def _head_text(prio: str) -> str:
    return f'{{"facility": {_prio(prio) >> 3}, "level": {_prio(prio) & 7}, "message": '


def _facility_text(prio: str) -> str:
    return f'{{"facility": {_prio(prio) >> 3}, '


def _level_text(prio: str) -> str:
    return f'"level": {_prio(prio) & 7}, "message": '


def _second_text(second: str) -> str:
    return datetime.fromtimestamp(int(second), UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _fields_text(lines: str) -> str:
    return fields_json(_pairs(lines))


def _in_range(boot: float) -> bool:
    """Whether every timestamp of up to 17 digits has a wall time wall_time_iso accepts, at or
    after 1970-01-01T00:00:01 (its float arithmetic is monotonic in the timestamp: the ends decide)."""
    try:
        lowest = round((boot + 0 / 1e6) * 1e6)
        highest = round((boot + (_MAX_TS - 1) / 1e6) * 1e6)
    except (OverflowError, ValueError):  # a boot time that is not a finite number
        return False
    return 1_000_000 <= lowest and highest < _MAX_MICROS


class KmsgBlocks:
    """Feeds the records of /dev/kmsg text, block after block, to a :class:`Derived`."""

    def __init__(self, derived: Derived, on_error: Callable[[int, ParseError], None] | None = None) -> None:
        self.derived = derived
        self.on_error = on_error
        self.number = 0  # lines read so far
        self.pending: kmsg.KmsgRecord | None = None  # the last record read, without its fields
        self.extra: list[tuple[str, str]] = []  # its dictionary lines so far
        self._fast = _in_range(derived.boot)  # else every block is read line by line
        self._head = _Memo(_head_text)
        self._facility = _Memo(_facility_text)
        self._level = _Memo(_level_text)
        self._second = _Memo(_second_text)
        self._fields = _Memo(_fields_text)

    #: a block that is not clean is cut in parts of about this many characters, each tried again
    #: (one damaged line sends its part, not the whole block, line by line)
    retry_chars = 16 * 1024

    def feed(self, text: str) -> None:
        """Read one decoded block (whole lines; only the log's last may lack its newline)."""
        if self._clean_block(text):
            return
        if len(text) > self.retry_chars:
            for part in _cut_text(text, self.retry_chars):
                if not self._clean_block(part):
                    self._lines(part)
        else:
            self._lines(text)

    def _lines(self, text: str) -> None:
        parts = text.split("\n")
        last = parts.pop()  # "" when the text ends with a newline
        for part in parts:
            self.line(part + "\n")
        if last:
            self.line(last)

    def close(self) -> Derived:
        """Hand over the last record; return the Derived (its records.jsonl text all written)."""
        self._emit()
        self.pending = None
        return self.derived.finish()

    def line(self, line: str) -> None:
        """One line, by the rules of kmsg.iter_kmsg."""
        self.number += 1
        if line[:1] == " ":
            if self.pending is None:
                self._error(ParseError(f"kmsg line {self.number}: dictionary line without a record"))
                return
            key, _, value = line[1:].rstrip("\n").partition("=")
            if len(self.extra) < _MAX_FIELDS:
                self.extra.append((key, value))
            return
        try:
            record = kmsg.parse_kmsg_record(line)
        except ParseError as error:
            if line.strip():
                self._error(error)
            return
        self._emit()
        self.pending = record
        self.extra = []

    def _error(self, error: ParseError) -> None:
        if self.on_error is None:
            raise error
        self.on_error(self.number, error)

    def _emit(self) -> None:
        if self.pending is not None:
            self.derived.feed(self.pending._replace(fields=tuple(self.extra)))

    def _clean_block(self, text: str) -> bool:
        """Derive a clean block at once (see the module's docstring); False, having changed
        nothing, when the block is not clean."""
        if not self._fast or (",0" in text and _LEADING_ZERO.search(text)):
            return False
        found = _BLOCK.findall(text if text.endswith("\n") else text + "\n")
        if not found:
            return False
        if len(self._second) > 20_000 or len(self._fields) > 10_000:  # bounded memos
            self._second.clear()
            self._fields.clear()
        boot = self.derived.boot
        head, facility, level, second, fields_of = self._head, self._facility, self._level, self._second, self._fields
        encode = encode_string
        # x: the wall time's microseconds since the epoch as kmsg.wall_time_iso computes them
        try:  # a line that is not a record raises _NotClean (its prio column is empty)
            lines = [f'{head[p] if not d else facility[p] + fields_of[d] + level[p]}{encode(m)}, '
                     f'"seq": {s}, "time": "{second[(x := str(round((boot + int(t) / 1e6) * 1e6)))[:-6]]}.'
                     f'{x[-6:]}Z", "ts_usec": {t}}}'
                     for p, s, t, _, m, d, _ in found]
        except _NotClean:
            return False

        self.number += text.count("\n") + (not text.endswith("\n"))
        self._emit()  # the previous block's last record: this block's first line is a record
        derived = self.derived
        count = len(found) - 1  # the last record is held: the next block may add to it
        if count:
            del lines[-1]
            derived.count += count
            if derived.first_ts is None:
                derived.first_ts = int(found[0][2])
            derived.last_ts = int(found[count - 1][2])
            derived.last_seq = int(found[count - 1][1])
            for i in self._candidates("\n".join(map(itemgetter(4), found[:count]))):
                derived.parse(_record(found[i], tuple(_pairs(found[i][5]))))
            derived.add_lines(lines)
        self.pending = _record(found[-1])
        self.extra = _pairs(found[-1][5])
        return True

    def _candidates(self, joined: str) -> list[int]:
        """Indexes, in order, of the messages (``joined``: one a line) a parser may act on (see
        _ANYWHERE)."""
        hits: set[int] = set()
        for word in _ANYWHERE:
            at = joined.find(word)
            while at >= 0:
                hits.add(at)
                at = joined.find(word, at + 1)
        starts: tuple[str, ...] = _OOM_STARTS
        if len(self.derived.driver) < MAX_DRIVER_MESSAGES:  # once full, a driver message is dropped
            starts += _DRIVER_STARTS
        for word in starts:
            at = joined.find(word)
            while at >= 0:
                if at == 0 or joined[at - 1] == "\n":
                    hits.add(at)
                at = joined.find(word, at + 1)
        indexes: list[int] = []
        index = previous = 0
        for at in sorted(hits):
            index += joined.count("\n", previous, at)
            previous = at
            if not indexes or indexes[-1] != index:
                indexes.append(index)
        return indexes


def _record(row: tuple[str, ...], fields: tuple[tuple[str, str], ...] = ()) -> kmsg.KmsgRecord:
    """The record of one row of _BLOCK's findall."""
    prio, seq, ts, flags, message = row[:5]
    return kmsg.KmsgRecord(int(prio) >> 3, int(prio) & 7, int(seq), int(ts), flags, message, fields)


def derive_kmsg(raw: bytes, boot: float, write_lines: Callable[[str], object] | None = None,
                on_error: Callable[[int, ParseError], None] | None = None,
                block_bytes: int = BLOCK_BYTES) -> Derived:
    """What the kernel collector derives from a /dev/kmsg dump: the same as
    ``derive(kmsg.iter_kmsg(_lines(raw), on_error), boot, write_lines)``, block by block."""
    reader = KmsgBlocks(Derived(boot, write_lines), on_error)
    for text in blocks(raw, block_bytes):
        reader.feed(text)
    return reader.close()
