"""One sampler process per source: the recorder's loop never waits on a source.

The parent forks a child per source; the child runs the source's driver (capture's own collector
``sample()`` code) and answers each tick command with the records its collector wrote through
``ctx.sink``. The sink here is :class:`RecordSink`: the same methods as the bundle's
``EvidenceSink`` (``write_json``, ``append_jsonl``, ...), so a record is exactly the member bytes a
capture would have written, stamped with wall and monotonic time.

The messages on the two pipes, their types and their encoding: :mod:`forensics.record.protocol`.

A child follows the rules of capture's collector children (:func:`forensics.collect.lifeline.fork_child`:
it dies with its parent, stdout onto stderr, SIGINT ignored), runs in its own process group at nice 10 and is killed (the
whole group) by the parent when it does not answer a tick in time (a hung NVML call).

Memory: the children are forks of the recorder, so the pages of what the parent loaded (the
interpreter's objects, the modules, the sources' collectors, loaded before the first fork by
``forensics.record.sources.preload``) are shared as long as nobody writes to them. The parent
freezes its objects before the first fork and each child freezes what it inherits (``gc.freeze``),
so no collection, in either, writes into their headers; and every :data:`TRIM_EVERY` ticks each
process gives the C heap's free pages back (``malloc_trim``), the tick's buffers being freed.
"""

from __future__ import annotations

import fcntl
import gc
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from forensics.bundle.format import check_member_name
from forensics.bundle.sink import dumps_json
from forensics.collect.lifeline import fork_child, malloc_trim
from forensics.errors import BundleUnsafe, RecorderProtocolError
from forensics.record.protocol import (
    Answer,
    AnswerKind,
    Command,
    FrameReader,
    QuitCommand,
    Record,
    decode_answer,
    decode_command,
    encode_command,
    send_answer,
)

__all__ = ["RecordSink", "SourceProcess", "child_loop", "spawn"]

TRIM_EVERY = 10  # ticks between two malloc_trim calls
PIPE_BYTES = 1 << 20  # the frames pipe's capacity (the default max of an unprivileged pipe)


