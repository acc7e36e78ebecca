"""Benchmark: the per-tick cost of the IO and network evidence for 200 containers and 8 NICs and
8 InfiniBand ports.

Builds, on a temporary directory, a sysfs tree (8 interfaces with ``speed``/``operstate``, 8 IB
ports laid out as ``Documentation/ABI/stable/sysfs-class-infiniband``) and a /proc tree (a
``net/dev`` with the 8 interfaces, ``diskstats``, and 200 processes each in its own network
namespace with its own ``net/dev``), then times ``NetCollector.sample`` per tick; and the added
cgroup work per tick: reading ``io.stat`` for 200 cgroups through kept descriptors and parsing
those whose bytes changed, as the cgroups collector does (the v1 equivalent,
``blkio.throttle.io_service_bytes`` + ``io_serviced``, is timed too). Between ticks (outside the
timing) ``--active`` percent of the namespaces and cgroups get new counters: the busy share of a
node's containers; the others read the same as the tick before. Prints CPU per tick, the share
of one core at 1 Hz (median tick) and its ratio to the target (0.2 %: a ratio under 1 meets it).

The files are on tmpfs, not the kernel's generated files: a real /proc/<pid>/net/dev is built by
the kernel on each read and costs a little more system time.

With ``--real-netns`` (root): the net tick is timed again with ``/proc`` as its root over real
processes, each in a network namespace of its own (loopback up; the busy share send a datagram on
it between ticks), through the collector's kept descriptors and pidfds: the cost on a real host.

Run: ``python bench/bench_io_net_tick.py [--containers 200] [--links 8] [--ticks 30] [--active 25] [--real-netns]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forensics.bundle.redact import Redactor  # noqa: E402
from forensics.bundle.sink import EvidenceSink  # noqa: E402
from forensics.capture.context import CaptureOptions, CollectContext, Tick  # noqa: E402
from forensics.collectors.net import TICK_IB_COUNTERS, NetCollector  # noqa: E402
from forensics.parsing.cgroup_files import file_values  # noqa: E402

HEADER = ("Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
          "carrier compressed\n")


def median(values: list[float]) -> float:
    """The median tick (a tick another process's burst slowed does not move it)."""
    return sorted(values)[len(values) // 2]


def dev_line(name: str, n: int) -> str:
    return f"{name:>6}: {n} 10 0 0 0 0 0 0 {n} 10 0 0 0 0 0 0\n"


def build(root: Path, containers: int, links: int) -> tuple[Path, Path]:
    sysfs, proc = root / "sys", root / "proc"
    for i in range(links):
        eth = sysfs / f"class/net/eth{i}"
        eth.mkdir(parents=True)
        (eth / "speed").write_text("100000\n")
        (eth / "operstate").write_text("up\n")
        port = sysfs / f"class/infiniband/mlx5_{i}/ports/1"
        (port / "counters").mkdir(parents=True)
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port / "state").write_text("4: ACTIVE\n")
        for c in TICK_IB_COUNTERS:
            (port / "counters" / c).write_text("123456789\n")
    (proc / "net").mkdir(parents=True)
    (proc / "net/dev").write_text(HEADER + dev_line("lo", 1) + "".join(dev_line(f"eth{i}", i) for i in range(links)))
    (proc / "diskstats").write_text("".join(f" 259 {i} nvme{i}n1 1 2 3 4 5 6 7 8 0 9 10 0 0 0 0\n" for i in range(links)))
    (proc / "self/ns").mkdir(parents=True)
    os.symlink("net:[4026531840]", proc / "self/ns/net")
    for pid in range(1000, 1000 + containers):
        base = proc / str(pid)
        (base / "ns").mkdir(parents=True)
        (base / "net").mkdir()
        os.symlink(f"net:[{4026532000 + pid}]", base / "ns/net")
        (base / "cgroup").write_text(f"0::/system.slice/docker-{pid:064x}.scope\n")
        (base / "net/dev").write_text(HEADER + dev_line("lo", 5) + dev_line("eth0", pid))
    return sysfs, proc


def _enter(fd: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "setns")


def real_namespaces(count: int, ticks: int, busy: int, sysfs: Path, stage: Path) -> tuple[float, float]:
    """CPU per tick of ``NetCollector.sample`` (``/proc`` root: the kernel's own files, kept
    descriptors and pidfds) over ``count`` real processes, each in a network namespace of its own
    (``unshare -n``, loopback up); between ticks ``busy`` of them send a datagram on their loopback,
    so their ``net/dev`` moves. Returns (CPU of the whole tick, CPU of the bare namespace preads)."""
    import socket

    children = [subprocess.Popen(["unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep 600"],
                                 stdin=subprocess.DEVNULL) for _ in range(count)]
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    sockets: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        for child in children:
            while os.readlink(f"/proc/{child.pid}/exe").endswith("/sh") or \
                    os.readlink(f"/proc/{child.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
                if time.monotonic() > deadline:
                    raise SystemExit("namespaces not ready after 60 s")
                time.sleep(0.01)  # unshare/sh have not exec'd sleep in the namespace yet
            fd = os.open(f"/proc/{child.pid}/ns/net", os.O_RDONLY)
            try:
                _enter(fd)
                # bound to that namespace for life; unconnected, so no ICMP error is reported on it
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sockets.append(s)
            finally:
                _enter(own)
                os.close(fd)
        ctx = CollectContext(CaptureOptions(), EvidenceSink(stage), Redactor(True),
                             {"pids": [c.pid for c in children]})
        collector = NetCollector(str(sysfs), "/proc")
        collector.sample(ctx, Tick(0, time.time()))
        spent: list[float] = []
        for i in range(1, ticks + 1):
            for k in range(busy):
                sockets[(i * busy + k) % count].sendto(b"x", ("127.0.0.1", 9))
            c0 = time.process_time()
            collector.sample(ctx, Tick(i, time.time()))
            spent.append(time.process_time() - c0)
        files = collector._netns_files
        fds = files._files.descriptors() if files is not None else []
        bare: list[float] = []
        for _ in range(ticks):
            c0 = time.process_time()
            for fd in fds:
                os.pread(fd, 65536, 0)
            bare.append(time.process_time() - c0)
        collector.end_sampling(ctx)
        import json

        lines = [json.loads(line) for line in (stage / "net/samples.jsonl").read_text().splitlines()[1:]]
        moved = sum(len(line["netns"]) for line in lines) / max(1, len(lines))
        print(f"real namespaces: {moved:.1f} of {count} written per tick (the others in netns_unchanged)")
        return median(spent), median(bare)
    finally:
        for s in sockets:
            s.close()
        os.close(own)
        for child in children:
            child.kill()
        for child in children:
            child.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--containers", type=int, default=200)
    ap.add_argument("--links", type=int, default=8)
    ap.add_argument("--ticks", type=int, default=30)
    ap.add_argument("--active", type=float, default=25.0,
                    help="percent of containers whose counters change between ticks")
    ap.add_argument("--real-netns", action="store_true",
                    help="also time the net tick over real processes in their own network namespaces "
                         "(root, unshare(1) and ip(8) needed)")
    args = ap.parse_args()
    busy = max(0, min(args.containers, round(args.containers * args.active / 100)))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sysfs, proc = build(root, args.containers, args.links)
        (root / "stage").mkdir()
        ctx = CollectContext(CaptureOptions(), EvidenceSink(root / "stage"), Redactor(True),
                             {"pids": list(range(1000, 1000 + args.containers))})
        collector = NetCollector(str(sysfs), str(proc))
        collector.sample(ctx, Tick(0, time.time()))  # discovery happens once, on the first tick
        net_cpus: list[float] = []
        net_walls: list[float] = []
        for i in range(1, args.ticks + 1):
            for k in range(busy):  # the busy containers' traffic moved since the last tick
                pid = 1000 + (i * busy + k) % args.containers
                (proc / str(pid) / "net/dev").write_text(HEADER + dev_line("lo", 5 + i) + dev_line("eth0", pid * 1000 + i))
            cpu0, wall0 = time.process_time(), time.perf_counter()
            collector.sample(ctx, Tick(i, time.time()))
            net_cpus.append(time.process_time() - cpu0)
            net_walls.append(time.perf_counter() - wall0)
        net_cpu, net_wall = median(net_cpus), median(net_walls)
        collector.end_sampling(ctx)

        io_stat = "259:0 rbytes=4194304 wbytes=1234 rios=1024 wios=3 dbytes=0 dios=0\n"
        blkio = "".join(f"259:0 {op} 4194304\n" for op in ("Read", "Write", "Sync", "Async", "Discard", "Total"))
        files = []
        for i in range(args.containers):
            d = root / f"cg/{i}"
            d.mkdir(parents=True)
            (d / "io.stat").write_text(io_stat)
            (d / "blkio.throttle.io_service_bytes").write_text(blkio + "Total 4194304\n")
            (d / "blkio.throttle.io_serviced").write_text(blkio + "Total 4194304\n")
            files.append(d)
        fds2 = [os.open(d / "io.stat", os.O_RDONLY) for d in files]
        fds1 = [(os.open(d / "blkio.throttle.io_service_bytes", os.O_RDONLY),
                 os.open(d / "blkio.throttle.io_serviced", os.O_RDONLY)) for d in files]

        def per_tick(names: tuple[str, ...], fds: list[tuple[int, ...]], version: int) -> float:
            """Read every file each tick; parse only what changed (the cgroups collector's memo)."""
            memo: dict[tuple[int, int], bytes] = {}
            spent: list[float] = []
            for i in range(args.ticks):
                for k in range(busy):
                    d = files[(i * busy + k) % len(files)]
                    for name in names:
                        text = (d / name).read_text()
                        (d / name).write_text(text.replace("4194304", str(4194304 + i + 1), 1))
                c0 = time.process_time()
                for n, group in enumerate(fds):
                    for j, fd in enumerate(group):
                        data = os.pread(fd, 65536, 0)
                        if memo.get((n, j)) != data:
                            memo[(n, j)] = data
                            file_values(version, names[j], data.decode(), True)
                spent.append(time.process_time() - c0)
            return median(spent)

        v2 = per_tick(("io.stat",), [(fd,) for fd in fds2], 2)
        v1 = per_tick(("blkio.throttle.io_service_bytes", "blkio.throttle.io_serviced"), fds1, 1)
        for fd in fds2:
            os.close(fd)
        for a, b in fds1:
            os.close(a)
            os.close(b)
        real = bare = None
        if args.real_netns:
            (root / "stage-real").mkdir()
            real, bare = real_namespaces(args.containers, args.ticks, busy, sysfs, root / "stage-real")
    print(f"{busy} of {args.containers} containers with new counters each tick")
    print(f"net tick, files on tmpfs ({args.containers} namespaces, {args.links} NICs, {args.links} IB ports): "
          f"{net_cpu * 1e3:.2f} ms CPU, {net_wall * 1e3:.2f} ms wall")
    hosts = [("v2 host", net_cpu + v2), ("v1 host", net_cpu + v1)]
    if real is not None and bare is not None:
        print(f"net tick, real namespaces ({args.containers} processes each in its own network namespace, "
              f"kernel-made /proc/<pid>/net/dev through kept descriptors): {real * 1e3:.2f} ms CPU, "
              f"of which {bare * 1e3:.2f} ms the bare preads of the namespaces' net/dev")
        hosts += [("v2 host, real namespaces", real + v2), ("v1 host, real namespaces", real + v1)]
    target = 0.002
    print(f"cgroup io files per tick ({args.containers} cgroups): v2 io.stat {v2 * 1e3:.2f} ms, "
          f"v1 blkio.throttle x2 {v1 * 1e3:.2f} ms CPU")
    for name, cost in hosts:
        share = cost / 1.0
        print(f"{name}: {share * 100:.3f} % of a core at 1 Hz; ratio to the 0.2 % target: {share / target:.2f}")


if __name__ == "__main__":
    main()
