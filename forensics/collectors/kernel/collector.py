"""``kernel``: the kernel ring buffer, verbatim, with OOM kills and NVIDIA Xid events derived.

Sources, first that works: ``/dev/kmsg`` (non-blocking reads, one record per ``read()``, a 64 KiB
buffer so any record fits), then ``dmesg --raw``, then ``journalctl -k -o json``. Wall-clock
times: boot time (``time.time() - clock_gettime(CLOCK_MONOTONIC)``) plus each record's
microseconds since boot; ``CLOCK_BOOTTIME - CLOCK_MONOTONIC`` is recorded too, since printk time
stops during suspend. ``--since`` drops older records (raw and derived alike). What is derived
is derived.py's, from a /dev/kmsg dump a block at a time (blocks.py).

Every record's text is redacted as free text is (``Redactor.text_bytes``: a kernel command line or
a driver message can carry a credential), before it is stored or parsed: the members and what is
derived from them agree. Members: ``kernel/kmsg.txt`` (records exactly as read but redacted; or ``kernel/dmesg.txt`` /
``kernel/journal.jsonl`` from a fallback), ``kernel/records.jsonl``, ``kernel/oom.json`` (each kill
linked to its memcg and so to a container or pod), ``kernel/xid.json``, ``kernel/gpu_driver.json``,
``kernel/index.json``; while sampling, ``kernel/kmsg-window.txt`` and ``kernel/window.jsonl``
(records that arrived during the capture window). See docs/bundle-format/host-evidence.md.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

from forensics.bundle.sink import dumps_json
from forensics.collect.context import CollectContext, Tick
from forensics.collect.lifeline import run_tied
from forensics.collectors.kernel.blocks import derive_kmsg
from forensics.collectors.kernel.derived import Derived, derive, oom_json
from forensics.errors import ParseError, SourcePermissionDenied, SourceUnavailable
from forensics.parsing import kmsg, nvrm, oomkill
from forensics.specs.hints import KMSG_LAST_SEQ
from forensics.specs.kernel import (
    DMESG,
    GPU_DRIVER,
    INDEX,
    JOURNAL,
    KMSG,
    KMSG_WINDOW,
    OOM,
    RECORDS,
    SPEC,
    WINDOW,
    XID,
)

__all__ = ["COLLECTOR", "KernelCollector", "clock_readings", "read_kmsg_records"]

READ_BUFFER_BYTES = 65536


def clock_readings() -> dict[str, float]:
    """Realtime, monotonic and boottime clocks read back to back, and the derived boot time."""
    realtime = time.time()
    monotonic = time.clock_gettime(time.CLOCK_MONOTONIC)
    boottime = time.clock_gettime(time.CLOCK_BOOTTIME)
    return {
        "realtime_unix": realtime,
        "monotonic_s": monotonic,
        "boottime_s": boottime,
        "boot_time_unix": realtime - monotonic,
        "suspended_s": boottime - monotonic,
    }


def read_kmsg_records(path: str, max_bytes: int, stats: dict[str, int]) -> Iterator[bytes]:
    """Every record now in the ring buffer, one ``bytes`` per ``read()``; stops at EAGAIN.

    ``stats`` counts ``records``, ``bytes``, ``overwritten`` (EPIPE: records lost to the ring
    buffer wrapping while reading) and ``truncated`` (1 when ``max_bytes`` was reached).
    Raises OSError from ``open`` (ENOENT, EACCES, EPERM).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            # A saved kmsg dump (tests, re-reading kernel/kmsg.txt): split it into records.
            yield from _split_dump(fd, max_bytes, stats)
            return
        while True:
            try:
                record = os.read(fd, READ_BUFFER_BYTES)
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno == errno.EPIPE:
                    stats["overwritten"] = stats.get("overwritten", 0) + 1
                    continue
                if error.errno == errno.EINTR:
                    continue
                raise
            if not record:
                return
            stats["records"] = stats.get("records", 0) + 1
            stats["bytes"] = stats.get("bytes", 0) + len(record)
            yield record
            if stats["bytes"] >= max_bytes:
                stats["truncated"] = 1
                return
    finally:
        os.close(fd)


def _split_dump(fd: int, max_bytes: int, stats: dict[str, int]) -> Iterator[bytes]:
    chunks: list[bytes] = []
    total = 0
    while total < max_bytes:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    data = b"".join(chunks)
    del chunks
    current: list[bytes] = []
    for line in data.splitlines(keepends=True):
        if line.startswith(b" ") and current:
            current.append(line)
            continue
        if current:
            record = b"".join(current)
            stats["records"] = stats.get("records", 0) + 1
            stats["bytes"] = stats.get("bytes", 0) + len(record)
            yield record
        current = [line]
    if current:
        record = b"".join(current)
        stats["records"] = stats.get("records", 0) + 1
        stats["bytes"] = stats.get("bytes", 0) + len(record)
        yield record


