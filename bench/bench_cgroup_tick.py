"""Benchmark: one cgroups sampling tick over 200 container cgroups.

Creates 200 real cgroups (``gpuforensics-bench-<pid>/docker-<id>.scope``) in every v1 hierarchy
the collector reads (cpu, cpuacct, memory, pids) and in the v2 hierarchy when it can, so the
kernel's own cgroup files are read; without root (or without cgroupfs) it falls back to 200 copies
of the v2 fixture tree on a temporary directory. Prints the time and CPU per tick, the CPU share
at 1 Hz (target: under 1% of one core), and the ratio against a baseline: a plain
open/read/close loop over the same files with no parsing or writing.

With ``--gating`` (real cgroups only), each cgroup also holds a process (``--active PCT`` of them
one that wakes every 0.2 s, the others asleep), and two collectors sample the same cgroups tick by
tick, ``--interval`` apart, for ``--gating-ticks`` ticks: capture's (every file every tick) and the
recorder's (activity gating, ``cgroups.idle_full_s`` 10 s); it prints the CPU per tick of each
(mean: the gated one's periodic full reads included), their ratio and the lines written.

With ``--replan`` (real cgroups only; each cgroup holds a sleeping process), the recorder's own
cgroups driver (forensics.record.sources.CgroupsDriver) samples them: it prints the CPU of a plain
tick, of a tick that scans ``/proc`` again (every ``replan_s``, containers unchanged) and of one that
also plans again (a container came or went): the re-plan's share at 1 Hz follows from how often
each happens.

Run: ``python bench/bench_cgroup_tick.py [--cgroups 200] [--ticks 30] [--gating --active 25] [--replan]``
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forensics.bundle.redact import Redactor  # noqa: E402
from forensics.bundle.sink import EvidenceSink  # noqa: E402
from forensics.collect.context import CaptureOptions, CollectContext, Tick  # noqa: E402
from forensics.collectors.cgroups import CgroupsCollector  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/cgroup/v2"
ROOTS = [Path("/sys/fs/cgroup") / h for h in ("cpu", "cpuacct", "memory", "pids", "unified")]


def make_real(count: int, tag: str) -> list[str] | None:
    if os.geteuid() != 0 or not (ROOTS[0] / "cpu.cfs_quota_us").exists():
        return None
    paths = []
    for _ in range(count):
        path = f"/{tag}/docker-{secrets.token_hex(32)}.scope"
        for root in ROOTS:
            if root.is_dir():
                (root / path.lstrip("/")).mkdir(parents=True)
        paths.append(path)
    return paths


WAKER = ["perl", "-e", "select(undef, undef, undef, 0.2) while 1"]  # CPU moves every tick, no fork


def populate(paths: list[str], active: int) -> list[subprocess.Popen[bytes]]:
    """One process in each cgroup (every v1 hierarchy, as Docker places it): the first ``active``
    wake every 0.2 s, the others sleep."""
    procs = []
    for i, path in enumerate(paths):
        enter = "; ".join(f'echo $$ > "{root}{path}/cgroup.procs"' for root in ROOTS[:4])
        argv = " ".join(WAKER[:2]) + f" '{WAKER[2]}'" if i < active else "sleep 3600"
        procs.append(subprocess.Popen(["sh", "-c", f"{enter}; exec {argv}"]))
    time.sleep(1.0)
    return procs


def gating(paths: list[str], work: Path, ticks: int, interval: float) -> None:
    """Capture's sampling and the recorder's gated sampling of the same cgroups, tick by tick."""
    collectors = {"every file": CgroupsCollector(), "gated": CgroupsCollector()}
    collectors["gated"].activity_gating = True
    contexts = {name: CollectContext(CaptureOptions(interval_s=interval), EvidenceSink(work / name.replace(" ", "-")),
                                     Redactor(True), {"cgroup_paths": paths}) for name in collectors}
    cpu: dict[str, list[float]] = {name: [] for name in collectors}
    for index in range(ticks + 1):
        started = time.monotonic()
        for name, collector in collectors.items():
            c0 = time.process_time()
            collector.sample(contexts[name], Tick(index, time.time()))
            if index:  # the first tick plans and opens the files
                cpu[name].append(time.process_time() - c0)
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
    for name, collector in collectors.items():
        collector.end_sampling(contexts[name])
    lines = {name: (work / name.replace(" ", "-") / "cgroup/samples.jsonl").read_text().count("\n") / (ticks + 1)
             for name in collectors}
    mean = {name: sum(v) / len(v) for name, v in cpu.items()}
    for name in collectors:
        print(f"[{name}] CPU {mean[name] * 1e3:.2f} ms per tick (mean of {ticks}), {lines[name]:.1f} lines per tick; "
              f"at 1 Hz {mean[name] * 100:.2f}% of one core")
    print(f"gated / every file: {mean['gated'] / mean['every file']:.2f}x CPU")


def replan(ticks: int) -> None:
    """The recorder's cgroups driver over the populated cgroups: a plain tick, a /proc scan, a re-plan."""
    from forensics.record.child import RecordSink
    from forensics.record.sources import CgroupsDriver

    driver, sink = CgroupsDriver(), RecordSink()
    ctx = CollectContext(CaptureOptions(interval_s=1.0), sink, Redactor(True), {})
    driver.start(ctx)
    cpu: dict[str, list[float]] = {"plain tick": [], "tick with a /proc scan": [], "tick with a re-plan": []}
    for index in range(3 * ticks + 2):
        kind = list(cpu)[index % 3]
        if index > 1 and kind != "plain tick":
            driver.planned = float("-inf")  # replan_s is up
            if kind == "tick with a re-plan":
                driver.paths = []  # as if a container came or went
        c0 = time.process_time()
        driver.tick(ctx, Tick(index, time.time()))
        if index > 1:  # the first ticks plan and open the files
            cpu[kind].append(time.process_time() - c0)
        sink.take_bytes()
        time.sleep(0.05)
    driver.collector.end_sampling(ctx)
    median = {kind: sorted(v)[len(v) // 2] for kind, v in cpu.items()}
    for kind, value in median.items():
        print(f"[driver] {kind}: CPU {value * 1e3:.2f} ms (median of {ticks})")
    scan, plan = (median["tick with a /proc scan"] - median["plain tick"],
                  median["tick with a re-plan"] - median["plain tick"])
    print(f"[driver] per replan_s ({driver.replan_s:g} s) at 1 Hz: a scan adds {scan * 100 / driver.replan_s:.3f}% "
          f"of one core, a re-plan every replan_s {plan * 100 / driver.replan_s:.3f}% (target: all of the "
          f"recorder under 0.5%)")


def remove_real(tag: str) -> None:
    for root in ROOTS:
        top = root / tag
        if top.is_dir():
            for child in top.iterdir():
                if child.is_dir():
                    child.rmdir()
            top.rmdir()


def make_fixture(count: int, work: Path) -> tuple[list[str], Path]:
    tree = work / "cg"
    source = next(FIXTURE.glob("system.slice/docker-*.scope"))
    paths = []
    for _ in range(count):
        path = f"/system.slice/docker-{secrets.token_hex(32)}.scope"
        shutil.copytree(source, tree / path.lstrip("/"))
        paths.append(path)
    for name in ("cpu.stat", "cpu.pressure", "memory.pressure", "io.pressure"):
        shutil.copy(FIXTURE / name, tree / name)
    mountinfo = work / "mountinfo"
    mountinfo.write_text(f"24 1 0:22 / {tree} rw - cgroup2 cgroup2 rw\n")
    return paths, mountinfo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cgroups", type=int, default=200)
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--gating", action="store_true", help="compare the recorder's gated sampling")
    parser.add_argument("--active", type=float, default=0.0, metavar="PCT", help="with --gating: share of waking cgroups")
    parser.add_argument("--interval", type=float, default=1.0, help="with --gating: seconds between ticks")
    parser.add_argument("--gating-ticks", type=int, default=40)
    parser.add_argument("--replan", action="store_true", help="the recorder's driver: scan and re-plan costs")
    args = parser.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    tag = f"gpuforensics-bench-{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix="gf-bench-"))
    try:
        paths = make_real(args.cgroups, tag)
        if paths is not None:
            kind, collector = "real cgroupfs (v1 cpu/cpuacct/memory/pids + v2)", CgroupsCollector()
        else:
            paths, mountinfo = make_fixture(args.cgroups, work)
            kind = "v2 fixture tree on a regular filesystem"
            collector = CgroupsCollector(str(mountinfo))
        ctx = CollectContext(CaptureOptions(), EvidenceSink(work / "stage"), Redactor(True),
                             {"cgroup_paths": paths})
        collector.sample(ctx, Tick(0, time.time()))  # first tick builds the plan, opens files
        assert collector._plan is not None
        files = [f[3] for t in collector._plan for f in t.files if f[4]]

        def run(forget_parses: bool) -> tuple[list[float], list[float]]:
            wall, cpu = [], []
            for index in range(1, args.ticks + 1):
                if forget_parses:  # worst case: every file changed since the previous tick
                    collector._previous.clear()
                    collector._parsed.clear()
                w0, c0 = time.perf_counter(), time.process_time()
                collector.sample(ctx, Tick(index, time.time()))
                wall.append(time.perf_counter() - w0)
                cpu.append(time.process_time() - c0)
            return wall, cpu

        worst_wall, worst_cpu = run(True)
        wall, cpu = run(False)
        fds = collector._files.descriptors()
        pread_cpu = []
        for _ in range(args.ticks):
            c0 = time.process_time()
            for fd in fds:
                os.pread(fd, 65536, 0)
            pread_cpu.append(time.process_time() - c0)
        collector.end_sampling(ctx)

        base_wall = []
        for _ in range(args.ticks):
            w0 = time.perf_counter()
            for path in files:
                fd = os.open(path, os.O_RDONLY)
                os.read(fd, 65536)
                os.close(fd)
            base_wall.append(time.perf_counter() - w0)

        def median(values: list[float]) -> float:
            return sorted(values)[len(values) // 2]

        tick_wall, base = median(wall), median(base_wall)
        lines = (work / "stage/cgroup/samples.jsonl").read_text().count("\n")
        print(f"cgroups: {len(paths)} containers (+ host root) on {kind}")
        print(f"files read per tick: {len(files)}; sample lines written: {lines}")
        for label, w, c in (("these (idle) cgroups", wall, cpu),
                            ("worst case, every file changed", worst_wall, worst_cpu)):
            print(f"[{label}] tick wall {median(w) * 1e3:.2f} ms (best {min(w) * 1e3:.2f}), "
                  f"CPU {median(c) * 1e3:.2f} ms (best {min(c) * 1e3:.2f}) over {args.ticks} "
                  f"ticks; CPU share at 1 Hz (median): {median(c) * 100:.2f}% of one core "
                  f"(target < 1%) -> {'PASS' if median(c) < 0.01 else 'FAIL'}")
        print(f"load average while measuring: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(f"of which reading (pread on kept descriptors, kernel side mostly): "
              f"{median(pread_cpu) * 1e3:.2f} ms CPU")
        print(f"baseline open/read/close of the same files: {base * 1e3:.2f} ms per pass")
        print(f"ratio tick / baseline: {tick_wall / base:.2f}x (idle), "
              f"{median(worst_wall) / base:.2f}x (worst case)")
        if args.gating and kind.startswith("real"):
            procs = populate(paths, round(len(paths) * args.active / 100))
            print(f"gating: {len(paths)} cgroups with one process each, {args.active:g}% waking every 0.2 s")
            gating(paths, work, args.gating_ticks, args.interval)
        if args.replan and kind.startswith("real"):
            if not procs:
                procs = populate(paths, 0)
            print(f"re-plan: {len(paths)} cgroups with one sleeping process each, "
                  f"{sum(1 for n in os.listdir('/proc') if n.isdigit())} PIDs")
            replan(args.ticks)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        time.sleep(0.5 if procs else 0)  # a cgroup empties once its process is reaped
        if os.geteuid() == 0:
            remove_real(tag)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
