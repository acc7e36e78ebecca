"""Change-only records for the per-tick sample members: a line is stored as what changed since the
line before it with the same key, and read back byte for byte.

A sampled line repeats most of the line before it for the same GPU or cgroup: the same processes
with the same memory, the same per-process utilisation (only its ``timeStamp`` moves), the same
counters of an idle container (only ``t``, ``tick`` and ``time`` move). The writer stores such a
line as its changes; the reader rebuilds the original bytes, so everything downstream (capture's
fold, the loaders, the evidence quoted from the folded member) sees the member exactly as the
collector wrote it. Nothing is dropped: the codec is lossless by construction (a line is split on
``", "`` and joined again; only whole tokens are replaced), whatever the line holds.

- **Key**: a line's first token (its text up to the first ``", "``): ``{"gpu_index": 3`` for
  ``nvml/samples.jsonl`` (keys sorted), ``{"cgroup": "/kubepods/..."`` for ``cgroup/samples.jsonl``.
  Keys are numbered 0, 1, ... in the order they first appear (both sides count the same way: a
  key's first line is always whole).
- **Encoded line**: a line that does not start with ``[`` is the original line (a key frame: the
  first line of its key, one whose token count is new for its key lately, one whose delta would
  not be smaller, one with a tab in a changed token); ``[]<TAB><line>`` is an original line that
  starts with ``[``; otherwise ``[<key number>,<token count>]`` then, per changed token text,
  ``<TAB><indices, comma-separated><TAB><token>``: the line before it with that key, with ``token``
  put at each of the indices (tokens that changed to the same text, such as the per-process
  ``timeStamp`` of a whole GPU, share one entry). When that line has another token count, the
  base is the key's latest line of ``<token count>`` tokens kept from before (ring version 3, see
  **Kept lines of other token counts**). ``[<key>,<count>]=`` : the same changes as the encoded line before
  it (an idle container's ``t``, ``tick`` and ``time``, the same for every cgroup of a tick). Tabs
  and plain text, not JSON: the record that holds these lines is JSON already, and JSON inside JSON
  would escape every quote twice.
- **Kept lines of other token counts**: a line's token count wavers in steady state: an NVML
  line holds the utilisation samples since the cursor, one a process at most ticks but two after a
  late tick and none (``NotFound``) after an early one; a quiet cgroup's ``idle_full_s`` line holds
  the files its other lines skip. So per key both sides keep, besides the latest line, the latest
  line of each of up to :data:`ALT_KEPT` other token counts (:func:`_keep_alt`, called by both at
  every line of a known key whose count is not its latest line's, whole or not, so what the
  encoder keeps is always among what the decoder keeps), and a line whose count came lately is a
  delta on that one instead of a whole line. A reader older than ring version 3 refuses such a
  line (counted as not rebuilt, never rebuilt wrong: its count is not the latest line's).
- **Decoding cost**: the decoder keeps, per key, the text between the tokens that keep changing,
  so a line is those pieces and the new tokens joined (a few dozen pieces for an NVML line of ~800
  tokens), and a run of ``=`` lines (every idle cgroup of a tick) costs a lookup and a join each.
- **Scope**: one :class:`DeltaEncoder` / :class:`DeltaDecoder` per member per segment: every segment
  decodes alone (its first line of each key is whole), as every segment carries its own state.
- **What the encoder keeps**: each key's previous line (and its kept lines of other counts), for
  the keys seen lately only. A key not
  seen for :attr:`DeltaEncoder.horizon_s` (60 s, or 3 times the longest gap seen between two lines
  of one key, up to 600 s) is forgotten: a gone container's cgroup, on a node where containers
  come and go (at 5 a second, 3000 keys and ~9 MB of lines in a 10-minute segment otherwise). Its
  next line, if one comes, is stored whole under its old key number (the encoder keeps the numbers
  for the segment, so both sides still count keys the same way); the decoder takes a whole line of
  a known key as that key's line, as it does after a changed token count.

Why this module is long: it is one format, both of its sides. The encoder and the decoder must
count keys, keep lines of other token counts (:func:`_keep_alt`, shared) and read ``=`` the same
way, line for line; apart, the two halves of each rule would sit in two modules and could drift.

Records so encoded have ``op`` ``"delta"`` in the segment; :class:`~forensics.ring.reader.RingReader`
hands them out as the ``"append"`` records they were.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import compress, repeat
from operator import eq, itemgetter, ne
from typing import TypeVar

__all__ = ["DELTA_OP", "SEP", "DeltaDecoder", "DeltaEncoder", "DeltaError"]

DELTA_OP = "delta"
SEP = ", "
_MIN_SAVING = 0.8  # a delta is kept only when it is under 80 % of the line
_SAME = "="
_HEAD = 6  # the encoder compares a line's first tokens apart from the rest (see DeltaEncoder)
FORGET_S = 60.0  # the encoder forgets a key not seen for this long (at least: DeltaEncoder.horizon_s)
FORGET_MAX_S = 600.0
_HINT_MIN = 64  # a line of at least this many tokens keeps the text between its changing ones
#: per key, the latest lines of this many other token counts are kept as bases (both sides, the same
#: way: see DeltaEncoder), so a line whose token count goes back to one seen lately is a delta
ALT_KEPT = 3


V = TypeVar("V")


class DeltaError(ValueError):
    """An encoded line that does not fit the lines before it (a torn or foreign segment)."""


def _lines(data: str) -> list[str]:
    return data.split("\n")[:-1] if data.endswith("\n") else data.split("\n")


class DeltaEncoder:
    """Encodes the lines of one member, in order, against the previous line of the same key.

    Cost (the recorder's parent encodes every sampled line): a line is first split at its first
    :data:`_HEAD` separators only; when the rest is the same text as the previous line's rest (an
    idle cgroup: only ``t``, ``tick`` and ``time`` moved) the changes are found among those few
    tokens, and the line is never split whole. Otherwise the whole token lists are compared in C
    (``compress(range(n), map(ne, a, b))``). Either way the encoded line is the same text."""

    def __init__(self, forget_s: float = FORGET_S) -> None:
        # per key seen lately: the previous line's head (split at _HEAD separators), its token
        # count, its tokens (split only when a line's rest changed; None until then), the line,
        # the encoded line's "[key,count]", when it came (encode's now), and for a long line its
        # _Hint (the tokens that changed before, and the text between them), or None
        self._prev: dict[str, tuple[list[str], int, list[str] | None, str, str, float, _Hint | None]] = {}
        self._ids: dict[str, int] = {}  # every key of the segment: its number
        # per key seen lately: its latest line of each of up to ALT_KEPT other token counts, oldest
        # first (_keep_alt: the decoder keeps the same, so a delta may build on one of them)
        self._alt: dict[str, dict[int, str]] = {}
        self._gone: dict[str, float] = {}  # a forgotten key -> when its last line came
        self.forget_s = forget_s
        self._longest_gap = 0.0  # between two lines of one key: the pace of the quietest key
        self._now = 0.0
        self._swept = 0.0
        self._named: dict[tuple[int, ...], str] = {}  # indices -> their text ("3,17,31"), the recurring ones
        # the changes of the encoded line before (the indices that moved and their new tokens):
        # the same again is written "=", without building the text of the changes
        self._last: tuple[tuple[int, ...], tuple[str, ...]] | None = None

    def encode(self, data: str, now: float | None = None) -> str:
        """``data`` (whole lines, each ending in a newline) as encoded lines; ``now``: when they
        were sampled (monotonic seconds; default: the clock now), which decides what is forgotten."""
        self._now = now = time.monotonic() if now is None else now
        if now - self._swept >= self.horizon_s / 4:
            self._swept = now
            self._forget(now - self.horizon_s)
        return "\n".join(map(self._line, _lines(data))) + "\n"

    @property
    def horizon_s(self) -> float:
        """How long the previous line of a key not seen since is kept: :attr:`forget_s`, or 3 times
        the longest gap seen between two lines of one key (a quiet cgroup's ``idle_full_s``, a
        sampler that stalled), at most 600 s, so a key that is still there is not forgotten
        between its lines."""
        return max(self.forget_s, min(3 * self._longest_gap, FORGET_MAX_S))

    @property
    def keys_kept(self) -> int:
        """How many keys' previous lines are kept."""
        return len(self._prev)

    def _forget(self, before: float) -> None:
        prev = self._prev
        for key in [k for k, p in prev.items() if p[5] < before]:
            self._gone[key] = prev.pop(key)[5]
            self._alt.pop(key, None)

    def _gap(self, gap: float) -> None:
        self._longest_gap = max(self._longest_gap, gap)

    def _whole(self, line: str) -> str:
        self._last = None
        return "[]\t" + line if line.startswith("[") else line

    def _line(self, line: str) -> str:
        head = line.split(SEP, _HEAD)
        key = head[0]
        prev = self._prev.get(key)
        now = self._now
        if prev is None:
            n = self._ids.get(key)
            if n is None:
                n = self._ids[key] = len(self._ids)
            else:  # forgotten, and back: whole, under its number
                self._gap(now - self._gone.pop(key, now))
            count = line.count(SEP) + 1 if len(head) > _HEAD else len(head)
            self._prev[key] = (head, count, None, line, f"[{n},{count}]", now, None)
            return self._whole(line)
        p_head, count, p_toks, p_line, code, seen, hint = prev
        if now - seen > self._longest_gap:
            self._gap(now - seen)
        if len(head) > _HEAD and len(p_head) > _HEAD and head[_HEAD] == p_head[_HEAD]:
            # the same rest: only the head's tokens can have changed, and the count is the same
            moved = tuple(compress(range(_HEAD), map(ne, head, p_head)))
            vals = tuple(map(head.__getitem__, moved))
            self._prev[key] = (head, count, None, line, code, now, None)
        elif hint is not None and (p_vals := hint.vals) and (now_vals := hint.match(line)) is not None:
            # only tokens that changed before changed: found without splitting the line
            at = tuple(compress(range(len(now_vals)), map(ne, now_vals, p_vals)))
            moved = tuple(map(hint.ix.__getitem__, at))
            vals = tuple(map(now_vals.__getitem__, at))
            self._prev[key] = (head, count, None, line, code, now, hint)
        else:
            toks = line.split(SEP)
            if len(toks) != count:  # the latest line of this count, if one is kept, is the base
                base = _keep_alt(self._alt, key, count, p_line, len(toks))
                count, hint = len(toks), None
                code = f"[{self._ids[key]},{count}]"
                if base is None:
                    self._prev[key] = (head, count, toks, line, code, now, None)
                    return self._whole(line)
                p_toks = base.split(SEP)
            elif p_toks is None:
                p_toks = p_line.split(SEP)
            moved = tuple(compress(range(count), map(ne, toks, p_toks)))
            vals = tuple(map(toks.__getitem__, moved))
            hint = _Hint.from_changes(toks, moved, hint) if count >= _HINT_MIN else None
            self._prev[key] = (head, count, None if hint else toks, line, code, now, hint)
        changes = (moved, vals)
        if changes == self._last:
            enc = code + _SAME
        else:
            texts = dict.fromkeys(vals)  # the changed texts, in the order they first come
            if "\t" in "".join(texts):
                return self._whole(line)
            if len(texts) * 8 <= len(vals):  # few texts for many tokens (an NVML line's timeStamps)
                named = self._named
                if len(named) > 1024:
                    named.clear()
                parts = []
                for tok in texts:  # each text's indices picked in C, their text made once
                    where = tuple(compress(moved, map(eq, vals, repeat(tok))))
                    text = named.get(where)
                    if text is None:
                        text = named[where] = ",".join(map(str, where))
                    parts.append(f"\t{text}\t{tok}")
                enc = code + "".join(parts)
            else:
                changed: dict[str, list[int]] = {}
                for i, tok in zip(moved, vals, strict=True):
                    group = changed.get(tok)
                    if group is None:
                        changed[tok] = [i]
                    else:
                        group.append(i)
                enc = code + "".join([f"\t{','.join(map(str, g))}\t{tok}" for tok, g in changed.items()])
            self._last = changes
        if len(enc) < _MIN_SAVING * len(line):
            return enc
        return self._whole(line)


