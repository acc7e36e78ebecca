"""Benchmark: parsing a 1-million-record kernel log (target: over 200 000 records/s).

Builds a /dev/kmsg dump of N records (default 1 000 000): network and driver noise, dictionary
lines, a memcg OOM sequence every 5 000 records and an Xid line every 10 000. Prints records/s
for (1) a plain baseline loop that only splits each line at ';', (2) ``iter_kmsg`` (records),
(3) records + OOM tracker + Xid + driver-message parsers, (4) everything the kernel collector
derives (also the records.jsonl text, with wall-clock times), and the peak Python memory of a
streaming pass measured with tracemalloc against the size of the log.

Run: ``python bench/bench_kmsg_parse.py [--records 1000000]``
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forensics.collectors.kernel import _lines, derive  # noqa: E402
from forensics.parsing import kmsg, nvrm, oomkill  # noqa: E402

OOM = [
    "4,{s},{t},-;python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "6,{s},{t},-;memory: usage 32768kB, limit 32768kB, failcnt 109",
    "6,{s},{t},-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/docker/" + "a" * 64 + ",task_memcg=/docker/" + "a" * 64 + ",task=python3,pid={p},uid=0",
    "3,{s},{t},-;Memory cgroup out of memory: Killed process {p} (python3) total-vm:39136kB, "
    "anon-rss:31872kB, file-rss:1392kB, shmem-rss:0kB, UID:0 pgtables:112kB oom_score_adj:0",
]
XID = "4,{s},{t},-;NVRM: Xid (PCI:0000:3b:00): 31, pid={p}, name=python, Ch 0000000a, MMU Fault"
NOISE = [
    "6,{s},{t},-;eth0: renamed from veth{p}",
    "6,{s},{t},-;docker0: port 3(veth{p}) entered blocking state",
    "4,{s},{t},-;nvidia-uvm: Loaded the UVM driver, major device number 509",
    "6,{s},{t},-;pci 0000:3b:00.0: [10de:2330] type 00 class 0x030200",
]


def build(count: int) -> bytes:
    lines: list[str] = []
    seq = 0
    while seq < count:
        ts = 1_000_000 + seq * 1000
        if seq % 5000 == 4000 and seq + len(OOM) <= count:
            for template in OOM:
                lines.append(template.format(s=seq, t=ts, p=seq) + "\n")
                seq += 1
            continue
        if seq % 10000 == 7000:
            lines.append(XID.format(s=seq, t=ts, p=seq) + "\n")
        else:
            lines.append(NOISE[seq % len(NOISE)].format(s=seq, t=ts, p=seq) + "\n")
            if seq % 4 == 3:
                lines.append(" SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n")
        seq += 1
    return "".join(lines).encode()


def rate(label: str, count: int, seconds: float, baseline: float | None = None) -> float:
    per_s = count / seconds
    extra = f", {per_s / baseline:.2f}x the baseline's rate" if baseline else ""
    print(f"{label}: {count} records in {seconds:.2f} s = {per_s:,.0f} records/s{extra}")
    return per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    raw = build(args.records)
    print(f"log: {args.records} records, {len(raw) / 1e6:.1f} MB")

    started = time.perf_counter()
    n = 0
    for line in _lines(raw):
        if line[:1] != " ":
            line.partition(";")
            n += 1
    base = rate("baseline (decode + split at ';')", n, time.perf_counter() - started)

    started = time.perf_counter()
    n = sum(1 for _ in kmsg.iter_kmsg(_lines(raw)))
    parse_rate = rate("iter_kmsg (records)", n, time.perf_counter() - started, base)

    started = time.perf_counter()
    tracker = oomkill.OomTracker()
    ooms = xids = n = 0
    for record in kmsg.iter_kmsg(_lines(raw)):
        n += 1
        ooms += tracker.feed(record) is not None
        xids += nvrm.parse_xid(record) is not None
        nvrm.parse_driver_message(record)
    rate("records + OOM + Xid + driver parsers", n, time.perf_counter() - started, base)
    print(f"  found {ooms} OOM kills, {xids} Xid events")

    written = [0]

    def sink(text: str) -> None:
        written[0] += len(text)

    started = time.perf_counter()
    derived = derive(kmsg.iter_kmsg(_lines(raw)), 1.7e9, sink)
    full_rate = rate("full collector derivation (+ records.jsonl text)", derived.count,
                     time.perf_counter() - started, base)
    print(f"  records.jsonl would be {written[0] / 1e6:.1f} MB")

    tracemalloc.start()
    tracker = oomkill.OomTracker()
    for record in kmsg.iter_kmsg(_lines(raw)):
        tracker.feed(record)
        nvrm.parse_xid(record)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"streaming parse peak Python memory: {peak / 1024:.0f} KiB for a "
          f"{len(raw) / 1e6:.0f} MB log (bounded: does not grow with the log)")
    print(f"target > 200 000 records/s: parse {'PASS' if parse_rate > 200_000 else 'FAIL'}, "
          f"full derivation {'PASS' if full_rate > 200_000 else 'FAIL'}")


if __name__ == "__main__":
    main()
