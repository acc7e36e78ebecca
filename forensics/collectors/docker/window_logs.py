"""Container logs printed during a ``--duration`` window, appended to each container's ``logs.txt``.

The snapshot reads each container's log once (``docker/containers/<id>/logs.txt``); a container
that prints an error, or a CUDA out-of-memory, while the capture window runs would otherwise leave
those lines out of the bundle. After the window, for every container running then or named by an
event of the window (one that exited during it), the sampling child reads the log again as the
snapshot did (``GET /containers/{id}/logs?timestamps=1&since=<window start>&tail=N``) and appends
the lines after those the snapshot kept.

Which lines are new: the snapshot records, in ``index.json`` ``containers.<id>.logs.last_line``,
the engine timestamp of the last raw line it kept and how many kept lines carry it (the kept
member itself cannot say: redaction joins the lines of a PEM block into one); a line is new when
its timestamp is later, or equal and past that many. Without such a record (the snapshot kept no
line) every line is new.

Redaction: the new lines are redacted together with up to 64 KiB of the old lines before them,
and only what follows the old lines' redacted text is appended, so a secret that spans the
boundary (a PEM block whose first lines were printed before the snapshot read the log) is
redacted whole; where such a secret's redaction starts in the old lines, the lines from its start
are appended again, redacted whole, rather than a remainder that would carry its body. Redaction
counts are those of the appended text alone.

``docker/window/logs.json`` records, per container, ``since``, ``last_kept_line``,
``already_kept_lines``, ``received_bytes``, ``kept_bytes``, ``dropped_oldest_bytes``,
``boundary_lines_repeated`` and any ``error``. The new text is cut to ``logs.max_bytes`` (the
newest whole lines; a line longer than that keeps its end, redacted alone with the part of a token
the cut began in: forensics.bundle.secrets.cut).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from forensics.collect.context import CollectContext
from forensics.collectors.docker.calls import CallPool
from forensics.collectors.docker.engine import logs
from forensics.collectors.docker.taken import parse_docker_time, window_start
from forensics.parsing.logsignals.line import newest_lines
from forensics.specs import docker as dspec
from forensics.specs.docker import DockerSettings
from forensics.specs.logs import LOGS

__all__ = ["append_window_logs", "last_line_record", "split_new_lines"]

_CONTEXT_BYTES = 64 << 10  # old lines redacted with the new ones: a PEM block, a multi-line token


def stamp_key(stamp: bytes) -> tuple[int, int] | None:
    """``2026-12-06T10:59:33.1234Z`` -> (epoch seconds, nanoseconds); the engine trims trailing
    zeros of the fraction, so the text does not sort."""
    text = stamp.decode("ascii", "replace")
    whole, dot, frac = text.partition(".")
    digits = "".join(itertools.takewhile(str.isdigit, frac))
    when = parse_docker_time(whole + "Z" if dot else text)
    if when is None:
        return None
    return int(when.timestamp()), int((digits or "0")[:9].ljust(9, "0"))


def _stamp(line: bytes) -> bytes:
    return line.split(b" ", 1)[0]


def last_line_record(kept: bytes, cut_line_head: bytes = b"") -> dict[str, Any] | None:
    """What the snapshot records of the raw log it kept: its last line's engine timestamp and
    how many of its last lines carry it (None for no line). ``cut_line_head``: where the cut to
    ``logs.max_bytes`` fell inside the first kept line, that line's dropped start (up to its
    timestamp): the kept text begins with no timestamp, and its first word may be a token's part."""
    lines = kept.splitlines()
    if not lines:
        return None
    if cut_line_head:
        lines[0] = (cut_line_head + lines[0][:64]).split(b"\n", 1)[0]
    last = _stamp(lines[-1])
    same = sum(1 for _ in itertools.takewhile(lambda ln: _stamp(ln) == last, reversed(lines)))
    return {"time": last.decode("ascii", "replace"), "lines_at_time": same}


def split_new_lines(data: bytes, record: dict[str, Any] | None) -> tuple[bytes, bytes, int]:
    """(old text, new text, old line count) of a log read again: a line is old when its timestamp
    is before the recorded last line's, or equal and within the recorded count."""
    last = stamp_key(str(record.get("time", "")).encode()) if isinstance(record, dict) else None
    if last is None or record is None:
        return b"", data, 0
    limit = int(record.get("lines_at_time") or 0)
    pos = equal = old = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        key = stamp_key(_stamp(data[pos:end]))
        if key is None or key > last or (key == last and equal >= limit):
            break
        equal += key == last
        old += 1
        pos = end
    return data[:pos], data[pos:], old


