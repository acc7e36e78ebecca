"""``gpuforensics record``: the flight recorder's loop.

Every ``interval_s`` the loop sends a tick to each source's child (forensics.record.child) that is
idle, collects the answers that arrive, and appends their records to the ring with one write.
A child that has not answered within ``tick_timeout_s`` misses that tick (its gap is recorded when
it answers again); one silent for ``hang_kill_s`` is killed and started again with a backoff, so a
hung NVML call costs that source's figures only, never the loop (the children's lives, their
backoffs and gaps: :mod:`forensics.record.supervisor`; the messages between them and the loop:
:mod:`forensics.record.protocol`). The loop itself never reads a source.

Also recorded (member ``recorder/events.jsonl``): the start and the clean stop; a wall-clock jump
(the offset between wall and monotonic clocks moved by more than ``clock_jump_s``: records keep
both clocks and stay in monotonic order); a source's gap (from, to, why); a full disk (writing
stops, one line is logged, records are counted as dropped; every ``retry_s`` a write is tried
again, and when it works the gap is recorded). SIGTERM/SIGINT: children are told to quit, then
killed; the active segment is sealed. ``gpuforensics top`` drives the same loop one step at a
time with no ring (:meth:`Recorder.step`, :meth:`Recorder.settled`, :meth:`Recorder.close`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forensics.bundle.sink import dumps_json
from forensics.collect.context import CaptureOptions
from forensics.collect.lifeline import malloc_trim, wait_readable
from forensics.record.child import TRIM_EVERY
from forensics.record.options import RecordOptions
from forensics.record.protocol import Answer, TickCommand
from forensics.record.sources import ATTRIBUTE_PIDS, DELTA_MEMBERS, DRIVERS, GPU_PIDS
from forensics.record.supervisor import SourceChild, SourceState, Supervisor
from forensics.ring import RingWriter
from forensics.specs.base import Hint
from forensics.specs.ring import RECORDER_EVENTS

if TYPE_CHECKING:
    from forensics.record.live.metrics import RecorderMetrics
    from forensics.record.live.state import LiveState
    from forensics.record.triggers import TriggerEngine

__all__ = ["RecordOptions", "Recorder", "run_recorder"]

EVENTS = RECORDER_EVENTS


class Recorder:
    def __init__(self, options: RecordOptions, log: Callable[[str], None] | None = None) -> None:
        options.check()
        self.options = options
        self.log = log or (lambda msg: print(f"gpuforensics record: {msg}", file=sys.stderr, flush=True))
        self.tick_timeout = options.tick_timeout_s or options.interval_s
        self.hang_kill = options.hang_kill_s or max(5.0, 5 * options.interval_s)
        self.stop = False
        self.supervisor = Supervisor(options.sources, self._source_child, self._event,
                                     tick_timeout_s=self.tick_timeout, hang_kill_s=self.hang_kill)
        self.drivers = {n: DRIVERS[n] for n in options.sources}
        self.pending: list[tuple[float, float, str, str, bytes]] = []
        self.disk_full_since: float | None = None
        self.disk_full_dropped = 0
        self.last_retry = 0.0
        self.seen_pids: dict[int, float] = {}
        self._pids_swept = time.monotonic()
        # hints by key (forensics.record.sources): published, for the child that reads the key next
        # tick (attribute_pids: made by the loop); held, for each new child of a driver that resumes
        self.queued: dict[str, list[Any]] = {}
        self.held: dict[str, Any] = {}
        # the keys some recorded source reads: a hint no child takes is not queued (it would grow
        # all day, e.g. cgroup paths under --sources nvml,procfs)
        self.read_keys = {h.key for d in self.drivers.values() for h in d.reads}
        self.records_written = 0
        self.ticks = 0
        self.writer: RingWriter | None = None
        self.key: bytes | None = None
        # the live state (forensics.record.live) and the triggers over it: fed every record in
        # _handle, ticked once per loop tick; None when neither --trigger nor --metrics-addr is asked for
        self.triggers: TriggerEngine | None = None
        self.live: LiveState | None = None
        if options.triggers is not None or options.metrics is not None:
            from forensics.record.live.state import LiveState

            self.live = LiveState()
        if options.triggers is not None:
            from forensics.record.triggers import TriggerEngine

            options.triggers.check()
            self.triggers = TriggerEngine(options.triggers, self.live, self.log, ring=options.ring,  # type: ignore[arg-type]
                                          interval_s=options.interval_s, redact=options.redact,
                                          nvml_library=options.nvml_library, extra=options.extra)
        # the metrics endpoint (forensics.record.live.metrics): bound here (a busy port fails before
        # anything runs), served by a thread of this process from run() to _shutdown()
        self.ticks_behind = 0
        self.records_dropped = 0
        self.metrics: RecorderMetrics | None = None
        if options.metrics is not None:
            from forensics.record.live.metrics import RecorderMetrics

            self.metrics = RecorderMetrics(options.metrics, options.interval_s)

    @property
    def sources(self) -> dict[str, SourceState]:
        """Each source's state (its child, status, counters, open gap): the supervisor's."""
        return self.supervisor.sources

    # -- signals ----------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stop = True

    # -- the ring ---------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> None:
        now = time.time()
        rec = {"kind": kind, "t": round(now, 6), **fields}
        self.pending.append((now, time.monotonic(), EVENTS, "append",
                             (dumps_json(rec) + "\n").encode("utf-8", "surrogateescape")))

    def _flush(self) -> None:
        if not self.pending:
            return
        if self.writer is None:  # driven by step() with no ring (gpuforensics top): the live state had them
            self.records_written += len(self.pending)
            self.pending.clear()
            return
        now = time.monotonic()
        if self.disk_full_since is not None and now - self.last_retry < self.options.retry_s:
            self.disk_full_dropped += len(self.pending)
            self.pending.clear()
            return
        batch = self.pending
        self.pending = []
        gap = self.disk_full_since is not None
        if gap:
            wall = time.time()
            batch.insert(0, (wall, now, EVENTS, "append", (dumps_json({
                "kind": "gap", "source": "ring", "t": round(wall, 6), "from": self.disk_full_since,
                "to": round(wall, 6), "reason": "disk full: records not written",
                "dropped_records": self.disk_full_dropped}) + "\n").encode()))
        try:
            self.writer.append(batch)
        except OSError as exc:  # ENOSPC, EDQUOT, EIO...: keep running, stop writing, log once
            self.last_retry = now
            if self.disk_full_since is None:
                self.disk_full_since = round(time.time(), 6)
                self.disk_full_dropped = 0
                self.log(f"cannot write the ring ({exc.strerror or exc}); records are dropped until "
                         f"space returns (retrying every {self.options.retry_s:g} s)")
            self.disk_full_dropped += len(batch) - (1 if gap else 0)
            return
        if self.disk_full_since is not None:
            self.log(f"ring writable again; {self.disk_full_dropped} records were dropped")
            self.records_dropped += self.disk_full_dropped
            self.disk_full_since = None
            self.disk_full_dropped = 0
        self.records_written += len(batch)

    # -- sources ----------------------------------------------------------------------------
    def _capture_options(self) -> CaptureOptions:
        extra = {"nvml.call_timeout_s": str(max(1.0, min(self.tick_timeout, 5.0))), **self.options.extra,
                 "ring.dir": str(self.options.ring)}  # the kubernetes source resumes after what the ring holds
        return CaptureOptions(interval_s=self.options.interval_s, timeout_s=self.hang_kill, redact=self.options.redact,
                              nvml_library=self.options.nvml_library, extra=extra, argv=self.options.argv,
                              kubeconfig=self.options.kubeconfig, kube_context=self.options.kube_context,
                              node_name=self.options.node_name)

    def _source_child(self, name: str) -> SourceChild:
        """What the child of source ``name`` runs (forensics.record.supervisor.SourceChild)."""
        return SourceChild(name, self._capture_options(), self.key, self.hang_kill, live=self.live is not None,
                           nice=self.options.nice)

    def _handle(self, st: SourceState, answer: Answer) -> None:
        """One answer of a source's child: its records to the ring (and the live state), its notes
        and the hints it published to the loop's queues, what it means for the source to the supervisor."""
        driver = self.drivers[st.name]
        resume = driver.resumes
        for rec in answer.records:  # data: the member's bytes (SourceProcess.answers)
            data = rec.data if isinstance(rec.data, bytes) else b"".join(rec.data)
            self.pending.append((rec.t, rec.mono, rec.member, rec.op, data))
            if resume is not None and rec.member == resume.member:  # a restarted child resumes after it
                value = resume.read(data)
                if value is not None:
                    self.held[resume.hint.key] = value
            if self.live is not None:  # the child's summary of the lines where it sent one
                self.live.feed(rec.t, rec.mono, rec.member, rec.op, data, rec.summary)
        for note in answer.notes:
            self._event("note", source=st.name, text=note[:2000])
        for hint in driver.publishes:
            self._receive(hint, answer.hints.get(hint.key) or [])
        if answer.kind == "fatal":
            self.supervisor.failed(st, answer.error or "failed")
            return
        if answer.kind == "hello":
            st.status = "running"
            return
        if st.proc is None:
            return
        if self.metrics is not None and st.proc.busy_tick is not None:
            self.metrics.answered(st.name, st.proc.busy_since)
        st.proc.busy_tick = None
        error = answer.error
        if error:
            self._event("tick-error", source=st.name, tick=answer.tick, error=error[:2000])
            if driver.restart_when_hung and ("did not return" in error or "hung" in error):
                self.supervisor.end(st, f"NVML call hung: {error}", backoff=False, after_s=self.options.interval_s)
            return
        self.supervisor.answered(st)

    def _receive(self, hint: Hint[Any], values: list[Any]) -> None:
        """A published hint: GPU PIDs become ``attribute_pids`` (first sightings); others are queued."""
        if hint.key == GPU_PIDS.key:
            if ATTRIBUTE_PIDS.key in self.read_keys:
                self._gpu_pids(values)
        elif hint.key in self.read_keys:
            self.queued.setdefault(hint.key, []).extend(v for v in values if isinstance(v, hint.item))

    def _gpu_pids(self, pids: list[Any]) -> None:
        now = time.monotonic()
        fresh = []
        for pid in pids:
            if type(pid) is not int:
                continue
            last = self.seen_pids.get(pid)
            if last is None or now - last > 30.0:  # gone a while: a PID reused by a new process
                fresh.append(pid)
            self.seen_pids[pid] = now
        if now - self._pids_swept >= 60.0:  # a PID gone 30 s is attributed again anyway: forget those gone 60 s
            self._pids_swept = now
            self.seen_pids = {p: s for p, s in self.seen_pids.items() if now - s < 60}
        if fresh:
            self.queued.setdefault(ATTRIBUTE_PIDS.key, []).extend(fresh)

    def _tick(self, index: int) -> None:
        now_mono = time.monotonic()
        wall = time.time()
        for st in self.sources.values():
            if not self.supervisor.ready(st, now_mono, wall):
                continue
            assert st.proc is not None
            hints: dict[str, list[Any]] = {}
            driver = self.drivers[st.name]
            for hint in driver.reads:
                values = self.queued.pop(hint.key, None)
                if values:
                    hints[hint.key] = values
            resume = driver.resumes
            if resume is not None and not st.hinted and self.held.get(resume.hint.key) is not None:
                hints[resume.hint.key] = [self.held[resume.hint.key]]  # read once, at the child's first tick
            if st.proc.send(TickCommand(index, wall, hints)):
                self.supervisor.sent(st, index, now_mono)
            else:
                self.supervisor.end(st, "command pipe closed")

    def _poll(self, until: float) -> None:
        """Read answers until the monotonic time ``until``; their records go to the ring with one
        write once every child sent this tick has answered (or at ``until``), not one per answer."""
        try:
            self._read_answers(until)
        finally:
            self._flush()

    def _read_answers(self, until: float) -> None:
        while not self.stop:
            left = until - time.monotonic()
            fds = self.supervisor.running()
            if left <= 0:
                return
            try:
                ready = wait_readable(fds, left) if fds else []
                if not fds:
                    time.sleep(min(left, 0.2))
            except InterruptedError:
                continue
            for fd in ready:
                st = fds[fd]
                for answer in self.supervisor.read(st):
                    if answer.kind == "hello" and st.proc is not None:
                        st.proc.hello = True
                    self._handle(st, answer)
                    if st.proc is None:
                        break
            if ready and not self.supervisor.busy():
                self._flush()  # the tick's last answer

    # -- the whole run ----------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        if self.options.nice:
            try:
                os.nice(self.options.nice)
            except OSError:
                pass
        self.queued = {}
        for driver in self.drivers.values():
            if driver.resumes is not None:  # where the ring's records stop (the kernel's of this boot)
                self.held[driver.resumes.hint.key] = driver.resumes.initial(self.options.ring)
        writer = RingWriter(self.options.ring, self.options.max_bytes, self.options.retention_s,
                            segment_bytes=self.options.segment_bytes, segment_age_s=self.options.segment_age_s,
                            writer_info={"interval_s": self.options.interval_s, "sources": list(self.options.sources),
                                         "argv": list(self.options.argv)}, delta_members=DELTA_MEMBERS,
                            redacted=self.options.redact)
        writer.open()
        self.writer = writer
        self.key = writer.key
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        self._event("start", pid=os.getpid(), run=writer.run, interval_s=self.options.interval_s,
                    sources=list(self.options.sources), recovered=writer.recovered,
                    max_bytes=self.options.max_bytes, retention_s=self.options.retention_s)
        if writer.recovered:
            self.log(f"ring recovered: {writer.recovered}")
        if self.metrics is not None:
            self.metrics.start()
            self.log(f"metrics on {self.metrics.url}")
        start = time.monotonic()
        offset = time.time() - start
        index = 0
        try:
            while not self.stop:
                due = start + index * self.options.interval_s
                self._poll(due)
                if self.stop:
                    break
                now = time.monotonic()
                if self.options.duration_s and now - start >= self.options.duration_s:
                    break
                if now - due > self.options.interval_s:  # fell behind (suspended, starved): skip ticks
                    index += int((now - due) // self.options.interval_s)
                    self.ticks_behind += int((now - due) // self.options.interval_s)
                    continue
                new_offset = time.time() - now
                if abs(new_offset - offset) > self.options.clock_jump_s:
                    self._event("clock-jump", by_s=round(new_offset - offset, 6), mono=round(now, 6),
                                wall_before=round(offset + now, 6), wall_after=round(new_offset + now, 6))
                    self.log(f"wall clock jumped by {new_offset - offset:+.1f} s (recorded; order kept by the monotonic clock)")
                offset = new_offset
                self._tick(index)
                if self.triggers is not None:
                    self.triggers.tick()
                if self.metrics is not None:
                    self.metrics.sent({n: st.proc.busy_since for n, st in self.sources.items()
                                       if st.proc is not None and st.proc.busy_tick == index})
                    self.metrics.publish(self, self.live, self.log)
                self.ticks += 1
                index += 1
                self._poll(min(due + self.tick_timeout, start + index * self.options.interval_s))
                writer.maintain()
                if self.ticks % TRIM_EVERY == 0:
                    malloc_trim()  # the tick's frames and batches are freed: their pages go back
        finally:
            self._shutdown()
            for s, h in old.items():
                signal.signal(s, h)
        return self.status()

    def _shutdown(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if self.triggers is not None:
            self.triggers.close()
        self.supervisor.stop_all(self._handle)
        self._event("stop", ticks=self.ticks, records=self.records_written)
        self.last_retry = 0.0  # the last flush tries the disk now, whatever the retry interval
        self._flush()
        if self.writer is not None:
            self.writer.close()

    # -- driven one step at a time, with no ring (gpuforensics top's own samplers) ------------
    def step(self, index: int | None, until: float) -> None:
        """Send tick ``index`` to the sources (starting those due; None: no tick now), then read
        their answers until the monotonic time ``until``. Without :meth:`run` there is no ring:
        the records reach :attr:`live` only."""
        if index is not None:
            self._tick(index)
        self._poll(until)

    def settled(self) -> bool:
        """Every source started and answered its last tick, and no hint waits for its reader
        (GPU PIDs to attribute, cgroup paths to sample)."""
        return self.supervisor.settled() and not any(self.queued.values())

    def close(self) -> None:
        """Stop the sources' children (what :meth:`run` does at its end)."""
        self._shutdown()

    def status(self) -> dict[str, Any]:
        return {"ticks": self.ticks, "records_written": self.records_written,
                "sources": self.supervisor.status(),
                **({"triggers": self.triggers.status()} if self.triggers is not None else {})}


def run_recorder(options: RecordOptions, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Record until SIGTERM/SIGINT (or ``duration_s``); return the run's counters."""
    return Recorder(options, log).run()
