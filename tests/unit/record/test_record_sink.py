"""The recorder's sink: EvidenceSink's interface, a tick's appends to one member as one record."""

from __future__ import annotations

import inspect
import json

import pytest

from forensics.bundle.sink import EvidenceSink
from forensics.record.child import RecordSink


def test_record_sink_offers_every_method_collectors_call_on_the_bundle_sink() -> None:
    wanted = {n for n, f in inspect.getmembers(EvidenceSink, inspect.isfunction)
              if not n.startswith("_") and n.startswith(("write", "append", "replace"))}
    assert wanted, "EvidenceSink lost its writers?"
    missing = sorted(n for n in wanted if not callable(getattr(RecordSink, n, None)))
    assert not missing, f"RecordSink lacks {missing}: a collector calling them fails in the recorder"


def test_consecutive_appends_to_one_member_are_one_record_with_the_same_bytes() -> None:
    sink = RecordSink()
    for i in range(3):
        sink.append_jsonl("nvml/samples.jsonl", {"gpu": i})
    sink.append_jsonl("cgroup/samples.jsonl", {"c": 1})
    sink.append_jsonl("nvml/samples.jsonl", {"gpu": 9})
    recs = sink.take()
    assert [(r[2], r[3]) for r in recs] == [("nvml/samples.jsonl", "append"), ("cgroup/samples.jsonl", "append"),
                                            ("nvml/samples.jsonl", "append")]
    assert [json.loads(line)["gpu"] for line in recs[0][4].splitlines()] == [0, 1, 2]
    assert json.loads(recs[2][4]) == {"gpu": 9}
    assert sink.take() == []


def test_batches_are_bounded_and_writes_never_merge() -> None:
    sink = RecordSink(batch_bytes=100)
    for _ in range(10):
        sink.append_bytes("a.txt", b"x" * 40 + b"\n")
    sink.write_json("s.json", {"v": 1})
    sink.write_json("s.json", {"v": 2})
    recs = sink.take()
    appends = [r for r in recs if r[2] == "a.txt"]
    assert len(appends) == 5 and all(len(r[4]) <= 100 for r in appends)
    assert "".join(r[4] for r in appends) == ("x" * 40 + "\n") * 10
    assert [json.loads(r[4])["v"] for r in recs if r[2] == "s.json"] == [1, 2]


def test_replace_json_keeps_only_the_last_buffered_version() -> None:
    sink = RecordSink()
    for v in range(4):
        sink.replace_json("nvml/devices.json", {"gpus": v})
    recs = sink.take()
    assert [json.loads(r[4]) for r in recs] == [{"gpus": 3}]


def test_a_frame_carries_the_records_bytes_verbatim_after_its_header() -> None:
    """child -> parent: the records' data is sent as the member's own bytes (quotes, newlines,
    undecodable bytes), not escaped into the JSON header; several frames in one read all arrive."""
    import os
    import time

    from forensics.record.child import SourceProcess
    from forensics.record.protocol import send_frame

    sink = RecordSink()
    sink.append_jsonl("nvml/samples.jsonl", {"q": 'say "hi"\n', "n": 1})
    sink.append_bytes("kernel/kmsg-window.txt", b"6,1,2,-;caf\xc3\xa9 \xff\xfe\n")
    sink.write_json("nvml/devices.json", {})
    records = sink.take_bytes()
    r, w = os.pipe()
    try:
        send_frame(w, {"kind": "tick", "tick": 7, "records": records, "notes": ["n"]})
        send_frame(w, {"kind": "tick", "tick": 8, "records": []})
        proc = SourceProcess("x", 0, -1, r, time.monotonic())
        os.set_blocking(r, False)
        frames = proc.frames()
    finally:
        os.close(r)
        os.close(w)
    assert [f["tick"] for f in frames] == [7, 8]
    assert frames[0]["records"] == records and frames[0]["notes"] == ["n"]
    assert frames[0]["records"][1][4] == b"6,1,2,-;caf\xc3\xa9 \xff\xfe\n"
    assert frames[1]["records"] == []