class RecordSink:
    """``EvidenceSink``'s interface, buffering ``(t, mono, member, op, data)`` records in memory
    until the tick's answer takes them (thread-safe: the Docker follower writes from a thread).
    Bounded: past ``max_buffer_bytes`` records are dropped and counted.

    Consecutive appends to one member (a tick's line per GPU, per cgroup) become one record, up
    to ``batch_bytes``: its data is those lines, in order, stamped with the first one's clocks.
    The member's bytes are the same; the ring pays one record envelope per member and tick
    instead of one per line."""

    def __init__(self, max_buffer_bytes: int = 32 << 20, batch_bytes: int = 1 << 20,
                 summarize: Callable[[str, Any], Any] | None = None, summarized: Iterable[str] = ()) -> None:
        self.max_buffer_bytes = max_buffer_bytes
        self.batch_bytes = batch_bytes
        self.bytes_written = 0
        self.dropped = 0
        self._buffered = 0
        self._records: list[list[Any]] = []  # [t, mono, member, op, [byte chunks], size, summary]
        self._lock = threading.Lock()
        self.watch: Callable[[str, Any], None] | None = None  # sees each appended JSON object
        # the live state's summary of each line appended to these members (forensics.record.live
        # .summarize), sent with the record: the recorder's live state then never parses the lines
        self.summarize = summarize
        self.summarized = frozenset(summarized) if summarize is not None else frozenset()

    def _add(self, member: str, op: str, data: bytes, summary: list[Any] | None = None) -> None:
        """``summary``: the summaries of ``data``'s lines; None for a member not summarised, or
        bytes appended without one (the record then has none: its reader parses it)."""
        check_member_name(member)
        if member == "manifest.json":
            raise BundleUnsafe("collectors may not write manifest.json")
        with self._lock:
            if self._buffered + len(data) > self.max_buffer_bytes:
                self.dropped += 1
                return
            self._buffered += len(data)
            self.bytes_written += len(data)
            last = self._records[-1] if self._records else None
            if (op == "append" and last is not None and last[3] == "append" and last[2] == member
                    and last[5] + len(data) <= self.batch_bytes):
                last[4].append(data)
                last[5] += len(data)
                last[6] = None if last[6] is None or summary is None else last[6] + summary
                return
            self._records.append([round(time.time(), 6), round(time.monotonic(), 6), member, op, [data], len(data),
                                  summary])

    def take_chunks(self) -> list[list[Any]]:
        """:meth:`take_bytes` with each record's ``data`` as the list of byte strings appended to
        it, not joined (the child's answer writes them into its frame as they are: one copy less
        of a tick's ~135 kB of NVML lines)."""
        with self._lock:
            out, self._records, self._buffered = self._records, [], 0
        return [[t, mono, member, op, chunks, *(() if summary is None else (summary,))]
                for t, mono, member, op, chunks, _, summary in out]

    def take_bytes(self) -> list[list[Any]]:
        """The buffered records as ``[t, mono, member, op, data]`` (``data``: bytes), oldest first,
        each followed by its ``summary`` where it has one."""
        return [[*rec[:4], b"".join(rec[4]), *rec[5:]] for rec in self.take_chunks()]

    def take(self) -> list[list[Any]]:
        """:meth:`take_bytes` with ``data`` decoded (UTF-8, undecodable bytes kept as surrogates)."""
        return [[*rec[:4], rec[4].decode("utf-8", "surrogateescape"), *rec[5:]] for rec in self.take_bytes()]

    def write_bytes(self, member: str, data: bytes) -> None:
        self._add(member, "write", bytes(data))

    def write_text(self, member: str, text: str) -> None:
        self.write_bytes(member, text.encode("utf-8", "surrogateescape"))

    def write_json(self, member: str, obj: Any) -> None:
        self.write_bytes(member, (dumps_json(obj) + "\n").encode("utf-8", "surrogateescape"))

    def replace_json(self, member: str, obj: Any) -> None:
        """A write record that replaces the member (as ``EvidenceSink.replace_json``); an earlier
        version still buffered is dropped, so a snapshot that saves as it goes costs one record."""
        with self._lock:
            kept = [r for r in self._records if not (r[2] == member and r[3] == "write")]
            self._buffered -= sum(r[5] for r in self._records if r[2] == member and r[3] == "write")
            self._records = kept
        self.write_json(member, obj)

    def append_jsonl(self, member: str, obj: Any) -> None:
        self.append_encoded_jsonl(member, obj, (dumps_json(obj, indent=None) + "\n").encode("utf-8", "surrogateescape"))

    def append_encoded_jsonl(self, member: str, obj: Any, data: bytes) -> None:
        """:meth:`append_jsonl` of ``obj`` whose line ``data`` the caller has made (the same bytes:
        ``dumps_json(obj, indent=None) + "\\n"``, UTF-8; the nvml sampler's LineEncoder)."""
        if self.watch is not None:
            self.watch(member, obj)
        if member in self.summarized:
            assert self.summarize is not None
            got = self.summarize(member, obj)
            self._add(member, "append", data, [] if got is None else [got])
        else:
            self._add(member, "append", data)

    def append_bytes(self, member: str, data: bytes) -> None:
        self._add(member, "append", bytes(data))


