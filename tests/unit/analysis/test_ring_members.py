"""The ring view reads the members it rebuilds from a bundle's segments without holding them
(issue 35): a member bigger than the reader holds is rebuilt again from its segments when a loader
reads it, one segment at a time. What a user checks: the view holds no more of such a member than
one segment's records of it however much of it was read, a line the analysis quotes is the
member's own bytes and names the segment record it came from (also a line of an early segment
quoted after the later ones were read), the caps and problems of the first read still fire, and a
segment that reads otherwise the second time is an error, never other bytes."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis.ring_members import RingMembers
from forensics.analysis.ring_view import RingSource, rebuild_ring, ring_view
from forensics.analysis.source import Source
from forensics.bundle.reader import ReadLimits, open_bundle
from forensics.errors import RingError
from forensics.record.sources import DELTA_MEMBERS
from forensics.ring import RingWriter
from tests.support.ring_bundle import capture_since

SAMPLES = "nvml/samples.jsonl"
#: the reader holds members of up to 2 KiB (8 KiB in all): the samples are read again from the segments
SMALL = ReadLimits(held_member_bytes=2 << 10, held_total_bytes=8 << 10)


def _sample(n: int, t: float) -> bytes:
    procs = ", ".join(f'{{"pid": {1000 + p}, "used_mib": {(n * 7 + p) % 97}}}' for p in range(6))
    return (b'{"gpu_index": %d, "kind": "device", "n": %d, "t": %.1f, "util": %d, "processes": [%s]}\n'
            % (n % 2, n, t, (n * 13) % 100, procs.encode()))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``capture --since`` over a ring of 600 change-only NVML sample lines in small segments."""
    tmp = tmp_path_factory.mktemp("ringmembers")
    ring = tmp / "ring"
    now = time.time()
    w = RingWriter(ring, segment_bytes=4096, delta_members=DELTA_MEMBERS).open()
    w.append([(now - 700, 1.0, "nvml/devices.json", "write", b'{"devices": ["GPU-0", "GPU-1"]}\n')])
    for n in range(600):
        t = now - 600 + n
        w.append([(t, 10.0 + n, SAMPLES, "append", _sample(n, t))])
    w.close()
    return capture_since(ring, tmp / "out", "15m")


def _view(bundle: Path, limits: ReadLimits = SMALL) -> tuple[RingSource, RingMembers]:
    opened = open_bundle(bundle, limits)
    view = ring_view(Source(opened, bundle.name, opened.members))
    assert view is not None and view.rebuilt is not None
    members = view.rebuilt.members
    assert isinstance(members, RingMembers)
    return view, members


def _largest_segment_share(view: RingSource, whole: bytes, member: str) -> int:
    """The most bytes of ``member`` (``whole``) one segment's records rebuild, from the view's
    origins: the first line of each record and its segment."""
    assert view.rebuilt is not None
    starts, where = view.rebuilt.origins[member]
    lines = whole.split(b"\n")[:-1]
    per: dict[str, int] = {}
    for k, (seg, _line) in enumerate(where):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines) + 1
        per[seg] = per.get(seg, 0) + sum(len(line) + 1 for line in lines[starts[k] - 1:end - 1])
    return max(per.values())


def test_a_big_member_is_read_one_segment_at_a_time(bundle: Path) -> None:
    """Every line of the samples read through the view (as the NVML loader reads them), then lines
    quoted from here and there: the view holds at most one segment's records of it, though the
    member is many times that, and the lines read are the member's bytes."""
    view, members = _view(bundle)
    whole = members[SAMPLES]
    assert view.rebuilt is not None and len(view.rebuilt.segments) >= 5  # a ring of many segments
    share = _largest_segment_share(view, whole, SAMPLES)
    assert len(whole) > 4 * share, (len(whole), share)
    assert members.held_bytes() <= SMALL.held_total_bytes  # the samples not held: read again when read
    lines = []
    for no, obj, raw in view.jsonl(SAMPLES):
        assert members.held_bytes() <= SMALL.held_total_bytes
        lines.append(bytes(raw))
        assert obj["n"] == no - 1
    assert b"".join(line + b"\n" for line in lines) == whole
    assert [json.loads(line)["n"] for line in lines] == list(range(600))
    for no in (1, 300, 599, 2):  # quotes: the segment of each decoded again, the latest kept
        assert view.line_at(f"ring/{SAMPLES}", whole.index(lines[no - 1])) == lines[no - 1]
        assert members.held_bytes() <= SMALL.held_total_bytes + share


