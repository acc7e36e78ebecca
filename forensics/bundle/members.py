"""A bundle's members as :func:`forensics.bundle.reader.open_bundle` holds them: :class:`Members`.

The small ones' bytes are held; of a big one only where it lies in the bundle file's gzip stream
(:mod:`forensics.bundle.inflate`'s resume points), so it is inflated again when it is read, whole,
in pieces (the loaders' JSON lines) or a few bytes at an offset (a quoted line: cached in blocks).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from forensics.bundle.inflate import Point, inflate_range
from forensics.errors import BundleInvalid

__all__ = ["Members"]

_BLOCK = 256 << 10  # a big member's bytes read again for a line are cached in blocks of this size
_BLOCKS = 8


class Members(Mapping[str, bytes]):
    """A bundle's members by path: the small ones' bytes held, a big one's read again from the
    bundle file when asked for (from the nearest resume point of its gzip stream,
    :mod:`forensics.bundle.inflate`), through the descriptor it was read by (the same file, though
    another be put under its name). Its size and modification time are checked before every such
    read: a bundle changed in place since is an error, never other bytes quoted as its own."""

    def __init__(self, path: Path, held: dict[str, bytes]) -> None:
        self.path = path
        self.held = held
        #: member -> (offset of its bytes in the tar stream, size), for those not held
        self.spans: dict[str, tuple[int, int]] = {}
        self.points: list[Point] = []
        #: the bundle file, open since it was read (what is read again is that file, though it be
        #: renamed, removed or replaced under its name), and its size and mtime then
        self.file: BinaryIO | None = None
        self.identity: tuple[int, ...] = ()
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()

    def __getitem__(self, member: str) -> bytes:
        data = self.held.get(member)
        if data is not None:
            return data
        if member not in self.spans:
            raise KeyError(member)
        return b"".join(self.chunks(member))

    def __contains__(self, member: object) -> bool:
        return member in self.held or member in self.spans

    def __iter__(self) -> Iterator[str]:
        yield from self.held
        yield from self.spans

    def __len__(self) -> int:
        return len(self.held) + len(self.spans)

    def size(self, member: str) -> int:
        data = self.held.get(member)
        return len(data) if data is not None else self.spans[member][1]

    def chunks(self, member: str, chunk: int = 1 << 20) -> Iterator[bytes]:
        """The member's bytes in pieces of at most ``chunk`` (KeyError when it is not there)."""
        data = self.held.get(member)
        if data is not None:
            for pos in range(0, len(data), chunk):
                yield data[pos:pos + chunk]
            return
        start, size = self.spans[member]
        yield from self._inflate(start, size, chunk)

    def _inflate(self, start: int, size: int, chunk: int) -> Iterator[bytes]:
        if self.file is None:
            raise BundleInvalid(f"{self.path.name}: the bundle file is not open to read again")
        got = 0
        try:
            st = os.fstat(self.file.fileno())
            if (st.st_size, st.st_mtime_ns) != self.identity:
                raise BundleInvalid(f"{self.path.name}: the bundle file changed on disk while it was read")
            for piece in inflate_range(self.file.fileno(), self.points, start, size, chunk):
                got += len(piece)
                yield piece
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            raise BundleInvalid(f"{self.path.name}: cannot read the bundle again ({exc})") from None
        if got != size:
            raise BundleInvalid(f"{self.path.name}: the bundle file changed on disk while it was read")

    def read_at(self, member: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of the member from ``offset`` (fewer at its end)."""
        data = self.held.get(member)
        if data is not None:
            return bytes(data[offset:offset + length])
        size = self.spans[member][1]
        end = min(offset + length, size)
        out = []
        pos = offset
        while pos < end:
            base = pos - pos % _BLOCK
            block = self._block(member, base, min(_BLOCK, size - base))
            out.append(block[pos - base:end - base])
            pos = base + len(block)
        return b"".join(out)

    def _block(self, member: str, base: int, length: int) -> bytes:
        key = (member, base)
        block = self._blocks.get(key)
        if block is None:
            block = b"".join(self._inflate(self.spans[member][0] + base, length, length))
            self._blocks[key] = block
            if len(self._blocks) > _BLOCKS:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(key)
        return block
