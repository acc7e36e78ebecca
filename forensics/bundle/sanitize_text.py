"""The byte-level replacement of ``gpuforensics sanitize``: names and addresses in any member's
bytes, one regular-expression pass per member, nothing else touched.

What makes a replacement safe for the evidence:

- **Line structure kept**: a pseudonym holds no newline, so every ``line N`` locator of an analysis
  of the copy points at the same line; JSON stays valid JSON (a name is replaced inside a string,
  and pseudonyms hold no character JSON escapes), JSON-lines stay one object a line, NUL-separated
  members (``proc/<pid>/environ``) keep their entries.
- **Whole words only**: a name is replaced where it stands alone, bounded by anything but a letter,
  a digit or a hyphen (``ml/trainer-0``, ``"trainer"``, ``trainer.py``, ``ns_ml_x``; not the ``ml``
  of ``libnvidia-ml.so`` nor the ``trainer`` of ``trainer-ckpt``); after a JSON escape (``\\n``,
  ``\\t``, ``\\r``, ``\\u003e`` as Go writes ``>``) too; a hyphen that ends a word ends a name
  (``generateName: trainer-``), and a bundle's own name is read as ``gpuforensics-<host>-<time>``.
  Host and domain names match in any case (DNS does), other names exactly.
- **Field names kept**: a name that is also a field name of the evidence's JSON (a container
  called ``server``) is not replaced where it stands as a JSON key.
- **Join keys kept**: UUIDs (GPU, MIG, pod and boot ids; a systemd cgroup's ``pod<uid with _>``), PCI bus ids, hex ids of 12 characters or
  more (container and image ids, SHA-256) and ``sha256:`` digests are skipped as a whole before any
  name or address is looked for in them.
- **Addresses by shape**: IPv4 (not loopback, unspecified, link-local, multicast, broadcast or a
  netmask), IPv6 (validated; not loopback or unspecified) and MAC addresses of 6, 8 or 20 octets
  (not all-zero or broadcast) are found wherever they stand and each gets its own pseudonym.

Linear time: one compiled pattern per run; the names are one alternation built as a trie (a prefix
shared by many names is tried once), so the cost per byte does not grow with the number of names.
In a member over 16 KiB the full pattern runs only around hints (a name, ``.d.d.``, ``:h:h:``,
``::``: patterns the engine finds at C speed), as every match holds one.
"""

from __future__ import annotations

import bisect
import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Iterator

from forensics.bundle.pseudonyms import PseudonymMap

__all__ = ["Replacer", "find_addresses", "trie_pattern"]

# before a name: not a letter, digit or hyphen, or a JSON escape (\n, \t, \r) right before it
# (a bundle's name: gpuforensics-<host>-<time>)
_NAME_LEFT = rb"(?:(?<![A-Za-z0-9-])|(?<=\\[ntr])|(?<=\\u[0-9a-fA-F]{4})|(?<=gpuforensics-))"
# after a name: not a letter, digit or hyphen; or a hyphen that ends the word (generateName
# "trainer-"), or a bundle name's time (gpuforensics-gpu-07-20261129T140500Z)
_NAME_RIGHT = rb"(?:(?![A-Za-z0-9-])|(?=-(?![A-Za-z0-9]))|(?=-[0-9]{8}[Tt][0-9]{6}[Zz]))"
_PROTECTED = (
    rb"(?<![0-9A-Za-z])(?:"
    rb"(?:GPU-|MIG-|pod)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # UUIDs
    rb"|pod[0-9a-fA-F]{8}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{4}_[0-9a-fA-F]{12}"  # a systemd cgroup's pod
    rb"|[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"  # PCI bus ids
    rb"|sha256:[0-9a-fA-F]{12,}"
    rb"|[0-9a-fA-F]{12,}"  # container, image, machine ids and hashes
    rb")(?![0-9A-Za-z])"
)
_PROTECTED_RE = re.compile(_PROTECTED)
_HEXISH = re.compile(rb"[0-9A-Fa-f-]+")
_MAC = (rb"(?:(?<![0-9A-Fa-f:.-])|(?<=\\[ntr]))"
        rb"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}(?:(?::[0-9A-Fa-f]{2}){14}|(?::[0-9A-Fa-f]{2}){2})?"
        rb"(?![0-9A-Fa-f:])")
