"""Reading a ring while it is written (no lock): sealed segments checked against the SHA-256 the
index lists, then the active ones up to their last whole line; ``writer.json`` and whether the
writer still holds the lock."""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import RingError
from forensics.ring.delta import DELTA_OP, DeltaDecoder
from forensics.ring.files import ACTIVE_RE, LOCK_FILE, WRITER_FILE
from forensics.ring.segment import RingRecord, SegmentInfo, SkippedLine, read_index, valid_prefix

__all__ = ["DecodeBudget", "ReadReport", "RingReader", "SegmentFile", "window_records"]


@dataclass
class ReadReport:
    """What a read met: segments used (provenance), problems (hash mismatch, torn tails)."""

    segments: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class DecodeBudget:
    """Bytes the change-only lines of untrusted segments (a bundle's) may still rebuild, across
    every record and segment it is passed for: a few bytes of such a line rebuild a whole line."""

    left: int
    passed: bool = False  # a record went past it: it and everything after were left out


@dataclass(frozen=True)
class SegmentFile:
    """One segment as :meth:`RingReader.segment_files` read it: its bytes, or what is wrong with it
    (``problem``, then no bytes: a sealed one whose SHA-256 is not the index's, or that does not
    inflate; ``gone``: listed each time the ring was listed, never there when read)."""

    info: SegmentInfo
    data: bytes
    problem: str | None = None
    gone: bool = False