def test_a_frames_header_reads_back_as_the_standard_librarys_json_gives_it() -> None:
    """The header is orjson's where orjson can write it, the standard library's otherwise (an
    integer beyond 64 bits, which orjson would read back as a float; a lone surrogate; a key not a
    string): every one reads back as json.loads(json.dumps(head, default=str)) does, through a pipe."""
    import datetime
    import json
    import os
    import time

    from forensics.record.child import SourceProcess
    from forensics.record.protocol import decode_header, encode_header, send_frame

    heads = [{"kind": "tick", "tick": 3, "records": [], "hints": {"gpu_pids": [1, 2]}, "t": 0.1, "neg": -0.0},
             {"kind": "tick", "tick": 4, "records": [], "big": 2 ** 70, "small": -(2 ** 63)},
             {"kind": "tick", "tick": 5, "records": [], "notes": ["caf\udcff"]},
             {"kind": "tick", "tick": 6, "records": [], "hints": {7: "seven"}},
             {"kind": "tick", "tick": 7, "records": [], "when": datetime.datetime(2026, 12, 2, 18, 0), "set": {1}}]
    for head in heads:
        assert decode_header(encode_header(head)) == json.loads(json.dumps(head, separators=(",", ":"), default=str))
    assert encode_header(heads[1]).startswith(b" ") and not encode_header(heads[0]).startswith(b" ")
    r, w = os.pipe()
    try:
        for head in heads:
            send_frame(w, head)
        proc = SourceProcess("x", 0, -1, r, time.monotonic())
        os.set_blocking(r, False)
        frames = proc.frames()
    finally:
        os.close(r)
        os.close(w)
    assert frames == [json.loads(json.dumps(h, default=str)) for h in heads]
    assert frames[1]["big"] == 2 ** 70


def test_a_frame_split_across_reads_arrives_whole_and_once() -> None:
    """The parent reads what the pipe holds: a frame cut anywhere (in its lengths, its header, its
    body) is kept until the rest comes, then handed out with the same bytes, exactly once."""
    import os
    import time

    from forensics.record.child import SourceProcess
    from forensics.record.protocol import send_frame

    sink = RecordSink()
    for i in range(50):
        sink.append_jsonl("cgroup/samples.jsonl", {"cgroup": f"/c{i}", "v": "x" * i})
    sink.append_bytes("kernel/kmsg-window.txt", b"6,1,2,-;\xff\n")
    records = sink.take_bytes()
    r, w = os.pipe()
    try:
        send_frame(w, {"kind": "tick", "tick": 1, "records": records})
        send_frame(w, {"kind": "tick", "tick": 2, "records": records[-1:]})
        whole = os.read(r, 1 << 20)
        proc = SourceProcess("x", 0, -1, r, time.monotonic())
        os.set_blocking(r, False)
        got = []
        sent = 0
        for cut in (3, 40, len(whole) // 2, len(whole) - 5, len(whole)):  # lengths, header, body, the next frame
            os.write(w, whole[sent:cut])
            sent = cut
            got.extend(proc.frames())
    finally:
        os.close(r)
        os.close(w)
    assert [f["tick"] for f in got] == [1, 2]
    assert got[0]["records"] == records and got[1]["records"] == records[-1:]
    assert all(type(rec[4]) is bytes for f in got for rec in f["records"])
    assert proc.buf == b""


def test_a_frame_of_unjoined_chunks_is_the_frame_of_their_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's answer sends each record's appended chunks as they are (take_chunks, writev):
    the frame the parent reads is the one of the joined bytes, with more chunks than one writev
    takes and writes that stop short anywhere."""
    import os
    import time

    from forensics.record import protocol
    from forensics.record.child import SourceProcess
    from forensics.record.protocol import send_frame

    def fill(sink: RecordSink) -> None:
        for i in range(700):
            sink.append_jsonl("cgroup/samples.jsonl", {"cgroup": f"/c{i}"})
        sink.append_bytes("kernel/kmsg-window.txt", b"")
        sink.append_bytes("kernel/kmsg-window.txt", b"6,1,2,-;\xff\n")

    joined, chunked = RecordSink(), RecordSink()
    fill(joined)
    fill(chunked)
    records = joined.take_bytes()
    pieces = chunked.take_chunks()
    assert len(pieces[0][4]) == 700 > protocol.IOV_MAX
    real = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, bufs: real(fd, [bytes(memoryview(b"".join(bufs))[:7])]))
    r, w = os.pipe()
    try:
        os.set_blocking(r, False)
        proc = SourceProcess("x", 0, -1, r, time.monotonic())
        got = []
        for recs in (pieces, records):
            send_frame(w, {"kind": "tick", "tick": 1, "records": recs})
            got.extend(proc.frames())
    finally:
        os.close(r)
        os.close(w)
    assert len(got) == 2
    assert got[0]["records"] == [[*rec[:4], b"".join(rec[4])] for rec in pieces]
    assert got[1]["records"] == records
    assert [rec[2:] for rec in got[0]["records"]] == [rec[2:] for rec in records]  # the same lines