_IPV6 = (rb"(?:(?<![0-9A-Za-z_:.])|(?<=\\[ntr]))"
         rb"(?:[0-9A-Fa-f]{1,4}|(?=::))(?::[0-9A-Fa-f]{0,4}){2,7}"
         rb"(?![0-9A-Za-z_:])")
# not right after a digit or a dot, but right after a \uXXXX escape (never inside one)
_IPV4 = (rb"(?:(?<![0-9.])|(?<=\\u[0-9a-fA-F]{4}))(?<!\\u[0-9a-fA-F]{3})(?<!\\u[0-9a-fA-F]{2})(?<!\\u[0-9a-fA-F])"
         rb"(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9])(?!\.[0-9])")
_HOME = rb"(?<![A-Za-z0-9_.-])/home/([a-z_][a-z0-9_.-]{0,31})(?![A-Za-z0-9_-])"


def trie_pattern(words: Iterable[bytes]) -> bytes:
    """One regular expression matching exactly ``words``, longest first at each branch (a trie, so
    the work at each position is one walk down shared prefixes, whatever the number of words)."""
    trie: dict[int, object] = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})  # type: ignore[assignment]
        node[-1] = {}

    def build(node: dict[int, object]) -> bytes:
        end = -1 in node
        branches = [re.escape(bytes([b])) + build(child)  # type: ignore[arg-type]
                    for b, child in sorted(node.items()) if b != -1]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        return b"(?:" + body + b")?" if end else body

    return build(trie)


def _address_category(text: str) -> str | None:
    """``ipv4``/``ipv6``/``mac`` for an address worth a pseudonym, None for one kept as it is
    (loopback, unspecified, link-local IPv4, multicast, broadcast, netmasks, all-zero MACs) or for
    text that is not an address."""
    if text.count(":") in (5, 7, 19) and "::" not in text and all(len(p) == 2 for p in text.split(":")):
        octets = bytes.fromhex(text.replace(":", ""))
        return None if octets.strip(b"\x00") == b"" or octets.strip(b"\xff") == b"" else "mac"
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if addr.version == 4:
        if text.startswith(("255.", "0.")) or addr.is_loopback or addr.is_link_local or addr.is_multicast \
                or addr.is_unspecified:
            return None
        return "ipv4"
    if text.count(":") < 2 or addr.is_loopback or addr.is_unspecified or addr.is_multicast:
        return None
    if "::" in text and (sum(1 for p in text.split(":") if p) < 2 or sum(len(p) for p in text.split(":")) < 4):
        return None  # "d::", "a::b": a C++ scope more likely than an address
    return "ipv6"


_SCAN = re.compile(b"(" + _PROTECTED + b")|(" + _MAC + b")|(" + _IPV6 + b")|(" + _IPV4 + b")|" + _HOME)
# Hints: patterns that start with a literal (the regular-expression engine skips to it at C speed)
# and that every address holds: IPv4 ".d.d.", MAC and IPv6 ":h:h:" or "::". The full patterns run
# only around them (:func:`_windows`): most of a bundle's bytes (samples of counters) hold none.
_ADDRESS_HINT = re.compile(rb"\.[0-9]{1,3}\.[0-9]{1,3}\.|::|:[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:")
_HOME_HINT = re.compile(rb"/home/")
_SEPARATOR = re.compile(rb"[\n \t\",]")
_WINDOW = 512  # bytes either side of a hint: more than any name, address or id the patterns match
_SMALL = 16 << 10  # a member this small is scanned whole
_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_ESCAPES = frozenset({b"\\n", b"\\t", b"\\r"})
_UNICODE_ESCAPE = re.compile(rb"\\u[0-9a-fA-F]{4}")


