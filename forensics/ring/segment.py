"""The ring's on-disk format: segment lines (a header, then records) and index lines.

A segment's first line is a header (format, version, run id, boot id, host, and ``redacted``:
whether its writer redacted the records, False under ``record --no-redact``); every other line is
one record::

    {"t": <wall unix s>, "mono": <CLOCK_MONOTONIC s>, "member": "nvml/samples.jsonl",
     "op": "append" | "write" | "delta", "data": "<the member's bytes, as the collector wrote them>"}

``member`` and ``data`` are what a collector's ``sample()`` handed to ``ctx.sink``: a ring record
*is* a bundle member's bytes, so capture folds records back into members byte for byte and the
analysis loaders read them with their usual code. Members under ``recorder/`` are the recorder's
own (starts, stops, gaps, clock jumps, disk full).

A line is whole when it ends in a newline; a whole line is a record when it parses as one (or,
first, as the header). :func:`valid_prefix` is the one test of that, used by the writer's recovery
(to cut a torn tail: the bytes after the last newline) and by the readers (to stop before one). A
whole line that is not a record (a time that is not finite, a damaged byte) is skipped and named
(:class:`SkippedLine`); the records after it are read: one bad line never costs the rest of its
segment. ``index.jsonl`` holds one :class:`SegmentInfo` per sealed
segment; :func:`read_index` reads it up to its last whole line.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from forensics.errors import RingError
from forensics.ring.files import INDEX_FILE

__all__ = [
    "RECORD_KEYS", "RING_FORMAT", "RING_VERSION", "RingRecord", "SegmentInfo", "SegmentLines", "SegmentTooLarge",
    "SkippedLine", "encode_record", "index_line",
    "info_from_lines", "parse_record_line", "read_index", "segment_text", "valid_prefix",
]

RING_FORMAT = "gpuforensics-ring"
RING_VERSION = 3  # 2: "delta" records (forensics.ring.delta); 3: a delta may build on a kept line of another token count
RECORD_KEYS = ("t", "mono", "member", "op", "data")


@dataclass(frozen=True)
class RingRecord:
    """One record read back, with where it lies (its provenance in a capture)."""

    t: float
    mono: float
    member: str
    op: str
    data: bytes
    run: str
    segment: str
    line: int  # 1-based line in the segment's uncompressed text (the header is line 1)


@dataclass
class SegmentInfo:
    """A segment's index entry (sealed) or what a scan of the active file found."""

    name: str
    seq: int
    sealed: bool
    run: str = ""
    boot_id: str | None = None
    # whether the writer's records are redacted (the header's ``redacted``; False under
    # ``record --no-redact``; None: written before segments said so, not known)
    redacted: bool | None = None
    sha256: str | None = None  # of the file as stored (compressed, for a sealed segment)
    bytes: int = 0  # on disk
    raw_bytes: int = 0  # uncompressed text
    records: int = 0
    min_t: float | None = None
    max_t: float | None = None
    first_mono: float | None = None
    last_mono: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    def count(self, t: float, mono: float) -> None:
        """One more record at wall time ``t``, monotonic ``mono`` (in the order written)."""
        self.records += 1
        self.min_t = t if self.min_t is None else min(self.min_t, t)
        self.max_t = t if self.max_t is None else max(self.max_t, t)
        if self.first_mono is None:
            self.first_mono = mono
        self.last_mono = mono



def parse_record_line(line: bytes) -> dict[str, Any] | None:
    """A record line (without its newline) as a dict, or None when it is not a whole record."""
    obj, _ = _parse(line)
    return obj


def _parse(line: bytes) -> tuple[dict[str, Any] | None, Any]:
    """A record line as a dict (None when it is not a record), and what json made of it."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None, None
    if not isinstance(obj, dict):
        return None, obj
    if "ring" in obj:
        return obj, obj  # the header
    if not all(k in obj for k in RECORD_KEYS) or not isinstance(obj["data"], str) \
            or not isinstance(obj["member"], str) or not isinstance(obj["t"], int | float) \
            or not isinstance(obj["mono"], int | float) or not math.isfinite(obj["t"]) \
            or not math.isfinite(obj["mono"]):
        return None, obj  # json reads NaN and Infinity: such a time passes every window comparison
    return obj, obj


class SkippedLine(NamedTuple):
    """A whole line of a segment that is not a record: left out, the records after it read."""

    line: int  # 1-based, in the segment's text
    why: str
    member: str | None = None  # what the line says, where it says it: a change-only line's member
    op: str | None = None  # (and its data) are fed to the member's decoder, whose later lines build on it
    data: str | None = None


class SegmentLines(NamedTuple):
    """What :func:`valid_prefix` found in a segment's text."""

    end: int  # bytes up to the end of the last whole line; what follows is a torn tail
    lines: list[tuple[int, dict[str, Any]]]  # the header and the records: (1-based line, object)
    skipped: list[SkippedLine]  # whole lines that are not records