def test_a_quoted_line_is_the_members_own_bytes_and_names_its_segment_record(bundle: Path) -> None:
    """References made while the loader read the samples, quoted after every segment was read: the
    excerpt is the member's own line, cited as ``ring/nvml/samples.jsonl line N``, derived from the
    segment record whose change-only line rebuilds it (in the first segment for the first lines)."""
    view, members = _view(bundle)
    assert view.rebuilt is not None
    refs = {no: view.ref(SAMPLES, no, raw, ("util",)) for no, _obj, raw in view.jsonl(SAMPLES)}
    whole = members[SAMPLES].split(b"\n")
    opened = open_bundle(bundle)
    segments = {n: gzip.decompress(opened.read_bytes(n)) if n.endswith(".gz") else opened.read_bytes(n)
                for n in view.rebuilt.segments}
    for no in (600, 1, 2, 450):  # the last segment's, then the first's
        ev = refs[no].evidence
        assert ev.member == f"ring/{SAMPLES}" and ev.locator == f"line {no}"
        assert ev.excerpt == f'"util": {((no - 1) * 13) % 100}'
        assert ev.excerpt in whole[no - 1].decode()
        assert ev.derived_from is not None and ev.derived_verified
        assert ev.derived_from == view.rebuilt.origin(SAMPLES, no)
        seg, line = ev.derived_from
        assert no not in (1, 600) or seg == view.rebuilt.segments[0 if no == 1 else -1]
        record = json.loads(segments[seg].split(b"\n")[line - 1])
        assert record["member"] == SAMPLES and record["t"] == pytest.approx(json.loads(whole[no - 1])["t"], abs=0.06)
    line_ev = view.ev_line(SAMPLES, 3)  # a line quoted whole (cut at the excerpt limit), read from the member whole
    assert line_ev.excerpt.endswith("...") and whole[2].decode().startswith(line_ev.excerpt[:-3])
    assert line_ev.derived_from == view.rebuilt.origin(SAMPLES, 3)


def test_the_view_reads_as_when_it_held_everything(bundle: Path) -> None:
    """The same bytes, origins and problems whether the reader holds the members or not."""
    streamed, small = _view(bundle)
    held, big = _view(bundle, ReadLimits())
    assert streamed.rebuilt is not None and held.rebuilt is not None
    assert SAMPLES in big._held and SAMPLES not in small._held
    assert dict(small.items()) == dict(big.items())
    assert streamed.rebuilt.origins == held.rebuilt.origins and streamed.rebuilt.spans == held.rebuilt.spans
    assert list(streamed.jsonl(SAMPLES)) == list(held.jsonl(SAMPLES))


class _MemBundle:
    """A bundle's members in memory, read under ``limits`` (as open_bundle's)."""

    def __init__(self, members: dict[str, bytes], limits: ReadLimits) -> None:
        self.members, self.limits = members, limits
        self.manifest: dict[str, Any] = {}

    def read_bytes(self, member: str) -> bytes:
        return self.members[member]


def _segment(records: list[dict[str, Any]], tail: bytes = b"") -> bytes:
    return ("\n".join(json.dumps(r) for r in [{"ring": 1, "run": "r"}, *records]) + "\n").encode() + tail


def _appends(member: str, first: int, n: int, size: int = 100) -> list[dict[str, Any]]:
    return [{"t": float(first + k), "mono": float(first + k), "member": member, "op": "append",
             "data": json.dumps({"n": first + k, "pad": "x" * size}) + "\n"} for k in range(n)]