def _keep_alt(alts: dict[str, dict[int, V]], key: str, count: int, latest: V, new_count: int) -> V | None:
    """A key's latest line (``latest``, of ``count`` tokens) gives way to one of ``new_count``:
    the one kept of ``new_count``, taken out (None when none is), and ``latest`` kept in its place,
    the oldest kept dropped past :data:`ALT_KEPT`. Encoder and decoder both call this at every
    line of a known key whose token count is not its latest line's, whole or not, so what the
    encoder keeps is always among what the decoder keeps (the same lines, the newest last; the
    decoder may keep more: a key the encoder forgot and saw again)."""
    kept = alts.get(key)
    if kept is None:
        kept = alts[key] = {}
    base = kept.pop(new_count, None)
    kept.pop(count, None)  # (not there: a kept count is never the latest line's)
    kept[count] = latest
    while len(kept) > ALT_KEPT:
        del kept[next(iter(kept))]
    return base


class _Hint:
    """A long line as the tokens at ``ix`` (those that changed in the lines before: an NVML line's
    per-process ``timeStamp``) and the text between them (``chunks``: before the first, between
    two, after the last). The next line of its key, when only those tokens changed again, is
    matched against the chunks instead of being split into its ~800 tokens and compared token by
    token; the changes found are the same. The tokens are taken where they were, counted from the
    line's start up to the one whose length changed last time (the ``t`` of an NVML line: its
    float's digits vary; the timestamps do not) and from the line's end after it, and the line is
    checked whole, all in C (a join and a compare); when that fails, the chunks are looked for one
    by one."""

    __slots__ = ("chunks", "ix", "parts", "pivot", "take", "vals")

    def __init__(self, ix: tuple[int, ...], chunks: list[str], vals: tuple[str, ...]) -> None:
        self.ix, self.chunks = ix, chunks
        self.parts = [""] * (2 * len(ix) + 1)  # the line: chunks and tokens, in turn
        self.parts[0::2] = chunks
        self.pivot = len(ix)  # the token whose length may change: none known yet
        self.vals: tuple[str, ...] = ()
        self._took(vals)

    def _took(self, vals: tuple[str, ...]) -> None:
        """The tokens at ix are ``vals`` now: where to take them next time."""
        if self.vals and len(vals) == len(self.vals):
            self.pivot = next((k for k, (a, b) in enumerate(zip(vals, self.vals, strict=True))
                               if len(a) != len(b)), self.pivot)
        self.vals = vals
        self.parts[1::2] = vals
        size, spans = 0, []
        for chunk, val in zip(self.chunks, vals, strict=False):
            size += len(chunk)
            spans.append((size, size + len(val)))
            size += len(val)
        size += len(self.chunks[-1])
        pivot = self.pivot  # before it from the start, after it from the end, itself from both
        cut = [slice(a, b) if k < pivot else slice(a if k == pivot else a - size, (b - size) or None)
               for k, (a, b) in enumerate(spans)]
        get = itemgetter(*cut)
        self.take: Callable[[str], tuple[str, ...]] = get if len(cut) > 1 else lambda line: (get(line),)

    @classmethod
    def from_changes(cls, toks: list[str], moved: tuple[int, ...], before: _Hint | None) -> _Hint | None:
        """The hint of a line (``toks``) whose tokens at ``moved`` changed, those that changed
        before kept; None when they are a quarter of the line (matching would cost a split)."""
        ix = tuple(sorted(set(moved).union(before.ix))) if before is not None else moved
        if not ix or len(ix) > len(toks) // 4:
            return None
        chunks, at = [], 0
        for i in ix:
            chunks.append((SEP if at else "") + SEP.join(toks[at:i]) + (SEP if at < i else ""))
            at = i + 1
        chunks.append(SEP + SEP.join(toks[at:]) if at < len(toks) else "")
        return cls(ix, chunks, tuple(toks[i] for i in ix))

    def match(self, line: str) -> tuple[str, ...] | None:
        """The tokens at :attr:`ix` of ``line`` when every other token is the one before (the
        chunks are there, in order, and no token found holds a separator), else None (and the
        hint is not to be used again). On a match the hint describes ``line``."""
        vals = self.take(line)
        parts = self.parts
        parts[1::2] = vals
        if "".join(parts) == line and SEP not in "\n".join(vals):  # (a line holds no newline)
            self.vals = vals
            return vals
        chunks, last = self.chunks, len(self.ix) - 1
        find, starts = line.find, line.startswith
        found = []
        pos = 0
        for k in range(last + 1):
            chunk = chunks[k]
            if not starts(chunk, pos):
                return None
            pos += len(chunk)
            end = find(SEP, pos)
            if k == last and not chunks[-1]:  # the line's last token
                if end >= 0:
                    return None
                end = len(line)
            elif end < 0:
                return None
            found.append(line[pos:end])
            pos = end
        tail = chunks[-1]
        if len(line) - pos != len(tail) or not starts(tail, pos):
            return None
        self._took(tuple(found))
        return self.vals


