"""A ring history longer than a slice is analysed in consecutive slices (forensics.analysis.slices):
what a user checks. The same findings as one model of the whole history where the slices cannot
change them (each episode inside one slice), one slice's model alive at a time, the evidence of an
early slice quoted from the member's own bytes and numbered as the whole history's member, the
document saying it was sliced, and no innocent accused because a grant was written before the
slice (the ring copies its state at every segment's top)."""

from __future__ import annotations

import gc
import gzip
import json
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import SlicePart, analyze_bundles, build_model, ring_slices, run_rules
from forensics.analysis.excerpt import OMISSION
from forensics.analysis.model import Model
from forensics.analysis.ring_view import HistoryPart, RingSource, ring_view
from forensics.analysis.slices import Carried, analyze_in_slices, slice_note, slice_windows
from forensics.analysis.source import Source
from forensics.bundle.reader import open_bundle
from forensics.record.sources import DELTA_MEMBERS
from forensics.ring import RingWriter
from forensics.thresholds import AnalysisConfig
from tests.golden.test_excerpts import check_excerpts
from tests.support.ring_bundle import RING_SAMPLE, bundle_members, capture_since

#: the sample's episode (a few seconds) again every GAP seconds; slices of SLICE hold one each
GAP, SLICE, COPIES = 1000.0, 900.0, 3
#: the sample's innocent: its container is granted GPU 0 (docker/containers/<id>/inspect.json)
GRANTED = "aaaa203dc66dc5cdbdbc0186fa6d01f642dffcad0735c60147ae1517507ed60a"
UNGRANTED = "5a21086c8350ec9e0062450bd129b1d327e563afc197592e6e155e2bfa9c333c"


def _shifted(line: bytes, by: float) -> bytes:
    rec = json.loads(line)
    if isinstance(rec.get("t"), int | float):
        rec["t"] += by
    return json.dumps(rec).encode() + b"\n"


