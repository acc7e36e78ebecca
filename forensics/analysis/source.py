"""Evidence-aware access to one opened bundle.

Wraps the reader's ``Bundle`` (forensics.bundle.reader) so that loaders read members tolerantly
(a missing or malformed member becomes a limitation, never an exception) and can cite what they
read: JSON pointer or line number plus a short verbatim excerpt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from forensics.analysis.excerpt import JsonText, cut, quote
from forensics.analysis.findings import (
    Evidence,
    EvidenceRef,
    LineRef,
    LineTable,
    shorten,
)
from forensics.bundle.verify import Integrity

__all__ = ["BundleLike", "Source", "json_pointer", "loads", "resolve_pointer"]

loads: Callable[[bytes | str], Any]
try:  # orjson parses JSON lines 3-5x faster; the standard library is the fallback
    import orjson

    loads = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    loads = json.loads


class BundleLike(Protocol):
    """What the analyzer needs of forensics.bundle.reader.Bundle."""

    @property
    def manifest(self) -> dict[str, Any]: ...

    def read_bytes(self, member: str) -> bytes: ...


def json_pointer(*parts: str | int) -> str:
    """RFC 6901 pointer from path parts: ``json_pointer("HostConfig", "DeviceRequests")``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """Value at a JSON pointer, or None when the path does not exist."""
    if pointer == "":
        return doc
    cur = doc
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict):
            if part not in cur:
                return None
            cur = cur[part]
        elif isinstance(cur, list):
            if not (part.isascii() and part.isdigit()) or int(part) >= len(cur):
                return None
            cur = cur[int(part)]
        else:
            return None
    return cur


