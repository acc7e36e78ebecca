"""Verbatim excerpts: the member's own text for a JSON value, a JSON line's values or a text line.

An excerpt quotes the bundle, so it must be found in the member as it is (an investigator greps
the bundle for it). :class:`JsonText` locates the exact text span of a value by its path without
re-serialising anything: it scans the member's text (a span-preserving walk, not a parse), skipping
siblings, and remembers where each value it passed begins, so quoting many values of one large
member (``kubernetes/pods.json``) scans it about once.

:func:`quote` turns spans into one excerpt: neighbouring spans are quoted as the one run of text
that holds them; distant ones are joined by ``" ... "`` (an omission, like the ``...`` that cuts a
long excerpt); a string value is quoted without its quotes (its escapes as written).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["EXCERPT_MAX_CHARS", "OMISSION", "JsonText", "cut", "quote"]

EXCERPT_MAX_CHARS = 240
OMISSION = " ... "
_GAP_MAX = 80  # spans closer than this are quoted as one run of text

_WS = re.compile(r"[ \t\r\n]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_SCALAR = re.compile(r"[^,\]\}\s]+")
_STRUCT = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]\{\}]', re.S)

Path = Sequence[str | int]
Span = tuple[int, int]


class JsonText:
    """The text of one JSON document (or one JSON line), for finding the spans of its values."""

    __slots__ = ("_resume", "_starts", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        start = self._ws(0)
        # path -> (start of its "key": or element, start of its value), for every value passed
        self._starts: dict[tuple[str | int, ...], tuple[int, int]] = {(): (start, start)}
        # parent path -> (where the scan of its children stopped, that child's index): the next
        # look-up of a child not passed yet goes on from there (quoting result 1000 of a long array
        # after result 999 does not walk the first 999 again)
        self._resume: dict[tuple[str | int, ...], tuple[int, int]] = {}

    def _ws(self, pos: int) -> int:
        m = _WS.match(self.text, pos)
        return m.end() if m else pos

    def _end(self, pos: int) -> int:
        """The end of the value starting at ``pos`` (``pos`` past leading whitespace)."""
        text = self.text
        if pos >= len(text):
            raise ValueError("unexpected end of JSON text")
        ch = text[pos]
        if ch == '"':
            m = _STRING.match(text, pos)
            if not m:
                raise ValueError("unterminated string")
            return m.end()
        if ch in "[{":
            depth = 0
            for m in _STRUCT.finditer(text, pos):
                tok = m.group()
                if tok in "[{":
                    depth += 1
                elif tok in "]}":
                    depth -= 1
                    if depth == 0:
                        return m.end()
            raise ValueError("unterminated array or object")
        m = _SCALAR.match(text, pos)
        if not m:
            raise ValueError(f"no JSON value at offset {pos}")
        return m.end()

    def _child(self, parent: tuple[str | int, ...], key: str | int) -> tuple[int, int] | None:
        """(start of the member's key, or of the element; start of its value) of ``parent[key]``."""
        import json

        text = self.text
        pos = self._starts[parent][1]
        if pos >= len(text) or text[pos] not in "[{":
            return None
        is_obj = text[pos] == "{"
        if is_obj != isinstance(key, str):
            return None
        resume = self._resume.get(parent)
        pos, index = resume if resume is not None else (self._ws(pos + 1), 0)
        while pos < len(text) and text[pos] not in "]}":
            lead = pos
            if is_obj:
                m = _STRING.match(text, pos)
                if not m:
                    return None
                name = json.loads(m.group())
                pos = self._ws(m.end())
                if pos >= len(text) or text[pos] != ":":
                    return None
                pos = self._ws(pos + 1)
                here: str | int = name
            else:
                here = index
            self._starts.setdefault((*parent, here), (lead, pos))
            if here == key:
                self._resume[parent] = (lead, index)
                return lead, pos
            pos = self._ws(self._end(pos))
            if pos < len(text) and text[pos] == ",":
                pos = self._ws(pos + 1)
            index += 1
        self._resume[parent] = (pos, index)
        return None

    def span(self, path: Path, *, with_key: bool = False) -> Span | None:
        """The text span of the value at ``path`` (keys and list indexes), or None when absent;
        ``with_key``: from the start of its ``"key":`` when the last step is an object key."""
        try:
            cur: tuple[str | int, ...] = ()
            for key in path:
                nxt = (*cur, key)
                if nxt not in self._starts and self._child(cur, key) is None:
                    return None
                cur = nxt
            lead, start = self._starts[cur]
            end = self._end(start)
        except (ValueError, IndexError):
            return None
        if with_key and path and isinstance(path[-1], str):
            return lead, end
        return start, end

    def pointer_span(self, pointer: str) -> Span | None:
        """The span of the value at an RFC 6901 JSON pointer."""
        return self.span(pointer_path(pointer, self))


def pointer_path(pointer: str, doc: JsonText | None = None) -> list[str | int]:
    """The keys and indexes of a JSON pointer (numeric parts index arrays where ``doc`` has one)."""
    if not pointer:
        return []
    out: list[str | int] = []
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if part.isascii() and part.isdigit() and doc is not None:
            prefix = tuple(out)
            if prefix not in doc._starts:
                doc.span(out)
            start = doc._starts[prefix][1] if prefix in doc._starts else None
            if start is not None and start < len(doc.text) and doc.text[start] == "[":
                out.append(int(part))
                continue
        out.append(part)
    return out


def _unquoted(text: str, span: Span) -> Span:
    a, b = span
    if b - a >= 2 and text[a] == '"' and text[b - 1] == '"':
        return a + 1, b - 1
    return span


def cut(text: str, limit: int = EXCERPT_MAX_CHARS) -> str:
    """``text`` as it is when it fits in ``limit`` characters, else its start cut with ``...``."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quote(text: str, spans: Sequence[Span], *, unquote_single: bool = True) -> str:
    """One verbatim excerpt of ``text`` holding ``spans`` (in text order): close spans as one run,
    distant ones joined by ``" ... "``; a lone string value without its quotes."""
    if not spans:
        return ""
    ordered = sorted(spans)
    if len(ordered) == 1 and unquote_single:
        a, b = _unquoted(text, ordered[0])
        return cut(text[a:b])
    runs: list[list[int]] = []
    for a, b in ordered:
        if runs and a - runs[-1][1] <= _GAP_MAX and b - runs[-1][0] <= EXCERPT_MAX_CHARS:
            runs[-1][1] = max(runs[-1][1], b)
        else:
            runs.append([a, b])
    return cut(OMISSION.join(text[a:b] for a, b in runs))
