"""The kernel collector redacts its records' text (a kernel command line or a driver message can
carry a credential) before it stores or parses them; kernel lines without one stay byte-identical."""

from __future__ import annotations

from pathlib import Path

from forensics.collectors.kernel import KernelCollector
from tests.support.host_evidence import FIXTURES, make_context, read_json, read_jsonl

KMSG = FIXTURES / "kernel" / "kmsg-oom-xid.txt"
SECRET = "hunter2-ipmi"
TOKEN = "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"  # gitleaks' huggingface.go fixture


def test_secrets_in_kernel_records_are_redacted_and_xids_still_parsed(tmp_path: Path) -> None:
    dump = tmp_path / "kmsg.txt"
    dump.write_bytes(
        b"6,10,1000,-;Kernel command line: BOOT_IMAGE=/vmlinuz root=/dev/sda1 ipmi.password=" + SECRET.encode()
        + b" quiet\n"
        + b"4,11,2000,-;audit: cmd=\"huggingface-cli login --token " + TOKEN.encode() + b"\"\n"
        + KMSG.read_bytes())
    stage = tmp_path / "stage"
    KernelCollector(str(dump)).snapshot(make_context(stage))
    kmsg = (stage / "kernel/kmsg.txt").read_bytes()
    assert SECRET.encode() not in kmsg and TOKEN.encode() not in kmsg
    assert b"ipmi.password=<redacted:" in kmsg and b"--token <redacted:" in kmsg
    assert kmsg.endswith(KMSG.read_bytes())  # the lines with no secret: the same bytes
    records = (stage / "kernel/records.jsonl").read_text()
    assert SECRET not in records and TOKEN not in records
    assert len(read_jsonl(stage, "kernel/records.jsonl")) == 23
    xids = read_json(stage, "kernel/xid.json")
    assert [(x["xid"], x["pci_bus_id"]) for x in xids] == [
        (79, "0000:3b:00.0"), (31, "0000:86:00.0"), (13, "0000:03:00.0")]


def test_no_redact_keeps_kernel_records_verbatim(tmp_path: Path) -> None:
    dump = tmp_path / "kmsg.txt"
    dump.write_bytes(b"6,10,1000,-;Kernel command line: ipmi.password=" + SECRET.encode() + b"\n")
    stage = tmp_path / "stage"
    ctx = make_context(stage)
    ctx.redactor.enabled = False
    KernelCollector(str(dump)).snapshot(ctx)
    assert (stage / "kernel/kmsg.txt").read_bytes() == dump.read_bytes()


def test_sampled_window_is_redacted_as_the_recorder_keeps_it(tmp_path: Path) -> None:
    """The sampled window (``kernel/kmsg-window.txt``) is what the flight recorder's kernel child
    writes into the ring, segment after segment: its records are redacted before they are written."""
    import time

    from forensics.collect.context import Tick

    kmsg = tmp_path / "kmsg"
    xid = b"4,1200,30000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"
    kmsg.write_bytes(b"6,1199,29000000,-;systemd[1]: Starting job with --api-key=" + TOKEN.encode() + b"\n" + xid)
    stage = tmp_path / "stage"
    ctx = make_context(stage, {"kmsg_last_seq": [-1]})
    collector = KernelCollector(str(kmsg))
    collector.sample(ctx, Tick(0, time.time()))
    collector.end_sampling(ctx)
    window = (stage / "kernel/kmsg-window.txt").read_bytes()
    assert TOKEN.encode() not in window and b"--api-key=<redacted:" in window
    assert window.endswith(xid)
    assert read_jsonl(stage, "kernel/window.jsonl")[0]["xid"] == 79
