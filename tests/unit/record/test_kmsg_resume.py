"""Where the recorder's kernel sampler resumes /dev/kmsg: after the ring's last kernel record of
this boot, however many runs without kernel records came since; from the start after a reboot;
and a kernel child restarted mid-run resumes after the last record its predecessor sent."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from forensics.collect.context import Tick
from forensics.collectors.kernel import KernelCollector
from forensics.record.child import SourceProcess
from forensics.record.kmsg_resume import FROM_START, last_seq, resume_seq
from forensics.record.options import RecordOptions
from forensics.record.protocol import Answer, Command, Record, TickCommand
from forensics.record.recorder import Recorder
from forensics.record.sources import DELTA_MEMBERS
from forensics.ring import RingWriter
from forensics.ring import writer as ring_writer
from forensics.ring.files import boot_id
from forensics.specs.kernel import KMSG_WINDOW
from tests.support.host_evidence import make_context

XID = b"4,1200,30000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"
BOOT = boot_id() or "this-boot"


def _run(ring: Path, records: list[tuple[str, bytes]], boot: str = BOOT, seal: bool = True) -> None:
    """One recorder run's segment: ``records`` (member, data), written in boot ``boot``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ring_writer, "boot_id", lambda: boot)
        w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
        t = time.time() - 600
        w.append([(t + k, 100.0 + k, member, "append", data) for k, (member, data) in enumerate(records)])
        w.close(seal=seal)


def _kmsg(seq: int, text: str = "a kernel record") -> bytes:
    return f"6,{seq},{seq * 1000},-;{text}\n".encode()


QUIET = ("cgroup/samples.jsonl", b'{"t": 1}\n')


def test_last_seq_reads_the_last_record_not_its_continuation_lines() -> None:
    assert last_seq(_kmsg(7) + _kmsg(8) + b" SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n") == 8
    assert last_seq(_kmsg(7) + b"6,9,9000,-;no newline at the end") == 9
    assert last_seq(b" only a continuation\n") is None
    assert last_seq(b"") is None


def test_same_boot_resumes_after_the_last_kernel_record(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    _run(ring, [(KMSG_WINDOW, _kmsg(3999) + _kmsg(4000)), QUIET])
    assert resume_seq(ring, BOOT) == 4000
    assert resume_seq(tmp_path / "no-ring", BOOT) is None


def test_a_crash_loop_of_runs_without_kernel_records_still_resumes(tmp_path: Path) -> None:
    """Each run opens a segment: two (or ten) short runs that died before the kernel said anything
    must not hide the last kernel record (the old search read only the last two segments, and the
    next run started at the end of /dev/kmsg, losing the OOM that killed the recorder)."""
    ring = tmp_path / "ring"
    _run(ring, [(KMSG_WINDOW, _kmsg(4000))])
    for _ in range(10):
        _run(ring, [QUIET])
    _run(ring, [QUIET], seal=False)  # the last run was SIGKILLed: its segment is still active
    assert resume_seq(ring, BOOT) == 4000


def test_a_ring_of_another_boot_reads_this_boot_from_the_start(tmp_path: Path) -> None:
    """The node rebooted: the ring's last number (50000, weeks of uptime) is of the old boot; a
    resume after it would skip the new boot's records up to 50000, the Xid at 1200 among them."""
    ring = tmp_path / "ring"
    _run(ring, [(KMSG_WINDOW, _kmsg(50000))], boot="previous-boot")
    assert resume_seq(ring, BOOT) == FROM_START
    _run(ring, [(KMSG_WINDOW, _kmsg(50001))], boot="previous-boot", seal=False)  # killed, not sealed
    assert resume_seq(ring, BOOT) == FROM_START
    # the kernel sampler given that hint records the new boot's Xid
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(XID)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"kmsg_last_seq": [resume_seq(ring, BOOT)]})
    collector = KernelCollector(str(kmsg))
    collector.sample(ctx, Tick(0, time.time()))
    collector.end_sampling(ctx)
    assert (stage / KMSG_WINDOW).read_bytes() == XID


