"""The recorder's cgroup lines after quiet ticks (``unchanged_until``, docs/bundle-format/cgroups.md):
the CPU reading the loader adds at that time holds the previous line's counters, so it must cite the
previous line, whose excerpt shows those counters, not the line that carried the time."""

from __future__ import annotations

import json
from typing import Any

from forensics.analysis.loaders.cgroups import load_cgroups
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model
from forensics.analysis.samples import CpuSample
from forensics.analysis.source import Source

PATH = "/docker/" + "a" * 64


def _line(t: float, periods: int, throttled: int, unchanged_until: float | None = None) -> str:
    rec: dict[str, Any] = {"cgroup": PATH, "t": t, "tick": int(t), "time": "x",
                           "values": {"cpu": {"nr_periods": periods, "nr_throttled": throttled, "throttled_ns": 0}}}
    if unchanged_until is not None:
        rec["unchanged_until"] = unchanged_until
    return json.dumps(rec)


class _Bundle:
    manifest: dict[str, Any] = {}

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read_bytes(self, member: str) -> bytes:
        return self.data


def test_the_reading_at_unchanged_until_cites_the_line_whose_counters_it_holds() -> None:
    data = (_line(100.0, 10, 0) + "\n" + _line(110.0, 60, 40, unchanged_until=109.0) + "\n").encode()
    model = Model()
    load_cgroups(Source(_Bundle(data), "b", ["cgroup/samples.jsonl"]), model, "n", LoadState())
    by_t = {s.t: s for s in model.series(CpuSample)}
    assert sorted(by_t) == [100.0, 109.0, 110.0]
    added = by_t[109.0]
    assert (added.nr_periods, added.nr_throttled) == (10, 0)
    assert added.evidence.locator == "line 1"
    assert '"nr_periods": 10' in added.evidence.excerpt and '"nr_throttled": 0' in added.evidence.excerpt
    closing = by_t[110.0].evidence  # the line that ends the quiet stretch shows where it began
    assert closing.locator == "line 2" and '"unchanged_until": 109.0' in closing.excerpt
    for sample in model.series(CpuSample):  # every excerpt is the member's own bytes
        assert sample.evidence.excerpt.encode() in data
