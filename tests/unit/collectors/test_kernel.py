"""kernel collector: saved kmsg dumps, --since, fallbacks, failures, and the real /dev/kmsg."""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from forensics.collect.context import Tick
from forensics.collectors.kernel import KernelCollector, clock_readings
from forensics.errors import SourcePermissionDenied, SourceUnavailable
from tests.support.env import is_root, need
from tests.support.host_evidence import FIXTURES, make_context, read_json, read_jsonl

KMSG = FIXTURES / "kernel" / "kmsg-oom-xid.txt"
DMESG = FIXTURES / "kernel" / "dmesg-raw.txt"
FAIL = (sys.executable, "-c", "import sys; sys.exit(1)")


def test_snapshot_from_kmsg_dump(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    ctx = make_context(stage)
    KernelCollector(str(KMSG)).snapshot(ctx)
    assert (stage / "kernel/kmsg.txt").read_bytes() == KMSG.read_bytes()
    index = read_json(stage, "kernel/index.json")
    assert (index["source"], index["member"]) == (str(KMSG), "kernel/kmsg.txt")
    records = read_jsonl(stage, "kernel/records.jsonl")
    assert len(records) == index["records"] == 21
    acpi = next(r for r in records if r["seq"] == 429)
    assert acpi["fields"] == {"SUBSYSTEM": "acpi", "DEVICE": "+acpi:PNP0A08:00"}
    assert acpi["time"].endswith("Z")
    ooms = read_json(stage, "kernel/oom.json")
    assert [o["pid"] for o in ooms] == [6911, 5151, 9999]
    assert ooms[0]["task_attribution"]["runtime"] == "docker"
    assert ooms[1]["oom_attribution"]["kind"] == "pod"
    assert ooms[1]["task_attribution"]["runtime"] == "containerd"
    assert ooms[1]["task_attribution"]["pod_uid"] == "6a1f3c2e-9b4d-4e5f-8a7b-1c2d3e4f5a6b"
    assert ooms[2]["scope"] == "global" and ooms[2]["task_attribution"] is None
    xids = read_json(stage, "kernel/xid.json")
    assert [(x["xid"], x["pci_bus_id"]) for x in xids] == [
        (79, "0000:3b:00.0"), (31, "0000:86:00.0"), (13, "0000:03:00.0")]
    assert read_json(stage, "kernel/gpu_driver.json")
    assert ctx.published["kmsg_last_seq"] == [700]


def test_since_drops_older_records(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    boot = clock_readings()["boot_time_unix"]
    since = datetime.fromtimestamp(boot + 350, UTC)  # between the first and second OOM
    KernelCollector(str(KMSG)).snapshot(make_context(stage, since=since))
    ooms = read_json(stage, "kernel/oom.json")
    assert [o["pid"] for o in ooms] == [5151, 9999]
    index = read_json(stage, "kernel/index.json")
    assert index["dropped_before_since"] == 10
    assert b"6911" not in (stage / "kernel/kmsg.txt").read_bytes()


def test_fallback_to_dmesg(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    ctx = make_context(stage)
    KernelCollector(str(tmp_path / "no-kmsg"), dmesg_argv=("cat", str(DMESG)),
                    journal_argv=FAIL).snapshot(ctx)
    index = read_json(stage, "kernel/index.json")
    assert index["source"] == f"cat {DMESG}" and "no-kmsg" in next(iter(index["attempts"]))
    assert (stage / "kernel/dmesg.txt").read_bytes() == DMESG.read_bytes()
    assert [o["pid"] for o in read_json(stage, "kernel/oom.json")] == [6911]
    assert read_json(stage, "kernel/xid.json")[0]["xid"] == 79
    assert ctx.partial_reasons


def test_fallback_to_journal(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    journal = FIXTURES / "kernel" / "journal.jsonl"
    KernelCollector(str(tmp_path / "no-kmsg"), dmesg_argv=FAIL,
                    journal_argv=("cat", str(journal))).snapshot(make_context(stage))
    assert read_json(stage, "kernel/index.json")["member"] == "kernel/journal.jsonl"
    assert read_json(stage, "kernel/xid.json")[0]["xid"] == 48


def test_nothing_readable_is_unavailable(tmp_path: Path) -> None:
    collector = KernelCollector(str(tmp_path / "no-kmsg"), dmesg_argv=FAIL, journal_argv=FAIL)
    with pytest.raises(SourceUnavailable):
        collector.snapshot(make_context(tmp_path / "stage"))


def test_permission_denied_everywhere(tmp_path: Path) -> None:
    denied = (sys.executable, "-c",
              "import sys; sys.stderr.write('dmesg: read kernel buffer failed: Operation not permitted'); sys.exit(1)")
    collector = KernelCollector(str(tmp_path / "no-kmsg"), dmesg_argv=denied, journal_argv=FAIL)
    with pytest.raises(SourcePermissionDenied, match="not permitted"):
        collector.snapshot(make_context(tmp_path / "stage"))


def test_real_dev_kmsg_and_window_sampling(tmp_path: Path) -> None:
    """The real /dev/kmsg: the snapshot reads every record; a record written afterwards shows up
    in the sampling window (and the earlier ones do not)."""
    need(is_root() and os.access("/dev/kmsg", os.R_OK | os.W_OK), "/dev/kmsg readable and writable (root)")
    stage = tmp_path / "stage"
    ctx = make_context(stage)
    collector = KernelCollector()
    collector.snapshot(ctx)
    index = read_json(stage, "kernel/index.json")
    assert index["source"] == "/dev/kmsg" and index["records"] > 0
    assert not index["parse_errors"]
    marker = f"gpuforensics-test window marker {os.getpid()} {time.time()}"
    with open("/dev/kmsg", "w") as kmsg:
        kmsg.write(marker + "\n")
    sampler = KernelCollector()
    window_ctx = make_context(stage, ctx.published)
    sampler.sample(window_ctx, Tick(0, time.time()))
    sampler.end_sampling(window_ctx)
    window = (stage / "kernel/kmsg-window.txt").read_text()
    assert marker in window
    first_seq = int(window.split(",", 2)[1])
    assert first_seq > ctx.published["kmsg_last_seq"][0]


@pytest.mark.parametrize(("hint", "recorded"), [([-1], True), ([1199], True), ([1200], False), (None, False)])
def test_window_hint_says_where_to_start(tmp_path: Path, hint: list[int] | None, recorded: bool) -> None:
    """``kmsg_last_seq``: the window reads /dev/kmsg after that number (-1: from the start, the
    recorder's hint after a reboot); without it, from the end (a fake kmsg of one record)."""
    kmsg = tmp_path / "kmsg"
    xid = b"4,1200,30000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"
    kmsg.write_bytes(xid)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"kmsg_last_seq": hint} if hint is not None else {})
    collector = KernelCollector(str(kmsg))
    collector.sample(ctx, Tick(0, time.time()))
    collector.end_sampling(ctx)
    window = stage / "kernel/kmsg-window.txt"
    assert (window.read_bytes() if window.exists() else None) == (xid if recorded else None)
    assert (stage / "kernel/window.jsonl").exists() == recorded  # the Xid derived


def test_record_lines_are_canonical_json() -> None:
    """The hand-built records.jsonl line is exactly what dumps_json makes of the record."""
    from forensics.bundle.sink import dumps_json
    from forensics.collectors.kernel.collector import _lines
    from forensics.collectors.kernel.derived import record_line
    from forensics.parsing import kmsg

    text = KMSG.read_bytes() + b'6,800,1,-;quote " backslash \\\\ unicode \xc3\xa9 \xe2\x80\xa8 end\n'
    # dictionary lines: quotes, non-ASCII, a key twice (the last wins, as in dict(fields)), an empty value
    text += b'6,801,2,-;with fields\n SUBSYSTEM=pci\n DEVICE=+pci:"x"\\\xc3\xa9\n SUBSYSTEM=usb\n A=\n'
    for record in kmsg.iter_kmsg(_lines(text, block=64)):
        expected = {"seq": record.seq, "ts_usec": record.ts_usec, "time": "T",
                    "facility": record.facility, "level": record.level, "message": record.message}
        if record.fields:
            expected["fields"] = dict(record.fields)
        assert record_line(record, "T") == dumps_json(expected, indent=None)


def test_lines_blocks_keep_every_line() -> None:
    from forensics.collectors.kernel.collector import _lines

    raw = KMSG.read_bytes()
    for block in (1, 7, 64, 1 << 20):
        assert "".join(_lines(raw, block)) == raw.decode()
    assert list(_lines(b"a\nb")) == ["a\n", "b"]
