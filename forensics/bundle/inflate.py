"""A gzip stream inflated with resume points, so a part of it can be inflated again without the rest.

:class:`Inflater` reads a (possibly multi-member) gzip file as :class:`gzip.GzipFile` does, and
every :data:`SPACING` bytes of output keeps a :class:`Point`: the compressed offset, the output
offset and a copy of zlib's inflate state (its 32 KiB window and bit buffer, about 40 KiB), from
which :func:`inflate_range` inflates any later range of the output reading only from there (the
idea of zlib's ``examples/zran.c``, with ``zlib.Decompress.copy`` holding the state). A 190 MiB
member then costs about 4 MiB of points instead of its bytes, and quoting one of its lines
inflates at most :data:`SPACING` bytes.

Errors are zlib's and gzip's own (``zlib.error``, ``EOFError`` for a cut-off stream,
``gzip.BadGzipFile`` for what follows a member and is not one): the bundle reader turns them into
its one-line errors.
"""

from __future__ import annotations

import gzip
import os
import zlib
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

__all__ = ["SPACING", "Inflater", "Point", "Readable", "inflate_range"]


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...

SPACING = 2 << 20  # output bytes between resume points
_RAW = 64 << 10  # compressed bytes read at a time
_OUT = 256 << 10  # output inflated at a time (a gzip bomb's 1000:1 never inflates more at once)
_GZIP = 31  # zlib's wbits for a gzip header and trailer (CRC-32 and length checked at its end)


@dataclass(frozen=True)
class Point:
    """Where inflating can start again: ``raw`` compressed offset, ``out`` output offset, the state."""

    raw: int
    out: int
    state: zlib._Decompress  # copied again each time it is used


class Inflater:
    """A readable file of a gzip stream's output that keeps :class:`Point` s as it goes (``points``,
    in output order; the first at offset 0; none after it where ``spacing`` is None)."""

    def __init__(self, raw: Readable, spacing: int | None = SPACING) -> None:
        self._raw = raw
        self._spacing = spacing
        self._d = zlib.decompressobj(_GZIP)
        self._tail = b""  # compressed bytes read and not yet inflated
        self._raw_pos = 0  # compressed bytes read from ``raw``
        self._buf = b""  # the last output, handed out up to ``_off``
        self._off = 0
        self._out = 0  # output produced (handed out or buffered)
        self._eof = False
        self.points: list[Point] = [Point(0, 0, self._d.copy())]

    def _more_raw(self) -> bytes:
        data = self._raw.read(_RAW)
        self._raw_pos += len(data)
        return data

    def _next_member(self) -> bool:
        """After a gzip member ended: start the next one (False at the end of the file); zero
        padding between or after members is skipped, as gzip does."""
        tail = self._d.unused_data
        while True:
            tail = tail.lstrip(b"\0")
            if tail:
                break
            tail = self._more_raw()
            if not tail:
                return False
        if len(tail) < 2:
            tail += self._more_raw()
        if tail[:2] != b"\x1f\x8b":
            raise gzip.BadGzipFile("Not a gzipped file")
        self._d = zlib.decompressobj(_GZIP)
        self._tail = tail
        return True

    def _inflate(self) -> bytes:
        """The next piece of output (empty at the end of the file)."""
        while True:
            if self._d.eof and not self._next_member():
                self._eof = True
                return b""
            if self._spacing is not None and self._out - self.points[-1].out >= self._spacing:
                # the state before inflating what is left of the tail: resume at its first byte
                self.points.append(Point(self._raw_pos - len(self._tail), self._out, self._d.copy()))
            if not self._tail:
                self._tail = self._more_raw()
                if not self._tail:
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            out = self._d.decompress(self._tail, _OUT)
            self._tail = self._d.unconsumed_tail if not self._d.eof else b""
            self._out += len(out)
            if out:
                return out

    def read(self, n: int = -1) -> bytes:
        have = len(self._buf) - self._off
        if 0 <= n <= have:
            data = self._buf[self._off:self._off + n]
            self._off += n
            return data
        parts = [self._buf[self._off:]]
        while not self._eof and (n < 0 or have < n):
            out = self._inflate()
            parts.append(out)
            have += len(out)
        joined = b"".join(parts)
        cut = len(joined) if n < 0 else min(n, len(joined))
        self._buf, self._off = joined, cut
        return joined[:cut]


def inflate_range(fd: int, points: list[Point], start: int, length: int,
                  chunk: int = 1 << 20) -> Iterator[bytes]:
    """The ``length`` output bytes from offset ``start``, in pieces of at most ``max(chunk, 256 KiB)``,
    inflated from the last point at or before ``start``; ``fd``: the file, read with ``os.pread`` (no
    shared file offset: two ranges of one file may be read in turns)."""
    k = bisect_right([p.out for p in points], start) - 1
    point = points[max(k, 0)]
    at = point.raw

    def more() -> bytes:
        nonlocal at
        data = os.pread(fd, _RAW, at)
        at += len(data)
        return data

    d = point.state.copy()
    pos = point.out
    tail = b""
    end = start + length
    pending: list[bytes] = []
    held = 0
    while pos < end:
        if d.eof:  # a gzip member ended inside the range: the next one (zero padding skipped)
            rest = d.unused_data.lstrip(b"\0")
            while not rest:
                rest = more().lstrip(b"\0")
                if not rest:
                    raise EOFError("the gzip stream ended before the range read again")
            d, tail = zlib.decompressobj(_GZIP), rest
        if not tail:
            tail = more()
            if not tail:
                raise EOFError("the gzip stream ended before the range read again")
        out = d.decompress(tail, min(end - pos, _OUT))
        tail = d.unconsumed_tail if not d.eof else b""
        if pos + len(out) > start:
            piece = out[start - pos:] if pos < start else out
            if held + len(piece) > chunk and pending:
                yield b"".join(pending)
                pending, held = [], 0
            pending.append(piece)
            held += len(piece)
        pos += len(out)
    if pending:
        yield b"".join(pending)
