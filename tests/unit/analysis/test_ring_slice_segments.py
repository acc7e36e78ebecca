"""A ring history is sliced (forensics.analysis.slices) only where each slice can find its records:
a slice reads the segments up to the first whose last record passes its end, so segments out of
time order (a wall clock set ahead, then back) are read whole, as without slicing."""

from __future__ import annotations

import time
from pathlib import Path

from forensics.analysis import ring_slices
from forensics.analysis.ring_view import HistoryPart, rebuild_ring
from forensics.analysis.source import Source
from forensics.bundle.reader import open_bundle
from forensics.ring import RingWriter
from tests.support.ring_bundle import capture_since

MEMBER = "app/events.jsonl"


def test_segments_out_of_time_order_lose_no_record_to_a_slice(tmp_path: Path) -> None:
    base = time.time() - 3 * 86400.0
    w = RingWriter(tmp_path / "ring", retention_s=90 * 86400.0).open()
    lines: list[bytes] = []

    def put(t: float) -> None:
        line = f'{{"t": {t}}}\n'.encode()
        lines.append(line)
        w.append([(t, t - base, MEMBER, "append", line)])

    for k in range(3):
        put(base + k)
    put(base + 5000.0)  # the wall clock set ahead: this segment's last record is 5000 s on
    w.rotate()
    for k in range(3):
        put(base + 20.0 + k)  # set back: the next segment's records are in the first hour again
    w.close(seal=False)
    bundle = capture_since(tmp_path / "ring", tmp_path / "out", "4d")
    opened = open_bundle(bundle)
    src = Source(opened, bundle.name, opened.members)
    assert sorted(bytes(rebuild_ring(src).members[MEMBER]).splitlines(keepends=True)) == sorted(lines)
    got: list[bytes] = []
    line_base: dict[str, int] = {}
    state: dict[str, tuple[bytes, tuple[str, int]]] = {}
    windows = ring_slices([bundle], slice_s=3600.0)  # the slices analyze reads ([]: the whole history)
    for window in windows or [None]:
        rebuilt = rebuild_ring(src, part=None if window is None else HistoryPart(window, line_base, state))
        got += bytes(rebuilt.members.get(MEMBER, b"")).splitlines(keepends=True)
        line_base = {m: line_base.get(m, 0) + n for m, n in rebuilt.lines.items()}
        state = rebuilt.state
    assert sorted(got) == sorted(lines)  # every record read once, none lost to a cut