def _lines(text: str) -> list[str]:
    """``text`` split at ``\n`` (no empty last line after a final one; a ``\r`` before it dropped)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [line.removesuffix("\r") for line in lines]
    return lines


class Source:
    """One bundle, opened: member listing, tolerant reads, evidence constructors, problems seen."""

    def __init__(self, bundle: BundleLike, name: str, members: Iterable[str]) -> None:
        self.bundle = bundle
        self.name = name
        self.members: frozenset[str] = frozenset(members)
        self.problems: list[str] = []
        #: the bundle's integrity check, when it was run (analyze): what it states (the ring
        #: segments' faults, forensics.bundle.verify.segment_faults) a reader does not state again
        self.integrity: Integrity | None = None
        self._json_cache: dict[str, Any] = {}
        self._text_cache: dict[str, list[str] | None] = {}
        self._json_texts: dict[str, JsonText | None] = {}
        self._cur: tuple[str, int] = ("", -1)  # member and byte offset of the JSON line being read
        self._tables: dict[str, LineTable] = {}  # what the references to a member's lines share
        self._whole_lines: dict[str, type[LineRef]] = {}  # member -> the class of references to its lines

    # -- listing -------------------------------------------------------------------------------
    def has(self, member: str) -> bool:
        return member in self.members

    def under(self, prefix: str) -> list[str]:
        """Members whose path starts with ``prefix`` (sorted)."""
        return sorted(m for m in self.members if m.startswith(prefix))

    @property
    def manifest(self) -> dict[str, Any]:
        m = self.bundle.manifest
        return m if isinstance(m, dict) else {}

    # -- reads ---------------------------------------------------------------------------------
    def text_lines(self, member: str, cache: bool = True) -> list[str] | None:
        """The member's lines (UTF-8, undecodable bytes replaced), or None when absent/unreadable.
        Lines end at ``\n`` alone (a ``\r`` before it is dropped), as ``line N`` counts them
        everywhere (the ring view's origins, ``sed -n Np``): not at the other breaks
        ``str.splitlines`` knows (U+2028, ``\x1c``, ``\x85``...), which hostile text can hold.

        ``cache=False`` for big members read once (the kernel log): the lines are not kept.
        """
        if member in self._text_cache:
            return self._text_cache[member]
        lines: list[str] | None = None
        if member in self.members:
            try:
                data = self.bundle.read_bytes(member)
                lines = _lines(data.decode("utf-8", errors="replace"))
            except Exception as exc:  # the reader's BundleError or I/O: keep going, note it
                self.problems.append(f"{self.name}: cannot read {member}: {exc}")
        if cache:
            self._text_cache[member] = lines
        return lines

    def json(self, member: str) -> Any:
        """The parsed JSON member, or None when absent or malformed (malformed is noted)."""
        if member in self._json_cache:
            return self._json_cache[member]
        value: Any = None
        if member in self.members:
            try:
                value = loads(self.bundle.read_bytes(member))
            except (ValueError, RecursionError) as exc:
                self.problems.append(f"{self.name}: {member} is not valid JSON: {exc}")
            except Exception as exc:
                self.problems.append(f"{self.name}: cannot read {member}: {exc}")
        self._json_cache[member] = value
        return value

    def jsonl(self, member: str, containing: bytes | None = None) -> Iterator[tuple[int, dict[str, Any], bytes]]:
        """(1-based line number, object, raw line bytes) for every JSON object line; bad lines are noted.

        ``containing``: only the lines holding these bytes are parsed and given (a second pass over
        a big member looking for a rare value, as the collector writes it: a key or string value
        without escapes); the others are skipped unparsed (line numbers still count them)."""
        if member not in self.members:
            return
        chunked = getattr(self.bundle, "read_chunks", None)
        try:
            pieces: Iterable[bytes] = chunked(member) if chunked is not None else (self.bundle.read_bytes(member),)
            bad = [0]
            yield from self._jsonl_lines(member, pieces, containing, bad)
        except Exception as exc:  # the reader's BundleError or I/O: what was read stands, the rest is noted
            self.problems.append(f"{self.name}: cannot read {member}: {exc}")
            return
        if bad[0]:
            self.problems.append(f"{self.name}: {member}: {bad[0]} malformed line(s) skipped")

    def _jsonl_lines(self, member: str, pieces: Iterable[bytes], containing: bytes | None,
                     bad: list[int]) -> Iterator[tuple[int, dict[str, Any], bytes]]:
        """The object lines of the member's bytes, given in pieces (a line may span two)."""
        no = 0
        base = 0  # the member offset of ``data[0]``
        rest = b""
        it = iter(pieces)
        while True:
            piece = next(it, None)
            last = piece is None
            data = rest + piece if rest and piece is not None else (rest if last else piece)
            assert data is not None
            size = len(data)
            end = size if last else data.rfind(b"\n") + 1  # lines ending in this piece
            pos = 0
            while pos < end:
                nl = data.find(b"\n", pos, end)
                if nl < 0:
                    nl = end
                line = data[pos:nl]
                no += 1
                self._cur = (member, base + pos)
                pos = nl + 1
                if not line or line.isspace() or (containing is not None and containing not in line):
                    continue
                try:
                    obj = loads(line)
                except (ValueError, RecursionError):
                    bad[0] += 1
                    continue
                if isinstance(obj, dict):
                    yield no, obj, line
                else:
                    bad[0] += 1
            if last:
                return
            rest = data[end:]
            base += end

    # -- evidence ------------------------------------------------------------------------------
    def json_text(self, member: str) -> JsonText | None:
        """The member's text, for locating the spans of its JSON values (None when unreadable or
        not valid UTF-8: a span of repaired text would not be the member's own)."""
        if member not in self._json_texts:
            text: JsonText | None = None
            if member in self.members:
                try:
                    text = JsonText(self.bundle.read_bytes(member).decode("utf-8"))
                except Exception:  # the reader's BundleError, I/O, or not UTF-8
                    text = None
            self._json_texts[member] = text
        return self._json_texts[member]

    def ev_pointer(self, member: str, pointer: str, doc: Any = None) -> Evidence:
        """Evidence quoting the JSON value at ``pointer`` in ``member``: the exact text of that value
        in the member (a string without its quotes); re-serialised, and said to be, only when the
        member's text cannot be read."""
        text = self.json_text(member)
        span = text.pointer_span(pointer) if text is not None else None
        if text is not None and span is not None:
            return Evidence(self.name, member, pointer, quote(text.text, [span]))
        if doc is None:
            doc = self.json(member)
        value = resolve_pointer(doc, pointer)
        excerpt = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return Evidence(self.name, member, pointer, shorten(excerpt), True)

    def ev_line(self, member: str, line_no: int, raw: str | bytes | None = None) -> Evidence:
        """Evidence quoting line ``line_no`` (1-based) of ``member``: the line's own text (cut at
        the excerpt limit); said to be normalised when it was not valid UTF-8."""
        repaired = False
        if isinstance(raw, bytes | bytearray):
            head = bytes(raw[:1024])
            try:
                raw = head.decode("utf-8")
            except UnicodeDecodeError as exc:
                # a cut through a multi-byte character at the end is not damage
                raw = head.decode("utf-8", "replace")
                repaired = exc.start < 1020
        if raw is None:
            lines = self.text_lines(member) or []
            raw = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
            repaired = "\ufffd" in raw
        return Evidence(self.name, member, f"line {line_no}", cut(raw), repaired)

    def ref(self, member: str, line: int, payload: Any, *paths: tuple[str | int, ...],
            pointer: str = "") -> EvidenceRef | LineRef:
        """A lazy evidence reference (quoted only if a finding cites it): ``line`` 0 uses ``pointer``.

        A raw line (bytes) of the JSON-lines member being read is not kept: the reference holds its
        byte offset and reads it again from the bundle if it is ever quoted: it is a :class:`LineRef`
        (the line number; its offset in the member's table), one made per line of every sampled member.
        """
        cur = self._cur
        if cur[0] == member and isinstance(payload, bytes | bytearray):
            if pointer:
                return EvidenceRef(self.name, member, line, None, paths, pointer, self, cur[1])
            cls = self._whole_lines.get(member) if not paths else None
            if cls is None:
                table = self._tables.get(member)
                if table is None:
                    table = self._tables[member] = LineTable(self.name, member, self)
                cls = table.ref_class(paths)
                if not paths:
                    self._whole_lines[member] = cls
            offsets = cls.table.offsets
            if line == len(offsets):  # (inline for the usual case: the next line)
                offsets.append(cur[1])
            else:
                cls.table.at(line, cur[1])
            return cls(line)
        return EvidenceRef(self.name, member, line, payload, paths, pointer, self)

    def line_at(self, member: str, offset: int) -> bytes:
        """The line of ``member`` starting at byte ``offset`` (of a big member, read again from
        there: the bundle reader's ``read_at``, not the whole member)."""
        read_at = getattr(self.bundle, "read_at", None)
        try:
            if read_at is None:
                data = self.bundle.read_bytes(member)
                end = data.find(b"\n", offset)
                return bytes(data[offset: end if end >= 0 else len(data)])
            parts: list[bytes] = []
            want = 4096
            while True:
                got = read_at(member, offset, want)
                end = got.find(b"\n")
                if end >= 0:
                    parts.append(got[:end])
                    return b"".join(parts)
                parts.append(got)
                if len(got) < want:  # the member's end
                    return b"".join(parts)
                offset += len(got)
                want = min(want * 4, 1 << 20)
        except Exception:
            return b""

    def ev_text(self, member: str, locator: str, excerpt: str) -> Evidence:
        """Evidence whose excerpt the caller located in ``member`` itself (an ``entry N`` of a
        NUL-separated member): built here so a view over other members names the real one."""
        return Evidence(self.name, member, locator, excerpt)

    def ev_member(self, member: str, excerpt: str) -> Evidence:
        """Evidence about the whole member: ``excerpt`` describes what was examined (normalised)."""
        return Evidence(self.name, member, "", shorten(excerpt), True)
