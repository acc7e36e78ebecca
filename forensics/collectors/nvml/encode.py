"""A sampling line's bytes without encoding its two long lists every tick.

A device line at 8 GPUs x 64 processes is about 22 kB of JSON, nearly all of it the ``processes``
entries (unchanged from one tick to the next while the processes run) and the per-process
utilisation samples (six integers each). ``dumps_json`` of the 8 lines costs about 1.2 ms a tick;
:class:`LineEncoder` makes the same bytes in about a fifth of that:

- the process entries come from :meth:`LineEncoder.entry`, which keeps each entry (a dict) with its
  ``dumps_json`` text while the same process shows the same figures (kept for one tick: the cache
  holds this tick's and the last tick's processes, no more);
- the utilisation samples (the direct calls' answer, fast.Samples: its dicts and the rows of ints
  they were made from) are written from the rows, keys in ``dumps_json``'s sorted order, with its
  separators: ``timeStamp`` sorts last, so a sample's text is a head made from the rest of its row
  (PID and the four percentages, the same from one tick to the next while the process runs
  steadily; kept for one tick as the entries are) then its timestamp and ``}``;
- the rest of the line is ``dumps_json`` itself, with the two lists stood in for by placeholder
  strings that are cut out again (each must occur exactly once, else the line is not encoded here).

:meth:`LineEncoder.encode` gives None for a line it cannot vouch for (an entry it did not make, a
placeholder seen twice): the caller then encodes the line the ordinary way. The bytes are the
ones ``RecordSink.append_jsonl`` would make (``dumps_json(line, indent=None) + "\\n"``, UTF-8 with
surrogateescape); test_nvml_line_encoding compares them on the lines a simulated machine gives.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, cast

from forensics.bundle.sink import dumps_json
from forensics.collectors.nvml.fast import SAMPLE_FIELDS, Samples

__all__ = ["LineEncoder"]

_PROCS = "\x00processes\x00"  # NVML never gives a NUL in a string (C strings): cannot be data
_UTIL = "\x00utilization\x00"
_PROCS_JSON = dumps_json(_PROCS)
_UTIL_JSON = dumps_json(_UTIL)
_UTIL_CALL = "nvmlDeviceGetProcessUtilization"
#: one utilisation sample as dumps_json writes it (keys sorted, ", " and ": " separators), and where
#: each of its values is in a sample's unpacked row (fast.SAMPLE_FIELDS order)
_SAMPLE_KEYS = ("decUtil", "encUtil", "memUtil", "pid", "smUtil", "timeStamp")
assert list(_SAMPLE_KEYS) == sorted(SAMPLE_FIELDS) and _SAMPLE_KEYS[-1] == "timeStamp"
#: a sample's text up to its timestamp, from its row's other fields (``_STEADY`` of the row, in
#: fast.SAMPLE_FIELDS order; ``_HEAD_ORDER`` puts them in the keys' order)
_SAMPLE_HEAD = '{"decUtil": %d, "encUtil": %d, "memUtil": %d, "pid": %d, "smUtil": %d, "timeStamp": '
_STEADY_FIELDS = tuple(f for f in SAMPLE_FIELDS if f != "timeStamp")
_STEADY = itemgetter(*(SAMPLE_FIELDS.index(f) for f in _STEADY_FIELDS))
_HEAD_ORDER = itemgetter(*(_STEADY_FIELDS.index(k) for k in _SAMPLE_KEYS[:-1]))
_STAMP = itemgetter(SAMPLE_FIELDS.index("timeStamp"))


class LineEncoder:
    """Per sampler: the process entries it made, with their JSON, and the lines' bytes from them."""

    def __init__(self) -> None:
        self._kept: dict[tuple[Any, ...], tuple[dict[str, Any], str]] = {}  # last tick's entries
        self._next: dict[tuple[Any, ...], tuple[dict[str, Any], str]] = {}  # this tick's so far
        self._texts: dict[int, str] = {}  # id(entry) -> its JSON, for the entries of _kept
        # per list call: (its rows, their entries, their _kept items), last tick's and this tick's
        self._lists_kept: dict[Any, tuple[list[Any], list[dict[str, Any]], dict[Any, Any]]] = {}
        self._lists_next: dict[Any, tuple[list[Any], list[dict[str, Any]], dict[Any, Any]]] = {}
        # a utilisation sample's text up to its timestamp, by its row's other fields: the ones the
        # last tick's lines used (kept) and this tick's so far
        self._heads_kept: dict[tuple[int, ...], str] = {}
        self._heads_next: dict[tuple[int, ...], str] = {}

    def entry(self, pid: Any, used: Any, gpu_instance: Any, compute_instance: Any, kind: str,
              mig_uuid: str | None) -> dict[str, Any]:
        """A line's process entry (the sampler's six keys); the same dict while its figures stay."""
        key = (pid, used, gpu_instance, compute_instance, kind, mig_uuid)
        got = self._next.get(key) or self._kept.get(key)
        if got is None:
            e = {"pid": pid, "usedGpuMemory": used, "gpuInstanceId": gpu_instance,
                 "computeInstanceId": compute_instance, "type": kind, "mig_uuid": mig_uuid}
            got = (e, dumps_json(e))
        self._next[key] = got
        return got[0]

    def entries(self, where: Any, rows: list[tuple[Any, ...]], kind: str, mig_uuid: str | None) -> list[dict[str, Any]]:
        """:meth:`entry` of each row ``(pid, usedGpuMemory, gpuInstanceId, computeInstanceId)`` of
        one list call (``where``: which one, ``kind`` and ``mig_uuid`` part of it); the last tick's
        entries at once when its rows are the same."""
        last = self._lists_kept.get(where)
        if last is not None and last[0] == rows:
            self._next.update(last[2])
            self._lists_next[where] = last
            return list(last[1])
        made = [self.entry(row[0], row[1], row[2], row[3], kind, mig_uuid) for row in rows]
        self._lists_next[where] = (rows, made, {(*row, kind, mig_uuid): self._next[(*row, kind, mig_uuid)]
                                                for row in rows})
        return list(made)

    def end_reads(self) -> None:
        """The tick's reads are done: its entries are the ones kept (and encodable) from now."""
        self._kept, self._next = self._next, {}
        self._lists_kept, self._lists_next = self._lists_next, {}
        self._texts = {id(e): text for e, text in self._kept.values()}
        self._heads_kept, self._heads_next = self._heads_next, {}

    def _samples_text(self, rows: list[tuple[int, ...]]) -> str:
        """The samples' JSON objects as ``dumps_json`` writes them between a list's ``[`` and ``]``
        (joined by ``", "``), from their rows (ints, fast.SAMPLE_FIELDS order): each sample's head,
        its timestamp's digits, ``}``. One answer's samples mostly share one timestamp (their
        period's): then the digits and the separator are one string between the heads."""
        if not rows:
            return ""
        steady = list(map(_STEADY, rows))
        kept: list[str | None] = list(map(self._heads_kept.get, steady))
        if not all(kept):  # a head is never empty: None where not kept
            for i, head in enumerate(kept):
                if head is None:
                    kept[i] = _SAMPLE_HEAD % _HEAD_ORDER(steady[i])
        heads = cast("list[str]", kept)  # no None left
        self._heads_next.update(zip(steady, heads, strict=True))
        stamps = list(map(_STAMP, rows))
        first = stamps[0]
        if stamps.count(first) == len(stamps):
            digits = str(first)
            return (digits + "}, ").join(heads) + digits + "}"
        texts = {stamp: str(stamp) for stamp in set(stamps)}
        return "}, ".join(map(str.__add__, heads, map(texts.__getitem__, stamps))) + "}"

    def encode(self, line: dict[str, Any]) -> bytes | None:
        """``line``'s bytes as ``RecordSink.append_jsonl`` makes them, or None (see the module docstring)."""
        procs = line.get("processes")
        if type(procs) is not list:
            return None
        texts = self._texts
        parts = list(map(texts.get, map(id, procs)))
        if not all(parts):  # an entry's text is never empty: None for an entry not made here
            return None
        skeleton = dict(line)
        skeleton["processes"] = _PROCS
        samples = None
        nv = line.get("nvml")
        util = nv.get(_UTIL_CALL) if type(nv) is dict else None
        if type(nv) is dict and type(util) is dict and type(util.get("value")) is Samples:
            samples = util["value"]
            skeleton["nvml"] = {**nv, _UTIL_CALL: {**util, "value": _UTIL}}
        text = dumps_json(skeleton)
        if text.count(_PROCS_JSON) != 1:
            return None
        cuts = [(text.index(_PROCS_JSON), _PROCS_JSON, ", ".join(parts))]  # type: ignore[arg-type]  # no None left
        if samples is not None:
            if text.count(_UTIL_JSON) != 1:
                return None
            rows = samples.rows
            if len(rows) != len(samples):
                return None
            cuts.append((text.index(_UTIL_JSON), _UTIL_JSON, self._samples_text(rows)))
        cuts.sort(key=itemgetter(0))
        out: list[str] = []
        pos = 0
        for at, stand_in, listed in cuts:
            out += (text[pos:at], "[", listed, "]")  # the line is joined once, its lists not first
            pos = at + len(stand_in)
        out += (text[pos:], "\n")
        return "".join(out).encode("utf-8", "surrogateescape")
