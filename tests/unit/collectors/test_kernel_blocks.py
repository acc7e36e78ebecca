"""The block parser (forensics/collectors/kernel/blocks.py) derives from a /dev/kmsg dump exactly
what the record-at-a-time path did before it (tests/support/kmsg_reference.py, main's code kept
verbatim): the same records.jsonl appends, byte for byte, the same OOM kills, Xid events and
driver messages, the same errors named by the same line numbers, and, where the old path failed
(a timestamp out of wall_time_iso's range, a boot time that is not a number), the same exception
after the same appends. Logs are generated with hostile lines: bad headers, blank and whitespace
lines, dictionary lines before any record or after a bad line, more than 64 of them, invalid
UTF-8, escapes, quotes, control characters, leading zeros, timestamps past the range, messages
over 64 KiB, a last line without its newline; cut into blocks as small as one record."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.collectors.kernel import blocks as kmsg_blocks
from forensics.collectors.kernel import derived as kernel_derived
from forensics.collectors.kernel.blocks import blocks, derive_kmsg
from forensics.collectors.kernel.collector import KernelCollector
from tests.support import kmsg_reference as reference
from tests.support.host_evidence import make_context

MESSAGES = [
    "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "memory: usage 32768kB, limit 32768kB, failcnt 109",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/docker/"
    + "a" * 64 + ",task_memcg=/docker/" + "a" * 64 + ",task=python3,pid=77,uid=0",
    "Memory cgroup out of memory: Killed process 77 (python3) total-vm:39136kB, anon-rss:31872kB, "
    "file-rss:1392kB, shmem-rss:0kB, UID:0 pgtables:112kB oom_score_adj:0",
    "Out of memory: Killed process 78 (x) total-vm:1kB",
    "Task in /kubepods/burstable/pod1/c1 killed as a result of limit of /kubepods/burstable/pod1",
    "Memory cgroup out of memory: Kill process 5 (a) score 1 or sacrifice child",
    "Killed process 9 (b)",
    "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, Ch 0000000a, MMU Fault",
    "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: x",
    "NVRM: Xid (0000:3f:00): 46",
    "NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.",
    "nvidia-uvm: Loaded the UVM driver, major device number 509",
    "nvidia-nvlink: Nvlink Core is being initialized",
    "NVRM loading NVIDIA UNIX x86_64 Kernel Module",
    "nvrm: lower case",
    "eth0: renamed from veth1",
    "a bloom, a room, a zoom: oom inside words; Kill in the middle; Xid too",
    " memory: usage 1kB, limit 2kB, failcnt 3",
    "",
    'quote " backslash \\ escaped \\x0a \\xff',
    "tab\there carriage\r nul \x00 unit \x1f del \x7f",
    "unicode é \u2028 \u0085 \ufffd \U0001f600",
    "u001f \\u001f \x1f",
]
FLAGS = ["-", "c", "+", "", "-x", "a b", "\x01", "é", "-;", "\t"]
MORE = ["", ",SUBSYSTEM", ",a,b", ",é", ",\x7f"]
BAD = ["garbage", "6,1;x", "a,b,c,d;x", "6,1,2;three fields", "", "   ", "\t", "\r", "6,1,2,-",
       "٣,1,2,-;arabic digit", "6,1,2,-é;x", "12345,1,2,-;prio of five digits", ";", ",,,;"]
BOOTS = [1.7e9, 1_700_000_000.123456, 1.7e9 + 0.5e-6, 0.0, 0.5, 1e11, 2.5e11, -1.7e9,
         float("nan"), float("inf")]


def _number(draw: Any, small: bool, hostile: bool) -> str:
    value = draw(st.integers(0, 10**13) if small else st.integers(0, 10**21))
    zeros = draw(st.sampled_from(["", "", "", "", "0", "00"] if hostile else [""] * 14 + ["0"]))
    return zeros + str(value)


@st.composite
def _line(draw: Any, hostile: bool = True) -> bytes:
    kind = draw(st.sampled_from(["record"] * 6 + ["dict"] * 3 + (["bad", "raw"] if hostile else [])))
    if kind == "dict":
        key = draw(st.sampled_from(["SUBSYSTEM", "DEVICE", "", "K", "A=B", "é"]))
        value = draw(st.sampled_from(["pci", "+pci:0000:3b:00.0", "", '"q"\\', "é", "x=y"]))
        return f" {key}={value}".encode() if draw(st.booleans()) else f" {key}".encode()
    if kind == "bad":
        return draw(st.sampled_from(BAD)).encode()
    if kind == "raw":
        return draw(st.binary(max_size=12))
    prio = draw(st.sampled_from(["6", "4", "3", "0", "7", "30", "0006", "191", "9999"]))
    seq = _number(draw, draw(st.booleans()), hostile)
    ts = _number(draw, not hostile or draw(st.integers(0, 9)) > 0, hostile)
    message = draw(st.sampled_from(MESSAGES) | st.text(max_size=30)
                   | st.sampled_from(MESSAGES).map(lambda m: m[: len(m) // 2]))
    head = f"{prio},{seq},{ts},{draw(st.sampled_from(FLAGS))}{draw(st.sampled_from(MORE))};".encode()
    body = message.encode("utf-8", "surrogatepass")
    if hostile and draw(st.integers(0, 9)) == 0:  # an invalid UTF-8 sequence in the message
        cut = draw(st.integers(0, len(body)))
        body = body[:cut] + draw(st.sampled_from([b"\xff", b"\xe2\x82", b"\xc3", b"\xed\xa0\x80"])) + body[cut:]
    return head + body


@st.composite
def _log(draw: Any) -> bytes:
    hostile = draw(st.booleans())  # else only records and dictionary lines: most blocks are clean
    lines = draw(st.lists(_line(hostile), max_size=40))
    if draw(st.integers(0, 19)) == 0:  # more dictionary lines than a record keeps
        lines.insert(draw(st.integers(0, len(lines))), b"\n".join(b" K%d=v" % i for i in range(70)))
    if draw(st.integers(0, 29)) == 0:  # a message over 64 KiB
        lines.insert(draw(st.integers(0, len(lines))), b"6,5,5,-;" + b"m" * (64 * 1024 + 1))
    raw = b"\n".join(lines)
    return raw + b"\n" if lines and draw(st.integers(0, 4)) else raw


def _outcome(run: Callable[[Any, Any], Any]) -> tuple[list[str], list[tuple[int, str]], str]:
    writes: list[str] = []
    errors: list[tuple[int, str]] = []
    try:
        d = run(writes.append, lambda number, error: errors.append((number, str(error))))
        result = json.dumps([d.count, d.first_ts, d.last_ts, d.last_seq, d.ooms, d.xids, d.driver],
                            sort_keys=True)
    except Exception as error:  # noqa: BLE001 - both paths must fail alike, after the same appends
        result = f"{type(error).__name__}: {error}"
    return writes, errors, result


def _both(raw: bytes, boot: float, block: int, strict: bool = False) -> None:
    old = _outcome(lambda write, on_error: reference.derive(
        reference.iter_kmsg(reference._lines(raw), None if strict else on_error), boot, write))
    new = _outcome(lambda write, on_error: derive_kmsg(raw, boot, write, None if strict else on_error,
                                                       block_bytes=block))
    assert new[2] == old[2]
    assert new[1] == old[1]
    assert new[0] == old[0]


def _small_limits(mp: pytest.MonkeyPatch) -> None:
    """Appends of 3 lines, at most 2 driver messages and 3 events: every limit is reached."""
    for module, chunk, driver, events in ((reference, "_DERIVED_CHUNK", "_MAX_DRIVER_MESSAGES", "_MAX_EVENTS"),
                                          (kernel_derived, "DERIVED_CHUNK", "MAX_DRIVER_MESSAGES", "MAX_EVENTS")):
        mp.setattr(module, chunk, 3)
        mp.setattr(module, driver, 2)
        mp.setattr(module, events, 3)
    mp.setattr(kmsg_blocks, "MAX_DRIVER_MESSAGES", 2)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_log(), st.sampled_from(BOOTS), st.sampled_from([1, 2, 16, 200, 1 << 20]), st.booleans(),
       st.integers(0, 9), st.sampled_from([1, 50, 300, 16 * 1024]))
def test_block_parser_derives_what_the_record_at_a_time_path_did(raw: bytes, boot: float, block: int,
                                                                  small: bool, strict: int, retry: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kmsg_blocks.KmsgBlocks, "retry_chars", retry)
        if small:
            _small_limits(mp)
        _both(raw, boot, block, strict=strict == 0)


@pytest.mark.parametrize("block", [1, 100, 4096, 1 << 20])
@pytest.mark.parametrize("small", [False, True])
@pytest.mark.parametrize("retry", [200, 16 * 1024])
def test_a_long_log_of_clean_and_damaged_blocks(block: int, small: bool, retry: int) -> None:
    """The benchmark's kind of log (OOM sequences, Xids, driver noise, dictionary lines), seeded
    damage here and there, the last record torn: the fast path and the line by line path both run,
    and records cross blocks."""
    rng = random.Random(35)
    lines: list[bytes] = []
    for seq in range(6000):
        ts = 1_000_000 + seq * 997
        lines.append(f"{rng.choice('3467')},{seq},{ts},-;{rng.choice(MESSAGES)}".encode())
        if rng.random() < 0.3:
            lines += [b" SUBSYSTEM=pci", b" DEVICE=+pci:0000:3b:00.0"]
        if rng.random() < 0.002:
            lines.append(rng.choice(BAD).encode())
        if rng.random() < 0.001:
            lines.append(b" DEVICE=after-a-bad-line")
    raw = b"\n".join(lines)[:-7]  # the last record torn
    clean: list[bool] = []
    read_clean_block = kmsg_blocks.KmsgBlocks._clean_block

    def spy(self: kmsg_blocks.KmsgBlocks, text: str) -> bool:
        clean.append(read_clean_block(self, text))
        return clean[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kmsg_blocks.KmsgBlocks, "_clean_block", spy)
        mp.setattr(kmsg_blocks.KmsgBlocks, "retry_chars", retry)
        if small:
            _small_limits(mp)
        _both(raw, 1.7e9, block)
        _both(raw + b"\n6,99,100000000000000000,-;past the range\n6,100,1,-;x\n", 1.7e9, block)
    assert False in clean and True in clean  # both paths ran


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=20) | st.sampled_from([b" K=v", b"6,1,2,-;x", b"\xe2\x82", b""]),
                max_size=30), st.integers(1, 40))
def test_blocks_decode_as_the_whole_log_does(parts: list[bytes], size: int) -> None:
    raw = b"\n".join(parts)
    texts = list(blocks(raw, size))
    assert "".join(texts) == raw.decode("utf-8", "replace")
    assert all(text for text in texts)
    assert all(not text.startswith(" ") for text in texts[1:])  # a record's dictionary lines stay with it


def test_collector_snapshot_writes_what_the_reference_derives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the collector: kernel/records.jsonl, oom.json, xid.json, gpu_driver.json and the
    index's counts and parse errors are the reference's."""
    from forensics.bundle.sink import dumps_json

    rng = random.Random(7)
    lines = [f"{rng.choice('3467')},{seq},{1_000_000 + seq * 1000},-;{rng.choice(MESSAGES)}".encode()
             for seq in range(3000)]
    lines[10:10] = [b"not a record", b" KEY=after-it", b"", b"6,1,2;bad"]
    dump = tmp_path / "kmsg.txt"
    dump.write_bytes(b"\n".join(lines) + b"\n")
    boot = 1_700_000_000.25
    monkeypatch.setattr(sys.modules[KernelCollector.__module__], "clock_readings",
                        lambda: {"realtime_unix": boot + 5e6, "monotonic_s": 5e6, "boottime_s": 5e6,
                                 "boot_time_unix": boot, "suspended_s": 0.0})
    stage = tmp_path / "stage"
    ctx = make_context(stage)
    KernelCollector(str(dump)).snapshot(ctx)

    raw = (stage / "kernel/kmsg.txt").read_bytes()
    writes: list[str] = []
    errors: list[str] = []
    expected = reference.derive(reference.iter_kmsg(reference._lines(raw), lambda n, e: errors.append(f"line {n}: {e}")),
                                boot, writes.append)
    assert (stage / "kernel/records.jsonl").read_text() == "".join(writes)
    assert json.loads((stage / "kernel/oom.json").read_text()) == json.loads(dumps_json(expected.ooms))
    assert json.loads((stage / "kernel/xid.json").read_text()) == json.loads(dumps_json(expected.xids))
    assert json.loads((stage / "kernel/gpu_driver.json").read_text()) == json.loads(dumps_json(expected.driver))
    index = json.loads((stage / "kernel/index.json").read_text())
    assert index["records"] == expected.count == 3000
    assert index["parse_errors"] == errors and len(errors) == 2
    assert index["last_seq"] == expected.last_seq
    assert expected.xids and expected.ooms and expected.driver