def test_the_caps_and_problems_of_the_first_read_still_fire() -> None:
    """A segment over the member cap is left out, a torn tail is named: the member not held reads
    the records the first read kept, and nothing of those it left out."""
    limits = ReadLimits(max_member_bytes=8 << 10, held_member_bytes=1 << 10, held_total_bytes=4 << 10)
    members = {
        "ring/segments/seg-1.jsonl": _segment(_appends("host/a.jsonl", 0, 20)),
        "ring/segments/seg-2.jsonl": _segment(_appends("host/a.jsonl", 20, 200)),  # ~20 kB: over the cap
        "ring/segments/seg-3.jsonl": _segment(_appends("host/a.jsonl", 220, 20), b'{"t": 240.0, "mono": 1'),
    }
    src = Source(_MemBundle(members, limits), "b.tgz", members)
    rebuilt = rebuild_ring(src)
    assert any("seg-2.jsonl" in p and "over the cap of 8192" in p for p in rebuilt.problems), rebuilt.problems
    assert any("seg-3.jsonl: 22 bytes after line 21 are not whole ring records: left out" in p
               for p in rebuilt.problems), rebuilt.problems
    store = rebuilt.members
    assert isinstance(store, RingMembers) and store.held_bytes() == 0
    got = b"".join(store.chunks("host/a.jsonl"))
    assert [json.loads(line)["n"] for line in got.splitlines()] == [*range(20), *range(220, 240)]
    assert got == store["host/a.jsonl"]
    at = got.index(b'{"n": 221,')
    assert store.read_at("host/a.jsonl", at, 10) == b'{"n": 221,'
    assert rebuilt.origin("host/a.jsonl", 22) == ("ring/segments/seg-3.jsonl", 3)


def test_the_records_past_the_cap_are_not_read_again() -> None:
    """The rebuilt bytes pass the reader's cap inside a segment: read again, that segment gives the
    records before the cap and stops there."""
    limits = ReadLimits(max_total_bytes=3000, held_member_bytes=512, held_total_bytes=1024)
    members = {f"ring/segments/seg-{n}.jsonl": _segment(_appends("host/a.jsonl", 3 * n, 3, size=400)) for n in range(3)}
    rebuilt = rebuild_ring(Source(_MemBundle(members, limits), "b.tgz", members))
    assert any("pass the reader's cap (3000 bytes)" in p and "seg-2.jsonl line 3" in p for p in rebuilt.problems), \
        rebuilt.problems
    got = rebuilt.members["host/a.jsonl"]
    assert [json.loads(line)["n"] for line in got.splitlines()] == list(range(7))  # seg-2's first record, no more
    assert rebuilt.origin("host/a.jsonl", 7) == ("ring/segments/seg-2.jsonl", 2)


def test_a_segment_that_changed_since_it_was_read_is_an_error_not_other_bytes() -> None:
    """The segment's bytes differ when the member is read again: the read stops with an error (a
    loader's problem, ``cannot read``), it never hands out other lines under the indexed numbers."""
    limits = ReadLimits(held_member_bytes=512, held_total_bytes=1024)
    members = {"ring/segments/seg-1.jsonl": _segment(_appends("host/a.jsonl", 0, 10)),
               "ring/segments/seg-2.jsonl": _segment(_appends("host/a.jsonl", 10, 10))}
    bundle = _MemBundle(members, limits)
    src = Source(bundle, "b.tgz", members)
    view = RingSource(src)
    assert view.rebuilt is not None
    members["ring/segments/seg-2.jsonl"] = _segment(_appends("host/a.jsonl", 10, 10, size=99))
    store = view.rebuilt.members
    assert isinstance(store, RingMembers)
    with pytest.raises(RingError, match="seg-2.jsonl: line 2 of host/a.jsonl is not the record read before"):
        b"".join(store.chunks("host/a.jsonl"))
    read = [obj["n"] for _no, obj, _raw in view.jsonl("host/a.jsonl")]
    assert read == list(range(10))  # the first segment's, as read before; none of the changed one's
    assert any("cannot read host/a.jsonl" in p and "changed since it was read" in p for p in view.problems), \
        view.problems