def _windows(data: bytes, hints: Iterable[re.Pattern[bytes]], extra: Iterable[int] = ()) -> list[tuple[int, int]]:
    """Spans of ``data`` to scan with the full patterns: around every hint, widened to a separator
    (newline, space, tab, quote, comma: none is inside a name, an address or an id, so no match is
    cut by a window's edge), merged."""
    points = sorted({m.start() for h in hints for m in h.finditer(data)} | set(extra))
    spans: list[tuple[int, int]] = []
    for p in points:
        end_sep = _SEPARATOR.search(data, min(len(data), p + _WINDOW))
        end = end_sep.start() if end_sep else len(data)
        if spans and p <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            continue
        lo = max(0, p - _WINDOW)
        sep = _SEPARATOR.search(data, lo, p) if lo else None
        spans.append((sep.start() if sep else lo, end))
    return spans


def find_addresses(data: bytes) -> Iterator[tuple[str, str]]:
    """``(category, text)`` of every address and ``/home/<user>`` in ``data``: ``ipv4``, ``ipv6``,
    ``mac`` (lower case) and ``user``."""
    if len(data) <= _SMALL:
        spans = [(0, len(data))] if _ADDRESS_HINT.search(data) or _HOME_HINT.search(data) else []
    else:
        spans = _windows(data, (_ADDRESS_HINT, _HOME_HINT))
    for m in (m for start, end in spans for m in _SCAN.finditer(data, start, end)):
        if m.lastindex == 1:
            continue
        if m.lastindex == 5:
            yield "user", m.group(5).decode("ascii")
            continue
        text = m.group(0).decode("ascii")
        category = _address_category(text)
        if category is not None:
            yield category, text.lower() if category == "mac" else text


def _is_json_key(data: bytes, start: int, end: int) -> bool:
    """``data[start:end]`` is a whole JSON object key: ``"<it>":`` (spaces allowed before the colon)."""
    return start > 0 and data[start - 1:start] == b'"' and data[end:end + 1] == b'"' \
        and data[end + 1:end + 17].lstrip()[:1] == b":"


