"""The members a bundle's ring segments rebuild, read without being held (forensics.analysis.ring_view).

An hour of the recorder's 1 Hz samples rebuilds to hundreds of MB (8 GPUs x 64 processes: ~560 MB
of ``nvml/samples.jsonl`` from ~2 MB of segments), a day to gigabytes: holding them is what a
laptop notices. :class:`RingMembers` keeps of each rebuilt member where each of its records lies:
the byte offset in the member where the record's data starts (its segment record, segment member
and line, is the view's ``origins``). A small member is held as it is rebuilt (all of them
together up to the bundle reader's ``held_total_bytes``, each up to a quarter of that, 16 MiB by
default, or the reader's ``held_member_bytes`` if more); a bigger one is rebuilt again when it is read, one
segment at a time (a segment decodes alone: the recorder starts each with whole lines of every
key): :meth:`RingMembers.chunks` hands out each record's data as its segment is decoded,
:meth:`RingMembers.read_at` decodes the one segment holding an offset (the latest one decoded is
kept, for the next quote near it), and the mapping's item joins the chunks, for the readers that
need a member whole. So what is held of a big member is at most one segment's rebuilt records of it.

Read again, a segment gives the records the first read indexed and no others: each record handed
out is checked to be the indexed one (its segment line and its length) and the read of a segment
stops at its last indexed record (a record past a cap or the decode budget is never decoded
again). A segment that reads otherwise the second time (its bundle file changed meanwhile) is a
:class:`~forensics.errors.RingError`, never other bytes under the same line numbers. Each read
decodes at most ``max_member_bytes`` of a segment's text (the inflation-bomb cap, as the first read)
and its change-only lines at most ``max_total_bytes`` (never more than the first read did).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from typing import Any

from forensics.bundle.reader import ReadLimits
from forensics.errors import RingError
from forensics.ring.reader import DecodeBudget, window_records
from forensics.ring.segment import RingRecord, parse_record_line, segment_text, valid_prefix

__all__ = ["RingMembers"]


class _Segment:
    """What a segment's records are read again from: its member, its run (the header's), and the
    line numbers of each member's records in it (all of them: a change-only line outside the window
    is decoded too); ``whole``: it has no line that is not a record, so a member's lines can be
    parsed alone (else the segment is read as the first read read it, ``valid_prefix``)."""

    __slots__ = ("lines", "member", "run", "whole")

    def __init__(self, member: str, run: str, lines: list[tuple[int, dict[str, Any]]], whole: bool) -> None:
        self.member = member
        self.run = run
        self.whole = whole
        self.lines: dict[str, array[int]] = {}
        if whole:
            for no, rec in lines[1:]:
                found = self.lines.get(rec["member"])
                if found is None:
                    found = self.lines[rec["member"]] = array("q")
                found.append(no)


class RingMembers(Mapping[str, bytes]):
    """The rebuilt members by name (without ``ring/``): the small ones held, the others read again
    from their segments when they are read (see the module's docstring). Built by
    ``forensics.analysis.ring_view.rebuild_ring`` (:meth:`segment`, :meth:`append`, :meth:`write`,
    then :meth:`close`); ``origins`` is the view's: member -> (first line of each record, (segment
    member, record line) of each)."""

    def __init__(self, bundle: Any, limits: ReadLimits, since: float | None, until: float | None,
                 origins: dict[str, tuple[list[int], list[tuple[str, int]]]]) -> None:
        self._bundle = bundle
        self._limits = limits
        self._since, self._until = since, until
        self._origins = origins
        self._segments: dict[str, _Segment] = {}
        #: member -> where each record's data starts in the member, and (last) the member's size
        self._offsets: dict[str, array[int]] = {}
        self._held: dict[str, bytes | bytearray] = {}
        self._streamed: set[str] = set()  # appended members too big to hold: read again when read
        #: a written member: its latest write (segment member and line) and its size; held ones' data
        self._writes: dict[str, tuple[tuple[str, int], int]] = {}
        self._held_writes: dict[str, bytes] = {}
        self._held_size = 0
        #: a member is held up to a quarter of what is held in all (at least what the bundle reader
        #: holds of a member): read again, a member costs the decoding of every segment again, not
        #: the inflating from a nearby resume point the bundle reader's own members cost
        self._member_cap = max(limits.held_member_bytes, limits.held_total_bytes // 4)
        #: the latest segment decoded for a quote: (member, segment), its records' data by line
        self._cache: tuple[tuple[str, str], dict[int, bytes]] | None = None

    # -- building (the first read) ------------------------------------------------------------
    def segment(self, member: str, run: str, lines: list[tuple[int, dict[str, Any]]], whole: bool) -> None:
        """A segment whose records follow (``lines``: its ``valid_prefix`` lines, the header first)."""
        self._segments[member] = _Segment(member, run, lines, whole)

    def _holds(self, size: int, more: int) -> bool:
        """Whether a member of ``size`` bytes is held, ``more`` of them not held yet."""
        return size <= self._member_cap and self._held_size + more <= self._limits.held_total_bytes

    def append(self, rec: RingRecord) -> None:
        """An appended record's data, at the member's end."""
        member, data = rec.member, rec.data
        offsets = self._offsets.get(member)
        if offsets is None:
            offsets = self._offsets[member] = array("q", [0])
        size = offsets[-1] + len(data)
        offsets.append(size)
        if member in self._streamed:
            return
        buf = self._held.get(member)
        if self._holds(size, len(data)):
            if buf is None:
                buf = self._held[member] = bytearray()  # grown in place: never joined (copied) again
            buf += data
            self._held_size += len(data)
            return
        self._streamed.add(member)  # too big to hold: what was held of it goes
        if buf is not None:
            self._held_size -= len(buf)
            del self._held[member]

    def write_size(self, member: str) -> int:
        """The size of the latest write of ``member`` so far (0: none)."""
        found = self._writes.get(member)
        return found[1] if found is not None else 0

    def write(self, rec: RingRecord) -> None:
        """A write record: the member is its data (the latest write wins, over any append of it too)."""
        member, data = rec.member, rec.data
        old = self._held_writes.pop(member, None)
        if old is not None:
            self._held_size -= len(old)
        self._writes[member] = ((rec.segment, rec.line), len(data))
        if self._holds(len(data), len(data)):
            self._held_writes[member] = data
            self._held_size += len(data)

    def carry(self, member: str, data: bytes, origin: tuple[str, int]) -> None:
        """A write an earlier part of the history read (forensics.analysis.slices), before this
        part's records: held (its segment is not read here), until a write of this part replaces it."""
        self._writes[member] = (origin, len(data))
        self._held_writes[member] = data
        self._held_size += len(data)

    def close(self) -> None:
        """The index is complete: a written member is its latest write (its origin that record's);
        the line numbers of the held members' records are dropped (they are never read again)."""
        for member, (origin, size) in self._writes.items():
            self._origins[member] = ([1], [origin])
            self._offsets[member] = array("q", [0, size])
            self._streamed.discard(member)
            appended = self._held.pop(member, None)
            if appended is not None:
                self._held_size -= len(appended)
        for member, data in self._held_writes.items():
            self._held[member] = data
        self._held_writes.clear()
        for seg in self._segments.values():
            for member in [m for m in seg.lines if m in self._held]:
                del seg.lines[member]

    # -- reading -------------------------------------------------------------------------------
    def __getitem__(self, member: str) -> bytes:
        held = self._held.get(member)
        if held is not None:
            return held  # bytes-like, as the bundle reader's members
        if member not in self._offsets:
            raise KeyError(member)
        return b"".join(self.chunks(member))

    def __iter__(self) -> Iterator[str]:
        return iter(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)

    def __contains__(self, member: object) -> bool:
        return member in self._offsets

    def held_bytes(self) -> int:
        """The bytes of rebuilt members held now: the small members, and the records of the latest
        segment decoded for a quote."""
        cached = sum(map(len, self._cache[1].values())) if self._cache is not None else 0
        return self._held_size + cached

    def chunks(self, member: str) -> Iterator[bytes]:
        """The member's bytes in pieces: a held member whole, another one record at a time, its
        segments decoded one after the other."""
        held = self._held.get(member)
        if held is not None:
            yield held
            return
        if member not in self._offsets:
            raise KeyError(member)
        where = self._origins[member][1]
        k = 0
        while k < len(where):
            end = self._group_end(where, k)
            for _k, data in self._records(member, where, k, end):
                yield data
            k = end

    def read_at(self, member: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of the member from byte ``offset`` (of a member not held, from
        the segment holding the record that holds ``offset``, decoded again)."""
        held = self._held.get(member)
        if held is not None:
            return bytes(held[offset:offset + length])
        offsets = self._offsets[member]
        where = self._origins[member][1]
        k = bisect_right(offsets, offset, 0, len(where)) - 1
        out: list[bytes] = []
        pos = offset
        while length > 0 and 0 <= k < len(where):
            data = self._cached(member, where, k)
            piece = data[pos - offsets[k]:pos - offsets[k] + length]
            out.append(piece)
            length -= len(piece)
            pos += len(piece)
            k += 1
        return b"".join(out)

    # -- reading again from the segments --------------------------------------------------------
    @staticmethod
    def _group_end(where: list[tuple[str, int]], k: int) -> int:
        """The index after the last record of ``where[k]``'s segment (a segment's records are one run)."""
        seg = where[k][0]
        end = k + 1
        while end < len(where) and where[end][0] == seg:
            end += 1
        return end

    def _cached(self, member: str, where: list[tuple[str, int]], k: int) -> bytes:
        seg, line = where[k]
        if self._cache is None or self._cache[0] != (member, seg):
            self._cache = None  # the one before goes first
            start = k
            while start > 0 and where[start - 1][0] == seg:
                start -= 1
            got = {where[j][1]: data for j, data in self._records(member, where, start, self._group_end(where, k))}
            self._cache = ((member, seg), got)
        return self._cache[1][line]

    def _records(self, member: str, where: list[tuple[str, int]], start: int, end: int) -> Iterator[tuple[int, bytes]]:
        """(index, data) of the member's records ``where[start:end]`` (all of one segment), decoded
        again from that segment and checked to be the ones indexed."""
        seg = self._segments[where[start][0]]
        offsets = self._offsets[member]
        lines, skipped = self._lines(seg, member)
        written = member in self._writes  # its latest write: the one record of it kept, not its appends
        k = start
        records = window_records(seg.member, lines, seg.run, self._since, self._until, (member,), True, {}, [], [],
                                 DecodeBudget(self._limits.max_total_bytes), skipped)
        for rec in records:  # (left unfinished when the last indexed one is handed out: never decoded further)
            if rec.member != member or (rec.op == "write") != written:
                continue
            if written and rec.line != where[k][1]:
                continue  # an earlier write of it in the segment
            if rec.line != where[k][1] or len(rec.data) != offsets[k + 1] - offsets[k]:
                raise RingError(f"{seg.member}: line {rec.line} of {member} is not the record read before "
                                f"(line {where[k][1]}, {offsets[k + 1] - offsets[k]} bytes): the segment "
                                "changed since it was read")
            yield k, rec.data
            k += 1
            if k == end:
                return
        raise RingError(f"{seg.member}: {end - k} record(s) of {member} read before are not there any more "
                        "(the segment changed since it was read)")

    def _lines(self, seg: _Segment, member: str) -> tuple[list[tuple[int, dict[str, Any]]], Any]:
        """The segment's lines for reading ``member`` again: only its records' lines (parsed alone)
        where the segment has no line that is not a record, else every line (``valid_prefix``)."""
        try:
            data = self._bundle.read_bytes(seg.member)
        except Exception as exc:  # the reader's BundleError: as the first read would have said
            raise RingError(f"cannot read {seg.member}: {exc}") from None
        text = segment_text(bytes(data), seg.member.endswith(".gz"), self._limits.max_member_bytes)
        if not seg.whole:
            _good, lines, skipped = valid_prefix(text)
            return lines, skipped
        nos = seg.lines.get(member)
        if not nos:
            return [], ()
        parts = text.split(b"\n", nos[-1])
        del text
        out: list[tuple[int, dict[str, Any]]] = [(1, {})]  # the header's place (its run is ``seg.run``)
        for no in nos:
            rec = parse_record_line(parts[no - 1]) if no <= len(parts) else None
            if rec is None or rec.get("member") != member:
                raise RingError(f"{seg.member}: line {no} is not the record of {member} read before: the segment "
                                "changed since it was read")
            out.append((no, rec))
        return out, ()
