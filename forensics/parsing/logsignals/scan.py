"""A line's signals and a whole log's: every family's parser over the lines worth parsing.

:func:`scan_log` finds those lines with one ``str.find`` pass per trigger word of each family (C
speed, about twice a regular-expression alternation's), then runs the families' patterns on those
lines only; a traceback's end, torchrun's rendezvous block and its ``Root Cause`` block are read
from the lines after their header. At most ``max_signals`` records; never raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from forensics.parsing.logsignals import cuda, nccl, process
from forensics.parsing.logsignals.line import (
    LineContext,
    Signal,
    SignalBase,
    bounded,
    cut_text,
    split_context,
)
from forensics.parsing.logsignals.process import (
    RENDEZVOUS,
    ROOT_CAUSE,
    TRACEBACK,
    TRACEBACK_MAX_LINES,
    ProcessEnd,
)

__all__ = ["parse_line", "scan_log"]

_TRIGGER_WORDS = cuda.TRIGGER_WORDS + nccl.TRIGGER_WORDS + process.TRIGGER_WORDS
_RANK_IN_TEXT = re.compile(r"\bRank (\d{1,6})\]")


def _trigger_positions(text: str) -> list[int]:
    hits: list[int] = []
    for word in _TRIGGER_WORDS:
        find = text.find
        p = find(word)
        while p >= 0:
            hits.append(p)
            p = find(word, p + 1)
    hits.sort()
    return hits


def _rank(ctx: LineContext, text: str) -> int | None:
    if ctx.rank is not None:
        return ctx.rank
    m = _RANK_IN_TEXT.search(text)
    return int(m.group(1)) if m else None


def _parse_text(ctx: LineContext, text: str) -> list[Signal]:
    """Every single-line signal in ``text`` (a line's message after its prefixes)."""
    base: SignalBase = {"t": ctx.t, "rank": _rank(ctx, text), "local_rank": ctx.local_rank}
    out: list[Signal] = []
    if oom := cuda.parse_oom(text, base):
        out.append(oom)
    out.extend(nccl.parse_nccl(text, base))
    out.extend(cuda.parse_faults(text, base))
    out.extend(process.parse_process_end(text, base))
    return out


def parse_line(line: str) -> list[Signal]:
    """Every signal one log line holds (no state: a traceback's end needs :func:`scan_log`)."""
    if not isinstance(line, str):
        return []
    ctx = split_context(line)
    return _parse_text(ctx, bounded(ctx.text))


def scan_log(text: str, *, max_signals: int = 10_000) -> Iterator[tuple[int, Signal]]:
    """Every signal of a whole log, with its 1-based line number, in line order.

    One regular-expression pass over the text finds the lines worth parsing; a traceback's end
    and torchrun's rendezvous block are read from the lines after their header. At most
    ``max_signals`` records; never raises."""
    if not isinstance(text, str) or not text:
        return
    emitted = 0
    line_no = 1
    pos = 0  # start of the line numbered line_no
    done_to = 0  # text before this offset is parsed (the rest of a line, a traceback block)
    for hit in _trigger_positions(text):
        if hit < done_to:
            continue
        start = text.rfind("\n", 0, hit) + 1
        line_no += text.count("\n", pos, start)
        pos = start
        end = text.find("\n", hit)
        end = len(text) if end < 0 else end
        done_to = end + 1
        ctx = split_context(text[start:end])
        body = bounded(ctx.text)
        records: list[tuple[int, Signal]] = [(line_no, s) for s in _parse_text(ctx, body)]
        if body.startswith(TRACEBACK) or RENDEZVOUS in body or ROOT_CAUSE in body:
            block = text[start:end + 1 + TRACEBACK_MAX_LINES * 512].split("\n", TRACEBACK_MAX_LINES)
            block = block[:TRACEBACK_MAX_LINES]
            if ROOT_CAUSE in body:
                if (cause := process.root_cause(block, 0, ctx)) is not None:
                    records.append((line_no, cause))
            elif not body.startswith(TRACEBACK):
                records.append((line_no, process.rendezvous(block, 0, ctx)))
            elif found := process.exception_end(block, 0):
                idx, ectx, exc_type, message = found
                records.append((line_no + idx, ProcessEnd(
                    how="exception", exc_type=exc_type, message=cut_text(message) if message else None, t=ectx.t,
                    rank=ectx.rank if ectx.rank is not None else ctx.rank, local_rank=ectx.local_rank)))
                # the exception line's own signals (a CUDA OOM, an NCCL error...) come with it
                records.extend((line_no + idx, s) for s in _parse_text(ectx, bounded(ectx.text)))
                done_to = max(done_to, start + sum(len(b) + 1 for b in block[:idx + 1]))
        for rec in records:
            yield rec
            emitted += 1
            if emitted >= max_signals:
                return
