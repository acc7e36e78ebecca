"""The flight recorder's kernel history in a bundle: the kernel records the ring holds and the
capture's own kernel log does not (they came before a reboot, or a busy kernel buffer overwrote
them) are analysed, each timed by the boot of the recorder run that followed it; a record in both
is read once, where the capture read it.

The node the on-call engineer arrives at was rebooted after its GPU fell off the bus: the capture's
``/dev/kmsg`` starts at the new boot, and only the ring saw the Xid 79."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles, ring_slices
from forensics.record.sources import DELTA_MEMBERS
from forensics.ring import RingWriter
from tests.support.hostile_bundles import build_bundle
from tests.support.ring_bundle import bundle_members, capture_since

NOW = time.time()
BOOT_A = NOW - 7200.0  # the boot before the reboot
BOOT_B = NOW - 600.0  # the capture's boot
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
XID_48 = "NVRM: Xid (PCI:0000:86:00): 48, pid=4242, name=python, An uncorrectable double bit error"


def _kmsg(seq: int, ts_s: float, text: str, prio: int = 4) -> bytes:
    return f"{prio},{seq},{round(ts_s * 1e6)},-;{text}\n".encode()


def _ring(ring: Path, boot_b_records: list[tuple[int, float, str]]) -> None:
    """Two recorder runs: one on boot A (noise, then the Xid 79), one on boot B (``boot_b_records``);
    each record appended 0.3 s after the kernel logged it, with that run's monotonic clock."""
    _runs(ring, ((BOOT_A, [(100, 5000.0, "usb 1-1: new high-speed USB device number 3 using xhci_hcd"),
                           (101, 5400.0, XID_79)]),
                 (BOOT_B, boot_b_records)))


def _runs(ring: Path, runs: tuple[tuple[float, list[tuple[int, float, str]]], ...]) -> None:
    """One recorder run (a writer of its own: a run never spans a reboot) per ``(boot, records)``."""
    for boot, records in runs:
        w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
        for seq, ts, text in records:
            t = boot + ts + 0.3
            w.append([(t, t - boot, "kernel/kmsg-window.txt", "append", _kmsg(seq, ts, text))])
        w.close(seal=False)


def _with_own_kernel_log(ring_only: Path, out: Path, records: list[tuple[int, float, str]]) -> Path:
    """The ring-only bundle as a whole capture would have written it: its own ``kernel/kmsg.txt``
    (boot B's buffer: ``records``), the boot time in ``kernel/index.json``, the kernel collector ok."""
    members = bundle_members(ring_only)
    manifest = json.loads(members.pop("manifest.json"))
    members["kernel/kmsg.txt"] = b"".join(_kmsg(seq, ts, text) for seq, ts, text in records)
    members["kernel/index.json"] = json.dumps({"clocks": {"boot_time_unix": BOOT_B}}).encode()
    collectors = [c if c["name"] != "kernel" else {**c, "status": "ok", "error": None}
                  for c in manifest["collectors"]]
    out.mkdir()
    return build_bundle(out, members, hostname=manifest["host"]["hostname"],
                        manifest_fields={"host": manifest["host"], "capture": manifest["capture"],
                                         "collectors": collectors})


def _lost(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["kind"] == "gpu-lost"]