@dataclass
class SourceProcess:
    """The parent's handle on one sampler child."""

    name: str
    pid: int
    cmd_fd: int  # parent writes commands
    out_fd: int  # parent reads frames
    started_mono: float
    reader: FrameReader = field(default_factory=FrameReader)
    busy_tick: int | None = None
    busy_since: float = 0.0
    hello: bool = False

    @property
    def buf(self) -> bytearray:
        """The start of a frame not whole yet."""
        return self.reader.buf

    def send(self, command: Command) -> bool:
        try:
            os.write(self.cmd_fd, encode_command(command))
        except OSError:
            return False
        return True

    def frames(self) -> list[dict[str, Any]]:
        """Read what is there (non-blocking) and return the complete frames (each header with its
        ``records`` as ``[t, mono, member, op, data]``, ``data`` bytes); EOF raises EOFError, a
        stream that cannot be followed RecorderProtocolError. Frames that do not decode are left
        out, their reasons kept (:meth:`take_rejected`)."""
        try:
            chunk = os.read(self.out_fd, 1 << 20)
        except BlockingIOError:
            return []
        except OSError:
            chunk = b""
        if chunk == b"":
            raise EOFError
        return self.reader.feed(chunk)

    def answers(self) -> list[Answer]:
        """:meth:`frames` as the child's typed answers; one that does not decode is left out, its
        reason kept (:meth:`take_rejected`)."""
        out = []
        for head in self.frames():
            try:
                out.append(decode_answer(head))
            except RecorderProtocolError as exc:
                self.reader.rejected.append(str(exc))
        return out

    def take_rejected(self) -> list[str]:
        """Why each message read since the last call was dropped (one line each)."""
        out, self.reader.rejected = self.reader.rejected, []
        return out

    def kill(self) -> None:
        for fn in (os.killpg, os.kill):
            try:
                fn(self.pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        for fd in (self.cmd_fd, self.out_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def reap(self, patience_s: float = 1.0) -> bool:
        end = time.monotonic() + patience_s
        while True:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid:
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)


def _name_process(comm: str) -> None:
    """The child's name in ps/top (``/proc/self/comm``, 15 bytes): which source a sampler samples."""
    try:
        with open("/proc/self/comm", "w", encoding="ascii") as f:
            f.write(comm[:15])
    except OSError:
        pass


def spawn(name: str, body: Callable[[int, int], None]) -> SourceProcess:
    """Fork a child that runs ``body(cmd_fd, out_fd)`` and exits; the parent gets its handle."""
    cmd_r, cmd_w = os.pipe()
    out_r, out_w = os.pipe()
    try:  # room for a whole tick's frame (~300 kB at 8 GPUs and 200 cgroups): one write, one wake-up
        fcntl.fcntl(out_w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):  # above /proc/sys/fs/pipe-max-size, or not Linux: 64 KiB it is
        pass

    def run() -> None:  # in the child
        gc.freeze()  # what it inherits is never collected here: its pages stay shared with the parent
        _name_process(f"gfrec-{name}")
        os.close(cmd_w)
        os.close(out_r)
        body(cmd_r, out_w)

    pid = fork_child(run, nice=0)  # capture's rules; the recorder is at nice 10 already
    os.close(cmd_r)
    os.close(out_w)
    os.set_blocking(out_r, False)
    return SourceProcess(name=name, pid=pid, cmd_fd=cmd_w, out_fd=out_r, started_mono=time.monotonic())


def child_loop(cmd_fd: int, out_fd: int, driver: Any, ctx: Any, tick_budget_s: float) -> None:
    """The child's side: ``driver.start(ctx)``, then one ``driver.tick`` per command."""
    from forensics.collect.context import Tick, merge_hints
    from forensics.errors import SourcePermissionDenied, SourceUnavailable

    sink: RecordSink = ctx.sink

    def answer(kind: AnswerKind, tick: int | None, error: str | None) -> None:
        notes, ctx.notes = ctx.notes, []
        hints, ctx.published = ctx.published, {}
        send_answer(out_fd, Answer(kind, tick, [Record(*rec) for rec in sink.take_chunks()], notes, error, hints,
                                   sink.dropped))

    ctx.deadline = time.monotonic() + max(tick_budget_s * 4, 30.0)
    try:
        driver.start(ctx)
    except (SourceUnavailable, SourcePermissionDenied) as exc:
        answer("fatal", None, f"unavailable: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - reported, the parent restarts the source
        answer("fatal", None, f"{type(exc).__name__}: {exc}")
        return
    answer("hello", None, None)
    answered = 0
    reader = os.fdopen(cmd_fd, "rb", buffering=0)
    pending = b""
    while True:
        chunk = reader.read(65536)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            try:
                cmd = decode_command(line)
            except RecorderProtocolError as exc:  # the parent hears why, as a failed tick
                answer("tick", None, f"{type(exc).__name__}: {exc}")
                continue
            if isinstance(cmd, QuitCommand):
                driver.stop()
                answer("tick", None, None)
                return
            merge_hints(ctx.hints, dict(cmd.hints))
            index = cmd.tick
            ctx.deadline = time.monotonic() + tick_budget_s
            error = None
            try:
                driver.tick(ctx, Tick(index=index, time_unix=cmd.time_unix))
            except Exception as exc:  # noqa: BLE001 - one tick's failure is reported
                error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            answer("tick", index, error)
            answered += 1
            if answered % TRIM_EVERY == 0:
                malloc_trim()  # the tick's records are sent and freed: their pages go back
