"""Container logs printed during a ``--duration`` window, appended to each container's ``logs.txt``.

The snapshot reads each container's log once (``docker/containers/<id>/logs.txt``); a container
that prints an error, or a CUDA out-of-memory, while the capture window runs would otherwise leave
those lines out of the bundle. After the window, for every container running then or named by an
event of the window (one that exited during it), the sampling child reads ``GET
/containers/{id}/logs?timestamps=1&since=<last line's time>&tail=N`` and appends the lines after
those the snapshot kept, redacted as the snapshot's are (the whole new text at once).

Where the snapshot kept lines, ``since`` is the engine timestamp of its last line (to the
nanosecond), and the lines the engine sends again with that same timestamp (those already kept)
are skipped; a container with no lines kept yet is read from the look-back window's start, as the
snapshot read it. The new text is cut to ``logs.max_bytes`` (the newest whole lines).
``docker/window/logs.json`` records, per container, ``since``, ``received_bytes``, ``kept_bytes``,
``dropped_oldest_bytes``, ``repeated_lines_skipped`` and any ``error``.
"""

from __future__ import annotations

import functools
import itertools
import os
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

__all__ = ["append_window_logs", "last_kept_lines"]

_TAIL_READ_BYTES = 1 << 16  # the end of a kept log read back to find its last timestamp


def _timestamp(line: bytes) -> bytes:
    """The engine's RFC 3339 nanosecond timestamp that starts a line (``timestamps=1``)."""
    return line.split(b" ", 1)[0]


def last_kept_lines(path: str) -> tuple[bytes, int]:
    """The timestamp of the last line of a kept log and how many of its last lines carry it
    (``b"", 0`` when there is no such file or line)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL_READ_BYTES))
            tail = f.read()
    except OSError:
        return b"", 0
    lines = [ln for ln in tail.split(b"\n")[1 if size > _TAIL_READ_BYTES else 0:] if ln]
    if not lines:
        return b"", 0
    last = _timestamp(lines[-1])
    same = 0
    for ln in reversed(lines):
        if _timestamp(ln) != last:
            break
        same += 1
    return last, same


def _epoch_text(stamp: bytes) -> str | None:
    """``2026-12-06T10:59:33.123456789Z`` -> ``"1796554773.123456789"``: the engine's ``since`` to
    the nanosecond (a datetime keeps only microseconds)."""
    text = stamp.decode("ascii", "replace")
    whole, dot, frac = text.partition(".")
    digits = "".join(itertools.takewhile(str.isdigit, frac))
    when = parse_docker_time(whole + "Z" if dot else text)
    if when is None:
        return None
    return f"{int(when.timestamp())}.{digits or '0'}"


def _read(client: Any, cid: str, since: datetime | str, tail: int) -> bytes:
    doc = client.inspect_container(cid)
    config = doc.get("Config") if isinstance(doc, dict) else None
    tty = bool(config.get("Tty")) if isinstance(config, dict) else False
    return logs(client, cid, since, tail, tty)


def _skip_repeated(data: bytes, stamp: bytes, count: int) -> tuple[bytes, int]:
    """``data`` less its first lines stamped ``stamp`` (at most ``count``: those already kept)."""
    skipped = 0
    pos = 0
    while skipped < count and stamp and data.startswith(stamp + b" ", pos):
        nl = data.find(b"\n", pos)
        pos = len(data) if nl < 0 else nl + 1
        skipped += 1
    return data[pos:], skipped


def append_window_logs(ctx: CollectContext, client: Any, settings: DockerSettings,
                       containers: Iterable[str]) -> None:
    """Append the lines each of ``containers`` printed since its kept log ends (module doc)."""
    if settings.logs_tail <= 0:
        return
    root = getattr(ctx.sink, "root", None)
    max_bytes = LOGS.read_settings(ctx.options.extra).max_bytes
    start = window_start(ctx)
    report: dict[str, dict[str, Any]] = {}
    kept: dict[str, tuple[bytes, int]] = {}
    pool = CallPool(settings.workers)
    try:
        for cid in dict.fromkeys(containers):
            member = dspec.container_member(cid, "logs.txt")
            stamp, count = last_kept_lines(os.path.join(root, member)) if root is not None else (b"", 0)
            since: datetime | str = (_epoch_text(stamp) or start) if stamp else start
            kept[cid] = (stamp, count)
            report[cid] = {"since": since if isinstance(since, str) else since.isoformat(),
                           "error": "no answer before the sampling deadline"}
            pool.submit("window-logs", cid, functools.partial(_read, client, cid, since,
                                                              settings.logs_tail))
        for call, result in pool.as_completed(ctx.deadline - 1.0):
            cid = call.key[1]
            if result is None:
                report[cid]["error"] = call.error
                continue
            data, skipped = _skip_repeated(result if isinstance(result, bytes) else b"", *kept[cid])
            new, dropped = newest_lines(data, max_bytes)
            report[cid].update(received_bytes=len(data), kept_bytes=len(new),
                               dropped_oldest_bytes=dropped, repeated_lines_skipped=skipped,
                               error=None)
            if new:
                # as the snapshot writes its lines; the whole new text at once: a PEM block spans lines
                text = ctx.redactor.text(new.decode("utf-8", "replace"), "logs")
                ctx.sink.append_bytes(dspec.container_member(cid, "logs.txt"),
                                      text.encode("utf-8", "surrogateescape"))
    finally:
        pool.close()
        ctx.sink.write_json(dspec.WINDOW_LOGS, report)
