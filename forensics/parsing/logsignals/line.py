"""What every log signal shares: the record base, a line's context and the scan bound.

* Engine and kubelet timestamps: ``GET /containers/{id}/logs?timestamps=1`` and
  ``GET /api/v1/namespaces/{ns}/pods/{name}/log?timestamps=true`` prefix each line with an
  RFC 3339 nanosecond time and one space (``2024-03-21T02:07:08.408271257Z <line>``).
* Launcher prefixes: ``[rank3]:`` (PyTorch >= 2.2 prefixes every line of a distributed rank),
  ``[default3]:`` (``torchrun --tee``: the local rank), ``(Worker pid=35)`` /
  ``(VllmWorkerProcess pid=1866)`` / ``(RayWorkerWrapper pid=1000, ip=10.0.0.2)`` (vLLM, Ray),
  ``(VllmWorker rank=3 pid=1090)`` (vLLM V1: the worker's rank),
  and c10d's glog header ``[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607]`` (no year or zone:
  not used as a time).

:func:`last_timestamp` (where a log ends) and :func:`newest_lines` (the newest whole lines within a
byte bound, as the collectors keep them) need no signal family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, TypedDict

from forensics.parsing.timestamps import parse_iso_unix

__all__ = ["MAX_SCAN_CHARS", "LineContext", "Signal", "SignalBase", "bounded", "cut_text", "last_timestamp",
           "newest_lines", "split_context", "to_int"]

MAX_SCAN_CHARS = 16 * 1024
_MAX_TEXT = 400  # a message kept in a record is cut here (the excerpt keeps the line's own bytes)


@dataclass(frozen=True, kw_only=True)
class Signal:
    """What every signal knows of its line: ``t`` the engine's or kubelet's timestamp (unix
    seconds, None without ``timestamps=true``), ``rank`` the global rank (``[rank3]:`` prefix or
    ``[Rank 3]`` in the message), ``local_rank`` (``[default3]:`` prefix)."""

    kind: ClassVar[str] = ""
    t: float | None = None
    rank: int | None = None
    local_rank: int | None = None


class SignalBase(TypedDict):
    """The fields each record of one line takes from the line (``**base``)."""

    t: float | None
    rank: int | None
    local_rank: int | None


def to_int(text: str | None) -> int | None:
    if text is None or len(text) > 20:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def cut_text(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "..."


_TS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)) ")
_PREFIXES = re.compile(
    r"\[(?P<what>rank|default)(?P<n>\d{1,6})\]:\s?"                      # [rank3]: / [default3]:
    r"|(?:[\w./-]{1,40} )?\((?P<proc>[A-Za-z_][\w.]{0,60}(?: rank=(?P<prank>\d{1,6}))? pid=\d{1,10}"
    r"(?:, ip=[\w.:]{1,60})?)\)(?:\s|$)"
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]\s]{1,80}\] "
)


@dataclass(frozen=True)
class LineContext:
    """What a line's prefixes said, and the message after them."""

    t: float | None
    rank: int | None
    local_rank: int | None
    process: str | None
    text: str


def split_context(line: str) -> LineContext:
    """Strip the timestamp and launcher prefixes of one line (see the module docstring)."""
    t = None
    pos = 0
    m = _TS.match(line)
    if m:
        t = parse_iso_unix(m.group(1))
        pos = m.end()
    rank = local = None
    proc = None
    for _ in range(4):
        p = _PREFIXES.match(line, pos)
        if not p:
            break
        if p.group("what") == "rank":
            rank = int(p.group("n"))
        elif p.group("what") == "default":
            local = int(p.group("n"))
        elif p.group("proc"):
            proc = p.group("proc")
            if p.group("prank") is not None and rank is None:
                rank = int(p.group("prank"))  # vLLM V1: (VllmWorker rank=3 pid=1090)
        pos = p.end()
    text = line[pos:]
    return LineContext(t, rank, local, proc, text.rstrip("\r\n"))


def bounded(text: str) -> str:
    """The part of a line that is scanned: all of it, or its head and tail when very long."""
    if len(text) <= MAX_SCAN_CHARS:
        return text
    half = MAX_SCAN_CHARS // 2
    return text[:half] + "\n" + text[-half:]


def last_timestamp(text: str) -> tuple[int, float] | None:
    """The last line of a log that carries an engine or kubelet timestamp: (line number, unix
    seconds). "Stopped logging first" across ranks is read from this."""
    if not isinstance(text, str) or not text:
        return None
    end = len(text)
    seen = 0
    while end > 0 and seen < 64:
        start = text.rfind("\n", 0, end - 1) + 1 if end > 0 else 0
        line = text[start:end]
        m = _TS.match(line)
        if m:
            t = parse_iso_unix(m.group(1))
            if t is not None:
                return text.count("\n", 0, start) + 1, t
        end = start
        seen += 1
        if start == 0:
            break
    return None


def newest_lines(data: bytes, max_bytes: int) -> tuple[bytes, int]:
    """The newest whole lines of ``data`` within ``max_bytes``, and how many bytes were dropped.

    A log is cut at its start (the crash is at its end): the first line kept starts after a
    newline, so no half line begins it; a single line longer than ``max_bytes`` keeps its end."""
    if len(data) <= max_bytes:
        return data, 0
    cut = data[len(data) - max_bytes:]
    nl = cut.find(b"\n")
    if 0 <= nl < len(cut) - 1:
        cut = cut[nl + 1:]
    return cut, len(data) - len(cut)