def _unix(iso: str) -> float:
    return time.mktime(time.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone + float("0" + iso[19:].rstrip("Z"))


@pytest.fixture(scope="module")
def ring_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("kernhist")
    _ring(tmp / "ring", [(7, 30.0, XID_48)])
    return capture_since(tmp / "ring", tmp / "out", "3h")


def test_an_xid_before_a_reboot_is_found_in_the_recorders_history(ring_only: Path, tmp_path: Path) -> None:
    bundle = _with_own_kernel_log(ring_only, tmp_path / "b", [(3, 2.0, "Linux version 6.1.0 (boot B)"),
                                                              (7, 30.0, XID_48)])
    doc = analyze_bundles([bundle])
    (lost,) = _lost(doc)
    assert "0000:3b:00" in lost["summary"] and "before capture" in lost["summary"]
    assert abs(_unix(lost["start"]) - (BOOT_A + 5400.0)) < 0.01  # boot A's time, not the capture's boot B
    (ev,) = lost["evidence"]
    assert ev["member"] == "ring/kernel/kmsg-window.txt" and XID_79 in ev["excerpt"]
    assert ev["derived_from"]["member"].startswith("ring/segments/")


def test_a_record_in_both_logs_is_read_once_where_the_capture_read_it(ring_only: Path, tmp_path: Path) -> None:
    bundle = _with_own_kernel_log(ring_only, tmp_path / "b", [(7, 30.0, XID_48)])
    doc = analyze_bundles([bundle])
    xid48 = [e for f in doc["findings"] for e in f["evidence"] if "Xid (PCI:0000:86:00): 48" in e["excerpt"]]
    assert xid48 and {e["member"] for e in xid48} == {"kernel/kmsg.txt"}  # never the ring's copy beside it
    dated = [t for t in doc["timeline"] if t.get("kind") == "xid"]
    assert sorted(round(_unix(t["time"])) for t in dated) == [round(BOOT_A + 5400.0), round(BOOT_B + 30.0)], dated


def test_a_capture_without_a_kernel_log_reads_the_rings(ring_only: Path) -> None:
    doc = analyze_bundles([ring_only])
    (lost,) = _lost(doc)
    assert abs(_unix(lost["start"]) - (BOOT_A + 5400.0)) < 0.01
    assert [e["member"] for e in lost["evidence"]] == ["ring/kernel/kmsg-window.txt"]


def test_where_the_history_stands_in_for_a_source_the_limitation_says_so(tmp_path: Path) -> None:
    """A capture of the ring alone (`capture --only ring --since`): the recorder's NVML, /proc,
    cgroup, Docker and kernel history were analysed, so no limitation says their evidence is
    missing ("no NVML data: GPU attribution not possible" was false); each names the history
    that stands in. The net source, which the recorder does not record, stays missing. An Xid of a
    GPU the recorder's NVML never listed says where NVML was read."""
    from tests.support.ring_bundle import ring_from_sample

    ring = tmp_path / "ring"
    ring_from_sample(ring)
    w = RingWriter(ring, delta_members=DELTA_MEMBERS, retention_s=90 * 86400.0).open()
    t = NOW - 60.0
    unlisted = XID_79.replace("0000:3b:00", "0000:c1:00")  # the sample's NVML lists 3b:00, not c1:00
    w.append([(t, t - BOOT_B, "kernel/kmsg-window.txt", "append", _kmsg(9, t - BOOT_B - 0.3, unlisted))])
    w.close(seal=False)
    doc = analyze_bundles([capture_since(ring, tmp_path / "out", "2026-11-29T00:00:00Z")])
    limits = doc["limitations"]
    for name, prefix in (("nvml", "ring/nvml/"), ("procfs", "ring/proc/"), ("cgroups", "ring/cgroup/"),
                         ("docker", "ring/docker/"), ("kernel", "ring/kernel/")):
        (said,) = [x for x in limits if f"collector {name} skipped" in x]
        assert re.search(rf"the flight recorder's history \({prefix}, its records 20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ "
                         r"to 20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ\) stands in for", said), said
    assert not [x for x in limits if "no NVML data" in x or "no kernel log" in x or "no cgroup data" in x]
    assert [x for x in limits if x.startswith("vm: no network or disk counters")]
    (lost,) = _lost(doc)
    assert "which NVML did not enumerate in the flight recorder's history" in lost["summary"], lost["summary"]


def test_the_records_counted_are_the_capture_s_and_those_only_the_ring_holds(tmp_path: Path) -> None:
    """"no Xid error in the kernel log (N records)": a record the ring and the capture's log both
    hold is one record, one from before the reboot that only the ring holds is one more."""
    noise = [(40 + i, 100.0 + i, f"usb 1-1: new high-speed USB device number {i} using xhci_hcd") for i in range(4)]
    ring = tmp_path / "ring"
    _runs(ring, ((BOOT_A, [(5, 50.0, "EXT4-fs (sda1): mounted filesystem")]), (BOOT_B, noise),
                 (BOOT_B, noise)))  # a run that read /dev/kmsg again from its start: the same records
    bundle = _with_own_kernel_log(capture_since(ring, tmp_path / "out", "3h"), tmp_path / "b", noise[2:])
    doc = analyze_bundles([bundle])
    (xid,) = [r["statement"] for r in doc["ruled_out"] if "no Xid error in the kernel log" in r["statement"]]
    assert "(5 records" in xid, xid  # the capture's 2, the 2 its buffer lost (the ring's, once) and boot A's


def test_a_history_of_state_alone_does_not_stand_in(tmp_path: Path) -> None:
    """The ring repeats its write members (NVML's device and process lists) at every segment's top,
    so they are in the window hours after the NVML sampler stopped: they do not make the history
    stand in for NVML's figures; only sampled records in the window do."""
    ring = tmp_path / "ring"
    w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
    t = NOW - 4 * 3600.0
    w.append([(t, t - BOOT_B, "nvml/devices.json", "write", b'{"devices": []}\n')])
    t = NOW - 60.0
    w.append([(t, t - BOOT_B, "kernel/kmsg-window.txt", "append", _kmsg(3, 10.0, "usb 1-1: new device"))])
    w.close(seal=False)
    doc = analyze_bundles([capture_since(ring, tmp_path / "out", "1h")])
    assert [x for x in doc["limitations"] if x.startswith("vm: no NVML data: GPU attribution not possible")]
    assert not [x for x in doc["limitations"] if "ring/nvml/" in x]
    assert [x for x in doc["limitations"] if "collector kernel skipped: the flight recorder's history (ring/kernel/" in x]


@pytest.mark.parametrize("mono", [-1e12, -1.0, 1e300, -1e300])
def test_a_hostile_monotonic_time_costs_the_records_time_not_the_analysis(tmp_path: Path, mono: float) -> None:
    """A ring record is hostile input: a monotonic time that puts its boot outside any calendar (or
    after the record's own wall time) leaves the kernel record without a time; the analysis does not
    fail (it ended in an internal error, exit 70)."""
    ring = tmp_path / "ring"
    w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
    t = NOW - 600.0
    w.append([(t, mono, "kernel/kmsg-window.txt", "append", _kmsg(5, 30.0, XID_79))])
    w.close(seal=False)
    doc = analyze_bundles([capture_since(ring, tmp_path / "out", "1h")])
    (lost,) = _lost(doc)
    assert lost["start"] is None and "at an unknown time" in lost["summary"]


CID = "3f9a" + "0" * 60
OOM = [(200, 100.0, "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"),
       (201, 100.0, "memory: usage 1048576kB, limit 1048576kB, failcnt 12"),
       (202, 100.0, f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=docker-{CID}.scope,mems_allowed=0,"
                    f"oom_memcg=/system.slice/docker-{CID}.scope,task_memcg=/system.slice/docker-{CID}.scope,"
                    "task=python,pid=4242,uid=0"),
       (203, 100.0, "Memory cgroup out of memory: Killed process 4242 (python) total-vm:123456kB, anon-rss:100000kB, "
                    "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:100kB oom_score_adj:0")]


@pytest.mark.parametrize(("held", "cited"), [
    (OOM, ["kernel/kmsg.txt"] * 3),  # the capture's log holds the whole report
    (OOM[3:], ["ring/kernel/kmsg-window.txt", "ring/kernel/kmsg-window.txt", "kernel/kmsg.txt"]),  # its tail
    ([], ["ring/kernel/kmsg-window.txt"] * 3),  # none of it
])
def test_an_oom_report_split_between_the_ring_and_the_capture_names_its_container(
        tmp_path: Path, held: list[tuple[int, float, str]], cited: list[str]) -> None:
    """A busy kernel buffer overwrote the start of an OOM report before the capture read it: the
    capture's log holds only "Killed process", which names no memory cgroup; the ring followed
    the whole report. The kill is one, of its container, citing the lines where they are."""
    ring = tmp_path / "ring"
    w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
    for seq, ts, text in OOM:
        t = BOOT_B + ts + 0.3
        w.append([(t, t - BOOT_B, "kernel/kmsg-window.txt", "append", _kmsg(seq, ts, text))])
    w.close(seal=False)
    bundle = _with_own_kernel_log(capture_since(ring, tmp_path / "out", "3h"), tmp_path / "b",
                                  [(1, 1.0, "Linux version 6.1.0 (boot B)"), *held])
    (oom,) = [f for f in analyze_bundles([bundle])["findings"] if f["kind"] == "oom-kill"]
    assert "process 4242 (python) of container 3f9a00000000" in oom["summary"], oom["summary"]
    assert [e["member"] for e in oom["evidence"]] == cited


def test_a_record_is_the_same_whichever_format_read_it(tmp_path: Path) -> None:
    """The capture fell back to `dmesg --raw`, which prints a process name as text; /dev/kmsg, which
    the recorder followed, writes its bytes escaped (`train\\xc3\\xa9r`). One Xid, not two."""
    raw = "NVRM: Xid (PCI:0000:86:00): 13, pid=4242, name=trainér, Graphics SM Warp Exception"
    ring = tmp_path / "ring"
    w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
    t = BOOT_B + 30.3
    w.append([(t, t - BOOT_B, "kernel/kmsg-window.txt", "append", _kmsg(7, 30.0, raw.replace("é", "\\xc3\\xa9")))])
    w.close(seal=False)
    members = bundle_members(capture_since(ring, tmp_path / "out", "3h"))
    manifest = json.loads(members.pop("manifest.json"))
    members["kernel/dmesg.txt"] = f"<4>[   30.000000] {raw}\n".encode()
    members["kernel/index.json"] = json.dumps({"clocks": {"boot_time_unix": BOOT_B}}).encode()
    collectors = [c if c["name"] != "kernel" else {**c, "status": "ok", "error": None} for c in manifest["collectors"]]
    (tmp_path / "b").mkdir()
    bundle = build_bundle(tmp_path / "b", members, hostname=manifest["host"]["hostname"],
                          manifest_fields={"host": manifest["host"], "capture": manifest["capture"],
                                           "collectors": collectors})
    doc = analyze_bundles([bundle])
    assert len([x for x in doc["timeline"] if x.get("kind") == "xid"]) == 1


def test_a_run_whose_clock_was_set_right_times_all_its_records_by_the_right_clock(tmp_path: Path) -> None:
    """The recorder started before NTP set the wall clock right (an hour behind): its records before
    the step carry the wrong wall time, those after it the right one; the kernel records of the whole
    run are timed by the clock as set right (its latest record's), not half of them an hour off."""
    ring = tmp_path / "ring"
    w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
    for seq, ts, skew in ((5, 100.0, -3600.0), (6, 200.0, 0.0)):
        t = BOOT_B + ts + 0.3 + skew
        w.append([(t, ts + 0.3, "kernel/kmsg-window.txt", "append", _kmsg(seq, ts, XID_79 if seq == 5 else XID_48))])
    w.close(seal=False)
    doc = analyze_bundles([capture_since(ring, tmp_path / "out", "3h")])
    dated = sorted(round(_unix(x["time"])) for x in doc["timeline"] if x.get("kind") == "xid")
    assert dated == [round(BOOT_B + 100.0), round(BOOT_B + 200.0)], dated


def test_a_record_a_later_run_read_again_is_one_record_when_the_history_is_sliced(tmp_path: Path) -> None:
    """A recorder run that read /dev/kmsg again from its start (its resume point lost) appends the
    boot's records again, minutes later: one model reads each once; the slices, the copy in a later
    slice than the first read, read it once too (one Xid, counted once), not once per slice."""
    ring = tmp_path / "ring"
    for appended_at in (30.3, 500.0):  # the first run, then one that read the buffer again
        w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
        t = BOOT_B + appended_at
        w.append([(t, t - BOOT_B, "kernel/kmsg-window.txt", "append", _kmsg(7, 30.0, XID_48))])
        w.append([(t + 0.1, t + 0.1 - BOOT_B, "kernel/kmsg-window.txt", "append",
                   _kmsg(8, 31.0, "usb 1-1: USB disconnect, device number 3"))])
        w.close(seal=False)
    bundle = capture_since(ring, tmp_path / "out", "3h")
    assert len(ring_slices([bundle], slice_s=300.0)) == 2  # the first read in one slice, the copy in the next
    whole = analyze_bundles([bundle])
    for doc in (whole, analyze_bundles([bundle], slice_s=300.0)):  # one model, then two slices
        xids = [t for t in doc["timeline"] if t.get("kind") == "xid"]
        assert len(xids) == 1, (doc is whole, xids)
        assert not any(f.get("occurrences") for f in doc["findings"]), doc["findings"]
