"""What a sampler child and the recorder say to each other: typed messages, encoded and decoded here.

Two pipes per child (:mod:`forensics.record.child`); the child is the only reader of its command pipe.

- parent -> child, a :data:`Command`, one JSON line each: :class:`TickCommand`
  ``{"tick": i, "t": wall, "hints": {key: [values]}}`` or :class:`QuitCommand` ``{"quit": true}``
  (:func:`encode_command`, :func:`decode_command`);
- child -> parent, an :class:`Answer` (``hello`` once started, ``tick`` per command, ``fatal`` when
  its source cannot start), one frame each: two 4-byte big-endian lengths, a JSON header
  (:func:`encode_header`) and the records' bytes. The header is
  ``{"kind", "tick", "records": [[t, mono, member, op, size(, summary)], ...], "notes", "error",
  "hints", "dropped"}``; then each record's ``size`` bytes of member data, in order
  (:func:`send_answer`, :class:`FrameReader`, :func:`decode_answer`). The data travels as the bytes
  the collector wrote: not escaped into JSON by the child and parsed back by the parent (most of a
  tick's frame is JSON lines, all quotes). A record's ``summary`` (when the recorder keeps a live
  state): what :mod:`forensics.record.live.summaries` gives for each of its lines, taken from the
  objects before they were encoded.

Two layers: the framing (:func:`send_frame`, :class:`FrameReader`: a header object and its body's
records, whatever the header holds) and the messages over it (:func:`decode_answer` checks a
header's every field). A frame or a command that does not decode raises
:class:`~forensics.errors.RecorderProtocolError` with what is wrong in one line: the recorder drops
that message and records why, and goes on (a frame too large to be one of ours means the stream is
lost: the source's child is restarted).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, cast, get_args

import orjson

from forensics.errors import RecorderProtocolError

__all__ = ["FRAME_HEAD", "MAX_FRAME", "Answer", "AnswerKind", "Command", "FrameReader", "QuitCommand", "Record",
           "TickCommand", "decode_answer", "decode_command", "decode_header", "encode_command", "encode_header",
           "send_answer", "send_frame"]

FRAME_HEAD = struct.Struct(">II")  # header length, body length
MAX_FRAME = 64 << 20
IOV_MAX = 512  # buffers per writev (Linux takes 1024)
_ORJSON_AS_JSON = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS  # to default=str, as json does


# -- parent -> child ---------------------------------------------------------------------------
class TickCommand(NamedTuple):
    """Sample now: tick number ``tick`` at wall time ``time_unix``, with the hints the child's driver
    reads (hint key -> values: GPU PIDs to attribute, cgroup paths, the kernel's resume point)."""

    tick: int
    time_unix: float
    hints: Mapping[str, list[Any]]


class QuitCommand(NamedTuple):
    """Stop the driver, answer once more (its last records), and exit."""


Command = TickCommand | QuitCommand


def encode_command(command: Command) -> bytes:
    """One command as its JSON line."""
    if isinstance(command, QuitCommand):
        return b'{"quit":true}\n'
    return (json.dumps({"tick": command.tick, "t": command.time_unix, "hints": command.hints},
                       separators=(",", ":")) + "\n").encode()


def decode_command(line: bytes) -> Command:
    """A command line back (RecorderProtocolError: not one of :func:`encode_command`'s)."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise RecorderProtocolError(f"a command that is not JSON: {_excerpt(line)} ({exc})") from None
    if not isinstance(obj, dict):
        raise RecorderProtocolError(f"a command that is not an object: {_excerpt(line)}")
    if obj.get("quit") is True:
        return QuitCommand()
    index, wall, hints = obj.get("tick"), obj.get("t"), obj.get("hints", {})
    if type(index) is not int or not _is_number(wall):
        raise RecorderProtocolError(f"a tick command without an integer tick and a time: {_excerpt(line)}")
    if not (isinstance(hints, dict) and all(isinstance(v, list) for v in hints.values())):
        raise RecorderProtocolError(f"a tick command whose hints are not lists by key: {_excerpt(line)}")
    return TickCommand(index, float(cast(float, wall)), hints)


# -- child -> parent ---------------------------------------------------------------------------
class Record(NamedTuple):
    """What a collector wrote through the child's sink, stamped with the child's clocks: the
    member, ``write`` or ``append``, and the member's own bytes; ``summary``, the live state's
    summary of each of its lines where the child made one (None: the reader parses the bytes).
    An outgoing record's ``data`` may be the list of byte strings appended, sent one after the
    other (:meth:`forensics.record.child.RecordSink.take_chunks`); one read back is always bytes."""

    t: float
    mono: float
    member: str
    op: str
    data: bytes | list[bytes]
    summary: list[Any] | None = None


AnswerKind = Literal["hello", "tick", "fatal"]
_KINDS = frozenset(get_args(AnswerKind))
_OPS = frozenset({"write", "append"})
_NUMBERS = (int, float)


@dataclass(frozen=True)
class Answer:
    """A child's answer: ``hello`` (its source started), ``tick`` (to tick ``tick``; ``None``: to
    the quit command), ``fatal`` (its source cannot start: ``error`` says why). Each carries the
    records written since the last answer, the collector's notes, the hints its driver published
    (hint key -> values) and the records its sink dropped so far; ``error`` on a tick: that tick failed."""

    kind: AnswerKind
    tick: int | None = None
    records: Sequence[Record] = ()
    notes: Sequence[str] = ()
    error: str | None = None
    hints: Mapping[str, list[Any]] = field(default_factory=dict)
    dropped: int = 0


def send_answer(fd: int, answer: Answer) -> None:
    """``answer`` as one frame on ``fd``."""
    send_frame(fd, {"kind": answer.kind, "tick": answer.tick, "records": answer.records, "notes": list(answer.notes),
                    "error": answer.error, "hints": dict(answer.hints), "dropped": answer.dropped})


def decode_answer(head: Any) -> Answer:
    """A frame's header (its records' bytes attached by :class:`FrameReader`) as an :class:`Answer`
    (RecorderProtocolError: a field missing or of another type, a record that is not one)."""
    if not isinstance(head, dict):
        raise RecorderProtocolError(f"an answer that is not an object: {_excerpt(head)}")
    kind, tick, error, dropped = head.get("kind"), head.get("tick"), head.get("error"), head.get("dropped", 0)
    if kind not in _KINDS:
        raise RecorderProtocolError(f"an answer of unknown kind {kind!r} (not {'/'.join(sorted(_KINDS))})")
    if tick is not None and type(tick) is not int:
        raise RecorderProtocolError(f"a {kind} answer whose tick is not an integer: {tick!r}")
    if error is not None and not isinstance(error, str):
        raise RecorderProtocolError(f"a {kind} answer whose error is not text: {_excerpt(error)}")
    if type(dropped) is not int:
        raise RecorderProtocolError(f"a {kind} answer whose dropped count is not an integer: {dropped!r}")
    notes = head.get("notes") or []
    if not isinstance(notes, list):
        raise RecorderProtocolError(f"a {kind} answer whose notes are not a list: {_excerpt(notes)}")
    hints = head.get("hints") or {}
    if not (isinstance(hints, dict) and all(isinstance(v, list) for v in hints.values())):
        raise RecorderProtocolError(f"a {kind} answer whose hints are not lists by key: {_excerpt(hints)}")
    records = []
    for n, rec in enumerate(head.get("records") or []):  # a tick's records: a few type checks each
        if not (type(rec) is list and (size := len(rec)) in (5, 6) and type(rec[0]) in _NUMBERS
                and type(rec[1]) in _NUMBERS and type(rec[2]) is str and rec[3] in _OPS and type(rec[4]) is bytes
                and (size == 5 or rec[5] is None or type(rec[5]) is list)):
            raise RecorderProtocolError(f"a {kind} answer whose record {n} is not [t, mono, member, write|append, "
                                        f"data(, summary)]: {_excerpt(rec)}")
        records.append(Record(float(rec[0]), float(rec[1]), rec[2], rec[3], rec[4], rec[5] if size == 6 else None))
    return Answer(cast(AnswerKind, kind), tick, records, [str(n) for n in notes], error, hints, dropped)


# -- the framing -------------------------------------------------------------------------------
def encode_header(head: dict[str, Any]) -> bytes:
    """A frame's JSON header: orjson's (a tenth of the standard library's CPU for a tick's
    summaries and hints), the values as ``json.dumps(head, default=str)`` gives them (dates,
    dataclasses, UUIDs and other types stringified alike; no header carries the two that differ: a
    float NaN or infinity arrives as null, a plain Enum as its value); a header orjson cannot write
    (an integer beyond 64 bits, a key not a string) is the standard library's, marked by a leading
    space for :func:`decode_header`."""
    try:
        return orjson.dumps(head, default=str, option=_ORJSON_AS_JSON)
    except TypeError:
        return b" " + json.dumps(head, separators=(",", ":"), default=str).encode()


def decode_header(payload: bytes | memoryview) -> Any:
    """:func:`encode_header`'s header back (ValueError: not JSON). The standard library reads a
    marked one: orjson would read an integer beyond 64 bits as a float."""
    if payload[:1] == b" ":
        return json.loads(bytes(payload))
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return json.loads(bytes(payload))


def send_frame(fd: int, obj: dict[str, Any]) -> None:
    """One frame: ``obj`` with its ``records``' data sent after the header, not in it (a record's
    data: bytes, or a list of byte strings, sent one after the other). The frame's pieces go out by
    ``writev``, not joined into one buffer first."""
    records = obj.get("records") or []
    datas = [rec[4] if type(rec[4]) is list else [rec[4]] for rec in records]
    sizes = [sum(map(len, chunks)) for chunks in datas]
    head = {**obj, "records": [[rec[0], rec[1], rec[2], rec[3], size, *rec[5:]]
                               if len(rec) < 6 or rec[5] is not None else [rec[0], rec[1], rec[2], rec[3], size]
                               for rec, size in zip(records, sizes, strict=True)]}
    header = encode_header(head)
    parts: list[Any] = [FRAME_HEAD.pack(len(header), sum(sizes)), header]
    for chunks in datas:
        parts += chunks
    _write_all(fd, [p for p in parts if len(p)])


def _write_all(fd: int, parts: list[Any]) -> None:
    """``parts`` written in order by ``os.writev`` (at most :data:`IOV_MAX` at a time), again from
    where a short write stopped."""
    i = 0
    while i < len(parts):
        n = os.writev(fd, parts[i:i + IOV_MAX])
        while n > 0:
            size = len(parts[i])
            if n >= size:
                n -= size
                i += 1
            else:
                parts[i] = memoryview(parts[i])[n:]
                n = 0


class FrameReader:
    """The frames of one child's stream, from whatever pieces the pipe gives: :meth:`feed` returns
    the frames completed (each header with its ``records`` as ``[t, mono, member, op, data]``,
    ``data`` bytes) and keeps the start of the next. A frame whose header is not JSON, or whose
    records' sizes do not add up to its body, is left out and its reason kept in :attr:`rejected`;
    one longer than :data:`MAX_FRAME` raises RecorderProtocolError (the stream cannot be followed)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.rejected: list[str] = []

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        head = FRAME_HEAD.size
        if self.buf:  # a frame's start left from before: gather until that frame is whole, then copy once
            self.buf += chunk
            if len(self.buf) < head:
                return []
            n, size = FRAME_HEAD.unpack_from(self.buf, 0)
            _check_size(n, size)
            if len(self.buf) < head + n + size:
                return []
            data = bytes(self.buf)
        else:
            data = chunk
        view = memoryview(data)
        out = []
        pos = 0
        while len(data) - pos >= head:
            n, size = FRAME_HEAD.unpack_from(data, pos)
            _check_size(n, size)
            end = pos + head + n + size
            if len(data) < end:
                break
            payload = view[pos + head:pos + head + n]
            body = view[pos + head + n:end]  # each record's bytes are copied out of it once (_attach)
            pos = end
            try:
                obj = decode_header(payload)
            except ValueError as exc:
                self.rejected.append(f"a frame header that is not JSON ({exc})")
                continue
            why = _attach(obj, body)
            if why:
                self.rejected.append(why)
            else:
                out.append(obj)
        self.buf = bytearray(view[pos:]) if pos < len(data) else bytearray()
        return out


