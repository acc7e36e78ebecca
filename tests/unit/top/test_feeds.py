"""``top`` following a recorder's ring: the records appended since the last look, change-only
lines rebuilt, across the seal of the active segment (the new one starts with the state again)."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

from forensics.record.sources import DELTA_MEMBERS
from forensics.ring import RingWriter
from forensics.top.feeds import RingFeed, recorder_running
from forensics.top.snapshot import Tracker, build_snapshot
from forensics.top.state import TopState
from tests.unit.record.test_live import SAMPLES


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers() if m.isfile() and "/" in m.name}


def _tick(line: str, tick: int, t: float) -> bytes:
    """A sample's NVML line as the sampler would write it at tick ``tick``, time ``t``."""
    obj = json.loads(line)
    obj["tick"], obj["t"] = tick, t
    return (json.dumps(obj) + "\n").encode()


def _ring_after_one_tick(ring: Path) -> tuple[RingWriter, list[str], float]:
    """A ring as the recorder starts one from the sample bundle's node: the state members, then one
    tick of GPU 0 (trainer and notebook on it); the writer (open), the sample's NVML lines, and
    the start time. Line 0 onwards: trainer alone on GPU 0."""
    members = _members(SAMPLES / "unallocated-gpu-use.tgz")
    writes = [(n, d) for n, d in sorted(members.items())
              if n.startswith(("nvml/", "proc/", "docker/")) and not n.endswith(".jsonl")]
    lines = [ln for ln in members["nvml/samples.jsonl"].decode().splitlines() if ln.strip()]
    assert '"pid": 6768' in lines[24] and '"pid": 6768' not in lines[0]  # GPU 0: trainer and notebook; trainer
    writer = RingWriter(ring, max_bytes=64 << 20, segment_bytes=1 << 20, segment_age_s=600.0,
                        delta_members=DELTA_MEMBERS).open()
    now = time.time()
    writer.append([(now, time.monotonic(), n, "write", d) for n, d in writes])
    writer.append([(now + 1, time.monotonic(), "nvml/samples.jsonl", "append",
                   _tick(lines[24], 1, now + 1) + _tick(lines[25], 1, now + 1))])
    return writer, lines, now


def test_the_records_written_just_before_a_seal_are_read(tmp_path: Path) -> None:
    """The writer seals right after the append that ages (or fills) the active segment, and opens
    the next one at the next append: what that last append wrote is in the sealed segment only.
    top reads it there, from where it stopped: a process that left the GPU in that tick is gone
    from the view, and a container that died then is shown dead (no later tick brings it back)."""
    ring = tmp_path / "ring"
    writer, lines, now = _ring_after_one_tick(ring)
    try:
        state = TopState()
        feed = RingFeed(state, ring)
        feed.look_s = 0.0
        assert feed.poll() > 0
        first = feed.segment
        procs = build_snapshot(state, Tracker(), feed.label).processes
        owners = {p.owner: p.container_id for p in procs}
        assert set(owners) == {"trainer", "notebook"}
        died = {"Type": "container", "Action": "die", "time": int(now + 2),
                "Actor": {"ID": owners["notebook"], "Attributes": {"name": "notebook"}}}
        writer.append([(now + 2, time.monotonic(), "nvml/samples.jsonl", "append",
                        _tick(lines[0], 2, now + 2) + _tick(lines[1], 2, now + 2)),
                       (now + 2, time.monotonic(), "docker/events.jsonl", "append",
                        (json.dumps(died) + "\n").encode())])
        writer.rotate()  # as append() does when the segment is old enough: no active segment now
        assert feed.poll() == 2  # the sealed segment's last records
        snap = build_snapshot(state, Tracker(), feed.label)
        assert {p.owner for p in snap.processes} == {"trainer"}
        assert owners["notebook"] in state.ended
        assert feed.poll() == 0  # read once
        writer.append([(now + 3, time.monotonic(), "nvml/samples.jsonl", "append",
                        _tick(lines[2], 3, now + 3) + _tick(lines[3], 3, now + 3))])
        assert feed.poll() > 1  # the new segment: the state again, then the tick
        assert feed.segment not in ("", first)
        assert {p.owner for p in build_snapshot(state, Tracker(), feed.label).processes} == {"trainer"}
        assert not feed.problems, feed.problems
    finally:
        writer.close()