def _skipped(no: int, seen: Any) -> SkippedLine:
    if not isinstance(seen, dict):
        return SkippedLine(no, "not JSON" if seen is None else "not a JSON object")
    if "ring" in seen:
        return SkippedLine(no, "a header line in the middle of the segment")
    member, op, data = seen.get("member"), seen.get("op"), seen.get("data")
    known = (member, op if isinstance(op, str) else None, data if isinstance(data, str) else None) \
        if isinstance(member, str) else (None, None, None)
    t, mono = seen.get("t"), seen.get("mono")
    if all(k in seen for k in RECORD_KEYS) and isinstance(t, int | float) and isinstance(mono, int | float) \
            and not (math.isfinite(t) and math.isfinite(mono)):
        return SkippedLine(no, f"its time is not a finite number (t {t!r}, mono {mono!r})", *known)
    return SkippedLine(no, "not a ring record (keys or types)", *known)


def valid_prefix(data: bytes) -> SegmentLines:
    """The segment's whole lines (each ends in a newline): the header (the first line; without
    one, nothing is read) and the records, each with its 1-based line number, and the whole lines
    that are not records, skipped (the records after them are read). ``end``: the length of the
    text up to the last whole line (what follows is a torn tail)."""
    out: list[tuple[int, dict[str, Any]]] = []
    skipped: list[SkippedLine] = []
    pos = 0
    no = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        obj, seen = _parse(data[pos:nl])
        if no == 0 and (obj is None or "ring" not in obj):
            break  # not a ring segment
        no += 1
        pos = nl + 1
        if obj is None or (no == 1) != ("ring" in obj):
            skipped.append(_skipped(no, seen))
            continue
        out.append((no, obj))
    return SegmentLines(pos, out, skipped)


class SegmentTooLarge(RingError):
    """A segment's text is longer than the cap :func:`segment_text` was given."""


def segment_text(data: bytes, sealed: bool, cap: int) -> bytes:
    """A segment file's text: a sealed one (gzip, one member or several) inflated, an active one as
    it is. At most ``cap`` bytes are inflated: a segment that expands further (a gzip bomb in a
    bundle, where a segment is untrusted input) raises :class:`SegmentTooLarge`, a corrupt one
    :class:`RingError`."""
    if not sealed:
        if len(data) > cap:
            raise SegmentTooLarge(f"{len(data)} bytes, over the cap of {cap}")
        return data
    out: list[bytes] = []
    size = 0
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(wbits=31)
            while not d.eof:
                chunk = d.decompress(rest, max(1, min(1 << 20, cap + 1 - size)))
                size += len(chunk)
                if size > cap:
                    raise SegmentTooLarge(f"inflates past the cap of {cap} bytes")
                out.append(chunk)
                rest = d.unconsumed_tail
                if not chunk and not rest:
                    break
            if not d.eof:
                raise RingError("cannot decompress: truncated gzip stream")
            rest = d.unused_data.lstrip(b"\0")
    except zlib.error as exc:
        raise RingError(f"cannot decompress: {exc}") from None
    return b"".join(out)


def info_from_lines(name: str, seq: int, lines: list[tuple[int, dict[str, Any]]]) -> SegmentInfo:
    info = SegmentInfo(name=name, seq=seq, sealed=False)
    if lines:
        head = lines[0][1]
        info.run = str(head.get("run", ""))
        info.boot_id = head.get("boot_id") if isinstance(head.get("boot_id"), str) else None
        info.redacted = head.get("redacted") if isinstance(head.get("redacted"), bool) else None
    for _, rec in lines[1:]:
        info.count(float(rec["t"]), float(rec["mono"]))
    return info


def encode_record(t: float, mono: float, member: str, op: str, data: bytes) -> bytes:
    """One record line (ASCII JSON: undecodable bytes survive as surrogate escapes)."""
    return (json.dumps({"t": round(t, 6), "mono": round(mono, 6), "member": member, "op": op,
                        "data": data.decode("utf-8", "surrogateescape")},
                       separators=(",", ":")) + "\n").encode("ascii")



def index_line(info: SegmentInfo) -> bytes:
    """A segment's line in ``index.jsonl``."""
    return (json.dumps(info.as_json(), sort_keys=True) + "\n").encode()


def read_index(root: Path) -> tuple[list[SegmentInfo], int]:
    """Index entries, and the number of bytes of a torn tail (0 when whole)."""
    try:
        data = (root / INDEX_FILE).read_bytes()
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise RingError(f"cannot read {root / INDEX_FILE}: {exc.strerror or exc}") from None
    out: list[SegmentInfo] = []
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        try:
            d = json.loads(data[pos:nl])
            out.append(SegmentInfo(**{k: d[k] for k in SegmentInfo.__dataclass_fields__ if k in d}))
        except (ValueError, TypeError):
            break
        pos = nl + 1
    return out, len(data) - pos