class _Key:
    """One key's line as last rebuilt: its tokens, where the tokens at ``ix`` are ``vals`` (the
    ones that keep changing, kept apart), and the text between those (``chunks``), so a line is
    the chunks and the new values joined, not every token joined again."""

    __slots__ = ("chunks", "count", "ix", "ixset", "parts", "pos", "text", "toks", "vals")

    def __init__(self, text: str) -> None:
        self.text = text  # split into tokens only when a change comes (many whole lines get none)
        self.toks: list[str] = []
        self.count = -1  # counted when a change comes: see counted()
        self.ix: tuple[int, ...] = ()
        self.ixset: frozenset[int] = frozenset()
        self.vals: tuple[str, ...] = ()
        self.chunks: list[str] = []
        self.parts: list[str] = []
        self.pos: dict[int, int] = {}

    def counted(self) -> int:
        if self.count < 0:
            self.count = self.text.count(SEP) + 1
        return self.count

    def line(self, changes: _Changes) -> str:
        """The line after ``changes``."""
        if changes.ix == self.ix and self.chunks:  # the same tokens changed as last time
            vals = changes.vals
        elif self.ixset.issuperset(changes.ix) and self.chunks:
            pos = self.pos
            new = list(self.vals)
            for i, tok in changes.flat.items():
                new[pos[i]] = tok
            vals = tuple(new)
        else:  # other tokens changed: the chunks again, around what changed now and before
            if not self.toks:
                self.toks = self.text.split(SEP)
            toks = self.toks
            for i, tok in zip(self.ix, self.vals, strict=True):
                toks[i] = tok
            for i, tok in changes.flat.items():
                toks[i] = tok
            self.ix = tuple(sorted(self.ixset.union(changes.ix)))
            self.ixset = frozenset(self.ix)
            self.vals = tuple(toks[i] for i in self.ix)
            self.pos = {i: k for k, i in enumerate(self.ix)}
            self.chunks, at = [], 0
            for i in self.ix:  # the text before each changing token, then after the last one
                inner = SEP.join(toks[at:i])
                self.chunks.append((SEP if at else "") + (inner + SEP if at < i else ""))
                at = i + 1
            self.chunks.append(SEP + SEP.join(toks[at:]) if at < len(toks) else "")
            self.parts = [""] * (2 * len(self.ix) + 1)
            self.parts[0::2] = self.chunks
            if not self.ix:
                self.chunks = []
                return SEP.join(toks)
            vals = self.vals
        self.vals = vals
        self.parts[1::2] = vals
        return "".join(self.parts)


