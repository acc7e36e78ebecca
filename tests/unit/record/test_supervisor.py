"""The sources' children, supervised (forensics.record.supervisor): real forked children that hang,
fail and come back; what the supervisor records of each and when it starts the next."""

from __future__ import annotations

import os
import time
from typing import Any

from forensics.collect.context import CaptureOptions
from forensics.record.protocol import Answer, TickCommand, send_answer
from forensics.record.supervisor import SourceChild, SourceState, Supervisor, backoff_s


def test_the_backoff_doubles_per_failure_in_a_row_up_to_a_minute() -> None:
    assert [backoff_s(n) for n in range(1, 10)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def _answers(sup: Supervisor, st: SourceState, want: int, within_s: float = 10.0) -> list[Answer]:
    got: list[Answer] = []
    end = time.monotonic() + within_s
    while len(got) < want and time.monotonic() < end and st.proc is not None:
        time.sleep(0.02)
        got += sup.read(st)
    return got


def _hello(sup: Supervisor, st: SourceState) -> None:
    got = _answers(sup, st, 1)
    assert [a.kind for a in got] == ["hello"]
    assert st.proc is not None
    st.proc.hello = True


def _hangs(cmd_fd: int, out_fd: int) -> None:
    send_answer(out_fd, Answer("hello"))
    while os.read(cmd_fd, 100):  # takes ticks, never answers
        pass


def _answers_ticks(cmd_fd: int, out_fd: int) -> None:
    send_answer(out_fd, Answer("hello"))
    while chunk := os.read(cmd_fd, 4096):
        for line in chunk.splitlines():
            if b'"tick"' in line:
                send_answer(out_fd, Answer("tick", 0))


def test_a_hung_child_is_killed_and_its_gap_recorded_when_the_next_one_answers() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    bodies = [_hangs, _answers_ticks]
    sup = Supervisor(["toy"], lambda name: bodies.pop(0), lambda kind, **f: events.append((kind, f)),
                     tick_timeout_s=1.0, hang_kill_s=5.0)
    st = sup.sources["toy"]
    try:
        now = time.monotonic()
        assert not sup.ready(st, now, time.time())  # due: started, not ready before its hello
        _hello(sup, st)
        assert sup.ready(st, now, time.time())
        assert st.proc is not None and st.proc.send(TickCommand(0, time.time(), {}))
        sup.sent(st, 0, now)
        assert not sup.ready(st, now + 1.0, 1000.0)  # busy: this tick is missed, the gap opens
        assert (st.missed, st.gap_from, st.gap_why) == (1, 1000.0, "no answer within 1 s")
        hung = st.proc.pid
        assert not sup.ready(st, now + 6.0, 1005.0)  # silent past hang_kill_s: killed
        assert st.proc is None and st.restarts == 1 and st.error == "no answer for 5 s (killed)"
        assert events == [("source", {"source": "toy", "status": "restarted", "error": "no answer for 6.0 s: killed"})]
        assert not _alive(hung)  # killed and reaped
        assert st.next_start - time.monotonic() > 0.5  # the backoff: one second after one failure
        assert not sup.ready(st, st.next_start - 0.1, time.time())  # not yet
        assert st.proc is None
        assert not sup.ready(st, st.next_start, time.time())  # due: the next child
        _hello(sup, st)
        assert st.proc.send(TickCommand(1, time.time(), {}))
        sup.sent(st, 1, time.monotonic())
        got = _answers(sup, st, 1)
        assert [(a.kind, a.tick) for a in got] == [("tick", 0)]
        sup.answered(st)
        assert (st.status, st.failures, st.gap_from, st.ticks) == ("running", 0, None, 1)
        kind, gap = events[-1]
        assert kind == "gap" and gap["source"] == "toy" and gap["from"] == 1000.0
        assert gap["reason"] == "no answer within 1 s" and gap["to"] > 1000.0
    finally:
        sup.stop_all(lambda st, answer: None, patience_s=0.5)
    assert st.proc is None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_unavailable_source_is_recorded_once_per_reason_and_retried_later() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    sup = Supervisor(["toy"], lambda name: _hangs, lambda kind, **f: events.append((kind, f)),
                     tick_timeout_s=1.0, hang_kill_s=5.0)
    st = sup.sources["toy"]
    for failures in (1, 2, 3):
        sup.failed(st, "unavailable: no libnvidia-ml.so.1")
        assert st.status == "unavailable" and st.failures == failures
        assert st.next_start - time.monotonic() > backoff_s(failures) - 0.5
    assert events == [("source", {"source": "toy", "status": "unavailable", "error": "unavailable: no libnvidia-ml.so.1"})]
    assert st.gap_why == "unavailable: no libnvidia-ml.so.1"


def test_a_source_child_is_the_recorders_child_of_a_real_source(tmp_path: Any) -> None:
    """SourceChild, the body forked for a source: the procfs source's child says hello and answers
    a tick with records of this machine's /proc."""
    events: list[tuple[str, dict[str, Any]]] = []
    options = CaptureOptions(interval_s=1.0, timeout_s=5.0, redact=True, extra={"ring.dir": str(tmp_path)})
    sup = Supervisor(["procfs"], lambda name: SourceChild(name, options, None, 5.0),
                     lambda kind, **f: events.append((kind, f)), tick_timeout_s=1.0, hang_kill_s=5.0)
    st = sup.sources["procfs"]
    try:
        sup.start(st)
        _hello(sup, st)
        assert st.proc is not None and st.proc.send(TickCommand(0, time.time(), {"attribute_pids": [os.getpid()]}))
        sup.sent(st, 0, time.monotonic())
        got = _answers(sup, st, 1)
        assert [(a.kind, a.tick, a.error) for a in got] == [("tick", 0, None)]
        assert any(r.member.startswith(f"proc/{os.getpid()}/") for r in got[0].records), [r.member for r in got[0].records]
    finally:
        sup.stop_all(lambda st, answer: None, patience_s=0.5)
    assert events == []
