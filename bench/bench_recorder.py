"""Recorder cost at 1 Hz: 8 simulated GPUs x 64 processes (``--gpus``, ``--processes`` per GPU),
N container-like cgroups (real cgroups named like Docker's, one sleeping process each), measured
from /proc/<pid>/stat and status of the recorder and its sampler children; disk per 24 h extrapolated from the ring's growth; and, when
Debian's prometheus-node-exporter is installed, the same figures for it answering one scrape/s.

    sudo python bench/bench_recorder.py --seconds 60 --cgroups 200 [--active 25]
    sudo python bench/bench_recorder.py --gpus 8 --processes 2 --cgroups 32   # a typical training node
Targets (issue 14, at the default load): < 0.5 % of one core, < 60 MB RSS, < 300 MB per 24 h.

    sudo python bench/bench_recorder.py --compare-baselines --seconds 60
runs three recorders side by side over the same window instead (the same GPUs and cgroups): none
with triggers, one with fixed rules (the live state on), one with the same rules and baseline rules
on every baseline metric; prints each's CPU and the baseline one's ratio to the other two
(issue 34's target: at most 1.10 against the same recorder without baselines).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forensics.ring import RingReader, encode_record  # noqa: E402
from tests.support import nvmlsim  # noqa: E402
from tests.support.record_support import start_recorder  # noqa: E402

CG_ROOT = Path("/sys/fs/cgroup")
#: unique to this run, so two benches never share cgroups: not the PID alone, which is 1 in a PID
#: namespace of its own (``unshare -p -f --mount-proc``), the same for every bench run that way
RUN = int.from_bytes(os.urandom(4), "big")
CG = CG_ROOT / f"gfbench{RUN:08x}.slice"  # cgroup v2
V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids")  # cgroup v1: /<controller>/docker/<id>, Docker's layout
TCK = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    out = [pid]
    for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split():
        out.extend(tree(int(p)))
    return out


def pss(pids: list[int]) -> int:
    """Proportional set size summed over the processes: the sampler children are forks of the
    recorder, so summing their RSS counts the pages they share once per process."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, IndexError, ValueError):
            pass
    return total


def pss_by_name(pids: list[int]) -> dict[str, int]:
    """PSS per process name (bytes)."""
    out: dict[str, int] = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            out[name] = out.get(name, 0) + pss([pid])
        except OSError:
            pass
    return out


def mem_by_name(pids: list[int]) -> dict[str, tuple[int, int]]:
    """(RSS, PSS) per process name (bytes)."""
    out: dict[str, tuple[int, int]] = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        r, q = out.get(name, (0, 0))
        out[name] = (r + cpu_rss([pid])[1], q + pss([pid]))
    return out


def cpu_by_name(pids: list[int]) -> dict[str, float]:
    """CPU seconds per process name (the sampler children are ``gfrec-<source>``)."""
    out: dict[str, float] = {}
    for pid in pids:
        try:
            head, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
            name = head.split("(", 1)[1]
            f = rest.split()
            out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / TCK
        except (OSError, IndexError):
            pass
    return out


def cpu_rss(pids: list[int]) -> tuple[float, int]:
    cpu, rss = 0.0, 0
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(f[11]) + int(f[12])) / TCK
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) * 1024
        except (OSError, IndexError):
            pass
    return cpu, rss


#: a process that wakes every 0.2 s (no fork): its cgroup's CPU counter moves every 1 Hz tick
WAKER = ["perl", "-e", "select(undef, undef, undef, 0.2) while 1"]


def cgroup_parents() -> list[Path]:
    """Where the container-like cgroups go: v2 ``gfbench<pid>.slice``, else v1 ``<controller>/docker``."""
    v2 = (CG_ROOT / "cgroup.controllers").exists()
    parents = [CG] if v2 else [CG_ROOT / c / "docker" for c in V1_CONTROLLERS if (CG_ROOT / c / "cgroup.procs").exists()]
    if not parents:
        raise SystemExit("no writable cgroup hierarchy (v2 or v1 cpu/memory/pids): cannot build the load")
    return parents