class _Changes:
    """The changes of one encoded line: token index -> text, and the indices sorted with their texts."""

    __slots__ = ("flat", "ix", "top", "vals")

    def __init__(self, flat: dict[int, str]) -> None:
        self.flat = flat
        self.ix = tuple(sorted(flat))
        self.vals = tuple(map(flat.__getitem__, self.ix))
        self.top = self.ix[-1] if self.ix else -1  # "same changes" fit only a line with more tokens


class DeltaDecoder:
    """Rebuilds the lines of one member from its encoded lines, in order."""

    def __init__(self) -> None:
        self._state: dict[str, _Key] = {}
        self._keys: list[str] = []
        self._known: set[str] = set()  # the keys numbered (a key's state goes after a bad line; its number stays)
        self._alt: dict[str, dict[int, _Key]] = {}  # per key: its latest line of other token counts (_keep_alt)
        self._last: _Changes | None = None
        self._heads: dict[str, tuple[int, int]] = {}  # "[key,count" -> (key, count)
        self._same: dict[str, tuple[str, int]] = {}  # "[key,count]=" -> (key, count), once decoded
        self._indices: dict[str, tuple[tuple[int, ...], int, int]] = {}  # "1,5,9" -> (indices, min, max)
        self.over_budget = False  # a decode stopped at its budget (its lines from there left out)

    def decode(self, data: str, budget: int | None = None) -> tuple[str, int]:
        """The original lines, and how many encoded lines could not be rebuilt (left out).

        ``budget``: at most that many bytes (characters) are rebuilt; a change-only line rebuilds a
        whole line of its key from a few bytes, so untrusted input (a bundle's segments) inflates
        without limit otherwise. The line that would pass it and every one after are left out
        (counted as not rebuilt) and :attr:`over_budget` is set. None: no limit (the recorder's
        own ring)."""
        out: list[str] = []
        bad = 0
        state, same = self._state, self._same
        lines = _lines(data)
        if self.over_budget:  # its state is not the writer's any more: nothing after is rebuilt
            return "", len(lines)
        size = counted = 0
        for n, line in enumerate(lines):
            if budget is not None and len(out) > counted:
                size += len(out[-1]) + 1
                counted = len(out)
                if size > budget:
                    out.pop()
                    bad += len(lines) - n + 1  # the line that passed it, and the ones not read
                    self.over_budget = True
                    break
            hit = same.get(line)  # "[key,count]=" seen before: the same changes, for a known key
            if hit is not None and self._last is not None and self._last.top < hit[1]:
                st = state.get(hit[0])
                if st is not None and st.count == hit[1]:
                    if self._last.ix == st.ix and st.chunks:  # and the same tokens as its last line
                        st.vals = self._last.vals
                        st.parts[1::2] = st.vals
                        out.append("".join(st.parts))
                    else:
                        out.append(st.line(self._last))
                    continue
            try:
                out.append(self._line(line))
            except DeltaError:
                bad += 1
                self._last = None
        else:
            if budget is not None and len(out) > counted and size + len(out[-1]) + 1 > budget:
                out.pop()
                bad += 1
                self.over_budget = True
        if out:
            out.append("")  # the last newline, without copying the text once more
        return "\n".join(out), bad

    def _literal(self, line: str) -> str:
        key = line.split(SEP, 1)[0]
        if key not in self._known:
            self._known.add(key)
            self._keys.append(key)
        new = _Key(line)
        old = self._state.get(key)
        if old is not None and old.counted() != new.counted():
            _keep_alt(self._alt, key, old.count, old, new.count)
        self._state[key] = new
        self._last = None
        return line

    def _changes(self, body: str, count: int) -> _Changes:
        parts = body.split("\t")
        if parts[0] != "" or len(parts) % 2 != 1:
            raise DeltaError("changes that are not <TAB>indices<TAB>token pairs")
        flat: dict[int, str] = {}
        cache = self._indices
        for k in range(1, len(parts), 2):
            known = cache.get(parts[k])
            if known is None:
                try:
                    indices = tuple(int(i) for i in parts[k].split(","))
                except ValueError:
                    raise DeltaError("a change whose indices are not numbers") from None
                known = (indices, min(indices), max(indices))
                if len(cache) > 4096:
                    cache.clear()
                cache[parts[k]] = known
            if known[1] < 0 or known[2] >= count:
                raise DeltaError("a change at an index outside the line")
            flat.update(dict.fromkeys(known[0], parts[k + 1]))
        return _Changes(flat)

    def _line(self, line: str) -> str:
        if not line.startswith("["):
            return self._literal(line)
        if line.startswith("[]\t"):
            return self._literal(line[3:])
        close = line.find("]")
        if close < 0:
            raise DeltaError("an encoded line without a known [key,count] head")
        head = self._heads.get(line[:close])
        if head is None:
            try:
                key_no, count = (int(x) for x in line[1:close].split(","))
            except ValueError:
                raise DeltaError("an encoded line without a known [key,count] head") from None
            head = self._heads[line[:close]] = (key_no, count)
        try:
            key = self._keys[head[0]]
        except IndexError:
            raise DeltaError("an encoded line without a known [key,count] head") from None
        st = self._state.pop(key, None)  # put back only once this line is rebuilt: after a bad
        try:  # line, later ones of its key are refused, never guessed (its kept lines dropped too)
            return self._rebuild(key, st, head[1], line[close + 1:], line)
        except DeltaError:
            self._alt.pop(key, None)
            raise

    def _rebuild(self, key: str, st: _Key | None, count: int, body: str, line: str) -> str:
        """The line of ``key`` whose changes are ``body``, on the latest line of ``key`` (``st``)
        or, when that has not ``count`` tokens, the one kept of ``count`` tokens."""
        if st is None:
            raise DeltaError(f"a delta for key {key[:80]!r} without the line before it")
        if st.counted() != count:
            kept = self._alt.get(key)
            base = kept.get(count) if kept else None
            if base is None:
                raise DeltaError(f"a delta for key {key[:80]!r} without the line before it")
            _keep_alt(self._alt, key, st.count, st, count)
            st = base
        if body == _SAME:
            if self._last is None:
                raise DeltaError("'same changes' after no change")
            if self._last.top >= count:
                raise DeltaError("'same changes' at an index outside the line")
            changes = self._last
            self._same[line] = (key, count)
        else:
            changes = self._changes(body, count)
        self._last = changes
        self._state[key] = st
        return st.line(changes)
