"""The sources' children, supervised: each started, watched, ended with a backoff, its gaps kept.

The recorder's loop (forensics.record.recorder) decides what to send and what to do with the
answers; everything about a source's child being there or not is here:

- :class:`SourceChild`: what a source's child runs once forked (its nice level, its sink, its
  collector context and :func:`~forensics.record.child.child_loop`), a value that can be built and
  run apart from the fork;
- :class:`Supervisor`: one :class:`SourceState` per source. :meth:`Supervisor.ready` starts a child
  that is due, kills one that did not start in ``2 * hang_kill_s`` or did not answer a tick in
  ``hang_kill_s`` (a hung NVML call costs that source's figures only), and counts a tick a busy
  child misses; :meth:`Supervisor.end` ends a child and sets when the next may start (1 s, doubled
  per failure in a row, at most 60 s); a source's gap opens when it fails or misses a tick and is
  recorded (``gap``: from, to, why) when it answers again (:meth:`Supervisor.answered`).

What is recorded goes through ``event(kind, **fields)`` (the recorder's ``recorder/events.jsonl``):
a source unavailable, restarted or exited, its gaps, a message from its child that did not decode
(``protocol-error``).

Memory: the children are forks of the recorder. Before the first fork the supervisor has the
children's modules loaded and the parent's objects frozen (:meth:`Supervisor.share_with_children`),
so their pages stay shared (see forensics.record.child).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from forensics.bundle.redact import Redactor
from forensics.collect.context import CaptureOptions, CollectContext
from forensics.collect.lifeline import wait_readable
from forensics.errors import RecorderProtocolError
from forensics.record.child import RecordSink, SourceProcess, child_loop, spawn
from forensics.record.protocol import Answer, QuitCommand
from forensics.record.sources import make_driver, preload

__all__ = ["SourceChild", "SourceState", "Supervisor", "backoff_s"]

_frozen = False  # gc.freeze() done in this process (once: see Supervisor.share_with_children)


def backoff_s(failures: int) -> float:
    """How long a source waits before its next child after ``failures`` failures in a row: 1 s,
    doubled per failure, at most 60 s."""
    return min(60.0, float(2 ** min(failures - 1, 6)))


@dataclass
class SourceState:
    """One source as the supervisor sees it: its child (None between two), when the next may
    start, its status and counters, and its open gap (since when, why)."""

    name: str
    proc: SourceProcess | None = None
    next_start: float = 0.0
    failures: int = 0
    status: str = "starting"
    error: str | None = None
    gap_from: float | None = None
    gap_why: str = ""
    ticks: int = 0
    missed: int = 0
    restarts: int = 0
    reported: str | None = None  # the unavailability last written as an event, until a tick is answered
    hinted: bool = False  # the child now running was sent a tick (its driver's ``resumes`` hint went with the first)


@dataclass(frozen=True)
class SourceChild:
    """What the child of source ``name`` runs after the fork, ``self(cmd_fd, out_fd)``: at nice
    ``nice`` (added to the recorder's), its collector context over a :class:`RecordSink` (one that
    summarises the per-tick lines for the live state when ``live``), then
    :func:`~forensics.record.child.child_loop` with ``tick_budget_s`` per tick."""

    name: str
    options: CaptureOptions
    key: bytes | None
    tick_budget_s: float
    live: bool = False
    nice: int = 0

    def __call__(self, cmd_fd: int, out_fd: int) -> None:
        if self.nice:
            try:
                os.nice(self.nice if os.nice(0) < self.nice else 0)
            except OSError:
                pass
        sink = RecordSink()
        if self.live:  # the live state folds the children's summaries, not the lines' JSON
            from forensics.record.live.summaries import SUMMARIZED, Summarizer

            sink = RecordSink(summarize=Summarizer(), summarized=SUMMARIZED)
        ctx = CollectContext(self.options, sink, Redactor(enabled=self.options.redact, key=self.key),  # type: ignore[arg-type]
                             {}, None, self.name)
        child_loop(cmd_fd, out_fd, make_driver(self.name), ctx, self.tick_budget_s)


class Supervisor:
    """See the module docstring. ``child(name)``: what to run in a source's forked child, given
    its command and answer pipes (the recorder's: a :class:`SourceChild`); ``event(kind,
    **fields)``: records what happened to a source."""

    def __init__(self, names: Iterable[str], child: Callable[[str], Callable[[int, int], None]],
                 event: Callable[..., None], *, tick_timeout_s: float, hang_kill_s: float) -> None:
        self.sources = {n: SourceState(n) for n in names}
        self.child = child
        self.event = event
        self.tick_timeout_s = tick_timeout_s
        self.hang_kill_s = hang_kill_s

    # -- a child's life ------------------------------------------------------------------------
    def share_with_children(self) -> None:
        """Before the first fork: load what the children will load, then move every object there
        is into the collector's permanent generation (``gc.freeze``). A child's collections then
        never write to the inherited objects' headers, nor do the parent's, so the pages stay
        shared between the parent and all its children instead of being copied into each one.
        Once per process: objects made later are collected as usual (a restarted child inherits
        them unfrozen; it freezes what it inherits itself, see forensics.record.child.spawn)."""
        global _frozen
        if _frozen:
            return
        preload(self.sources)
        gc.collect()
        gc.freeze()
        _frozen = True

    def start(self, st: SourceState) -> None:
        """Fork the source's child; it counts as started when it says hello."""
        self.share_with_children()
        st.proc = spawn(st.name, self.child(st.name))
        st.status = "starting"
        st.hinted = False

    def end(self, st: SourceState, why: str, backoff: bool = True, after_s: float = 0.0) -> None:
        """Kill the source's child (if any), open its gap, and set when the next may start:
        after :func:`backoff_s` of its failures in a row, or (``backoff=False``) after ``after_s``."""
        if st.proc is not None:
            _discard(st.proc)
            st.proc = None
        st.failures += 1
        st.restarts += 1
        st.next_start = time.monotonic() + (backoff_s(st.failures) if backoff else after_s)
        st.error = why
        if st.gap_from is None:
            st.gap_from, st.gap_why = time.time(), why

    def ready(self, st: SourceState, now_mono: float, wall: float) -> bool:
        """Whether the source's child can be sent a tick now. If not: a child due is started, one
        that did not start in time or has not answered for ``hang_kill_s`` is killed, and a busy
        child misses this tick (its gap opens)."""
        if st.proc is None:
            if now_mono >= st.next_start:
                self.start(st)
            return False
        if not st.proc.hello:
            if now_mono - st.proc.started_mono > self.hang_kill_s * 2:
                self.end(st, f"did not start within {self.hang_kill_s * 2:g} s")
            return False
        if st.proc.busy_tick is not None:
            st.missed += 1
            if st.gap_from is None:
                st.gap_from, st.gap_why = wall, f"no answer within {self.tick_timeout_s:g} s"
            if now_mono - st.proc.busy_since > self.hang_kill_s:
                self.event("source", source=st.name, status="restarted",
                           error=f"no answer for {now_mono - st.proc.busy_since:.1f} s: killed")
                self.end(st, f"no answer for {self.hang_kill_s:g} s (killed)")
            return False
        return True

    def sent(self, st: SourceState, tick: int, now_mono: float) -> None:
        """Tick ``tick`` went to the source's child."""
        assert st.proc is not None
        st.proc.busy_tick = tick
        st.proc.busy_since = now_mono
        st.hinted = True

    # -- what its answers mean -----------------------------------------------------------------
    def failed(self, st: SourceState, why: str) -> None:
        """The child's source cannot start (a ``fatal`` answer): recorded once per reason."""
        if st.reported != why:
            self.event("source", source=st.name, status="unavailable", error=why)
            st.reported = why
        self.end(st, why)
        st.status = "unavailable"

    def answered(self, st: SourceState) -> None:
        """The child answered a tick: its failures are over, and its gap (if one was open) is recorded."""
        st.ticks += 1
        st.failures = 0
        st.reported = None
        if st.gap_from is not None:
            self.event("gap", source=st.name, **{"from": round(st.gap_from, 6)}, to=round(time.time(), 6),
                       reason=st.gap_why)
            st.gap_from = None
        st.status = "running"
        st.error = None

    def read(self, st: SourceState) -> list[Answer]:
        """The answers the source's child sent (what is there: non-blocking). A child that exited
        or whose stream cannot be followed is ended; a message that does not decode is dropped,
        and recorded (``protocol-error``)."""
        assert st.proc is not None
        try:
            answers = st.proc.answers()
        except EOFError:
            self.event("source", source=st.name, status="exited", error="sampler process exited")
            self.end(st, "sampler process exited")
            return []
        except RecorderProtocolError as exc:
            self.event("source", source=st.name, status="restarted", error=str(exc))
            self.end(st, str(exc))
            return []
        for why in st.proc.take_rejected():
            self.event("protocol-error", source=st.name, error=why[:2000])
        return answers

    # -- all of them ---------------------------------------------------------------------------
    def running(self) -> dict[int, SourceState]:
        """The sources with a child, by the pipe their answers come on."""
        return {st.proc.out_fd: st for st in self.sources.values() if st.proc is not None}

    def busy(self) -> bool:
        """Some child has not answered its tick yet."""
        return any(st.proc is not None and st.proc.busy_tick is not None for st in self.sources.values())

    def settled(self) -> bool:
        """Every child started and answered its last tick."""
        return not any(st.proc is not None and (st.proc.busy_tick is not None or not st.proc.hello)
                       for st in self.sources.values())

    def stop_all(self, handle: Callable[[SourceState, Answer], None], patience_s: float = 2.0) -> None:
        """Tell every child to quit, hand their last answers to ``handle`` for ``patience_s``, then
        kill those still there."""
        for st in self.sources.values():
            if st.proc is not None:
                st.proc.send(QuitCommand())
        end = time.monotonic() + patience_s
        while any(st.proc is not None and st.proc.busy_tick is None for st in self.sources.values()) \
                and time.monotonic() < end:
            for st in self.sources.values():
                if st.proc is None or not wait_readable([st.proc.out_fd], 0.05):
                    continue
                try:
                    for answer in st.proc.answers():
                        handle(st, answer)
                except (EOFError, RecorderProtocolError):
                    _discard(st.proc)
                    st.proc = None
        for st in self.sources.values():
            if st.proc is not None:
                _discard(st.proc)
                st.proc = None

    def status(self) -> dict[str, Any]:
        return {n: {"status": s.status, "ticks": s.ticks, "missed": s.missed, "restarts": s.restarts, "error": s.error}
                for n, s in self.sources.items()}


def _discard(proc: SourceProcess) -> None:
    proc.kill()
    proc.close()
    proc.reap(0.5)