def make_cgroup(i: int, waker: bool, made: list[Path]) -> tuple[subprocess.Popen[bytes], list[Path]]:
    """Container-like cgroup number ``i`` (a Docker-shaped 64-hex id unique to this run and ``i``)
    in every hierarchy, holding one new sleeping (or waking) process; returns it and its directories."""
    v2 = (CG_ROOT / "cgroup.controllers").exists()
    p = subprocess.Popen(WAKER if waker else ["sleep", "3600"])
    dirs = []
    for parent in cgroup_parents():
        cid = f"{RUN:08x}{i:056x}"
        d = parent / (f"docker-{cid}.scope" if v2 else cid)
        d.mkdir(exist_ok=True)
        made.append(d)
        dirs.append(d)
        (d / "cgroup.procs").write_text(str(p.pid))
    return p, dirs


def make_cgroups(n: int, sleepers: list[subprocess.Popen[bytes]], made: list[Path], active: int = 0) -> None:
    """``n`` real container-like cgroups (v2 ``gfbench<pid>.slice/docker-<id>.scope``, else v1
    ``<controller>/docker/<id>``), each holding one sleeping process (the first ``active`` of them
    one that wakes every 0.2 s); every directory made is appended to ``made`` (parents first). A
    plain directory on a tmpfs is not a cgroup: refuse to pretend."""
    for parent in cgroup_parents():
        if not parent.exists():
            parent.mkdir()
            made.append(parent)
    for i in range(n):
        p, _ = make_cgroup(i, i < active, made)
        sleepers.append(p)


class Churn:
    """Containers coming and going: every second (from a thread), the ``n`` oldest cgroups lose
    their process and are removed, and ``n`` new ones (new ids, new sleeping processes) are made.
    A removed cgroup's sleeper may be a simulated GPU process's PID: NVML goes on listing it (the
    scenario is fixed), as NVML lists a process whose container is being torn down."""

    def __init__(self, n: int, first_id: int, made: list[Path]) -> None:
        self.n = n
        self.next_id = first_id
        self.made = made
        self.live: list[tuple[subprocess.Popen[bytes], list[Path]]] = []
        self.removed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def adopt(self, procs: list[subprocess.Popen[bytes]]) -> None:
        """Cgroups made before (by make_cgroups, ids 0..) that churn may remove, oldest first."""
        v2 = (CG_ROOT / "cgroup.controllers").exists()
        for k, p in enumerate(procs):
            cid = f"{RUN:08x}{k:056x}"
            self.live.append((p, [parent / (f"docker-{cid}.scope" if v2 else cid) for parent in cgroup_parents()]))

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            for _ in range(min(self.n, len(self.live))):
                p, dirs = self.live.pop(0)
                p.kill()
                p.wait()
                for d in dirs:
                    try:
                        d.rmdir()
                        self.made.remove(d)
                    except (OSError, ValueError):
                        pass
                self.removed += 1
            for _ in range(self.n):
                self.live.append(make_cgroup(self.next_id, False, self.made))
                self.next_id += 1

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        for p, _ in self.live:
            p.kill()
            p.wait()


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def flatness(trace: list[tuple[float, float, int, int]]) -> None:
    """Growth over the run: the slope of RSS and PSS (MB per hour, least squares over the 5 s
    samples after the first minute) and the CPU rate of the first and the second half."""
    steady = [p for p in trace if p[0] >= 60] or trace
    if len(steady) < 4:
        print("  flatness: run too short (needs samples after the first minute; use --seconds 600)")
        return
    xs = [p[0] / 3600 for p in steady]
    rss_slope = slope(xs, [p[2] / 1e6 for p in steady])
    pss_slope = slope(xs, [p[3] / 1e6 for p in steady])
    mid = len(steady) // 2
    first = 100 * (steady[mid][1] - steady[0][1]) / max(steady[mid][0] - steady[0][0], 1e-9)
    second = 100 * (steady[-1][1] - steady[mid][1]) / max(steady[-1][0] - steady[mid][0], 1e-9)
    print(f"  flatness over {steady[-1][0] - steady[0][0]:.0f} s: RSS {rss_slope:+.2f} MB/h, PSS {pss_slope:+.2f} MB/h "
          f"(from {steady[0][3] / 1e6:.1f} to {steady[-1][3] / 1e6:.1f} MB PSS); CPU first half {first:.2f} %, "
          f"second half {second:.2f} %")