def test_the_search_stops_at_the_first_segment_of_another_boot(tmp_path: Path) -> None:
    """This boot's runs recorded no kernel record; the one before them is of another boot: its
    number means nothing now, and every record of this boot is new to the ring."""
    ring = tmp_path / "ring"
    _run(ring, [(KMSG_WINDOW, _kmsg(50000))], boot="previous-boot")
    _run(ring, [QUIET])
    _run(ring, [QUIET])
    assert resume_seq(ring, BOOT) == FROM_START
    _run(ring, [(KMSG_WINDOW, _kmsg(12))])  # this boot's kernel record, after the reboot
    _run(ring, [QUIET])
    assert resume_seq(ring, BOOT) == 12


def test_no_kernel_record_and_no_other_boot_starts_at_the_end(tmp_path: Path) -> None:
    ring = tmp_path / "ring"
    _run(ring, [QUIET])
    _run(ring, [QUIET], seal=False)
    assert resume_seq(ring, BOOT) is None
    assert resume_seq(ring, None) is None  # the boot unknown: no segment can be told of another


def test_the_search_is_bounded_and_then_reads_from_the_start(tmp_path: Path) -> None:
    """Past ``read_bytes`` of segment text the search gives up: reading this boot's records again
    costs copies (the kernel loader keeps one), starting at the end could lose records."""
    ring = tmp_path / "ring"
    _run(ring, [(KMSG_WINDOW, _kmsg(4000))])
    for _ in range(5):
        _run(ring, [("cgroup/samples.jsonl", b'{"pad": "' + b"x" * 4000 + b'"}\n')])
    assert resume_seq(ring, BOOT) == 4000
    assert resume_seq(ring, BOOT, read_bytes=8000) == FROM_START


class _Child(SourceProcess):
    """A sampler child that is not there: the commands the recorder sends are kept."""

    def __init__(self) -> None:
        super().__init__(name="kernel", pid=0, cmd_fd=-1, out_fd=-1, started_mono=time.monotonic(), hello=True)
        self.sent: list[TickCommand] = []

    def send(self, command: Command) -> bool:
        assert isinstance(command, TickCommand)
        self.sent.append(command)
        return True

    def kill(self) -> None:
        pass

    def close(self) -> None:
        pass

    def reap(self, timeout: float) -> None:
        pass


def _answer(rec: Recorder, tick: int, data: bytes) -> None:
    st = rec.sources["kernel"]
    rec._handle(st, Answer("tick", tick, [Record(time.time(), time.monotonic(), KMSG_WINDOW, "append", data)]))
    rec.pending.clear()


def test_a_restarted_kernel_child_resumes_after_the_last_record_received(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The hint went to the first child only: one hang-killed and restarted got none and started at
    the end of /dev/kmsg, losing what the kernel logged between the kill and the restart."""
    rec = Recorder(RecordOptions(ring=tmp_path / "ring", sources=("kernel",), interval_s=1.0))
    rec.held["kmsg_last_seq"] = resume_seq(tmp_path / "ring", BOOT)  # as run() does: no ring, at the end
    assert rec.held["kmsg_last_seq"] is None
    children: list[_Child] = []

    def start(st: Any) -> None:
        children.append(_Child())
        st.proc = children[-1]
        st.hinted = False

    monkeypatch.setattr(rec.supervisor, "start", start)
    st = rec.sources["kernel"]
    rec._tick(0)  # starts the first child
    rec._tick(0)
    assert children[0].sent[0].hints == {}
    _answer(rec, 0, _kmsg(41) + _kmsg(42, "the last record received") + b" SUBSYSTEM=pci\n")
    rec._tick(1)
    assert children[0].sent[1].hints == {}  # a running child reads the hint once: not sent again
    rec.supervisor.end(st, "no answer for 5 s (killed)", backoff=False)  # hang-killed mid-tick
    rec._tick(2)  # the new child
    rec._tick(2)
    assert children[1].sent[0].hints == {"kmsg_last_seq": [42]}
    _answer(rec, 2, _kmsg(43))
    rec.supervisor.end(st, "no answer for 5 s (killed)", backoff=False)
    rec._tick(3)
    rec._tick(3)
    assert children[2].sent[0].hints == {"kmsg_last_seq": [43]}