class RingReader:
    """Reads a ring while it is written (no lock): sealed segments checked against their
    SHA-256, then the active ones up to their last whole line."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise RingError(f"no ring at {self.root}")
        self.report = ReadReport()

    def segments(self) -> list[SegmentInfo]:
        """Sealed (from the index) then active segments, oldest first."""
        entries, _ = read_index(self.root)
        names = {e.name for e in entries}
        active = []
        try:
            files = os.listdir(self.root)
        except OSError as exc:
            raise RingError(f"cannot list {self.root}: {exc.strerror or exc}") from None
        for f in files:
            m = ACTIVE_RE.match(f)
            if m and f + ".gz" not in names:
                active.append(SegmentInfo(name=f, seq=int(m.group(1)), sealed=False))
        return sorted(entries, key=lambda s: s.seq) + sorted(active, key=lambda s: s.seq)

    def _load(self, seg: SegmentInfo, inflate: bool = True) -> tuple[bytes, str | None]:
        """A segment's bytes (a sealed one checked against the SHA-256 the index lists, and
        inflated when ``inflate``) and what is wrong with it (then no bytes). Hashing and inflating
        leave the GIL, so :meth:`segment_files` loads the next segment this way while the caller
        works on the one before. FileNotFoundError: sealed or dropped meanwhile (the caller lists
        again)."""
        data = (self.root / seg.name).read_bytes()
        if not seg.sealed:
            return data, None
        digest = hashlib.sha256(data).hexdigest()
        if digest != seg.sha256:
            return b"", f"{seg.name}: SHA-256 {digest} does not match the index ({seg.sha256})"
        if not inflate:
            return data, None
        try:
            return gzip.decompress(data), None
        except (OSError, EOFError, zlib.error) as exc:
            return b"", f"{seg.name}: cannot decompress: {exc}"

    def segment_files(self, since: float | None = None, until: float | None = None,
                      inflate: bool = False) -> Iterator[SegmentFile]:
        """Each segment whose records may lie in [since, until], oldest first, once: its bytes as
        the ring holds them, a sealed one's checked against the index's SHA-256 (and inflated when
        ``inflate``), or what is wrong with it (:class:`SegmentFile`). The ring is read while it is
        written: a segment listed but gone when read (the active one sealed meanwhile, a sealed one
        dropped by the caps) has the ring listed again, up to three times; one gone each time is
        yielded last, ``gone``. The one segment loop of the ring's readers: :meth:`records` and
        capture's fold (forensics.collectors.ring)."""
        done: set[str] = set()  # stems: a segment sealed meanwhile is the one already read
        gone: dict[str, SegmentInfo] = {}
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ring-load") as pool:
            for _attempt in range(3):
                todo = []
                for seg in self.segments():
                    stem = seg.name.removesuffix(".gz")
                    if stem in done:
                        continue
                    if seg.sealed and ((since is not None and seg.max_t is not None and seg.max_t < since)
                                       or (until is not None and seg.min_t is not None and seg.min_t > until)):
                        done.add(stem)
                        continue
                    todo.append(seg)
                retry = False
                loads: list[Future[tuple[bytes, str | None]] | None] = (
                    [pool.submit(self._load, todo[0], inflate)] if todo else [])
                for k, seg in enumerate(todo):
                    if k + 1 < len(todo):
                        loads.append(pool.submit(self._load, todo[k + 1], inflate))
                    # the future is dropped once read: it holds the whole segment, and a fold of
                    # a long window must hold one segment at a time (and the next), not all of them
                    loaded, loads[k] = loads[k], None
                    assert loaded is not None
                    try:
                        data, problem = loaded.result()
                    except FileNotFoundError:
                        retry = True
                        gone[seg.name] = seg
                        continue
                    except OSError as exc:
                        raise RingError(f"cannot read {self.root / seg.name}: {exc.strerror or exc}") from None
                    done.add(seg.name.removesuffix(".gz"))
                    yield SegmentFile(seg, data, problem)
                if not retry:
                    break
        for name, seg in sorted(gone.items()):
            if name.removesuffix(".gz") not in done:
                yield SegmentFile(seg, b"", f"{name}: listed but gone each time it was read (removed meanwhile)",
                                  gone=True)

    def _segment_lines(self, seg: SegmentInfo) -> tuple[list[tuple[int, dict[str, Any]]], str | None]:
        """One segment's parsed lines and the SHA-256 that vouches for them, read now (the kernel
        sampler's resume point, forensics.record.recorder)."""
        data, problem = self._load(seg)
        lines, sha, _ = self._parse(SegmentFile(seg, data, problem))
        return lines, sha

    def read_text(self, seg: SegmentInfo) -> bytes:
        """One segment's text, read now: a sealed one checked against the SHA-256 the index lists and
        inflated; b"" when it cannot be used (what is wrong is in ``report.problems``). OSError:
        unreadable, or gone meanwhile. The kernel sampler's resume point reads the newest segments
        this way, one at a time (forensics.record.kmsg_resume)."""
        data, problem = self._load(seg)
        if problem:
            self.report.problems.append(f"{problem}: segment skipped")
        return data

    def _parse(self, got: SegmentFile) -> tuple[list[tuple[int, dict[str, Any]]], str | None, list[SkippedLine]]:
        seg = got.info
        if got.problem:
            self.report.problems.append(f"{got.problem}: segment skipped")
            return [], None, []
        data = got.data
        good, lines, skipped = valid_prefix(data)
        if good < len(data) and seg.sealed:
            self.report.problems.append(f"{seg.name}: {len(data) - good} bytes after the last whole record")
        sha = seg.sha256 if seg.sealed else hashlib.sha256(data[:good]).hexdigest()
        return lines, sha, skipped

    def records(self, since: float | None = None, until: float | None = None,
                members: tuple[str, ...] = (), keep_writes: bool = False) -> Iterator[RingRecord]:
        """Records whose wall time is in [since, until], in the order they were written
        (which is the monotonic order of one run; runs follow each other). ``keep_writes``: also
        the "write" records older than ``since`` in the segments read (the state then: device
        lists, container inspects; every segment starts with a copy of it). A line that is not a
        record is a problem, and the records after it are read (``valid_prefix``)."""
        for got in self.segment_files(since, until, inflate=True):
            if got.gone:
                continue  # removed by the caps while being read: as if it were never listed
            lines, sha, skipped = self._parse(got)
            if lines:
                yield from self._segment_records(got.info, lines, sha, since, until, members, keep_writes, skipped)

    def _segment_records(self, seg: SegmentInfo, lines: list[tuple[int, dict[str, Any]]], sha: str | None,
                         since: float | None, until: float | None, members: tuple[str, ...],
                         keep_writes: bool, skipped: list[SkippedLine]) -> Iterator[RingRecord]:
        run = str(lines[0][1].get("run", ""))
        decoders: dict[str, DeltaDecoder] = {}
        marks: list[int] = []  # the first and the last line handed out
        try:
            yield from window_records(seg.name, lines, run, since, until, members, keep_writes, decoders, marks,
                                      self.report.problems, skipped=skipped)
        finally:  # also when the consumer stops early (a cap, a deadline): its records have provenance
            if marks:
                self.report.segments.append({"segment": seg.name, "sealed": seg.sealed, "sha256": sha,
                                             "sha256_of": "file" if seg.sealed else "lines read",
                                             "run": run, "lines": [marks[0], marks[-1]]})

    def writer(self) -> dict[str, Any] | None:
        """writer.json, with ``alive`` (the lock is held) and ``pid_alive``."""
        try:
            info = json.loads((self.root / WRITER_FILE).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(info, dict):
            return None
        held = False
        try:
            fd = os.open(self.root / LOCK_FILE, os.O_RDONLY)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                held = True
            finally:
                os.close(fd)
        info["alive"] = held
        return info


def window_records(segment: str, lines: list[tuple[int, dict[str, Any]]], run: str,
                   since: float | None, until: float | None, members: tuple[str, ...],
                   keep_writes: bool, decoders: dict[str, DeltaDecoder], marks: list[int],
                   problems: list[str], budget: DecodeBudget | None = None,
                   skipped: Sequence[SkippedLine] = ()) -> Iterator[RingRecord]:
    """The records of one segment's parsed lines (``valid_prefix``; the header first) in the window
    (wall time in [since, until]; with ``keep_writes`` also the older "write" records, the state),
    change-only lines rebuilt; ``marks`` gets the line number of each one handed out (before it is,
    so a consumer that stops after taking it still has it on record). The one definition of a
    window's records: the ring reader's (a fold) and a bundle's ring view (segments carried
    verbatim, forensics.analysis.ring_view) are the same bytes. ``budget``: what change-only lines
    may rebuild (in the window or not); the record that passes it and the rest of the segment are
    left out, a problem (None: no limit, the recorder's own ring). ``skipped``: the segment's whole
    lines that are not records (``valid_prefix``), each a problem; the records after them are read.
    A skipped change-only line is still decoded where it can be (its member and data readable: a
    time that is not finite), since the lines after it build on it; where it cannot (its member
    unknown, or its data), the change-only lines after it of that member (unknown: of every
    member) are left out, named: rebuilt without it they would be wrong."""
    lost = list(skipped)  # in line order, as valid_prefix finds them
    k = 0
    broken: dict[str, int] = {}  # member ("" every one) -> the skipped line its decoding lost
    named: set[str] = set()
    for no, rec in lines[1:]:
        while k < len(lost) and lost[k].line < no:
            _skip(segment, lost[k], members, decoders, broken, problems, budget)
            k += 1
        t = float(rec["t"])
        member, op, data = rec["member"], rec["op"], rec["data"]
        if members and not member.startswith(members):
            continue
        if op == DELTA_OP and (member in broken or "" in broken):
            if member not in named:
                named.add(member)
                problems.append(f"{segment} line {no}: the change-only lines of {member} from here on build on "
                                f"line {broken.get(member, broken.get(''))}, which is not a ring record: left out")
            continue
        if op == DELTA_OP:  # decoded even outside the window: later lines build on it
            decoder = decoders.setdefault(member, DeltaDecoder())
            data, bad = decoder.decode(data, None if budget is None else max(budget.left, 0))
            if budget is not None:
                budget.left -= len(data)
                if decoder.over_budget:
                    budget.passed = True
                    problems.append(f"{segment} line {no}: the change-only lines of {member} rebuild more than "
                                    "the reader's budget for them: this record and every one after it "
                                    "are left out")
                    return
            if bad:
                problems.append(f"{segment} line {no}: {bad} change-only lines of "
                                f"{member} without the line before them: left out")
            op = "append"
            if not data:
                continue
        if (until is not None and t > until) or (since is not None and t < since and not (
                keep_writes and op == "write")):
            continue
        if marks:
            marks[1:] = [no]
        else:
            marks.append(no)
        yield RingRecord(t, float(rec["mono"]), member, str(op), data.encode("utf-8", "surrogateescape"),
                         run, segment, no)
    for rest in lost[k:]:
        _skip(segment, rest, members, decoders, broken, problems, budget)


def _skip(segment: str, bad: SkippedLine, members: tuple[str, ...], decoders: dict[str, DeltaDecoder],
          broken: dict[str, int], problems: list[str], budget: DecodeBudget | None) -> None:
    """A whole line that is not a record (see :func:`window_records`): named; a change-only one
    decoded where it can be, else its member's later change-only lines are marked as lost."""
    problems.append(f"{segment} line {bad.line}: not a ring record ({bad.why}): left out; the records "
                    "after it are read")
    if bad.member is None:
        broken.setdefault("", bad.line)  # any member's change-only line, maybe
        return
    if members and not bad.member.startswith(members) or bad.op != DELTA_OP:
        return  # a record of another op: no decoder builds on it
    if bad.data is None:
        broken.setdefault(bad.member, bad.line)
        return
    decoder = decoders.setdefault(bad.member, DeltaDecoder())
    text, _ = decoder.decode(bad.data, None if budget is None else max(budget.left, 0))
    if budget is not None:
        budget.left -= len(text)
