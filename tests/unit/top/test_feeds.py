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