def test_the_ring_is_followed_across_a_sealed_segment(tmp_path: Path) -> None:
    members = _members(SAMPLES / "unallocated-gpu-use.tgz")
    writes = [(n, d) for n, d in sorted(members.items())
              if n.startswith(("nvml/", "proc/", "docker/")) and not n.endswith(".jsonl")]  # as the replay
    lines = [ln for ln in members["nvml/samples.jsonl"].decode().splitlines() if ln.strip()]
    ring = tmp_path / "ring"
    # sealed by age every 0.2 s; each new segment opens with the state (the identity members) again
    writer = RingWriter(ring, max_bytes=64 << 20, segment_bytes=1 << 20, segment_age_s=0.2,
                        delta_members=DELTA_MEMBERS).open()
    try:
        assert recorder_running(ring)
        now = time.time()
        writer.append([(now, time.monotonic(), n, "write", d) for n, d in writes])
        state = TopState()
        feed = RingFeed(state, ring)
        feed.look_s = 0.0
        segments = set()
        utils = []
        for k in range(0, 420, 7):  # the sample's ticks over and over, with a changing load on GPU 0
            batch = []
            for j in range(k, k + 7):
                line = json.loads(lines[j % len(lines)])
                if line.get("gpu_index") == 0 and line.get("kind") == "device":
                    line["nvml"]["nvmlDeviceGetUtilizationRates"]["value"]["gpu"] = j % 101
                batch.append((now + j, time.monotonic(), "nvml/samples.jsonl", "append", (json.dumps(line) + "\n").encode()))
            writer.append(batch)
            time.sleep(0.05)
            feed.poll()
            if feed.segment:  # none between the seal of one and the first write to the next
                segments.add(feed.segment)
            if state.gpus():
                utils.append(state.gpus()[0].util_pct)
        feed.poll()
        assert len(segments) >= 3, segments  # sealed twice or more while followed
        snap = build_snapshot(state, Tracker(), feed.label)
        assert snap.source == f"recorder ring {ring}"
        assert {p.owner for p in snap.processes} == {"trainer"}  # named: the state came with each segment
        assert not feed.problems, feed.problems
        assert len(set(utils)) > 10  # every look saw new lines
    finally:
        writer.close()
    assert not recorder_running(ring)


def test_a_segment_sealed_whole_between_two_looks_is_named(tmp_path: Path) -> None:
    """A segment top never saw active (written and sealed between two of its looks: top stopped,
    or tiny segments) is not replayed into the live view: the problems name it."""
    lines = [ln for ln in _members(SAMPLES / "unallocated-gpu-use.tgz")["nvml/samples.jsonl"].decode().splitlines()
             if ln.strip()]
    ring = tmp_path / "ring"
    writer = RingWriter(ring, max_bytes=64 << 20, segment_age_s=600.0, delta_members=DELTA_MEMBERS).open()
    try:
        now = time.time()
        state = TopState()
        feed = RingFeed(state, ring)
        feed.look_s = 0.0

        def tick(n: int) -> None:
            writer.append([(now + n, time.monotonic(), "nvml/samples.jsonl", "append",
                            _tick(lines[0], n, now + n) + _tick(lines[1], n, now + n))])

        tick(0)
        assert feed.poll() == 1
        tick(1)  # the followed segment's last tick, after top's last look at it
        for n in (2, 3):  # the second and third segments: never seen active
            writer.rotate()
            tick(n)
        writer.rotate()
        writer.append([(now + 4, time.monotonic(), "nvml/samples.jsonl", "append", _tick(lines[2], 4, now + 4))])
        assert feed.poll() == 2  # the first segment's last tick, then the active one's
        assert feed.problems == ["2 segments (seg-0000000002.jsonl.gz to seg-0000000003.jsonl.gz) were written "
                                 "and sealed between two looks: their records are not in the view"]
    finally:
        writer.close()


def test_top_started_right_after_a_seal_shows_the_sealed_data(tmp_path: Path) -> None:
    """The recorder seals the active segment right after the append that ages it, and opens the next
    one only at its next append (a tick later, or a minute at ``--interval 60``). ``top --once``
    started in between shows the GPUs and processes of the segment just sealed, not an empty view."""
    import os
    import subprocess
    import sys

    ring = tmp_path / "ring"
    writer, lines, now = _ring_after_one_tick(ring)
    try:
        writer.rotate()  # sealed; no active segment until the next append
        root = Path(__file__).resolve().parents[3]
        top = subprocess.run([sys.executable, "-m", "forensics", "top", "--once", "--json", "--ring", str(ring)],
                             capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": str(root)})
        assert top.returncode == 0, top.stderr[-3000:]
        doc = json.loads(top.stdout)
        assert doc["source"] == f"recorder ring {ring}"
        assert doc["gpus"] and {p["owner"] for p in doc["processes"]} == {"trainer", "notebook"}, doc
        # the feed then follows the next segment as usual, the sealed one read once
        state = TopState()
        feed = RingFeed(state, ring)
        feed.look_s = 0.0
        assert feed.poll() > 0 and feed.poll() == 0 and not feed.problems, feed.problems
        writer.append([(now + 2, time.monotonic(), "nvml/samples.jsonl", "append",
                        _tick(lines[0], 2, now + 2) + _tick(lines[1], 2, now + 2))])
        assert feed.poll() > 0 and feed.segment and not feed.problems, feed.problems
        assert {p.owner for p in build_snapshot(state, Tracker(), feed.label).processes} == {"trainer"}
    finally:
        writer.close()