def redact_after(ctx: CollectContext, old: bytes, new: bytes, *, cut_start: bool = False) -> tuple[str, int]:
    """The redacted text of ``new`` as it stands after ``old`` (module doc), and how many old
    lines it repeats (those a boundary-crossing secret starts in). ``cut_start``: ``new`` was cut
    to ``logs.max_bytes`` inside a line: the bytes dropped before it part it from ``old``, and
    its first word may be a token's end (redacted alone, the cut at its start)."""
    if cut_start:
        return ctx.redactor.text(new.decode("utf-8", "replace"), "logs", cut_start=True), 0
    context = old[-_CONTEXT_BYTES:]
    if len(context) < len(old):  # from a line start
        context = context[context.find(b"\n") + 1:]
    before = Counter(ctx.redactor.counts)
    old_text = ctx.redactor.text(context.decode("utf-8", "replace"), "logs")
    old_counts = ctx.redactor.counts - before
    both = ctx.redactor.text((context + new).decode("utf-8", "replace"), "logs")
    # counted: what the appended text holds, not the context (counted when it was kept), twice read
    ctx.redactor.counts.subtract(old_counts + old_counts)
    ctx.redactor.counts += Counter()  # drop zero and negative entries
    if both.startswith(old_text):
        return both[len(old_text):], 0
    common = len(os.path.commonprefix([old_text, both]))
    start = old_text.rfind("\n", 0, common) + 1
    return both[start:], old_text[start:].count("\n")


def _read(client: Any, cid: str, since: datetime, tail: int) -> bytes:
    doc = client.inspect_container(cid)
    config = doc.get("Config") if isinstance(doc, dict) else None
    tty = bool(config.get("Tty")) if isinstance(config, dict) else False
    return logs(client, cid, since, tail, tty)


def _snapshot_records(ctx: CollectContext) -> dict[str, Any]:
    """``index.json`` ``containers.<id>.logs.last_line`` of the snapshot, from the staging directory."""
    root = getattr(ctx.sink, "root", None)
    if root is None:
        return {}
    try:
        with open(os.path.join(root, dspec.INDEX), "rb") as f:
            containers = json.load(f).get("containers") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {cid: ((c.get("logs") or {}).get("last_line")) for cid, c in containers.items()
            if isinstance(c, dict)}


def append_window_logs(ctx: CollectContext, client: Any, settings: DockerSettings,
                       containers: Iterable[str]) -> None:
    """Append the lines each of ``containers`` printed after those the snapshot kept (module doc)."""
    if settings.logs_tail <= 0:
        return
    max_bytes = LOGS.read_settings(ctx.options.extra).max_bytes
    start = window_start(ctx)
    records = _snapshot_records(ctx)
    report: dict[str, dict[str, Any]] = {}
    pool = CallPool(settings.workers)
    try:
        for cid in dict.fromkeys(containers):
            report[cid] = {"since": start.isoformat(), "last_kept_line": records.get(cid),
                           "error": "no answer before the sampling deadline"}
            pool.submit("window-logs", cid, functools.partial(_read, client, cid, start, settings.logs_tail))
        for call, result in pool.as_completed(ctx.deadline - 1.0):
            cid = call.key[1]
            if result is None:
                report[cid]["error"] = call.error
                continue
            data = result if isinstance(result, bytes) else b""
            old, fresh, old_lines = split_new_lines(data, records.get(cid))
            new, dropped = newest_lines(fresh, max_bytes)
            # a new line longer than logs.max_bytes keeps its end: it may begin inside a token
            cut_start = dropped > 0 and fresh[dropped - 1:dropped] != b"\n"
            text, repeated = redact_after(ctx, old, new, cut_start=cut_start) if new else ("", 0)
            report[cid].update(already_kept_lines=old_lines, received_bytes=len(fresh), kept_bytes=len(new),
                               dropped_oldest_bytes=dropped, boundary_lines_repeated=repeated, error=None)
            if text:
                ctx.sink.append_bytes(dspec.container_member(cid, "logs.txt"),
                                      text.encode("utf-8", "surrogateescape"))
    finally:
        pool.close()
        ctx.sink.write_json(dspec.WINDOW_LOGS, report)
