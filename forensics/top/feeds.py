"""Where ``gpuforensics top``'s records come from: the recorder's ring, or top's own samplers.

Both feed a :class:`~forensics.top.state.TopState` the records ``gpuforensics record`` writes, so
the view is the same whichever runs:

- :class:`RingFeed`, when a recorder is running on the node (its ring's ``writer.json`` names a
  live writer): follows the ring's active segment, from its start (every segment opens with the
  latest copy of each identity member: device lists, container inspects, ``proc/<pid>/`` files),
  then only the bytes appended since the last look, change-only lines rebuilt by the ring's own
  reader (:func:`forensics.ring.reader.window_records`). No NVML call, no /proc read: the cost of
  following is a read of what the recorder wrote since. A segment sealed meanwhile is read to its
  end first (its sealed copy, from where the last look stopped: the writer seals right after the
  append that ages or fills it, so that tick's records, events included, are in no other segment),
  then the new active one, which starts with the state again. Started between a seal and the
  writer's next append (no active segment: the writer opens the next one with that append), top
  reads the segment just sealed, whole, so the view shows the last sealed data meanwhile.
- :class:`SelfFeed`, otherwise: the recorder's own loop and sampler children
  (:class:`forensics.record.recorder.Recorder`: capture's collectors, one child per source at
  nice 10, a hung NVML call killed and the source restarted) with no ring under it: its records go
  to the state only. The parent (the view) stays at its own priority.

The recorder serves no socket and its metrics endpoint (``record --metrics-addr``) is optional
and holds no owners' names, so the ring, which every recorder writes, is the one honest source.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forensics.record.options import RecordOptions
from forensics.record.recorder import Recorder
from forensics.ring import RingReader
from forensics.ring.delta import DeltaDecoder
from forensics.ring.files import ACTIVE_RE
from forensics.ring.reader import window_records
from forensics.ring.segment import SegmentInfo, valid_prefix
from forensics.specs import nvml as nvml_spec
from forensics.top.state import TopState

__all__ = ["SOURCES", "RingFeed", "SelfFeed", "recorder_running"]

#: what top samples itself: the recorder's sources but the Kubernetes event follower (top names
#: pods from their containers' kubelet labels and cgroups, as the live state does)
SOURCES = ("nvml", "procfs", "cgroups", "kernel", "docker")
MAX_READ = 8 << 20  # bytes of a segment read per look (an active segment is 4 MiB at most by default)


def recorder_running(ring: Path) -> bool:
    """A recorder holds the ring at ``ring`` now (its lock is held)."""
    try:
        info = RingReader(ring).writer()
    except Exception:  # noqa: BLE001 - no ring, unreadable: no recorder to read from
        return False
    return bool(info and info.get("alive"))


def _seq(name: str) -> int:
    m = ACTIVE_RE.match(name)
    return int(m.group(1)) if m else -1


class RingFeed:
    """Follows the active segment of the ring at ``root`` (see the module docstring).
    ``on_tick(t)`` is called after each NVML record that changed the GPU process set, or came
    after identities changed (a GPU process' ``proc/<pid>/`` files, a container's inspect), so
    what came and went before ``top`` started is seen too, named."""

    def __init__(self, state: TopState, root: Path, on_tick: Callable[[float], None] | None = None) -> None:
        self.state = state
        self.root = Path(root)
        self.reader = RingReader(self.root)
        self.on_tick = on_tick
        self.segment = ""  # the active segment followed ("": none, until the writer opens the next)
        self.last_seq = -1  # the sequence number of the last one followed
        self.offset = 0
        self.header = b""
        self.run = ""
        self.decoders: dict[str, DeltaDecoder] = {}
        self.problems: list[str] = []
        self.records = 0
        self.look_s = 0.5
        self.looked = -1e9

    @property
    def label(self) -> str:
        return f"recorder ring {self.root}"

    def poll(self, wait_s: float = 0.0) -> int:
        """Feed the records appended since the last look; how many. Looks at most every
        :attr:`look_s` (the view's loop asks every 50 ms; the recorder writes once a tick);
        ``wait_s``: unused, the view's loop waits for keys."""
        now = time.monotonic()
        if now - self.looked < self.look_s:
            return 0
        self.looked = now
        segments = self.reader.segments()
        fed = 0
        if self.segment:
            fed += self._finish_sealed(segments)
        active = [s for s in segments if not s.sealed]
        if not active:
            if self.last_seq < 0:  # top started between a seal and the writer's next append
                fed += self._read_last_sealed(segments)
            return fed
        newest = active[-1].name
        if newest != self.segment:
            skipped = [s.name for s in segments if s.sealed and self.last_seq < s.seq < active[-1].seq]
            if skipped and self.last_seq >= 0:
                self.problems.append(f"{len(skipped)} segments ({skipped[0]} to {skipped[-1]}) were written and "
                                     "sealed between two looks: their records are not in the view")
            self._follow(newest)
        try:
            with open(self.root / newest, "rb") as f:
                f.seek(self.offset)
                data = f.read(MAX_READ)
        except FileNotFoundError:  # sealed meanwhile: the next look reads its end, then the new one
            return fed
        return fed + max(self._feed(newest, data), 0)

    def _follow(self, name: str) -> None:
        """Read the segment ``name`` from its start (its own header, decoders of its own)."""
        self.segment, self.offset, self.header, self.decoders = name, 0, b"", {}
        if name:
            self.last_seq = _seq(name)

    def _read_last_sealed(self, segments: list[SegmentInfo]) -> int:
        """The newest sealed segment, whole (as an active one is read from its start): what top shows
        when it starts right after a seal, the writer opening the next segment only at its next append
        (a tick later). The next active segment is then followed as usual. How many records were fed."""
        sealed = [s for s in segments if s.sealed]
        if not sealed:
            return 0
        last = sealed[-1]
        try:
            data = self.reader.read_text(last)
        except OSError:
            data = b""
        self._follow(last.name.removesuffix(".gz"))
        return self._feed_rest(last.name, data)

    def _finish_sealed(self, segments: list[SegmentInfo]) -> int:
        """The followed segment, if sealed since the last look: the records after :attr:`offset`,
        from its sealed copy (the same bytes, checked against the index's SHA-256); then none is
        followed until the next active segment is. How many records were fed."""
        stem = self.segment
        sealed = next((s for s in segments if s.sealed and s.name.removesuffix(".gz") == stem), None)
        if sealed is None:
            if any(s.name == stem for s in segments):
                return 0  # still active
            if any(s.seq > _seq(stem) for s in segments):
                self.problems.append(f"{stem}: sealed and dropped before its last records were read: "
                                     "they are not in the view")
                self._follow("")
            return 0
        try:
            data = self.reader.read_text(sealed)
        except OSError:
            data = b""
        if not data:
            self.problems.append(f"{sealed.name}: sealed and unreadable before its last records were read: "
                                 "they are not in the view")
            self._follow("")
            return 0
        return self._feed_rest(sealed.name, data)

    def _feed_rest(self, name: str, data: bytes) -> int:
        """A sealed segment's text from :attr:`offset` to its end, MAX_READ at a time as the active
        segment is read; then none is followed until the next active one is. The records fed."""
        fed = 0
        while self.offset < len(data):
            got = self._feed(name, data[self.offset:self.offset + MAX_READ])
            if got < 0:
                break
            fed += got
        self._follow("")
        return fed

    def _feed(self, name: str, data: bytes) -> int:
        """Feed the whole lines of ``data`` (the segment's bytes from :attr:`offset`); the records
        fed (-1: not one whole line)."""
        cut = data.rfind(b"\n")
        if cut < 0:
            return -1
        chunk = data[:cut + 1]
        self.offset += cut + 1
        if not self.header:
            nl = chunk.find(b"\n")
            self.header = chunk[:nl + 1]
            chunk = chunk[nl + 1:]
        parsed = valid_prefix(self.header + chunk)
        if not parsed.lines:
            return 0
        self.run = self.run or str(parsed.lines[0][1].get("run", ""))
        fed = 0
        gen = self.state.process_gen
        for rec in window_records(name, parsed.lines, self.run, None, None, (), False, self.decoders, [],
                                  self.problems, skipped=parsed.skipped):
            self.state.feed(rec.t, rec.mono, rec.member, rec.op, rec.data)
            fed += 1
            if self.on_tick is not None and rec.member == nvml_spec.SAMPLES and (self.state.process_gen != gen
                                                                                 or self.state.dirty):
                gen = self.state.process_gen
                self.on_tick(rec.t)
        del self.problems[:-20]
        self.records += fed
        return fed

    def close(self) -> None:
        pass


class SelfFeed:
    """top's own samplers (see the module docstring). :meth:`poll` sends a tick when one is due
    and reads the answers that arrived within ``wait_s``."""

    label = "sampled by top"

    def __init__(self, state: TopState, interval_s: float, nvml_library: str | None = None,
                 extra: dict[str, str] | None = None, kubeconfig: str | None = None,
                 kube_context: str | None = None, node_name: str | None = None,
                 sources: tuple[str, ...] = SOURCES, log: Callable[[str], None] | None = None) -> None:
        self.state = state
        self.interval_s = interval_s
        self.messages: list[str] = []
        options = RecordOptions(ring=Path(os.devnull), interval_s=interval_s, sources=sources,
                                nvml_library=nvml_library, extra=dict(extra or {}), nice=10,
                                kubeconfig=kubeconfig, kube_context=kube_context, node_name=node_name,
                                argv=("top",))
        self.recorder = Recorder(options, log or self._log)  # never run(): no ring, step() by step()
        self.recorder.live = state
        self.index = 0
        self.next_due = time.monotonic()

    def _log(self, message: str) -> None:
        self.messages = [*self.messages[-9:], message]

    def poll(self, wait_s: float = 0.05) -> int:
        now = time.monotonic()
        before = self.state.records_seen
        index = None
        if now >= self.next_due:
            index = self.index
            self.index += 1
            self.next_due = max(self.next_due + self.interval_s, now)
        self.recorder.step(index, time.monotonic() + wait_s)
        return self.state.records_seen - before

    def settle(self, ticks: int = 5, tick_s: float = 0.5, deadline_s: float = 20.0) -> None:
        """Run ``ticks`` ticks ``tick_s`` apart, and more (up to ``deadline_s``) while GPU PIDs or
        cgroups are still being handed between the samplers: ``--once`` then shows what a second
        look would (owners attributed, CPU % over an interval)."""
        self.interval_s = tick_s
        self.next_due = time.monotonic()
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            self.poll(0.05)
            self.state.refresh()  # the attribution, when identities changed
            if self.index >= ticks and self.recorder.settled() and not self.state.dirty:
                break

    def status(self) -> dict[str, Any]:
        return self.recorder.status()

    def close(self) -> None:
        self.recorder.close()