class Replacer:
    """Replaces every name and address of ``pmap`` in bytes, counting replacements per category.

    ``names``: the originals to replace by name (the map's categories but the addresses); addresses
    are found by shape and replaced when the map has them (the discovery pass put them there)."""

    def __init__(self, pmap: PseudonymMap, names: dict[str, str], field_names: Iterable[str] = ()) -> None:
        self.pmap = pmap
        #: names that are field names of the evidence's JSON: kept where they stand as a JSON key
        self._fields = {f.encode() for f in field_names if f in names}
        self.counts: Counter[str] = Counter()
        #: category -> the pseudonyms written (distinct names replaced)
        self.used: dict[str, set[bytes]] = {}
        # original (exact, or lower-cased for DNS names) -> (pseudonym, category)
        self._exact: dict[bytes, tuple[bytes, str]] = {}
        self._folded: dict[bytes, tuple[bytes, str]] = {}
        for original, category in names.items():
            pseudonym = pmap.get(category, original).encode()
            key = original.encode()
            if category in ("hostname", "domain"):
                self._folded[key.lower()] = (pseudonym, category)
            else:
                self._exact[key] = (pseudonym, category)
        # every name in one trie, in any case, so the longest wins (``trainer.corp.net`` the host,
        # not ``trainer`` the container); a hit whose case does not fit its name is left as it is
        lowered = trie_pattern(sorted({k.lower() for k in (*self._exact, *self._folded)}, key=len, reverse=True))
        alternatives = [b"(" + _PROTECTED + b")",
                        b"(" + _NAME_LEFT + b"(?i:" + lowered + b")" + _NAME_RIGHT + b")" if lowered else b"((?!))",
                        b"(" + _MAC + b")", b"(" + _IPV6 + b")", b"(" + _IPV4 + b")"]
        self._pattern = re.compile(b"|".join(alternatives))
        self._address_pattern = re.compile(b"(" + _PROTECTED + b")|(" + _MAC + b")|(" + _IPV6 + b")|(" + _IPV4 + b")")
        names_lower = sorted({k.lower() for k in (*self._exact, *self._folded)}, key=len, reverse=True)
        # literal first (found at C speed), its right edge checked in the pattern, its left in Python
        self._name_hint = re.compile(b"(?:" + trie_pattern(names_lower) + b")" + _NAME_RIGHT) if names_lower else None
        self._addresses: dict[bytes, tuple[bytes, str] | None] = {}

    def _address(self, text: bytes) -> tuple[bytes, str] | None:
        if text in self._addresses:
            return self._addresses[text]
        s = text.decode("ascii")
        category = _address_category(s)
        found = None
        if category is not None:
            original = s.lower() if category == "mac" else s
            pseudonym = self.pmap.names[category].get(original)
            found = ((pseudonym or self.pmap.get(category, original)).encode(), category)
        self._addresses[text] = found
        return found

    def _sub(self, m: re.Match[bytes]) -> bytes:
        group = m.lastindex
        text = m.group(0)
        if group == 1:
            return text
        if group == 2:
            hit = self._exact.get(text) or self._folded.get(text.lower())
            if hit is None or text in self._fields and _is_json_key(m.string, m.start(), m.end()):
                return text
            pseudonym, category = hit
        else:
            found = self._address(text)
            if found is None:
                return text
            pseudonym, category = found
        return self._count(pseudonym, category)

    def apply(self, data: bytes) -> bytes:
        """``data`` with every name and address replaced (the same bytes when nothing was).

        A member over 16 KiB: addresses are looked for around their hints only (:func:`_windows`),
        and names where the trie of their lower-cased forms finds them (at C speed), each checked
        as the whole pattern would (left edge, case, inside a join key, a field name as a key); the
        result is the same as the whole pattern's (tests/unit/bundle/test_sanitize_text.py)."""
        if len(data) <= _SMALL:
            hinted = _ADDRESS_HINT.search(data) or self._name_hint is not None and self._name_hint.search(data.lower())
            return self._pattern.sub(self._sub, data) if hinted else data
        edits: list[tuple[int, int, bytes]] = []
        taken: list[tuple[int, int]] = []  # addresses and join keys met around the address hints
        for start, end in _windows(data, (_ADDRESS_HINT,)):
            for m in self._address_pattern.finditer(data, start, end):
                taken.append(m.span())
                found = self._address(m.group(0)) if m.lastindex != 1 else None  # 1: a join key
                if found is not None:
                    edits.append((m.start(), m.end(), self._count(*found)))
        if self._name_hint is not None:
            self._names(data, edits, taken)
        if not edits:
            return data
        edits.sort()
        out: list[bytes] = []
        last = 0
        for start, end, new in edits:
            out += (data[last:start], new)
            last = end
        out.append(data[last:])
        return b"".join(out)

    def _names(self, data: bytes, edits: list[tuple[int, int, bytes]], taken: list[tuple[int, int]]) -> None:
        assert self._name_hint is not None
        lowered = bytes(data).lower()
        starts = [s for s, _ in taken]
        pos = 0
        while (m := self._name_hint.search(lowered, pos)) is not None:
            p, e = m.span()
            pos = p + 1  # a hit refused below may hide a name that starts inside it (after a dot)
            if p and data[p - 1] in _WORD and bytes(data[p - 2:p]) not in _ESCAPES \
                    and not _UNICODE_ESCAPE.fullmatch(data, max(0, p - 6), p) \
                    and bytes(data[max(0, p - 13):p]) != b"gpuforensics-":
                continue
            text = bytes(data[p:e])
            hit = self._exact.get(text) or self._folded.get(m.group(0))
            if hit is None:
                pos = e  # its case fits no name: left as it is, as the whole pattern leaves it
                continue
            i = bisect.bisect_right(starts, p) - 1
            if i >= 0 and taken[i][1] > p:
                pos = max(pos, taken[i][1])
                continue  # inside an address or a join key
            if _HEXISH.fullmatch(text) and self._in_join_key(data, p, e):
                continue
            if text in self._fields and _is_json_key(data, p, e):
                pos = e
                continue
            edits.append((p, e, self._count(*hit)))
            pos = e

    @staticmethod
    def _in_join_key(data: bytes, start: int, end: int) -> bool:
        lo = max(0, start - 80)
        return any(m.start() <= start and end <= m.end() for m in _PROTECTED_RE.finditer(data, lo, min(len(data), end + 80)))

    def _count(self, pseudonym: bytes, category: str) -> bytes:
        self.counts[category] += 1
        self.used.setdefault(category, set()).add(pseudonym)
        return pseudonym

    def text(self, s: str) -> str:
        return self.apply(s.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")
