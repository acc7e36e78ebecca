"""The messages between a sampler child and the recorder (forensics.record.protocol): each one
through a real pipe and back is the message sent; one that does not decode is dropped with a
one-line reason, and the recorder's reading goes on."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from forensics.bundle.redact import Redactor
from forensics.collect.context import CaptureOptions, CollectContext, Tick
from forensics.errors import RecorderProtocolError
from forensics.record.child import RecordSink, SourceProcess, child_loop
from forensics.record.protocol import (
    FRAME_HEAD,
    Answer,
    FrameReader,
    QuitCommand,
    Record,
    TickCommand,
    decode_answer,
    decode_command,
    encode_command,
    encode_header,
    send_answer,
)
from forensics.record.supervisor import Supervisor


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def _through(pipe: tuple[int, int], *answers: Answer) -> list[Answer]:
    r, w = pipe
    for answer in answers:
        send_answer(w, answer)
    proc = SourceProcess("x", 0, -1, r, time.monotonic())
    got = proc.answers()
    assert proc.take_rejected() == []
    return got


# -- each message, there and back ----------------------------------------------------------------
def test_a_tick_command_round_trips() -> None:
    cmd = TickCommand(41, 1765000000.25, {"attribute_pids": [7, 8], "cgroup_paths": ["/kubepods/p/c"]})
    line = encode_command(cmd)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_command(line.rstrip(b"\n")) == cmd


def test_a_quit_command_round_trips() -> None:
    assert decode_command(encode_command(QuitCommand()).rstrip(b"\n")) == QuitCommand()


def test_a_hello_answer_round_trips(pipe: tuple[int, int]) -> None:
    hello = Answer("hello", None, [Record(1.5, 2.5, "nvml/devices.json", "write", b'{"devices": []}\n')],
                   ["NVML 12.535"], None, {"gpu_pids": [100, 200]}, 0)
    assert _through(pipe, hello) == [hello]


def test_a_tick_answer_round_trips_with_its_bytes_and_summaries(pipe: tuple[int, int]) -> None:
    tick = Answer("tick", 9, [Record(1.0, 2.0, "kernel/kmsg-window.txt", "append", b"6,1,2,-;caf\xc3\xa9 \xff\xfe\n"),
                              Record(1.0, 2.0, "nvml/samples.jsonl", "append", b'{"q": "say \\"hi\\""}\n',
                                     [[9, 0, "GPU-0", 1.0, 50, 1, 2, False, [[1], None, [3], [4]]]])],
                  [], "OSError: one tick failed", {}, 3)
    assert _through(pipe, tick) == [tick]


def test_an_outgoing_records_chunks_arrive_as_its_bytes(pipe: tuple[int, int]) -> None:
    sent = Answer("tick", 1, [Record(1.0, 2.0, "cgroup/samples.jsonl", "append", [b'{"a": 1}\n', b"", b'{"b": 2}\n'])])
    got = _through(pipe, sent)
    assert got[0].records == [Record(1.0, 2.0, "cgroup/samples.jsonl", "append", b'{"a": 1}\n{"b": 2}\n')]


def test_a_fatal_answer_round_trips(pipe: tuple[int, int]) -> None:
    fatal = Answer("fatal", None, [], [], "unavailable: no libnvidia-ml.so.1", {}, 0)
    assert _through(pipe, fatal) == [fatal]


# -- malformed: a clear error, never a traceback ----------------------------------------------------
@pytest.mark.parametrize(("line", "says"), [
    (b"{not json", "a command that is not JSON"),
    (b"[1, 2]", "a command that is not an object"),
    (b'{"tick": "3", "t": 1.0}', "without an integer tick and a time"),
    (b'{"tick": 3, "t": 1.0, "hints": {"gpu_pids": 7}}', "hints are not lists by key"),
])
def test_a_malformed_command_is_rejected_with_what_is_wrong(line: bytes, says: str) -> None:
    with pytest.raises(RecorderProtocolError, match=says) as caught:
        decode_command(line)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("head", "says"), [
    ([1, 2], "an answer that is not an object"),
    ({"kind": "bye"}, "unknown kind 'bye'"),
    ({"kind": "tick", "tick": "7"}, "tick is not an integer"),
    ({"kind": "tick", "error": 5}, "error is not text"),
    ({"kind": "tick", "notes": "n"}, "notes are not a list"),
    ({"kind": "tick", "hints": {"gpu_pids": 1}}, "hints are not lists by key"),
    ({"kind": "tick", "dropped": 1.5}, "dropped count is not an integer"),
    ({"kind": "tick", "records": [[1.0, 2.0, "m", "truncate", b""]]}, "record 0 is not"),
    ({"kind": "tick", "records": [[1.0, 2.0, 3, "append", b""]]}, "record 0 is not"),
])
def test_a_malformed_answer_is_rejected_with_what_is_wrong(head: Any, says: str) -> None:
    with pytest.raises(RecorderProtocolError, match=says):
        decode_answer(head)


def test_a_frame_that_does_not_decode_is_dropped_and_the_next_one_arrives(pipe: tuple[int, int]) -> None:
    """A header that is not JSON, sizes that do not add up, an answer of the wrong shape: each is
    dropped with its reason, and the good frames between them arrive."""
    r, w = pipe
    good = Answer("tick", 1, [Record(1.0, 2.0, "m.txt", "append", b"x\n")])
    bad_json = b"{oops"
    os.write(w, FRAME_HEAD.pack(len(bad_json), 0) + bad_json)
    send_answer(w, good)
    short = encode_header({"kind": "tick", "records": [[1.0, 2.0, "m.txt", "append", 10]]})
    os.write(w, FRAME_HEAD.pack(len(short), 3) + short + b"abc")
    wrong = encode_header({"kind": "bye", "records": []})
    os.write(w, FRAME_HEAD.pack(len(wrong), 0) + wrong)
    send_answer(w, Answer("tick", 2))
    proc = SourceProcess("x", 0, -1, r, time.monotonic())
    assert [a.tick for a in proc.answers()] == [1, 2]
    rejected = proc.take_rejected()
    assert [why.split(" (")[0] for why in rejected[:1]] == ["a frame header that is not JSON"]
    assert "sizes add up to 10 bytes, its body is 3" in rejected[1]
    assert "unknown kind 'bye'" in rejected[2] and len(rejected) == 3
    assert proc.take_rejected() == []


def test_a_frame_too_large_to_be_a_childs_loses_the_stream() -> None:
    with pytest.raises(RecorderProtocolError, match="over the 64 MiB"):
        FrameReader().feed(FRAME_HEAD.pack(10, 65 << 20))


def test_the_recorder_records_a_malformed_answer_and_keeps_reading_the_child() -> None:
    """A real forked child that sends a frame that does not decode between two good answers: the
    supervisor (the recorder's reading) records ``protocol-error`` with the reason, hands on the
    good answers, and the child stays (not ended, not restarted)."""
    events: list[tuple[str, dict[str, Any]]] = []

    def body(cmd_fd: int, out_fd: int) -> None:
        send_answer(out_fd, Answer("hello"))
        bad = encode_header({"kind": "tick", "tick": "one"})
        os.write(out_fd, FRAME_HEAD.pack(len(bad), 0) + bad)
        send_answer(out_fd, Answer("tick", 1))
        os.read(cmd_fd, 100)  # until the parent says quit (or goes)

    sup = Supervisor(["toy"], lambda name: body, lambda kind, **fields: events.append((kind, fields)),
                     tick_timeout_s=1.0, hang_kill_s=5.0)
    st = sup.sources["toy"]
    sup.start(st)
    try:
        got: list[Answer] = []
        end = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < end:
            time.sleep(0.02)
            got += sup.read(st)
        assert [(a.kind, a.tick) for a in got] == [("hello", None), ("tick", 1)]
        assert events == [("protocol-error", {"source": "toy",
                                              "error": "a tick answer whose tick is not an integer: 'one'"})]
        assert st.proc is not None and st.restarts == 0
    finally:
        sup.stop_all(lambda st, answer: None, patience_s=0.5)
    assert st.proc is None


class _ToyDriver:
    """A source whose tick appends the tick's number (the child loop's commands, seen from a driver)."""

    def start(self, ctx: CollectContext) -> None:
        pass

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        ctx.sink.append_bytes("toy.txt", f"{tick.index}\n".encode())

    def stop(self) -> None:
        pass


def test_the_child_answers_a_malformed_command_as_a_failed_tick_and_goes_on() -> None:
    cmd_r, cmd_w = os.pipe()
    out_r, out_w = os.pipe()
    os.set_blocking(out_r, False)
    ctx = CollectContext(CaptureOptions(), RecordSink(), Redactor(enabled=False, key=None), {}, None, "toy")  # type: ignore[arg-type]
    loop = threading.Thread(target=child_loop, args=(cmd_r, out_w, _ToyDriver(), ctx, 5.0), daemon=True)
    loop.start()
    proc = SourceProcess("toy", 0, cmd_w, out_r, time.monotonic())
    try:
        os.write(cmd_w, b"{garbage\n")
        assert proc.send(TickCommand(5, time.time(), {}))
        assert proc.send(QuitCommand())
        loop.join(10)
        assert not loop.is_alive()
        got = proc.answers()
    finally:
        for fd in (cmd_w, out_r, out_w):
            os.close(fd)
    assert [(a.kind, a.tick) for a in got] == [("hello", None), ("tick", None), ("tick", 5), ("tick", None)]
    assert got[1].error is not None and got[1].error.startswith("RecorderProtocolError: a command that is not JSON")
    assert [r.data for r in got[2].records] == [b"5\n"] and got[2].error is None
