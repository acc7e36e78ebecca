"""The ring store: round trip, modes, caps, hash checks and crash safety under kill -9."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import stat
import time
from pathlib import Path

import pytest

from forensics.errors import RingError
from forensics.record.status import ring_status
from forensics.ring import RingReader, RingWriter, load_key
from tests.support.record_support import start_seq_writer


def _rec(n: int, t: float | None = None, member: str = "nvml/samples.jsonl", op: str = "append"):
    return (t if t is not None else time.time(), time.monotonic(), member, op,
            (json.dumps({"n": n}) + "\n").encode())


def test_round_trip_modes_and_provenance(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    w = RingWriter(ring, max_bytes=1 << 20, segment_bytes=2048).open()
    for n in range(100):
        w.append([_rec(n)])
    w.append([(time.time(), time.monotonic(), "kernel/kmsg-window.txt", "append", b"6,1,2,-;caf\xc3\xa9 \xff\n")])
    w.close()
    assert stat.S_IMODE(ring.stat().st_mode) == 0o700
    for f in ring.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    reader = RingReader(ring)
    recs = list(reader.records())
    assert [json.loads(r.data)["n"] for r in recs if r.member == "nvml/samples.jsonl"] == list(range(100))
    assert recs[-1].data == b"6,1,2,-;caf\xc3\xa9 \xff\n"  # the bytes as written, undecodable ones too
    assert not reader.report.problems
    used = reader.report.segments
    assert len(used) > 3 and all(s["sealed"] and len(s["sha256"]) == 64 for s in used)
    assert len(load_key(ring) or b"") == 32


def test_second_writer_refused(tmp_path: Path) -> None:
    w = RingWriter(tmp_path / "r").open()
    try:
        with pytest.raises(RingError, match="another recorder"):
            RingWriter(tmp_path / "r").open()
    finally:
        w.close()


def test_tampered_segment_is_named_and_skipped(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    w = RingWriter(ring, segment_bytes=1024).open()
    for n in range(40):
        w.append([_rec(n)])
    w.close()
    sealed = sorted(ring.glob("seg-*.jsonl.gz"))
    victim = sealed[1]
    data = gzip.decompress(victim.read_bytes()).replace(b'"n": 1', b'"n": 9')
    victim.write_bytes(gzip.compress(data))
    reader = RingReader(ring)
    got = [json.loads(r.data)["n"] for r in reader.records()]
    assert len(got) < 40 and got == sorted(got)
    (problem,) = reader.report.problems
    assert victim.name in problem and "SHA-256" in problem


def test_caps_drop_oldest_first(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    w = RingWriter(ring, max_bytes=64 << 10, segment_bytes=8 << 10).open()
    for n in range(3000):
        w.append([(time.time(), time.monotonic(), "cgroup/samples.jsonl", "append",
                   (json.dumps({"n": n, "r": os.urandom(20).hex()}) + "\n").encode())])
    w.close()
    assert w.dropped_segments > 0
    size = sum(f.stat().st_size for f in ring.glob("seg-*"))
    assert size <= 64 << 10
    got = [json.loads(r.data)["n"] for r in RingReader(ring).records()]
    assert got[-1] == 2999 and got == list(range(got[0], 3000))  # the newest kept, contiguous

    old = tmp_path / "old"
    w = RingWriter(old, retention_s=3600, segment_bytes=1024).open()
    for n in range(50):
        w.append([_rec(n, t=time.time() - 7200 + n)])
    w.rotate()
    w.append([_rec(99)])
    w.close()
    assert [json.loads(r.data)["n"] for r in RingReader(old).records()] == [99]


def test_state_is_repeated_at_the_top_of_every_segment(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    w = RingWriter(ring, segment_bytes=1024).open()
    w.append([(time.time() - 100, time.monotonic(), "nvml/devices.json", "write", b'{"devices": 1}\n')])
    for n in range(60):
        w.append([_rec(n)])
    w.close()
    since = time.time() - 1
    recs = list(RingReader(ring).records(since=since, keep_writes=True))
    assert any(r.member == "nvml/devices.json" for r in recs)
    last_seg = sorted(ring.glob("seg-*.jsonl.gz"))[-1]
    assert b"nvml/devices.json" in gzip.decompress(last_seg.read_bytes())


def test_state_keeps_the_newest_files_within_its_bound_byte_for_byte(tmp_path: Path) -> None:
    """Many first-seen processes (proc/<pid>/* files, long and short, one written twice): a new
    segment starts with the newest of them, as written, up to half a segment of data; the oldest
    are the ones left out."""
    ring = tmp_path / "ring"
    w = RingWriter(ring, max_bytes=64 << 20, segment_bytes=64 << 10).open()
    rng = random.Random(2)
    files = {}
    for pid in range(400):
        data = (f"pid {pid} " + "".join(rng.choice("abcdef\"\\\t") for _ in range(rng.choice((20, 200, 600)))) + "\n").encode()
        files[f"proc/{pid}/environ"] = data
        w.append([(time.time(), time.monotonic(), f"proc/{pid}/environ", "write", data)], remember=True)
    files["proc/7/environ"] = b"written again\n"
    w.append([(time.time(), time.monotonic(), "proc/7/environ", "write", b"written again\n")])
    w.rotate()
    w.append([_rec(1)])  # a new segment: the state at its top, then this record
    w.close()
    segs = sorted(ring.glob("seg-*.jsonl.gz"))
    top = [json.loads(line) for line in gzip.decompress(segs[-1].read_bytes()).splitlines()[1:]]
    carried = [(r["member"], r["data"].encode("utf-8", "surrogateescape")) for r in top if r["op"] == "write"]
    assert carried and all(files[m] == d for m, d in carried)  # as written, the latest version
    assert carried[-1] == ("proc/7/environ", b"written again\n")
    assert sum(len(d) for _, d in carried) <= 32 << 10
    order = list(files)  # oldest first, proc/7 moved to the end by its second write
    order.remove("proc/7/environ")
    order.append("proc/7/environ")
    assert [m for m, _ in carried] == order[len(order) - len(carried):]  # the newest, in order
    assert len(carried) < 400


def test_torn_tail_is_cut_and_readers_ignore_it(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    w = RingWriter(ring).open()
    w.append([_rec(n) for n in range(5)])
    active = next(ring.glob("seg-*.jsonl"))
    with open(active, "ab") as f:
        f.write(b'{"t": 1, "mono": 2, "member": "nvml/samples.jsonl", "op": "app')
    assert [json.loads(r.data)["n"] for r in RingReader(ring).records()] == list(range(5))
    os.close(w._fd)  # the writer "dies" without sealing
    os.close(w._lock_fd)
    w2 = RingWriter(ring).open()
    assert w2.recovered and w2.recovered[0]["kind"] == "torn-tail-cut"
    w2.close()
    assert [json.loads(r.data)["n"] for r in RingReader(ring).records()] == list(range(5))


def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    """20 SIGKILLs of a writing process: what is read back is, run by run, exactly the records
    acknowledged (plus at most the one batch in flight), and sealed data is hash-intact."""
    ring = tmp_path / "ring"
    rnd = random.Random(14)
    runs: list[tuple[str, int]] = []  # (run id, last acknowledged n)
    for _ in range(20):
        proc = start_seq_writer(ring)
        assert proc.stdout is not None
        run = proc.stdout.readline().split()[1]
        end = time.monotonic() + rnd.uniform(0.05, 0.4)
        last = -1
        while time.monotonic() < end:
            line = proc.stdout.readline()
            if line.strip().lstrip("-").isdigit():
                last = int(line)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for line in proc.stdout.read().splitlines():  # acknowledged before the kill, unread
            if line.strip().lstrip("-").isdigit():
                last = int(line)
        runs.append((run, last))
    reader = RingReader(ring)
    by_run: dict[str, list[int]] = {}
    for r in reader.records():
        if r.member == "test/seq.jsonl":
            by_run.setdefault(r.run, []).append(json.loads(r.data)["n"])
    assert not reader.report.problems
    for run, last in runs:
        got = by_run.get(run, [])
        assert got == list(range(len(got))), f"run {run}: not a prefix"
        assert last <= len(got) - 1 <= last + 4, (run, last, len(got))
    assert ring_status(ring, verify=True)["problems"] == []
    w = RingWriter(ring).open()  # the last run's active segment is sealed on the next open
    w.close()
    assert [r["kind"] for r in w.recovered if r["kind"] != "torn-tail-cut"] == []
    assert RingReader(ring).segments() and all(s.sealed for s in RingReader(ring).segments())


def test_the_fold_stops_short_of_the_evidence_cap_and_says_where(tmp_path: Path) -> None:
    """A window whose segments are more than the bundle's cap: the fold carries the oldest segments
    whole, provenance.json still, and a partial reason naming the cut; the history rebuilt from
    them is a prefix of the records, with the state."""
    from datetime import UTC, datetime

    from forensics.analysis.ring_view import rebuild_ring
    from forensics.analysis.source import Source
    from forensics.bundle.redact import Redactor
    from forensics.bundle.sink import EvidenceSink
    from forensics.collect.context import CaptureOptions, CollectContext
    from forensics.collectors.ring import COLLECTOR

    ring = tmp_path / "ring"
    w = RingWriter(ring, segment_bytes=256 << 10).open()
    t0 = time.time() - 600
    rng = random.Random(3)
    line = b'{"n": %d, "pad": "%s"}\n'
    w.append([(t0, 1.0, "nvml/devices.json", "write", b'{"devices": []}\n')])
    pads = [rng.randbytes(1000).hex().encode() for _ in range(4000)]  # 8 MB that gzip halves at best
    for n in range(4000):
        w.append([(t0 + n * 0.1, 1.0 + n * 0.1, "nvml/samples.jsonl", "append", line % (n, pads[n]))])
    w.close()
    root = tmp_path / "staging"
    root.mkdir()
    cap = 3 << 20
    sink = EvidenceSink(root, max_bytes=cap)
    start = datetime.fromtimestamp(time.time(), UTC)
    ctx = CollectContext(CaptureOptions(since=datetime.fromtimestamp(t0 - 1, UTC), capture_start=start,
                                        extra={"ring.dir": str(ring)}), sink, Redactor(True), {})
    COLLECTOR.snapshot(ctx)
    assert sink.bytes_written <= cap
    prov = json.loads((root / "ring/provenance.json").read_bytes())
    carried = [s["segment"] for s in prov["segments"]]
    ring_segs = [s.name for s in RingReader(ring).segments()]
    assert 0 < len(carried) < len(ring_segs) and carried == ring_segs[:len(carried)]
    left_out = RingReader(ring).segments()[len(carried)]
    assert prov["left_out_from"]["segment"] == left_out.name and prov["left_out_from"]["t"] == left_out.min_t
    assert any("evidence size cap" in r for r in ctx.partial_reasons), ctx.partial_reasons

    class Staged:  # the staging directory, read as the bundle it becomes
        manifest: dict[str, object] = {}

        def read_bytes(self, member: str) -> bytes:
            return (root / member).read_bytes()

    rebuilt = rebuild_ring(Source(Staged(), "staged", [str(p.relative_to(root)) for p in root.rglob("*")
                                                         if p.is_file()]))
    assert not rebuilt.problems
    data = rebuilt.members["nvml/samples.jsonl"]
    kept = data.count(b"\n")
    assert 0 < kept < 4000 and data == b"".join(line % (n, pads[n]) for n in range(kept))
    assert t0 + kept * 0.1 >= left_out.min_t - 0.11  # the records stop where the segments do
    assert rebuilt.members["nvml/devices.json"] == b'{"devices": []}\n'


def test_a_reader_stopped_early_still_gives_the_provenance_of_what_it_handed_out(tmp_path: Path) -> None:
    """A fold that stops at a cap or a deadline has taken records from the segment it stopped in:
    that segment is in the provenance, with the lines handed out."""
    w = RingWriter(tmp_path / "r", max_bytes=64 << 20, segment_bytes=1 << 20).open()
    t = time.time() - 100
    for i in range(3):
        w.append([(t + i + j / 10, float(i), "x/samples.jsonl", "append", b"line %d %d\n" % (i, j))
                  for j in range(5)])
        w.rotate()
    w.close()
    reader = RingReader(tmp_path / "r")
    taken = []
    for rec in reader.records():
        taken.append(rec)
        if len(taken) == 8:
            break
    named = {s["segment"]: s["lines"] for s in reader.report.segments}
    assert {rec.segment for rec in taken} == set(named), named
    last = taken[-1]
    assert named[last.segment] == [min(r.line for r in taken if r.segment == last.segment), last.line]


def test_a_reader_holds_one_inflated_segment_at_a_time(tmp_path: Path) -> None:
    """Reading a long ring must not keep every segment it read (its read-ahead futures did)."""
    import tracemalloc

    w = RingWriter(tmp_path / "r", max_bytes=256 << 20, segment_bytes=1 << 20).open()
    t = time.time() - 100
    rng = random.Random(7)
    for i in range(30):  # 30 segments of ~1.2 MB that gzip cannot shrink much
        w.append([(t + i, float(i), "x/samples.jsonl", "append",
                   rng.randbytes(200_000).hex().encode() + b"\n") for _ in range(3)])
        w.rotate()
    w.close()
    reader = RingReader(tmp_path / "r")
    tracemalloc.start()
    try:
        read = sum(len(rec.data) for rec in reader.records())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read > 30 * 1_000_000 and len(reader.report.segments) == 30
    assert peak < read / 4, (peak, read)  # a few segments at most, not the whole ring


@pytest.mark.parametrize("field", ["t", "mono"])
@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_a_record_line_without_a_finite_time_is_not_a_record(field: str, bad: str) -> None:
    """json reads NaN and Infinity; a record at such a time would pass (NaN) or break the window
    checks, so the line is not a whole record (the segment's valid prefix ends before it)."""
    from forensics.ring.segment import parse_record_line, valid_prefix

    good = b'{"t": 1.5, "mono": 2.5, "member": "a", "op": "append", "data": "x"}'
    line = good.replace(b'"%s": %s' % (field.encode(), b"1.5" if field == "t" else b"2.5"),
                        b'"%s": %s' % (field.encode(), bad.encode()))
    assert parse_record_line(good) is not None and line != good
    assert parse_record_line(line) is None
    text = b'{"ring": 1, "run": "r"}\n' + good + b"\n" + line + b"\n"
    assert [no for no, _ in valid_prefix(text)[1]] == [1, 2]


def test_ring_command_takes_the_ring_as_record_and_capture_name_it(tmp_path: Path) -> None:
    """`gpuforensics ring` shows a ring given as RING_DIR or as `--ring DIR` (the option `record` and
    `capture` take: a user who types it here was refused before); two different rings are a usage error."""
    from click.testing import CliRunner

    from forensics.cli import cli

    ring = tmp_path / "ring"
    w = RingWriter(ring).open()
    for n in range(5):
        w.append([_rec(n)])
    w.close()
    runner = CliRunner()
    shown = [runner.invoke(cli, args) for args in (["ring", str(ring), "--json"], ["ring", "--ring", str(ring), "--json"])]
    assert [r.exit_code for r in shown] == [0, 0], [r.output for r in shown]
    assert shown[0].output == shown[1].output
    assert json.loads(shown[1].output)["ring"] == str(ring)
    both = runner.invoke(cli, ["ring", str(ring), "--ring", str(tmp_path / "other")])
    assert both.exit_code == 2 and "two rings named" in both.output


def _fold_ctx(ring: Path, staging: Path, since: float) -> object:
    from datetime import UTC, datetime

    from forensics.bundle.redact import Redactor
    from forensics.bundle.sink import EvidenceSink
    from forensics.collect.context import CaptureOptions, CollectContext

    staging.mkdir()
    return CollectContext(CaptureOptions(since=datetime.fromtimestamp(since, UTC),
                                         capture_start=datetime.fromtimestamp(time.time(), UTC),
                                         extra={"ring.dir": str(ring)}),
                          EvidenceSink(staging, max_bytes=64 << 20), Redactor(True), {})


def test_segment_files_is_the_one_segment_loop_of_the_reader_and_the_fold(tmp_path: Path) -> None:
    """The ring read while it is written: the active segment sealed between the listing and the
    read is read once (sealed), a segment listed but never there is named last, a tampered one is
    a problem; the reader's records and capture's fold take their segments from this one loop."""
    from forensics.collectors.ring import RingFold
    from forensics.ring.segment import SegmentInfo

    ring = tmp_path / "ring"
    w = RingWriter(ring, segment_bytes=1024).open()
    t0 = time.time() - 100
    for n in range(30):
        w.append([_rec(n, t0 + n)])
    sealed = sorted(ring.glob("seg-*.jsonl.gz"))
    victim = sealed[0]
    victim.write_bytes(gzip.compress(gzip.decompress(victim.read_bytes()).replace(b'"n": 0', b'"n": 7')))

    class Racing(RingReader):
        """Lists the ring, then the writer seals its active segment before anything is read; the
        index also lists a segment whose file is gone (dropped by the caps)."""

        listed = 0

        def segments(self) -> list[SegmentInfo]:
            segs = super().segments()
            if self.listed == 0:
                w.rotate()
            self.listed += 1
            return [*segs, SegmentInfo(name="seg-0000009999.jsonl.gz", seq=9999, sealed=True, sha256="0" * 64)]

    got = list(Racing(ring).segment_files())
    names = [g.info.name for g in got]
    assert len(names) == len({n.removesuffix(".gz") for n in names})  # each segment once
    assert got[-1].gone and got[-1].info.name == "seg-0000009999.jsonl.gz" and "gone each time" in str(got[-1].problem)
    (bad,) = [g for g in got if g.problem and not g.gone]
    assert bad.info.name == victim.name and "does not match the index" in str(bad.problem) and bad.data == b""
    for g in got[:-1]:
        if g is not bad:  # raw bytes: a sealed segment's file as the ring holds it (not inflated)
            assert g.problem is None and g.data == (ring / g.info.name).read_bytes()
    assert all(g.info.sealed for g in got)  # the active one was read as sealed, after the retry

    reader = Racing(ring)
    ns = [json.loads(r.data)["n"] for r in reader.records()]
    assert ns == sorted(set(ns)) and ns[-1] == 29 and 0 not in ns
    assert reader.report.problems == [f"{bad.problem}: segment skipped"]  # the gone one: as if never listed

    copied: list[dict[str, object]] = []
    problems: list[str] = []
    ctx = _fold_ctx(ring, tmp_path / "staging", t0 - 1)
    refused: list[dict[str, object]] = []
    assert RingFold._copy(ctx, Racing(ring), t0 - 1, time.time(), copied, problems, refused) is None  # type: ignore[arg-type]
    assert refused == []  # every segment a writer marked redacted
    assert [c["segment"] for c in copied] == [g.info.name for g in got if g.problem is None]
    assert problems == [f"{bad.problem}: segment left out",
                        "seg-0000009999.jsonl.gz: listed but gone each time it was read (removed meanwhile): left out"]
    w.close()


def test_a_line_that_is_not_a_record_costs_only_itself(tmp_path: Path) -> None:
    """The writer takes any float as a time and json writes NaN: that line is not a record. It is
    named and left out, and every record after it, in the active segment and once sealed, is read
    (change-only lines of the same member too, byte for byte); the next writer cuts nothing."""
    from forensics.record.sources import DELTA_MEMBERS

    ring = tmp_path / "ring"
    w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
    t0 = time.time() - 100
    sample = '{"gpu_index": 0, "memory_used": %d, "t": %d, "util": 5}\n'
    lines = [(sample % (1000 + n % 3, n)).encode() for n in range(12)]
    for n, line in enumerate(lines):
        t = float("nan") if n == 5 else t0 + n
        w.append([(t, float(n), "nvml/samples.jsonl", "append", line),
                  (t, float(n), "host/a.jsonl", "append", b"a %d\n" % n)])
    w.close(seal=False)
    expected = b"".join(line for n, line in enumerate(lines) if n != 5)
    for sealed in (False, True):
        if sealed:
            w2 = RingWriter(ring).open()  # seals what the last writer left active
            assert [r["kind"] for r in w2.recovered] == []  # nothing cut
            w2.close()
        reader = RingReader(ring)
        recs = list(reader.records())
        assert b"".join(r.data for r in recs if r.member == "nvml/samples.jsonl") == expected
        assert [r.data for r in recs if r.member == "host/a.jsonl"] == [b"a %d\n" % n for n in range(12) if n != 5]
        assert len(reader.report.problems) == 2, reader.report.problems  # the two records of tick 5
        assert all("not a ring record (its time is not a finite number" in p and "the records after it are read"
                   in p for p in reader.report.problems)


def test_a_damaged_line_leaves_out_only_what_cannot_be_rebuilt(tmp_path: Path) -> None:
    """A line no longer JSON (a damaged byte) in the active segment: the appends after it are read;
    the change-only lines after it (of an unknown member, so of every one) cannot be rebuilt
    without it and are left out, named; a torn tail after them is still cut as a torn tail."""
    from forensics.record.sources import DELTA_MEMBERS

    ring = tmp_path / "ring"
    w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
    t0 = time.time() - 100
    for n in range(6):
        w.append([(t0 + n, float(n), "nvml/samples.jsonl", "append",
                   b'{"gpu_index": 0, "memory_used": %d, "t": %d}\n' % (1000 + n, n)),
                  (t0 + n, float(n), "host/a.jsonl", "append", b"a %d\n" % n)])
    active = next(ring.glob("seg-*.jsonl"))
    text = active.read_bytes().split(b"\n")
    text[5] = text[5][:20] + b"\xff" + text[5][21:]  # line 6: tick 2's nvml line
    active.write_bytes(b"\n".join(text) + b'{"t": 1, "mono": 2, "memb')
    reader = RingReader(ring)
    recs = list(reader.records())
    assert [r.data for r in recs if r.member == "host/a.jsonl"] == [b"a %d\n" % n for n in range(6)]
    assert [json.loads(r.data)["t"] for r in recs if r.member == "nvml/samples.jsonl"] == [0, 1]
    problems = reader.report.problems
    assert problems[0] == "seg-0000000001.jsonl line 6: not a ring record (not JSON): left out; the records after it are read"
    assert problems[1].startswith("seg-0000000001.jsonl line 8: the change-only lines of nvml/samples.jsonl from here "
                                  "on build on line 6, which is not a ring record: left out")
    assert len(problems) == 2
    os.close(w._fd)  # the writer dies; the next one cuts the torn tail only
    os.close(w._lock_fd)
    w2 = RingWriter(ring).open()
    assert [(r["kind"], r["kept_records"]) for r in w2.recovered] == [("torn-tail-cut", 11)]
    w2.close()
    assert len([r for r in RingReader(ring).records() if r.member == "host/a.jsonl"]) == 6