def flatness_of(name: str, points: list[tuple[float, int, int]]) -> None:
    """One process's RSS and PSS slopes (MB per hour, after the first minute)."""
    steady = [p for p in points if p[0] >= 60] or points
    if len(steady) < 4:
        return
    xs = [p[0] / 3600 for p in steady]
    print(f"    {name}: RSS {slope(xs, [p[1] / 1e6 for p in steady]):+.2f} MB/h, "
          f"PSS {slope(xs, [p[2] / 1e6 for p in steady]):+.2f} MB/h "
          f"(PSS {steady[0][2] / 1e6:.1f} -> {steady[-1][2] / 1e6:.1f} MB)")


FIXED_RULES = ["gpu.util>90%:5m", "gpu.memory:1m", "container.throttled:2m", "psi.memory.some:1m"]
BASELINE_RULES = ["gpu.util<baseline:5m", "gpu.memory>baseline:5m", "container.gpu.sm<baseline:5m",
                  "container.gpu.memory>baseline:5m", "container.throttled>baseline:2m", "psi.cpu.some>baseline:2m"]


def compare_baselines(args: argparse.Namespace, env: dict[str, str], lib: Path, tmp: Path) -> None:
    """Three recorders over the same window (see the module docstring); CPU of each process tree."""
    variants = {"no triggers": None, "fixed rules": FIXED_RULES, "fixed + baseline rules": FIXED_RULES + BASELINE_RULES}
    recs = {}
    for n, (name, rules) in enumerate(variants.items()):
        trig = {"triggers": {"rules": rules, "bundles": str(tmp / f"bundles{n}")}} if rules else {}
        recs[name] = start_recorder(tmp / f"ring{n}", env=env, interval_s=1.0, nvml_library=str(lib),
                                    sources=["nvml", "procfs", "cgroups", "kernel"],
                                    stderr=(tmp / f"recorder{n}.log").open("w"), **trig)
    try:
        time.sleep(10)
        c0 = {name: cpu_rss(tree(r.pid))[0] for name, r in recs.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        el = time.monotonic() - t0
        cpu = {name: 100 * (cpu_rss(tree(r.pid))[0] - c0[name]) / el for name, r in recs.items()}
    finally:
        for r in recs.values():
            r.send_signal(signal.SIGTERM)
        outs = {name: r.communicate(timeout=30)[0] for name, r in recs.items()}
    print(f"recorders side by side, {el:.0f} s at 1 Hz, {args.gpus} GPUs x {args.processes} processes, "
          f"{args.cgroups} cgroups; load average {os.getloadavg()[0]:.2f}")
    for name, pct in cpu.items():
        print(f"  {name}: CPU {pct:.2f} % of one core")
    base, fixed, both = cpu["no triggers"], cpu["fixed rules"], cpu["fixed + baseline rules"]
    print(f"  baselines' cost: fixed + baseline / fixed rules = {both / max(fixed, 1e-9):.3f} (target <= 1.10); "
          f"/ no triggers = {both / max(base, 1e-9):.3f}")
    try:
        status = json.loads(outs["fixed + baseline rules"].strip().splitlines()[-1])["triggers"]
        series = sum(len(v) for v in status.get("baselines", {}).values())
        print(f"  baseline series kept: {series} (status lists at most 200); evaluation "
              f"{status['evaluation_s']:.3f} s over {status['evaluations']} ticks")
    except (ValueError, KeyError, IndexError):
        print("  recorder status unreadable")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cgroups", type=int, default=200)
    ap.add_argument("--active", type=float, default=0.0, metavar="PCT",
                    help="share of the cgroups (%%) whose process wakes every 0.2 s, so that its CPU "
                         "counter moves every tick (default 0: all asleep)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (default 8)")
    ap.add_argument("--processes", type=int, default=64, help="simulated compute processes per GPU (default 64)")
    ap.add_argument("--skip-node-exporter", action="store_true", help="no side-by-side node-exporter run")
    ap.add_argument("--churn", type=int, default=0, metavar="N",
                    help="every second remove the N oldest container cgroups (and their processes) and "
                         "make N new ones with new ids (default 0: the same cgroups throughout)")
    ap.add_argument("--pid-churn", type=int, default=0, metavar="N",
                    help="every second N of the simulated GPU processes end and N new ones (new PIDs, "
                         "no real process behind them) start on the same GPUs (default 0)")
    ap.add_argument("--metrics-port", type=int, default=0, metavar="PORT",
                    help="also serve the metrics endpoint (the live state) on 127.0.0.1:PORT, scraped "
                         "every 5 s (default: off, the recorder as it runs by default)")
    ap.add_argument("--compare-baselines", action="store_true",
                    help="three recorders side by side: no triggers, fixed rules, fixed and baseline rules")
    args = ap.parse_args()
    active = round(args.cgroups * args.active / 100)
    tmp = Path(tempfile.mkdtemp(prefix="gfbench-"))
    sleepers: list[subprocess.Popen[bytes]] = []
    made: list[Path] = []
    try:
        make_cgroups(args.cgroups, sleepers, made, active)
        lib = nvmlsim.build_library(tmp / "lib")
        sc = nvmlsim.Scenario()
        gpus, per_gpu = args.gpus, args.processes
        for _ in range(gpus):
            sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 50), (30, 90)])
        # a GPU process's slot k lives on GPU k // per_gpu: with --pid-churn, from 20 s on (after start-up)
        # N slots a second (round robin) get a new process with a new PID
        starts: list[list[float]] = [[] for _ in range(gpus * per_gpu)]
        for j in range(int(args.pid_churn * (args.seconds + 120))):
            starts[j % len(starts)].append(20 + j / args.pid_churn)
        new_pid = 200000
        for k in range(gpus * per_gpu):
            times = starts[k]
            sc.add_process(pid=sleepers[k % len(sleepers)].pid if sleepers else 100000 + k, gpu=k // per_gpu,
                           used_memory_bytes=1 << 28, sm_util=10, mem_util=5, end_s=times[0] if times else None)
            for a, b in zip(times, (times + [math.inf])[1:], strict=True):
                sc.add_process(pid=new_pid, gpu=k // per_gpu, used_memory_bytes=1 << 28, sm_util=10, mem_util=5,
                               start_s=a, end_s=None if b == math.inf else b)
                new_pid += 1
        env = nvmlsim.subprocess_env(sc.write(tmp / "sc.tsv"), lib)
        ring = tmp / "ring"
        log = (tmp / "recorder.log").open("w")
        extra_opts = {"metrics": {"host": "127.0.0.1", "port": args.metrics_port}} if args.metrics_port else {}
        rec = start_recorder(ring, env=env, interval_s=1.0, nvml_library=str(lib),
                             sources=["nvml", "procfs", "cgroups", "kernel"], stderr=log, **extra_opts)
        if args.compare_baselines:
            compare_baselines(args, env, lib, tmp)
            return 0
        churn = Churn(args.churn, args.cgroups, made)
        if args.churn:
            churn.adopt(sleepers)
            sleepers.clear()  # churn owns them now
            churn.thread.start()
        time.sleep(10)  # start-up (snapshots, first plans) is not the steady state
        c0, _ = cpu_rss(tree(rec.pid))
        by0 = cpu_by_name(tree(rec.pid))
        w0 = time.time()
        t0 = time.monotonic()
        peak = peak_pss = 0
        trace: list[tuple[float, float, int, int]] = []  # (s since t0, CPU s, RSS, PSS): flat or growing?
        per_proc: dict[str, list[tuple[float, int, int]]] = {}  # name -> (s since t0, RSS, PSS)
        while time.monotonic() - t0 < args.seconds:
            time.sleep(5)
            if args.metrics_port:
                try:
                    scraped = len(urllib.request.urlopen(f"http://127.0.0.1:{args.metrics_port}/metrics", timeout=5).read())
                except OSError as exc:
                    scraped = f"scrape failed: {exc}"
            pids = tree(rec.pid)
            cpu_now, rss_now = cpu_rss(pids)
            pss_now = pss(pids)
            peak = max(peak, rss_now)
            peak_pss = max(peak_pss, pss_now)
            trace.append((time.monotonic() - t0, cpu_now, rss_now, pss_now))
            for name, (r, q) in mem_by_name(pids).items():
                per_proc.setdefault(name, []).append((trace[-1][0], r, q))
        c1, rss = cpu_rss(tree(rec.pid))
        by1 = cpu_by_name(tree(rec.pid))
        el = time.monotonic() - t0
        w1 = time.time()
        pss_end = pss_by_name(tree(rec.pid))
        rec.send_signal(signal.SIGTERM)
        out, _ = rec.communicate(timeout=20)
        log.close()
        print("  recorder stderr: " + ((tmp / "recorder.log").read_text()[-1000:].strip() or "(empty)"))
        try:  # a source that failed or restarted would make every figure below look better than it is
            for name, st in json.loads(out.strip().splitlines()[-1])["sources"].items():
                print(f"  source {name}: {st['status']}, {st['ticks']} ticks, {st['missed']} missed, "
                      f"{st['restarts']} restarts{', ' + str(st['error']) if st.get('error') else ''}")
        except (ValueError, KeyError, IndexError):
            print(f"  recorder status unreadable: {out[-500:]!r}")
        # the steady state: the ring lines of the records written in [w0, w1], raw and as the seal
        # compresses them (segments rotate meanwhile, so file sizes would mix both)
        reader = RingReader(ring)
        window = list(reader.records(since=w0, until=w1))
        stored = [rec for seg in reader.segments() for _, rec in reader._segment_lines(seg)[0][1:]
                  if w0 <= float(rec["t"]) <= w1]  # as stored: change-only records stay encoded
        steady = b"".join(encode_record(float(r["t"]), float(r["mono"]), r["member"], r["op"],
                                        r["data"].encode("utf-8", "surrogateescape")) for r in stored)
        decoded = sum(len(r.data) for r in window)
        by_member: dict[str, list[int]] = {}
        for r in stored:
            acc = by_member.setdefault(f"{r['member']} ({r['op']})", [0, 0])
            acc[0] += 1
            acc[1] += len(r["data"])
        print("  stored by member: " + ", ".join(f"{m} {n} records {b / 1e6:.2f} MB"
                                                 for m, (n, b) in sorted(by_member.items(), key=lambda kv: -kv[1][1])[:6]))
        why: dict[str, int] = {}  # the recorder's own events: restarts and gaps, and why
        for r in reader.records(members=("recorder/",)):
            for line in r.data.splitlines():
                ev = json.loads(line)
                if ev.get("kind") in ("source", "gap", "tick-error"):
                    key = f"{ev['kind']} {ev.get('source')}: {str(ev.get('error') or ev.get('reason'))[:80]}"
                    why[key] = why.get(key, 0) + 1
        for key, n in sorted(why.items()):
            print(f"  recorder event {key} (x{n})")
        print(f"  window: {len(window)} records, {decoded / 1e6:.1f} MB of member bytes, "
              f"{len(steady) / 1e6:.1f} MB as stored ({len(steady) / max(decoded, 1):.2f}x)")
        # NVML ticks recorded in the window (one device line per GPU): on a loaded machine ticks are
        # missed, so figures per tick compare runs that the raw rates would not
        ticks = sum(r.data.count(b'"kind": "device"') for r in window if r.member == "nvml/samples.jsonl") / gpus
        raw_rate = len(steady) / el
        sealed_rate = len(gzip.compress(steady, compresslevel=6, mtime=0)) / el
        cpu_pct = 100 * (c1 - c0) / el
        per_tick = f"{ticks:.0f} NVML ticks of {el:.0f} expected" if ticks else "no NVML tick recorded"
        print(f"recorder: {el:.0f} s at 1 Hz, {gpus} GPUs x {per_gpu} processes, {args.cgroups} cgroups "
              f"({active} active); {per_tick}; load average {os.getloadavg()[0]:.2f}")
        cg_lines = sum(r.data.count(b"\n") for r in window if r.member == "cgroup/samples.jsonl")
        if ticks:
            print(f"  cgroup/samples.jsonl: {cg_lines / ticks:.1f} lines per tick")
            print(f"  per NVML tick: CPU {1000 * (c1 - c0) / ticks:.1f} ms, ring {len(steady) / ticks / 1e3:.1f} kB raw, "
                  f"{len(gzip.compress(steady, 6, mtime=0)) / ticks / 1e3:.1f} kB sealed")
        print("  CPU by process: " + ", ".join(f"{n} {100 * (c - by0.get(n, 0.0)) / el:.2f} %"
                                               for n, c in sorted(by1.items())))
        print(f"  CPU {cpu_pct:.2f} % of one core (target 0.5 %: ratio {cpu_pct / 0.5:.1f}x)")
        print(f"  RSS {rss / 1e6:.1f} MB all processes, peak {peak / 1e6:.1f} MB (target 60 MB: ratio {peak / 60e6:.2f}x)")
        print("  PSS by process at the end: " + ", ".join(f"{n} {b / 1e6:.1f} MB" for n, b in sorted(pss_end.items())))
        print(f"  PSS peak {peak_pss / 1e6:.1f} MB (shared pages counted once; target 60 MB: ratio {peak_pss / 60e6:.2f}x)")
        print(f"  disk {raw_rate * 86400 / 1e6:.0f} MB/24 h in the active segment, {sealed_rate * 86400 / 1e6:.0f} MB/24 h "
              f"sealed (gzip) (target 300 MB: ratio {sealed_rate * 86400 / 300e6:.2f}x)")
        flatness(trace)
        if args.metrics_port:
            print(f"  metrics: last scrape {scraped} bytes")
        for name, points in sorted(per_proc.items()):
            flatness_of(name, points)
        if args.churn or args.pid_churn:
            print(f"  churn: {churn.removed} cgroups removed and {churn.next_id - args.cgroups} made "
                  f"({args.churn}/s); {args.pid_churn} GPU process(es)/s replaced by new PIDs")
        exe = shutil.which("prometheus-node-exporter")
        if args.skip_node_exporter:
            pass
        elif exe:
            ne = subprocess.Popen([exe, "--web.listen-address=127.0.0.1:19100"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
            time.sleep(2)
            n0, _ = cpu_rss([ne.pid])
            t0 = time.monotonic()
            while time.monotonic() - t0 < min(args.seconds, 60):
                urllib.request.urlopen("http://127.0.0.1:19100/metrics", timeout=5).read()
                time.sleep(1)
            n1, nrss = cpu_rss([ne.pid])
            ne.terminate()
            ne.wait()
            ne_pct = 100 * (n1 - n0) / (time.monotonic() - t0)
            print(f"node-exporter, 1 scrape/s: CPU {ne_pct:.2f} %, RSS {nrss / 1e6:.1f} MB; "
                  f"recorder/node-exporter CPU ratio {cpu_pct / max(ne_pct, 1e-6):.2f}x")
        else:
            print("prometheus-node-exporter not installed: apt-get install --no-install-recommends prometheus-node-exporter")
    finally:
        if "churn" in locals():
            churn.close()
        for p in sleepers:
            p.kill()
            p.wait()
        for d in reversed(made):  # children first; a cgroup empties once its sleeper is reaped
            try:
                d.rmdir()
            except OSError as exc:
                print(f"could not remove {d}: {exc}", file=sys.stderr)
        if os.environ.get("GF_KEEP"):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
