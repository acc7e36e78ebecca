"""Kernel log parsers: /dev/kmsg, dmesg and journald fallbacks, OOM sequences, Xid lines."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.errors import ParseError
from forensics.parsing import kmsg, nvrm, oomkill

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kernel"
POD = "6a1f3c2e_9b4d_4e5f_8a7b_1c2d3e4f5a6b"
DOCKER_ID = "a9737f57aa4f0cae7ff54ea5494a97c8fde7989ab8de5359095512075f2dd349"


def records(name: str) -> list[kmsg.KmsgRecord]:
    return list(kmsg.iter_kmsg((FIXTURES / name).read_text().splitlines(True)))


def kills(recs: list[kmsg.KmsgRecord]) -> list[oomkill.OomKill]:
    tracker = oomkill.OomTracker()
    return [k for k in map(tracker.feed, recs) if k is not None]


def test_record_header_and_dictionary_lines() -> None:
    recs = records("kmsg-oom-xid.txt")
    acpi = next(r for r in recs if r.seq == 429)
    assert acpi.fields == (("SUBSYSTEM", "acpi"), ("DEVICE", "+acpi:PNP0A08:00"))
    assert (acpi.facility, acpi.level, acpi.ts_usec, acpi.flags) == (0, 6, 298169000, "-")
    assert recs[0].message == "docker0: port 1(veth1) entered forwarding state"


def test_prio_splits_facility_and_level() -> None:
    record = kmsg.parse_kmsg_record("30,5,100,c;systemd[1]: started\n")
    assert (record.facility, record.level, record.flags) == (3, 6, "c")


def test_memcg_oom_sequence_real_format() -> None:
    found = kills(records("kmsg-oom-xid.txt"))
    first = found[0]
    assert (first.pid, first.comm, first.scope, first.invoker_comm) == (6911, "sh", "memcg", "sh")
    assert first.oom_memcg == first.task_memcg == f"/docker/{DOCKER_ID}"
    assert first.constraint == "CONSTRAINT_MEMCG"
    assert first.anon_rss_bytes == 31872 * 1024 and first.total_vm_bytes == 39136 * 1024
    assert first.memcg_limit_bytes == 32768 * 1024 and first.memcg_failcnt == 109
    assert first.seqs == (346, 375, 427, 428) and first.ts_usec == 297769613


def test_pod_level_oom_with_comma_in_comm() -> None:
    second = kills(records("kmsg-oom-xid.txt"))[1]
    assert (second.pid, second.comm, second.uid, second.oom_score_adj) == (5151, "python3, worker", 1000, -997)
    assert second.oom_memcg is not None and second.oom_memcg.endswith(f"pod{POD}.slice")
    assert second.task_memcg is not None and second.task_memcg.endswith(".scope")


def test_global_oom_without_preamble() -> None:
    last = kills(records("kmsg-oom-xid.txt"))[-1]
    assert (last.scope, last.pid, last.comm, last.invoker_comm, last.oom_memcg) == (
        "global", 9999, "stress", None, None)


def test_old_kernel_task_in_format() -> None:
    (kill,) = kills(records("old-kernel-oom.txt"))
    assert (kill.pid, kill.comm, kill.scope) == (777, "java", "memcg")
    assert kill.task_memcg == "/docker/" + "1" * 64
    assert kill.memcg_usage_bytes == 524288 * 1024 and kill.pgtables_bytes is None


def test_xid_formats() -> None:
    xids = [x for x in map(nvrm.parse_xid, records("kmsg-oom-xid.txt")) if x is not None]
    assert [(x.xid, x.pci_bus_id, x.pid, x.process_name) for x in xids] == [
        (79, "0000:3b:00.0", None, None),
        (31, "0000:86:00.0", 79749, "python"),
        (13, "0000:03:00.0", None, None),
    ]
    assert xids[0].text == "GPU has fallen off the bus." and xids[0].description
    assert xids[2].text.startswith("0003 00000000")


def test_driver_messages_exclude_xid_and_info_noise() -> None:
    driver = [d for d in map(nvrm.parse_driver_message, records("kmsg-oom-xid.txt")) if d]
    messages = [d.message for d in driver]
    assert not any("Xid" in m for m in messages)
    assert any(m.startswith("NVRM: GPU at PCI") for m in messages)
    assert any(m.startswith("nvidia 0000:3b:00.0: AER") for m in messages)
    assert not any(m.startswith("nvidia-nvlink") for m in messages)  # level 6, not NVRM


def test_dmesg_raw_fallback() -> None:
    recs = list(kmsg.iter_dmesg_raw((FIXTURES / "dmesg-raw.txt").read_text().splitlines(True)))
    assert recs[1].ts_usec == 297757585 and recs[1].level == 4 and recs[1].seq is None
    (kill,) = kills(recs)
    assert kill.pid == 6911 and kill.task_memcg == f"/docker/{DOCKER_ID}"
    assert nvrm.parse_xid(recs[-1]) is not None


def test_journal_fallback_with_binary_message() -> None:
    recs = list(kmsg.iter_journal_json((FIXTURES / "journal.jsonl").read_text().splitlines()))
    assert recs[0].ts_usec == 297769613 and recs[0].level == 3
    assert kills(recs)[0].pid == 6911
    assert recs[1].message.startswith("NVRM: Xid (PCI:0000:3b:00): 48")
    xid = nvrm.parse_xid(recs[1])
    assert xid is not None and xid.xid == 48


def test_wall_time() -> None:
    assert kmsg.wall_time_unix(1_500_000, 1000.0) == 1001.5
    assert kmsg.wall_time_iso(0, 0.0) == "1970-01-01T00:00:00.000000Z"
    with pytest.raises(ParseError):
        kmsg.wall_time_iso(10**19, 0.0)


def test_on_error_skips_bad_lines() -> None:
    errors: list[int] = []
    lines = ["6,1,10,-;ok\n", "garbage\n", " ORPHAN=1\n", "6,2,11,-;ok2\n"]
    recs = list(kmsg.iter_kmsg(lines, lambda n, e: errors.append(n)))
    assert [r.seq for r in recs] == [1, 2] and errors == [2]
    with pytest.raises(ParseError):
        list(kmsg.iter_kmsg(lines))
    with pytest.raises(ParseError):
        list(kmsg.iter_kmsg([" ORPHAN=1\n"]))


def _synthetic(n: int) -> Iterator[str]:
    for i in range(n):
        if i % 1000 == 0:
            yield f"3,{i},{i * 10},-;Memory cgroup out of memory: Killed process {i} (x) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0\n"
        else:
            yield f"6,{i},{i * 10},-;eth0: link is up at {i} Mbps\n"


def _peak_bytes(n: int) -> int:
    tracker = oomkill.OomTracker()
    tracemalloc.start()
    count = 0
    for record in kmsg.iter_kmsg(_synthetic(n)):
        tracker.feed(record)
        nvrm.parse_xid(record)
        count += 1
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == n
    return peak


def test_streaming_memory_does_not_grow_with_the_log() -> None:
    """Parsing 200k records needs no more memory than parsing 20k (streaming, bounded state)."""
    small, large = _peak_bytes(20_000), _peak_bytes(200_000)
    assert large < small * 1.5 + 64 * 1024


SAMPLE_LINES = (FIXTURES / "kmsg-oom-xid.txt").read_text().splitlines(True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=10))
def test_random_lines_raise_only_parse_error(lines: list[str]) -> None:
    for parse in (kmsg.iter_kmsg, kmsg.iter_dmesg_raw, kmsg.iter_journal_json):
        try:
            for record in parse(lines):
                nvrm.parse_xid(record)
                nvrm.parse_driver_message(record)
                oomkill.OomTracker().feed(record)
        except ParseError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(SAMPLE_LINES) - 1), st.integers(0, 300), st.text(max_size=6),
       st.integers(0, 4))
def test_mutated_records_raise_only_parse_error(index: int, at: int, insert: str, drop: int) -> None:
    line = SAMPLE_LINES[index]
    at %= len(line) + 1
    mutated = SAMPLE_LINES[:index] + [line[:at] + insert + line[at + drop:]] + SAMPLE_LINES[index + 1:]
    tracker = oomkill.OomTracker()
    try:
        for record in kmsg.iter_kmsg(mutated):
            tracker.feed(record)
            nvrm.parse_xid(record)
            nvrm.parse_driver_message(record)
    except ParseError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_journal_raises_only_parse_error(text: str) -> None:
    for parse in (kmsg.parse_journal_line, kmsg.parse_dmesg_raw_line,
                  kmsg.parse_kmsg_record):
        try:
            parse(text)
        except ParseError:
            pass


_ASCII_FIELD = st.text(st.characters(max_codepoint=0x7F, exclude_characters=",;"), max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[0-9]{1,4}", fullmatch=True), st.from_regex(r"[0-9]{1,20}", fullmatch=True),
       st.from_regex(r"[0-9]{1,20}", fullmatch=True), _ASCII_FIELD,
       st.none() | st.text(st.characters(max_codepoint=0x7F, exclude_characters=";"), max_size=8),
       st.text(st.characters(exclude_characters="\n"), max_size=60), st.booleans())
def test_a_record_line_reads_back_as_written(prio: str, seq: str, ts: str, flags: str, more: str | None,
                                             message: str, newline: bool) -> None:
    line = f"{prio},{seq},{ts},{flags}{'' if more is None else ',' + more};{message}{chr(10) if newline else ''}"
    record = kmsg.parse_kmsg_record(line)
    assert record == kmsg.KmsgRecord(int(prio) >> 3, int(prio) & 7, int(seq), int(ts), flags, message)


@pytest.mark.parametrize("line", [
    "6,1,10,-;" + "x" * (64 * 1024 + 1),  # longer than any printk record
    "6,1,10,-;two\nlines\n", "6,1,10,-;ends twice\n\n",
    "6,1,10,é;non-ASCII header", "6,1²,10,-;not an ASCII digit", "12345,1,10,-;prio of 5 digits",
    "6," + "9" * 21 + ",10,-;seq of 21 digits", "6,1,10;no flags", "6,,10,-;empty seq", "6,1,10,- no separator",
])
def test_a_line_that_is_not_a_record_is_refused(line: str) -> None:
    with pytest.raises(ParseError):
        kmsg.parse_kmsg_record(line)
    assert kmsg.parse_kmsg_record("6,1,10,-;" + "x" * (64 * 1024)).message == "x" * (64 * 1024)
