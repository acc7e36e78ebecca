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
  first line of its key, one whose token count changed, one whose delta would not be smaller, one
  with a tab in a changed token); ``[]<TAB><line>`` is an original line that starts with ``[``;
  otherwise ``[<key number>,<token count>]`` then, per changed token text, ``<TAB><indices,
  comma-separated><TAB><token>``: the line before it with that key, with ``token`` put at each of
  the indices (tokens that changed to the same text, such as the per-process ``timeStamp`` of a
  whole GPU, share one entry). ``[<key>,<count>]=`` : the same changes as the encoded line before
  it (an idle container's ``t``, ``tick`` and ``time``, the same for every cgroup of a tick). Tabs
  and plain text, not JSON: the record that holds these lines is JSON already, and JSON inside JSON
  would escape every quote twice.
- **Scope**: one :class:`DeltaEncoder` / :class:`DeltaDecoder` per member per segment: every segment
  decodes alone (its first line of each key is whole), as every segment carries its own state.

Records so encoded have ``op`` ``"delta"`` in the segment; :class:`~forensics.ring.reader.RingReader`
hands them out as the ``"append"`` records they were.
"""

from __future__ import annotations

__all__ = ["DELTA_OP", "SEP", "DeltaDecoder", "DeltaEncoder", "DeltaError"]

DELTA_OP = "delta"
SEP = ", "
_MIN_SAVING = 0.8  # a delta is kept only when it is under 80 % of the line
_SAME = "="


class DeltaError(ValueError):
    """An encoded line that does not fit the lines before it (a torn or foreign segment)."""


def _lines(data: str) -> list[str]:
    return data.split("\n")[:-1] if data.endswith("\n") else data.split("\n")


class DeltaEncoder:
    """Encodes the lines of one member, in order, against the previous line of the same key."""

    def __init__(self) -> None:
        self._prev: dict[str, list[str]] = {}
        self._ids: dict[str, int] = {}
        self._last_changes: str | None = None

    def encode(self, data: str) -> str:
        """``data`` (whole lines, each ending in a newline) as encoded lines."""
        return "\n".join(self._line(line) for line in _lines(data)) + "\n"

    def _line(self, line: str) -> str:
        toks = line.split(SEP)
        key = toks[0]
        prev = self._prev.get(key)
        self._prev[key] = toks
        if prev is None:
            self._ids[key] = len(self._ids)
        elif len(prev) == len(toks):
            changed: dict[str, list[int]] = {}
            if prev != toks:  # the comparisons in C, then only the tokens that moved in Python
                for i in [i for i, a, b in zip(range(len(toks)), prev, toks, strict=True) if a != b]:
                    changed.setdefault(toks[i], []).append(i)
            if not any("\t" in tok for tok in changed):
                body = "".join(f"\t{','.join(map(str, ix))}\t{tok}" for tok, ix in changed.items())
                head = f"[{self._ids[key]},{len(toks)}]"
                same = body == self._last_changes
                self._last_changes = body
                enc = head + _SAME if same else head + body
                if len(enc) < _MIN_SAVING * len(line):
                    return enc
        self._last_changes = None
        return "[]\t" + line if line.startswith("[") else line


class DeltaDecoder:
    """Rebuilds the lines of one member from its encoded lines, in order."""

    def __init__(self) -> None:
        self._prev: dict[str, list[str]] = {}
        self._keys: list[str] = []
        self._last_changes: list[tuple[list[int], str]] | None = None

    def decode(self, data: str) -> tuple[str, int]:
        """The original lines, and how many encoded lines could not be rebuilt (left out)."""
        out: list[str] = []
        bad = 0
        for line in _lines(data):
            try:
                out.append(self._line(line))
            except DeltaError:
                bad += 1
                self._last_changes = None
        return ("\n".join(out) + "\n" if out else ""), bad

    def _literal(self, line: str) -> str:
        toks = line.split(SEP)
        if toks[0] not in self._prev:
            self._keys.append(toks[0])
        self._prev[toks[0]] = toks
        self._last_changes = None
        return line

    @staticmethod
    def _pairs(body: str, count: int) -> list[tuple[list[int], str]]:
        parts = body.split("\t")
        if parts[0] != "" or len(parts) % 2 != 1:
            raise DeltaError("changes that are not <TAB>indices<TAB>token pairs")
        try:
            pairs = [([int(i) for i in parts[k].split(",")], parts[k + 1]) for k in range(1, len(parts), 2)]
        except ValueError:
            raise DeltaError("a change whose indices are not numbers") from None
        if any(not 0 <= i < count for indices, _ in pairs for i in indices):
            raise DeltaError("a change at an index outside the line")
        return pairs

    def _line(self, line: str) -> str:
        if not line.startswith("["):
            return self._literal(line)
        if line.startswith("[]\t"):
            return self._literal(line[3:])
        close = line.find("]")
        try:
            key_no, count = (int(x) for x in line[1:close].split(","))
            key = self._keys[key_no]
        except (ValueError, IndexError):
            raise DeltaError("an encoded line without a known [key,count] head") from None
        prev = self._prev.pop(key, None)  # put back only once this line is rebuilt: after a bad
        if prev is None or len(prev) != count:  # line, later ones of its key are refused, never guessed
            raise DeltaError(f"a delta for key {key[:80]!r} without the line before it")
        body = line[close + 1:]
        if body == _SAME:
            if self._last_changes is None:
                raise DeltaError("'same changes' after no change")
            pairs = self._last_changes
        else:
            pairs = self._pairs(body, count)
        toks = prev  # popped above: changed in place, put back below
        for indices, tok in pairs:
            for i in indices:
                toks[i] = tok
        self._last_changes = pairs
        self._prev[key] = toks
        return SEP.join(toks)
