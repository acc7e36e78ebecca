"""Benchmark: parsing a 1-million-record kernel log (target: over 200 000 records/s).

Builds a /dev/kmsg dump of N records (default 1 000 000): network and driver noise, dictionary
lines, a memcg OOM sequence every 5 000 records and an Xid line every 10 000. Prints records/s
for (1) a plain baseline loop that only splits each line at ';', (2) ``iter_kmsg`` (records),
(3) records + OOM tracker + Xid + driver-message parsers, (4) everything the kernel collector
derives (also the records.jsonl text, with wall-clock times: ``derive_kmsg``, a decoded block at
a time), (5) the same derived one record at a time (``derive`` over ``iter_kmsg``: the path (4)
is checked against, and what the collector ran before), and the peak Python memory of a
streaming pass measured with tracemalloc against the size of the log.

Rates are records per CPU second of this process (the machine is shared: wall seconds, printed
beside them, count the time other processes had the CPU), each also as a ratio to the baseline's.

Run: ``python bench/bench_kmsg_parse.py [--records 1000000]``
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forensics.collectors.kernel.blocks import derive_kmsg  # noqa: E402
from forensics.collectors.kernel.collector import _lines  # noqa: E402
from forensics.collectors.kernel.derived import derive  # noqa: E402
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


class Clock:
    """CPU and wall seconds since it was made."""

    def __init__(self) -> None:
        self.cpu = time.process_time()
        self.wall = time.perf_counter()


def rate(label: str, count: int, started: Clock, baseline: float | None = None) -> float:
    seconds = time.process_time() - started.cpu
    wall = time.perf_counter() - started.wall
    per_s = count / seconds
    extra = f", {per_s / baseline:.3f}x the baseline's rate" if baseline else ""
    print(f"{label}: {count} records in {seconds:.2f} CPU s ({wall:.2f} s wall) = "
          f"{per_s:,.0f} records/s{extra}")
    return per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    raw = build(args.records)
    print(f"log: {args.records} records, {len(raw) / 1e6:.1f} MB")

    started = Clock()
    n = 0
    for line in _lines(raw):
        if line[:1] != " ":
            line.partition(";")
            n += 1
    base = rate("baseline (decode + split at ';')", n, started)

    started = Clock()
    n = sum(1 for _ in kmsg.iter_kmsg(_lines(raw)))
    parse_rate = rate("iter_kmsg (records)", n, started, base)

    started = Clock()
    tracker = oomkill.OomTracker()
    ooms = xids = n = 0
    for record in kmsg.iter_kmsg(_lines(raw)):
        n += 1
        ooms += tracker.feed(record) is not None
        xids += nvrm.parse_xid(record) is not None
        nvrm.parse_driver_message(record)
    rate("records + OOM + Xid + driver parsers", n, started, base)
    print(f"  found {ooms} OOM kills, {xids} Xid events")

    written = [0]

    def sink(text: str) -> None:
        written[0] += len(text)

    started = Clock()
    derived = derive_kmsg(raw, 1.7e9, sink, lambda number, error: None)
    full_rate = rate("full collector derivation (+ records.jsonl text)", derived.count,
                     started, base)
    print(f"  records.jsonl would be {written[0] / 1e6:.1f} MB")

    written[0] = 0
    started = Clock()
    derived = derive(kmsg.iter_kmsg(_lines(raw), lambda number, error: None), 1.7e9, sink)
    old_rate = rate("the same one record at a time (derive over iter_kmsg)", derived.count,
                    started, base)
    print(f"  records.jsonl would be {written[0] / 1e6:.1f} MB; block at a time "
          f"{full_rate / old_rate:.2f}x the record at a time rate")

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