def _record_header_ts(record: bytes) -> int | None:
    try:
        return int(record.split(b";", 1)[0].split(b",", 3)[2])
    except (IndexError, ValueError):
        return None


def _record_header_seq(record: bytes) -> int | None:
    try:
        return int(record.split(b";", 1)[0].split(b",", 3)[1])
    except (IndexError, ValueError):
        return None


class KernelCollector:
    """``kernel``: ring buffer verbatim; OOM kills, Xid events and driver warnings derived."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 60.0

    def __init__(self, kmsg_path: str = "/dev/kmsg",
                 dmesg_argv: tuple[str, ...] = ("dmesg", "--raw"),
                 journal_argv: tuple[str, ...] = ("journalctl", "-k", "-o", "json",
                                                  "--no-pager")) -> None:
        self.kmsg_path = kmsg_path
        self.dmesg_argv = dmesg_argv
        self.journal_argv = journal_argv
        self._window_fd: int | None = None
        self._window_tracker = oomkill.OomTracker()
        self._window_skip_seq = -1
        self._window_boot = 0.0

    def _since_usec(self, ctx: CollectContext, boot: float) -> int | None:
        since = ctx.options.since
        if since is None:
            return None
        return max(0, int((since.timestamp() - boot) * 1e6))

    def snapshot(self, ctx: CollectContext) -> None:
        """Read the whole ring buffer (or a fallback), store it, and derive events."""
        clocks = clock_readings()
        boot = clocks["boot_time_unix"]
        since_usec = self._since_usec(ctx, boot)
        max_bytes = SPEC.read_settings(ctx.options.extra).max_bytes
        attempts: dict[str, str] = {}
        index: dict[str, Any] = {"clocks": clocks, "since_ts_usec": since_usec,
                                 "attempts": attempts}
        if clocks["suspended_s"] > 1.0:
            ctx.note(f"host was suspended {clocks['suspended_s']:.0f} s since boot: kernel "
                     "log wall times before the suspend are late by up to that much")

        derived: Derived | None = None
        stats: dict[str, int] = {}
        try:
            kept: list[bytes] = []
            dropped = 0
            for record in read_kmsg_records(self.kmsg_path, max_bytes, stats):
                if since_usec is not None:
                    ts = _record_header_ts(record)
                    if ts is not None and ts < since_usec:
                        dropped += 1
                        continue
                kept.append(record)
            raw = ctx.redactor.text_bytes(b"".join(kept), "kernel")
            del kept
            ctx.sink.write_bytes(KMSG, raw)
            index.update(source=self.kmsg_path, member=KMSG, read=stats,
                         dropped_before_since=dropped)
            if stats.get("overwritten"):
                ctx.note(f"{stats['overwritten']} kmsg records were overwritten while reading")
            if stats.get("truncated"):
                ctx.partial(f"kernel log cut at {max_bytes} bytes")
            derived = derive_kmsg(raw, boot, self._records_writer(ctx), self._on_error(index))
        except OSError as error:
            attempts[self.kmsg_path] = f"{type(error).__name__}: {error.strerror or error}"
        if derived is None:
            derived = self._fallbacks(ctx, index, attempts, boot, since_usec)
        if derived is None:
            denied = [a for a in attempts.values() if "ermission" in a or "not permitted" in a]
            message = "; ".join(f"{k}: {v}" for k, v in attempts.items())
            if denied:
                raise SourcePermissionDenied(f"kernel log: {message}")
            raise SourceUnavailable(f"kernel log: {message}")

        ctx.sink.write_json(OOM, derived.ooms)
        ctx.sink.write_json(XID, derived.xids)
        ctx.sink.write_json(GPU_DRIVER, derived.driver)
        index.update(records=derived.count, oom_kills=len(derived.ooms), xids=len(derived.xids),
                     driver_messages=len(derived.driver), last_seq=derived.last_seq,
                     first_time=(kmsg.wall_time_iso(derived.first_ts, boot)
                                 if derived.first_ts is not None else None),
                     last_time=(kmsg.wall_time_iso(derived.last_ts, boot)
                                if derived.last_ts is not None else None))
        ctx.sink.write_json(INDEX, index)
        if derived.last_seq is not None:
            KMSG_LAST_SEQ.publish(ctx, [derived.last_seq])
        ctx.note(f"{derived.count} kernel records from {index.get('source')}, "
                 f"{len(derived.ooms)} OOM kills, {len(derived.xids)} Xid events")

    def _on_error(self, index: dict[str, Any]) -> Any:
        errors: list[str] = []
        index["parse_errors"] = errors

        def record(number: int, error: ParseError) -> None:
            if len(errors) < 100:
                errors.append(f"line {number}: {error}")
        return record

    def _records_writer(self, ctx: CollectContext) -> Callable[[str], None]:
        """Starts ``kernel/records.jsonl``; returns what appends text to it."""
        def write(text: str) -> None:
            ctx.sink.append_bytes(RECORDS,
                                  text.encode("utf-8", "surrogateescape"))
        ctx.sink.write_bytes(RECORDS, b"")
        return write

    def _run(self, argv: tuple[str, ...], ctx: CollectContext) -> bytes:
        timeout = max(1.0, min(20.0, ctx.remaining() - 3.0))
        done = run_tied(argv, timeout)  # a dmesg or journalctl never outlives this collector
        if done.returncode != 0:
            raise OSError(errno.EIO, done.stderr.decode("utf-8", "replace").strip()[:200]
                          or f"exit status {done.returncode}")
        return done.stdout

    def _fallbacks(self, ctx: CollectContext, index: dict[str, Any], attempts: dict[str, str],
                   boot: float, since_usec: int | None) -> Derived | None:
        def keep(record: kmsg.KmsgRecord) -> bool:
            return since_usec is None or record.ts_usec >= since_usec

        tried: tuple[tuple[tuple[str, ...], str, Any], ...] = (
            (self.dmesg_argv, DMESG, kmsg.iter_dmesg_raw),
            (self.journal_argv, JOURNAL, kmsg.iter_journal_json),
        )
        for argv, member, iterate in tried:
            label = " ".join(argv)
            try:
                raw = self._run(argv, ctx)
            except (OSError, subprocess.SubprocessError) as error:
                attempts[label] = f"{type(error).__name__}: {getattr(error, 'strerror', None) or error}"
                continue
            if not raw.strip():
                attempts[label] = "no output"
                continue
            raw = ctx.redactor.text_bytes(raw, "kernel")
            ctx.sink.write_bytes(member, raw)
            index.update(source=label, member=member)
            records = (r for r in iterate(_lines(raw), self._on_error(index)) if keep(r))
            ctx.partial(f"/dev/kmsg unreadable; used {label}")
            return derive(records, boot, self._records_writer(ctx))
        return None

    # -- sampling: records that arrive during the capture window -------------------------------
    def sample(self, ctx: CollectContext, tick: Tick) -> None:
        """Append records that arrived since the snapshot (or the previous tick). With the hint
        ``kmsg_last_seq`` /dev/kmsg is read from its start, the records numbered up to the hint's
        value skipped (-1: none, every record of this boot); without it, from its end."""
        if self._window_fd is None:
            skip = KMSG_LAST_SEQ.read(ctx)
            self._window_skip_seq = max(skip) if skip else -1
            self._window_boot = clock_readings()["boot_time_unix"]
            try:
                self._window_fd = os.open(self.kmsg_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as error:
                raise SourceUnavailable(f"{self.kmsg_path}: {error.strerror or error}") from None
            if not skip:
                os.lseek(self._window_fd, 0, os.SEEK_END)
        fresh: list[bytes] = []
        while len(fresh) < 100_000:
            try:
                record = os.read(self._window_fd, READ_BUFFER_BYTES)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == errno.EPIPE:
                    continue
                raise
            if not record:
                break
            seq = _record_header_seq(record)
            if seq is not None and seq <= self._window_skip_seq:
                continue
            fresh.append(record)
        if not fresh:
            return
        raw = ctx.redactor.text_bytes(b"".join(fresh), "kernel")
        ctx.sink.append_bytes(KMSG_WINDOW, raw)
        events: list[str] = []
        for parsed in kmsg.iter_kmsg(_lines(raw), lambda n, e: None):
            kill = self._window_tracker.feed(parsed)
            if kill is not None:
                events.append(dumps_json({"type": "oom", "tick": tick.index,
                                          **oom_json(kill, self._window_boot)}, indent=None))
            xid = nvrm.parse_xid(parsed)
            if xid is not None:
                item = asdict(xid)
                item.update(type="xid", tick=tick.index,
                            time=kmsg.wall_time_iso(xid.ts_usec, self._window_boot))
                events.append(dumps_json(item, indent=None))
        if events:
            ctx.sink.append_bytes(WINDOW, ("\n".join(events) + "\n").encode())

    def end_sampling(self, ctx: CollectContext) -> None:
        """Close /dev/kmsg."""
        if self._window_fd is not None:
            os.close(self._window_fd)
            self._window_fd = None


def _lines(raw: bytes, block: int = 1 << 20) -> Iterator[str]:
    """Decode lines block by block (about 1 MiB at a time, cut at a newline): bounded extra
    memory whatever the size of the log, without a decode call per line."""
    start = 0
    size = len(raw)
    while start < size:
        end = raw.find(b"\n", min(start + block, size) - 1)
        end = size if end < 0 else end + 1
        parts = raw[start:end].decode("utf-8", "replace").split("\n")
        last = parts.pop()  # "" when the block ends with a newline
        for part in parts:
            yield part + "\n"
        if last:
            yield last
        start = end


COLLECTOR = KernelCollector()