def _check_size(header_bytes: int, body_bytes: int) -> None:
    if header_bytes + body_bytes > MAX_FRAME:
        raise RecorderProtocolError(f"a frame of {header_bytes + body_bytes} bytes, over the {MAX_FRAME >> 20} MiB "
                                    "a child sends: the stream is lost")


def _attach(obj: Any, body: bytes | memoryview) -> str:
    """Put each record's bytes from the frame's body in place of its size; why not ("" when done):
    a header not an object, a record without a size, sizes that do not add up to the body."""
    if not isinstance(obj, dict):
        return f"a frame header that is not an object: {_excerpt(obj)}"
    records = obj.get("records") or []
    if not isinstance(records, list):
        return f"a frame whose records are not a list: {_excerpt(records)}"
    at = 0
    for n, rec in enumerate(records):
        if not (isinstance(rec, list) and len(rec) in (5, 6) and type(rec[4]) is int and rec[4] >= 0):
            return f"a frame whose record {n} has no size: {_excerpt(rec)}"
        rec[4], at = bytes(body[at:at + rec[4]]), at + rec[4]
    if at != len(body):
        return f"a frame whose records' sizes add up to {at} bytes, its body is {len(body)}"
    return ""


def _is_number(value: Any) -> bool:
    return type(value) in _NUMBERS


def _excerpt(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
