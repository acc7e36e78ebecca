"""Benchmark: the per-tick cost of the IO and network evidence for 200 containers and 8 NICs and
8 InfiniBand ports.

Builds, on a temporary directory, a sysfs tree (8 interfaces with ``speed``/``operstate``, one veth
per container as a container runtime makes it, 8 IB ports laid out as
``Documentation/ABI/stable/sysfs-class-infiniband``) and a /proc tree (a ``net/dev`` with the 8
interfaces, the veths and ``lo``, ``diskstats``, and 200 processes each in its own network namespace
with its own ``net/dev``), then times ``NetCollector.sample`` per tick; and the added cgroup work
per tick: what ``io.stat`` (v2), or ``blkio.throttle.io_service_bytes`` + ``io_serviced`` (v1), add
to the cgroups collector's own tick over 200 cgroups laid out on a temporary directory (the
recorder's collector, activity gating on, one simulated second per tick, with those files planned
less the same collector without them, ticked alternately; capture's, reading every file every
tick, is printed beside it). Between ticks (outside the timing) ``--active`` percent of the
namespaces and cgroups get new counters (a cgroup's CPU and IO counters, the namespaces' net/dev
and their host veths): the busy share of a node's containers; the others read the same as the
tick before.
Prints CPU per tick, the share of one core at 1 Hz (median tick) and its ratio to the target
(0.2 %: a ratio under 1 meets it).

The files are on tmpfs, not the kernel's generated files, and outside ``/proc`` the namespaces'
files are opened afresh each tick (no pidfds to watch them by): see ``--real-netns`` for the cost
on a real host.

With ``--real-netns`` (root): the net tick is timed again over the kernel's own files, in a
private network and mount namespace standing for the host (``unshare -n -m``; nothing of this
host's network is touched): 200 processes each in a network namespace of its own, each joined to
the "host" by a veth pair (``eth0`` inside, ``gfh<N>`` outside, as a container runtime makes them),
``/proc`` as the collector's root (kept descriptors and pidfds) and a sysfs mounted for that
namespace (its ``class/net`` lists the veths; ``--veths 0``: no veth pairs, each namespace with
``lo`` only, as earlier versions of this bench), IPv6 off on both ends (as Docker makes a
container without ``--ipv6``: a new link's router solicitations and MLD reports would move every
namespace for its first minute). The busy share send a datagram out of ``eth0`` between ticks, so
their ``net/dev`` and their host veth's line move. Two collectors sample the same namespaces at
1 Hz (each first in turn): one reading every namespace every tick (capture's sampling), one with
quiet namespaces left unread (turned on as a user does, ``--set net.quiet_namespaces=true``;
``net.idle_full_s`` 10 s; a checkout without that setting prints the first only). Each tick's CPU
is the process's (``process_time``), with the kernel's share of it beside (``getrusage``: split at
the scheduler's ticks, so rough over 30 ticks).

``--baseline CHECKOUT`` (with ``--real-netns``): another checkout's collector (its ``forensics``
imported beside this one's, :func:`_checkout`) samples the same namespaces in the same ticks, the
four collectors first in turn, and the median of each tick's ratio of this checkout's CPU to the
baseline's is printed: on a shared, loaded box a before/after from two runs minutes apart
measures the load, not the change. ``--sections``: this checkout's tick by section (links,
``/proc/net/dev``, IB ports, disks, namespaces), each section's CPU and the part of it spent in
its ``pread`` calls (the kernel's: formatting ``/proc/net/dev``'s lines is ``vsnprintf``), and
what is left for the line's JSON and write.

Measured on the project's 2-core box (load 30-77 from other engineers' benches; 2 Dec 2026),
``--real-netns --pace 1``, 200 namespaces with veths, 25 % busy: every namespace read 7.0-8.9 ms
CPU a tick, quiet namespaces unread 5.2-6.2 ms (main's checkout as ``--baseline`` in the same
ticks: ratio 0.97-1.06 for the same code, the noise of the pairing). Of the gated tick:
``/proc/net/dev`` of 201 interfaces 1.7-1.8 ms (0.8 ms of it the kernel's pread), the 50 moved
namespaces 1.9 ms (0.75 ms pread), 8 IB ports 0.7 ms (0.36 pread), disks 0.12-0.14 ms, the
45 kB line's JSON and write 1.4-1.5 ms: about 2 ms a tick is the kernel's preads alone, so at
this load the 2 ms target is out of reach without reading less (docs/bundle-format/net.md "What
a tick costs").

Run: ``python bench/bench_io_net_tick.py [--containers 200] [--links 8] [--veths N] [--ticks 30]
[--active 25] [--real-netns [--pace 1] [--baseline CHECKOUT] [--sections]]``; ``--veths``
defaults to ``--containers``. To time another checkout (before/after) without ``--real-netns``,
copy this file into its ``bench/`` and run it there.

Why this module is long: it lays out two host trees (tmpfs files, and real namespaces with veths
in a private network namespace), times two collectors and the cgroups collector's IO files over
them, and loads a baseline checkout beside this one; splitting the set-up from the timing would
spread one measurement over modules nothing else imports.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forensics.bundle.redact import Redactor  # noqa: E402
from forensics.bundle.sink import EvidenceSink  # noqa: E402
from forensics.collect.context import CaptureOptions, CollectContext, Tick  # noqa: E402
from forensics.collectors.net import TICK_IB_COUNTERS, NetCollector  # noqa: E402
from forensics.specs.net import NetSettings  # noqa: E402

QUIET = {"net.quiet_namespaces": "true"}  # quiet namespaces left unread: as a user turns it on (--set)


def _gates(settings: Any) -> bool:
    """Whether a checkout's net settings (its ``NetSettings``) have ``quiet_namespaces``: one
    without it reads every namespace every tick, and its gated run is left out."""
    return "quiet_namespaces" in getattr(settings, "__dataclass_fields__", {})


_THIS = (NetCollector, CollectContext, CaptureOptions, EvidenceSink, Redactor, Tick, _gates(NetSettings))


def _checkout(root: str) -> tuple[Any, ...]:
    """Another checkout's NetCollector (and the context, options, sink, redactor and tick types it
    takes, and whether it has the ``net.quiet_namespaces`` setting), loaded beside this one's: its
    modules are imported under their own names with ``root`` first on the path, then taken out of
    ``sys.modules`` again (its functions keep their modules), so both collectors run in this
    process, interleaved tick by tick (the box's load falls on both)."""
    ours = {k: v for k, v in sys.modules.items() if k == "forensics" or k.startswith("forensics.")}
    for k in ours:
        del sys.modules[k]
    sys.path.insert(0, str(Path(root).resolve()))
    try:
        net = importlib.import_module("forensics.collectors.net")
        context = importlib.import_module("forensics.collect.context")
        sink = importlib.import_module("forensics.bundle.sink")
        redact = importlib.import_module("forensics.bundle.redact")
        try:
            gates = _gates(importlib.import_module("forensics.specs.net").NetSettings)
        except (ImportError, AttributeError):  # a checkout from before the settings were declared
            gates = False
        return (net.NetCollector, context.CollectContext, context.CaptureOptions, sink.EvidenceSink, redact.Redactor,
                context.Tick, gates)
    finally:
        sys.path.pop(0)
        for k in [k for k in sys.modules if k == "forensics" or k.startswith("forensics.")]:
            del sys.modules[k]
        sys.modules.update(ours)


SECTIONS = ("_links", "_interfaces", "_ports", "_disks", "_namespaces")


@contextlib.contextmanager
def _sectioned(at: list[Any]) -> Iterator[dict[tuple[str, str, int], float]]:
    """While in this block, each section of this checkout's ``TickReader.tick`` (:data:`SECTIONS`)
    is timed (CPU) per run and tick, ``at`` = ``[run, tick]`` saying which, and so is every
    ``os.pread`` within a section (``pread:<section>``: reading a kernel-made file is nearly all
    kernel time, so this is the kernel's part of the section, give or take the wrapper's own
    fraction of a microsecond a call); ``tick`` is the whole of ``TickReader.tick``, the rest of
    ``NetCollector.sample`` being the line's JSON and its write."""
    from forensics.collectors.net import tick as tick_module

    spent: dict[tuple[str, str, int], float] = {}
    now = time.process_time
    where = [""]
    saved = {name: getattr(tick_module.TickReader, name) for name in (*SECTIONS, "tick")}
    pread = os.pread

    def timed(name: str, fn: Any) -> Any:
        def run(self: Any, *args: Any) -> Any:
            outer, where[0] = where[0], name
            c0 = now()
            try:
                return fn(self, *args)
            finally:
                key = (at[0], name, at[1])
                spent[key] = spent.get(key, 0.0) + now() - c0
                where[0] = outer
        return run

    def timed_pread(fd: int, n: int, offset: int) -> bytes:
        c0 = now()
        try:
            return pread(fd, n, offset)
        finally:
            key = (at[0], f"pread:{where[0]}", at[1])
            spent[key] = spent.get(key, 0.0) + now() - c0

    for name, fn in saved.items():
        setattr(tick_module.TickReader, name, timed(name, fn))
    os.pread = timed_pread
    try:
        yield spent
    finally:
        os.pread = pread
        for name, fn in saved.items():
            setattr(tick_module.TickReader, name, fn)


HEADER = ("Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
          "carrier compressed\n")


def median(values: list[float]) -> float:
    """The median tick (a tick another process's burst slowed does not move it)."""
    return sorted(values)[len(values) // 2]


def dev_line(name: str, n: int) -> str:
    return f"{name:>6}: {n} 10 0 0 0 0 0 0 {n} 10 0 0 0 0 0 0\n"


def veth_line(i: int, n: int) -> str:
    return dev_line(f"gfh{i}", n)


def build(root: Path, containers: int, links: int, veths: int) -> tuple[Path, Path]:
    sysfs, proc = root / "sys", root / "proc"
    for i in range(veths):  # a veth's speed reads 10000 (the kernel's default for veth)
        veth = sysfs / f"class/net/gfh{i}"
        veth.mkdir(parents=True)
        (veth / "speed").write_text("10000\n")
        (veth / "operstate").write_text("up\n")
    for i in range(links):
        eth = sysfs / f"class/net/eth{i}"
        eth.mkdir(parents=True)
        (eth / "speed").write_text("100000\n")
        (eth / "operstate").write_text("up\n")
    (proc / "net").mkdir(parents=True)
    (proc / "net/dev").write_text(host_dev(links, veths, {}))
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


def host_dev(links: int, veths: int, moved: dict[int, int]) -> str:
    """The host's /proc/net/dev: lo, the NICs, one veth per container (``moved``: the veths whose
    counters moved, with their new bytes)."""
    return HEADER + dev_line("lo", 1) + "".join(dev_line(f"eth{i}", i) for i in range(links)) + \
        "".join(veth_line(i, moved.get(i, i)) for i in range(veths))


def _enter(fd: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "setns")


def ib_tree(sysfs: Path, links: int) -> None:
    for i in range(links):
        port = sysfs / f"class/infiniband/mlx5_{i}/ports/1"
        (port / "counters").mkdir(parents=True)
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port / "state").write_text("4: ACTIVE\n")
        for c in TICK_IB_COUNTERS:
            (port / "counters" / c).write_text("123456789\n")


def _netns_descriptors(collector: NetCollector) -> list[int]:
    """The kept descriptors of the namespaces' net/dev (this checkout's collector, or an older one)."""
    reader = getattr(collector, "_tick", None)
    files = reader._netns_files if reader is not None else getattr(collector, "_netns_files", None)
    return files._files.descriptors() if files is not None else []


def _no_ipv6() -> None:
    for name in ("all", "default"):
        try:
            Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").write_text("1\n")
        except OSError:
            pass  # no IPv6 in this kernel


def real_namespaces(count: int, ticks: int, busy: int, links: int, veths: bool, pace: float = 1.0,
                    baseline: str | None = None, sections: bool = False) -> dict[str, float]:
    """Run inside ``unshare -n -m`` (this network namespace stands for the host): CPU per tick of
    ``NetCollector.sample`` (``/proc`` root: the kernel's own files, kept descriptors and pidfds)
    over ``count`` real processes, each in a network namespace of its own (loopback up; with
    ``veths``, an ``eth0`` whose peer ``gfh<N>`` is here); between ticks ``busy`` of them send a
    datagram (out of ``eth0``, or on loopback), so their ``net/dev`` moves. Returns the median tick
    (the process's CPU time), the kernel's share of it (``getrusage``: sampled at the scheduler's
    ticks, so a rough split), the median of the bare preads of the namespaces' net/dev, the
    namespaces written per tick and the median line's bytes; with ``baseline`` (another checkout's
    root), the same for its collector (``base_full``, ``base_gated``), ticked in the same ticks in
    turn, and the median of each tick's ratio of this checkout's to the baseline's; with
    ``sections``, the median CPU of each section of this checkout's ticks and of the preads within
    it (:func:`_sectioned`: ``<run>:<section>`` and ``<run>:pread:<section>``)."""
    import socket

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        # no IPv6 here or in the namespaces (as Docker makes a container without --ipv6): a fresh
        # link's router solicitations and MLD reports would move idle namespaces for their first minute
        _no_ipv6()
        mnt, sysfs = root / "sysfs", root / "sys"
        mnt.mkdir()
        (sysfs / "class").mkdir(parents=True)
        subprocess.run(["mount", "-t", "sysfs", "sysfs", str(mnt)], check=True)  # this namespace's class/net
        children: list[subprocess.Popen[bytes]] = []
        sockets: list[socket.socket] = []
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        try:
            os.symlink(mnt / "class/net", sysfs / "class/net")
            ib_tree(sysfs, links)
            setup = ("while ! ip link show eth0 >/dev/null 2>&1; do sleep 0.05; done; "
                     "ip addr add 10.0.0.2/24 dev eth0 && ip link set eth0 up && " if veths else "")
            no_ipv6 = "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; "
            children = [subprocess.Popen(["unshare", "-n", "sh", "-c",
                                          f"{no_ipv6}ip link set lo up && {setup}exec sleep 600"],
                                         stdin=subprocess.DEVNULL) for _ in range(count)]
            deadline = time.monotonic() + 120
            here = os.readlink("/proc/self/ns/net")
            for child in children:
                while os.readlink(f"/proc/{child.pid}/ns/net") == here:
                    if time.monotonic() > deadline:
                        raise SystemExit("namespaces not made after 120 s")
                    time.sleep(0.01)
            if veths:
                batch = "".join(f"link add gfh{i} type veth peer name eth0 netns {c.pid}\nlink set gfh{i} up\n"
                                for i, c in enumerate(children))
                subprocess.run(["ip", "-batch", "-"], input=batch.encode(), check=True)
            for child in children:
                while not os.readlink(f"/proc/{child.pid}/exe").endswith("/sleep"):
                    if time.monotonic() > deadline or child.poll() is not None:
                        raise SystemExit("namespaces not ready after 120 s")
                    time.sleep(0.01)  # the namespace is not set up yet (unshare, then sh, has not exec'd sleep)
                fd = os.open(f"/proc/{child.pid}/ns/net", os.O_RDONLY)
                try:
                    _enter(fd)
                    # bound to that namespace for life; unconnected, so no ICMP error is reported on it
                    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                    sockets.append(s)
                finally:
                    _enter(own)
                    os.close(fd)
            target = ("10.0.0.255", 9) if veths else ("127.0.0.1", 9)
            # every namespace read every tick (capture's sampling), and with quiet namespaces left
            # unread (--set net.quiet_namespaces=true, net.idle_full_s 10 s), where the checkout has
            # that setting; with a baseline checkout, its collector the same two ways, in the same ticks
            runs: dict[str, tuple[Any, Any, list[float], list[float], Any]] = {}
            checkouts = [("", _THIS)] + ([("base_", _checkout(baseline))] if baseline else [])
            for prefix, (net_collector, context, options, sink, redactor, tick_type, gates) in checkouts:
                for mode in ("full", "gated") if gates else ("full",):
                    name = prefix + mode
                    (root / name).mkdir()
                    ctx = context(options(extra=dict(QUIET) if mode == "gated" else {}), sink(root / name),
                                  redactor(True), {"pids": [c.pid for c in children]})
                    collector = net_collector(str(sysfs), "/proc")
                    runs[name] = (collector, ctx, [], [0.0, 0.0], tick_type)
            for collector, ctx, _, _, tick_type in runs.values():
                collector.sample(ctx, tick_type(0, time.time()))
            at: list[Any] = ["", 0]
            timing: contextlib.AbstractContextManager[dict[tuple[str, str, int], float]] = \
                _sectioned(at) if sections else contextlib.nullcontext({})
            with timing as spent_in:
                for i in range(1, ticks + 1):
                    for k in range(busy):
                        sockets[(i * busy + k) % count].sendto(b"x", target)
                    now = time.time()
                    order = list(runs.values())
                    order = order[i % len(order):] + order[:i % len(order)]  # each first in turn
                    for collector, ctx, spent, split, tick_type in order:
                        at[:] = [next(k for k, v in runs.items() if v[0] is collector), i]
                        c0, r0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
                        collector.sample(ctx, tick_type(i, now))
                        r1 = resource.getrusage(resource.RUSAGE_SELF)
                        spent.append(time.process_time() - c0)
                        split[0] += r1.ru_utime - r0.ru_utime
                        split[1] += r1.ru_stime - r0.ru_stime
                    time.sleep(max(0.0, pace - (time.time() - now)))  # 1 Hz: idle_full_s is in seconds
            collector = runs["full"][0]
            fds = _netns_descriptors(collector)
            bare: list[float] = []
            for _ in range(ticks):
                c0 = time.process_time()
                for fd in fds:
                    os.pread(fd, 65536, 0)
                bare.append(time.process_time() - c0)
            out: dict[str, float] = {"bare": median(bare), "interfaces": len(os.listdir(sysfs / "class/net"))}
            for name, (collector, ctx, spent, split, _) in runs.items():
                collector.end_sampling(ctx)
                out[f"{name}_sys_share"] = split[1] / max(1e-9, split[0] + split[1])
                lines = (root / name / "net/samples.jsonl").read_bytes().splitlines()[1:]
                records = [json.loads(line) for line in lines]
                out[f"{name}_tick"] = median(spent)
                out[f"{name}_moved"] = sum(len(r["netns"]) for r in records) / max(1, len(lines))
                out[f"{name}_read"] = sum(len(r["netns"]) + len(r.get("netns_unchanged", ())) for r in records) \
                    / max(1, len(lines))
                out[f"{name}_line_bytes"] = median([float(len(line)) for line in lines])
            by_part: dict[str, list[float]] = {}
            for (run, part, _), cpu in spent_in.items():
                by_part.setdefault(f"{run}:{part}", []).append(cpu)
            for part, values in by_part.items():  # a tick without a pread in a section counts as 0
                out[part] = median(values + [0.0] * (ticks - len(values)))
            for name in ("full", "gated"):
                if name in runs and f"base_{name}" in runs:
                    out[f"{name}_ratio"] = median([a / b for a, b in zip(runs[name][2], runs[f"base_{name}"][2], strict=True)
                                                    if b > 0])
            return out
        finally:
            for s in sockets:
                s.close()
            os.close(own)
            for child in children:
                child.kill()
            for child in children:
                child.wait()
            # lazily: detached now even if a descriptor is still open, so the temporary directory's
            # removal never walks into sysfs (the mount namespace goes with this process anyway)
            subprocess.run(["umount", "-l", str(mnt)], check=False)


IO_FILES = {2: ("io.stat",), 1: ("blkio.throttle.io_service_bytes", "blkio.throttle.io_serviced")}
_BLKIO = "".join(f"259:0 {op} 4194304\n" for op in ("Read", "Write", "Sync", "Async", "Discard", "Total")) + \
    "Total 4194304\n"
_PSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
# one container cgroup's per-tick files, as the kernel writes them (the first number of an activity
# file and of an IO file is what a busy container moves)
CGROUP_FILES = {
    2: {"": {"cpu.stat": "usage_usec 1000\nuser_usec 800\nsystem_usec 200\nnr_periods 0\nnr_throttled 0\n"
                         "throttled_usec 0\nnr_bursts 0\nburst_usec 0\n",
             "memory.current": "1048576\n", "pids.current": "3\n",
             "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
             "cpu.pressure": _PSI, "memory.pressure": _PSI, "io.pressure": _PSI,
             "io.stat": "259:0 rbytes=4194304 wbytes=1234 rios=1024 wios=3 dbytes=0 dios=0\n"}},
    1: {"cpu": {"cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\nnr_bursts 0\nburst_time 0\n"},
        "cpuacct": {"cpuacct.usage": "1000000\n"},
        "memory": {"memory.usage_in_bytes": "1048576\n", "memory.failcnt": "0\n",
                   "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"},
        "pids": {"pids.current": "3\n"},
        "blkio": {"blkio.throttle.io_service_bytes": _BLKIO, "blkio.throttle.io_serviced": _BLKIO}},
}


def _bump(path: Path, by: int) -> None:
    """Add ``by`` to the file's first counter (``usage_usec N``, ``rbytes=N``, ``MAJ:MIN Read N``, ``N``)."""
    text = path.read_text()
    match = _COUNTER.search(text)
    assert match is not None, path
    path.write_text(f"{text[:match.start()]}{int(match.group()) + by}{text[match.end():]}")


_COUNTER = re.compile(r"(?:^|(?<=[ =]))\d+(?=\s)")


@contextlib.contextmanager
def _without_io_files(version: int) -> Iterator[None]:
    """The cgroups collector plans without this version's IO files while in this block."""
    from forensics.collectors import cgroups

    saved = cgroups.V2_FILES, cgroups.V1_FILES
    cgroups.V2_FILES = tuple(f for f in saved[0] if f[0] not in IO_FILES[version])
    cgroups.V1_FILES = {c: tuple(f for f in files if f[0] not in IO_FILES[version]) for c, files in saved[1].items()}
    try:
        yield
    finally:
        cgroups.V2_FILES, cgroups.V1_FILES = saved


def cgroup_io_cost(root: Path, version: int, containers: int, busy: int, ticks: int) -> tuple[float, float]:
    """What the IO files add to the cgroups collector's tick over ``containers`` cgroups on a
    ``version`` host laid out on a temporary directory (a fake mountinfo pointing at it): the
    recorder's collector (activity gating, ``cgroups.idle_full_s`` 10 s, one simulated second per
    tick) with the IO files in its plan less the same collector without them, ticked alternately;
    between ticks ``busy`` cgroups (in turn) move their CPU counter and their IO counters, the
    others stay still. Returns the median paired difference for the gated collector and for
    capture's (every file every tick)."""
    from forensics.collectors import cgroups

    lines = []
    for n, (controller, files) in enumerate(CGROUP_FILES[version].items()):
        mount = root / (controller or "unified")
        for i in range(containers):
            d = mount / f"docker/{i:064x}"
            d.mkdir(parents=True)
            for name, text in files.items():
                (d / name).write_text(text)
        lines.append(f"{30 + n} 1 0:{40 + n} / {mount} rw - cgroup2 cgroup2 rw\n" if version == 2 else
                     f"{30 + n} 1 0:{40 + n} / {mount} rw - cgroup cgroup rw,{controller}\n")
    paths = [f"/docker/{i:064x}" for i in range(containers)]
    (root / "mountinfo").write_text("".join(lines))
    pressure = root / "pressure"
    pressure.mkdir()
    for res in ("cpu", "memory", "io"):
        (pressure / res).write_text(_PSI)
    movers = [(root / (c or "unified"), name) for c, files in CGROUP_FILES[version].items() for name in files
              if name in ("cpu.stat" if version == 2 else "cpuacct.usage", *IO_FILES[version])]
    results = []
    for gated in (True, False):
        clock = [time.monotonic()]
        module = vars(cgroups)  # the collector's clock: one simulated second per tick
        real_time, module["time"] = module["time"], type("Clock", (), {"monotonic": staticmethod(lambda c=clock: c[0])})
        try:
            pair = []
            for with_io in (True, False):
                stage = root / f"stage-{gated}-{with_io}"
                stage.mkdir()
                collector = cgroups.CgroupsCollector(str(root / "mountinfo"), str(pressure), str(root / "noproc"))
                collector.activity_gating = gated
                ctx = CollectContext(CaptureOptions(interval_s=1.0, extra={"cgroups.idle_full_s": "10"}),
                                     EvidenceSink(stage), Redactor(True), {"cgroup_paths": list(paths)})
                with contextlib.nullcontext() if with_io else _without_io_files(version):
                    collector.sample(ctx, Tick(0, time.time()))  # plans (with or without the IO files)
                pair.append((collector, ctx))
            diffs = []
            for i in range(1, ticks + 1):
                for k in range(busy):
                    n = (i * busy + k) % containers
                    for mount, name in movers:
                        _bump(mount / f"docker/{n:064x}" / name, 1000 + i)
                clock[0] += 1.0
                spent = []
                for collector, ctx in pair:
                    c0 = time.process_time()
                    collector.sample(ctx, Tick(i, time.time()))
                    spent.append(time.process_time() - c0)
                diffs.append(spent[0] - spent[1])
            for collector, ctx in pair:
                collector.end_sampling(ctx)
        finally:
            module["time"] = real_time
        results.append(median(diffs))
    return results[0], results[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--containers", type=int, default=200)
    ap.add_argument("--links", type=int, default=8)
    ap.add_argument("--veths", type=int, default=None,
                    help="host veths, one per container (default: --containers; 0: none)")
    ap.add_argument("--ticks", type=int, default=30)
    ap.add_argument("--active", type=float, default=25.0,
                    help="percent of containers whose counters change between ticks")
    ap.add_argument("--real-netns", action="store_true",
                    help="also time the net tick over real processes in their own network namespaces "
                         "(root, unshare(1) and ip(8) needed)")
    ap.add_argument("--pace", type=float, default=1.0,
                    help="--real-netns: seconds from one tick's start to the next (default 1: caches go cold "
                         "between ticks, as at 1 Hz; 0: back to back, as this bench did before)")
    ap.add_argument("--baseline", metavar="CHECKOUT",
                    help="--real-netns: also time another checkout's net collector (its root directory), in the "
                         "same ticks, interleaved, and print this checkout's ratio to it")
    ap.add_argument("--sections", action="store_true",
                    help="--real-netns: also print where this checkout's tick goes: each section's CPU and the "
                         "kernel's part of it (its preads), median of the ticks")
    ap.add_argument("--inner-real", action="store_true", help=argparse.SUPPRESS)  # run by --real-netns
    args = ap.parse_args()
    busy = max(0, min(args.containers, round(args.containers * args.active / 100)))
    veths = min(args.containers, args.containers if args.veths is None else args.veths)
    if args.inner_real:
        print(json.dumps(real_namespaces(args.containers, args.ticks, busy, args.links, veths > 0, args.pace,
                                         args.baseline, args.sections)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sysfs, proc = build(root, args.containers, args.links, veths)
        ib_tree(sysfs, args.links)
        (root / "stage").mkdir()
        ctx = CollectContext(CaptureOptions(), EvidenceSink(root / "stage"), Redactor(True),
                             {"pids": list(range(1000, 1000 + args.containers))})
        collector = NetCollector(str(sysfs), str(proc))
        collector.sample(ctx, Tick(0, time.time()))  # discovery happens once, on the first tick
        net_cpus: list[float] = []
        net_walls: list[float] = []
        veth_bytes: dict[int, int] = {}
        for i in range(1, args.ticks + 1):
            for k in range(busy):  # the busy containers' traffic moved since the last tick
                n = (i * busy + k) % args.containers
                pid = 1000 + n
                (proc / str(pid) / "net/dev").write_text(HEADER + dev_line("lo", 5 + i) + dev_line("eth0", pid * 1000 + i))
                if n < veths:  # what the container sent, its host veth received
                    veth_bytes[n] = pid * 1000 + i
            (proc / "net/dev").write_text(host_dev(args.links, veths, veth_bytes))
            for p in range(args.links):  # the IB ports carry data (their error counters stay still)
                for c in ("port_xmit_data", "port_rcv_data"):
                    (sysfs / f"class/infiniband/mlx5_{p}/ports/1/counters/{c}").write_text(f"{123456789 + i * 1000}\n")
            cpu0, wall0 = time.process_time(), time.perf_counter()
            collector.sample(ctx, Tick(i, time.time()))
            net_cpus.append(time.process_time() - cpu0)
            net_walls.append(time.perf_counter() - wall0)
        net_cpu, net_wall = median(net_cpus), median(net_walls)
        collector.end_sampling(ctx)
        tmpfs_line = median([float(len(x)) for x in (root / "stage/net/samples.jsonl").read_bytes().splitlines()[1:]])

        v2, v2_every = cgroup_io_cost(root / "cg2", 2, args.containers, busy, args.ticks)
        v1, v1_every = cgroup_io_cost(root / "cg1", 1, args.containers, busy, args.ticks)
        real: dict[str, float] | None = None
        if args.real_netns:
            inner = subprocess.run(["unshare", "-n", "-m", "--propagation", "private", sys.executable, __file__,
                                    "--inner-real", "--containers", str(args.containers), "--links", str(args.links),
                                    "--veths", str(veths), "--ticks", str(args.ticks), "--active", str(args.active),
                                    "--pace", str(args.pace), *(["--baseline", args.baseline] if args.baseline else []),
                                    *(["--sections"] if args.sections else [])],
                                   capture_output=True, text=True, timeout=600)
            if inner.returncode != 0:
                raise SystemExit(f"--real-netns failed: {inner.stderr.strip()[-2000:]}")
            real = json.loads(inner.stdout.strip().splitlines()[-1])
    print(f"{busy} of {args.containers} containers with new counters each tick")
    print(f"net tick, files on tmpfs ({args.containers} namespaces, {args.links} NICs, {veths} host veths, "
          f"{args.links} IB ports): {net_cpu * 1e3:.2f} ms CPU, {net_wall * 1e3:.2f} ms wall; "
          f"line {tmpfs_line / 1024:.1f} KiB")
    hosts = [("v2 host", net_cpu + v2), ("v1 host", net_cpu + v1)]
    if real is not None:
        for name, what in (("full", "every namespace read every tick"),
                           ("gated", "quiet namespaces unread, net.idle_full_s 10 s"),
                           ("base_full", "baseline checkout, every namespace read every tick"),
                           ("base_gated", "baseline checkout, quiet namespaces unread")):
            if f"{name}_tick" not in real:
                continue
            print(f"net tick, real namespaces, {what} ({args.containers} processes each in its own network namespace"
                  f"{', each with a veth pair to the host' if veths else ', lo only'}; {int(real['interfaces'])} "
                  f"host interfaces; kernel-made files through kept descriptors): {real[f'{name}_tick'] * 1e3:.2f} "
                  f"ms CPU ({real[f'{name}_sys_share'] * 100:.0f} % in the kernel); {real[f'{name}_read']:.1f} namespaces read and {real[f'{name}_moved']:.1f} written per "
                  f"tick; line {real[f'{name}_line_bytes'] / 1024:.1f} KiB")
            if f"{name}_ratio" in real:
                print(f"  this checkout's tick / the baseline's, median of the ticks: {real[f'{name}_ratio']:.2f}")
            if f"{name}:tick" in real:
                parts = ", ".join(f"{part.lstrip('_')} {real[f'{name}:{part}'] * 1e3:.2f} (kernel "
                                  f"{real.get(f'{name}:pread:{part}', 0.0) * 1e3:.2f})" for part in SECTIONS)
                print(f"  ms CPU by section, medians (preads, the kernel's part): {parts}; line JSON and write "
                      f"{(real[f'{name}_tick'] - real[f'{name}:tick']) * 1e3:.2f}")
            hosts += [(f"v2 host, real namespaces, {name}", real[f"{name}_tick"] + v2),
                      (f"v1 host, real namespaces, {name}", real[f"{name}_tick"] + v1)]
        print(f"bare preads of the {args.containers} namespaces' net/dev: {real['bare'] * 1e3:.2f} ms")
    target = 0.002
    print(f"cgroup io files per tick ({args.containers} cgroups): v2 io.stat {v2 * 1e3:.2f} ms, "
          f"v1 blkio.throttle x2 {v1 * 1e3:.2f} ms CPU")
    print(f"  (the recorder's gated cgroups tick with those files less the same tick without them; capture's "
          f"sampling, every file every tick: v2 {v2_every * 1e3:.2f} ms, v1 {v1_every * 1e3:.2f} ms)")
    for name, cost in hosts:
        share = cost / 1.0
        print(f"{name}: {share * 100:.3f} % of a core at 1 Hz; ratio to the 0.2 % target: {share / target:.2f}")


if __name__ == "__main__":
    main()