def ring_of_copies(ring: Path) -> None:
    """The sample bundle's members as a recorder would have written them (as
    tests.support.ring_bundle.ring_from_sample does), its JSON-lines records written again every
    :data:`GAP` seconds, the state (every other member) written once, before the first."""
    members = bundle_members(RING_SAMPLE)
    started = json.loads(members.pop("manifest.json"))["capture"]["started"]
    t_start = time.mktime(time.strptime(started[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    w = RingWriter(ring, segment_bytes=48 << 10, delta_members=DELTA_MEMBERS, retention_s=90 * 86400.0).open()
    for name, data in sorted(members.items()):
        if not name.endswith(".jsonl"):
            w.append([(t_start - 30.0, 970.0, name, "write", data)])
    for k in range(COPIES):
        appends = []
        for name, data in sorted(members.items()):
            if name.endswith(".jsonl"):
                for line in data.splitlines(keepends=True):
                    t = json.loads(line).get("t")
                    t = float(t) if isinstance(t, int | float) else t_start
                    appends.append((t + k * GAP, t - t_start + 1000.0 + k * GAP, name, "append",
                                    _shifted(line, k * GAP)))
        for rec in sorted(appends, key=lambda r: r[0]):
            w.append([rec])
    w.close(seal=False)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("slices")
    ring_of_copies(tmp / "ring")
    return capture_since(tmp / "ring", tmp / "out", "2026-11-29T00:00:00Z")


@pytest.fixture(scope="module")
def docs(bundle: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return analyze_bundles([bundle]), analyze_bundles([bundle], slice_s=SLICE)


def _key(f: dict[str, Any]) -> tuple[Any, ...]:
    return (f["kind"], json.dumps([(s["type"], s["id"], s["role"]) for s in f["subjects"]]), f["start"], f["end"])


def test_windows_count_back_from_the_capture_and_a_sliver_joins_the_next() -> None:
    assert slice_windows(0.0, 3600.0005, 3600.0) == [(0.0, None)]  # a --since 1h history: one slice
    assert slice_windows(0.0, 10_000.0, 3600.0) == [(0.0, 2800.0), (2800.0, 6400.0), (6400.0, None)]
    assert slice_windows(0.0, 7500.0, 3600.0) == [(0.0, 3900.0), (3900.0, None)]  # 300 s would be a sliver


def test_the_note_names_the_slice_span_and_the_oldest_remainder() -> None:
    """Two slices: the span was read off the last two starts, i.e. the oldest's (``slices of
    1.08 h``, then ``0.996 h`` on a real 2 h history): it is the span the windows were cut by."""
    note = slice_note(slice_windows(0.0, 7500.0, 3600.0), 3600.0)
    assert "in 2 consecutive slices of 1 h counted back from the capture (the oldest 1.08 h)" in note, note
    note = slice_note(slice_windows(0.0, 10_000.0, 3600.0), 3600.0)
    assert "in 3 consecutive slices of 1 h counted back from the capture (the oldest 0.778 h)" in note, note


def test_a_history_longer_than_a_slice_finds_what_one_model_finds(bundle: Path, docs: tuple[dict[str, Any],
                                                                                          dict[str, Any]]) -> None:
    whole, sliced = docs
    assert len(ring_slices([bundle], slice_s=SLICE)) == COPIES and len(ring_slices([bundle])) == 1
    assert not any("consecutive slices" in x for x in whole["limitations"])
    # the same kinds, parties and roles, from the first episode's start to the last one's end
    assert sorted(map(_key, sliced["findings"])) == sorted(map(_key, whole["findings"]))
    # one model finds each as one span over the history; the slices find it in each slice (one
    # episode each), grouped as repeats: its occurrences say when
    for f in sliced["findings"]:
        occ = f["occurrences"]
        assert occ["count"] == COPIES and occ["first"]["start"] == f["start"] and occ["last"]["end"] == f["end"], f
        assert f"{COPIES} occurrences, first " in f["summary"]
    assert not any(f.get("occurrences") for f in whole["findings"])
    note = [x for x in sliced["limitations"] if "consecutive slices" in x]
    assert len(note) == 1 and f"in {COPIES} consecutive slices of 0.25 h" in note[0], sliced["limitations"]


def test_evidence_of_an_early_slice_is_the_members_own_bytes(bundle: Path, docs: tuple[dict[str, Any],
                                                                                       dict[str, Any]]) -> None:
    _, sliced = docs
    assert check_excerpts(bundle, sliced) > 0
    opened = open_bundle(bundle)
    whole = ring_view(Source(opened, bundle.name, opened.members))
    assert whole is not None and whole.rebuilt is not None
    members = bundle_members(bundle)
    first_slice_end = ring_slices([bundle], slice_s=SLICE)[0][1]
    lined = [e for f in sliced["findings"] for e in f["evidence"]
             if e["member"].startswith("ring/") and e["locator"].startswith("line ")]
    early = 0
    for e in lined:
        # numbered as the whole history's member: that line of it, rebuilt from that segment record
        no = int(e["locator"].removeprefix("line "))
        line = bytes(whole.real_bytes(e["member"]) or b"").splitlines()[no - 1].decode()
        excerpt = e["excerpt"][:-3] if e["excerpt"].endswith("...") else e["excerpt"]
        assert all(piece in line for piece in excerpt.split(OMISSION)), (e, line[:200])
        origin = e["derived_from"]
        assert (origin["member"], origin["line"]) == whole.rebuilt.origin(e["member"].removeprefix("ring/"), no)
        seg = members[origin["member"]]
        text = gzip.decompress(seg) if origin["member"].endswith(".gz") else seg
        rec = json.loads(text.splitlines()[origin["line"] - 1])
        assert rec["member"] == e["member"].removeprefix("ring/")
        early += rec["t"] < first_slice_end
    assert early and early < len(lined)  # the first slice's evidence and the later ones'


def test_one_slices_model_is_alive_at_a_time(bundle: Path) -> None:
    cfg = AnalysisConfig()
    windows = ring_slices([bundle], slice_s=SLICE)
    dropped: list[weakref.ref[Model]] = []
    alive_at_build: list[int] = []
    views_at_build: list[int] = []
    carried = Carried()

    def build(window: Any, last: bool) -> Model:
        gc.collect()
        alive_at_build.append(sum(r() is not None for r in dropped))
        views_at_build.append(sum(isinstance(o, RingSource) for o in gc.get_objects()))
        return build_model([bundle], None, cfg, SlicePart(window, last, carried))

    out = analyze_in_slices(windows, build, lambda m: run_rules(m, cfg), carried.notes,
                            lambda m: dropped.append(weakref.ref(m)))
    assert len(dropped) == COPIES - 1 and alive_at_build == [0] * COPIES, alive_at_build
    assert views_at_build == [0] * COPIES  # nor any ring view (its rebuilt bytes) of an earlier slice
    assert len(out.per_slice) == COPIES and all(n > 0 for n in out.per_slice)
    # the findings kept quote their evidence: none holds a source (its bytes) of a dropped slice
    assert out.findings and all(type(e).__name__ == "Evidence" for f in out.findings for e in f.evidence)


def test_a_grant_written_before_the_slice_still_counts(bundle: Path, docs: tuple[dict[str, Any],
                                                                                dict[str, Any]]) -> None:
    _, sliced = docs
    windows = ring_slices([bundle], slice_s=SLICE)
    opened = open_bundle(bundle)
    src = Source(opened, bundle.name, opened.members)
    whole_view = ring_view(src)
    late = ring_view(src, HistoryPart(windows[-1]))
    assert whole_view is not None and late is not None and whole_view.rebuilt and late.rebuilt
    grant = f"docker/containers/{GRANTED}/inspect.json"
    # the grant was written once, before the first episode; the ring's later segments no longer copy
    # it at their top (the recorder's state cap): the last slice's segments alone do not hold it
    assert whole_view.rebuilt.segments[0] not in late.rebuilt.segments
    assert grant in whole_view.rebuilt.members and grant not in late.rebuilt.members
    # the state the earlier slices carried does: the trainer is judged granted in every slice
    culprits = {s["id"] for f in sliced["findings"] for s in f["subjects"] if s["role"] == "culprit"}
    assert GRANTED not in culprits and UNGRANTED in culprits
    unallocated = [f for f in sliced["findings"] if f["kind"] == "unallocated-gpu-use"]
    assert len(unallocated) == 1 and unallocated[0]["occurrences"]["count"] == COPIES
    assert [s["role"] for s in unallocated[0]["subjects"] if s["id"] == GRANTED] == ["victim"]


def test_a_kernel_record_in_both_logs_is_read_once_when_its_slice_is_an_early_one(tmp_path: Path) -> None:
    """The ring's copy of a kernel record the capture's own log holds is skipped in the earlier slice
    it falls in (as one model skips it): the record is cited once, from the capture's log."""
    from tests.unit.analysis.test_ring_kernel_history import (
        BOOT_A,
        BOOT_B,
        XID_48,
        _ring,
        _unix,
        _with_own_kernel_log,
    )

    _ring(tmp_path / "ring", [(7, 30.0, XID_48), (8, 580.0, "usb 1-1: USB disconnect, device number 3")])
    ring_only = capture_since(tmp_path / "ring", tmp_path / "out", "3h")
    bundle = _with_own_kernel_log(ring_only, tmp_path / "b", [(7, 30.0, XID_48)])
    windows = ring_slices([bundle], slice_s=300.0)
    assert len(windows) > 2 and windows[-1][0] > BOOT_B + 30.3  # the Xid 48 is in an earlier slice
    sliced, whole = analyze_bundles([bundle], slice_s=300.0), analyze_bundles([bundle])
    assert [x for x in sliced["limitations"] if "consecutive slices" in x]
    assert not [x for x in whole["limitations"] if "consecutive slices" in x]
    for doc in (sliced, whole):
        xid48 = [e for f in doc["findings"] for e in f["evidence"] if "Xid (PCI:0000:86:00): 48" in e["excerpt"]]
        assert xid48 and {e["member"] for e in xid48} == {"kernel/kmsg.txt"}  # never the ring's copy beside it
        dated = [t for t in doc["timeline"] if t.get("kind") == "xid"]
        assert sorted(round(_unix(t["time"])) for t in dated) == [round(BOOT_A + 5400.0), round(BOOT_B + 30.0)]
