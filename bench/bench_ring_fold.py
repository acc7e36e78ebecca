"""``capture --since 1h`` with a full hour in the ring, against the same capture without the ring.

The hour is made from a real recording: the recorder runs ``--record-s`` seconds at 1 Hz over 8
simulated GPUs x 64 processes and the host's cgroups; its records are then written again, shifted
back in time (``t`` of each record and the ``"t": ...`` of each sampled line), until the ring spans
an hour, through the recorder's own writer (change-only samples, sealed gzip segments). Then
``capture --since 1h`` runs with that ring and with ``--skip ring`` (otherwise the same), each
``--runs`` times; the best of each is compared. With ``--base DIR`` (a worktree of another version,
e.g. ``git worktree add --detach ../base main``) every capture runs for both versions, interleaved
(base, this, base, this: the same load for both), and ``analyze -f json`` of each version's hour
bundle is timed too: since the bundle carries the ring's segments, the reader rebuilds the
members, so what capture no longer pays, analyze does.

    sudo python bench/bench_ring_fold.py --record-s 30 --base /work/wt/segfold-base
Target (issue 14): the ring adds under 2 s to the capture.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forensics.record.sources import DELTA_MEMBERS  # noqa: E402
from forensics.ring import RingReader, RingWriter  # noqa: E402
from tests.support import nvmlsim  # noqa: E402
from tests.support.record_support import start_recorder, wait_for_writer  # noqa: E402

_T = re.compile(rb'"t": ([0-9.]+)')


def shifted(data: bytes, by: float) -> bytes:
    return _T.sub(lambda m: b'"t": ' + repr(float(m.group(1)) + by).encode(), data)


def _children_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def capture(code: Path, ring: Path, out: Path, env: dict[str, str], lib: Path, with_ring: bool,
            only: str | None = None) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of the capture and its collector children, of the version at
    ``code``; ``only``: the collectors beside the ring (all when None)."""
    out.mkdir(parents=True)
    if only:
        which = ["--only", only + (",ring" if with_ring else "")]
    else:
        which = [] if with_ring else ["--skip", "ring"]
    cmd = [sys.executable, "-m", "forensics", "capture", "--since", "1h", "-o", str(out), "--quiet",
           "--nvml-library", str(lib), "--ring", str(ring), *which]
    t0, cpu0 = time.monotonic(), _children_cpu_s()
    # cwd: ``python -m`` puts the working directory before PYTHONPATH, so it must be the version's own
    r = subprocess.run(cmd, env={**env, "PYTHONPATH": str(code)}, cwd=code, capture_output=True, text=True,
                       timeout=600)
    took, cpu = time.monotonic() - t0, _children_cpu_s() - cpu0
    if r.returncode != 0:
        raise SystemExit(f"capture failed ({r.returncode}): {r.stderr[-2000:]}")
    return took, cpu


def analyze(code: Path, bundle: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """``analyze -f json --max-bundle-mb 2048`` of ``bundle`` by the version at ``code``: wall s,
    CPU s, and what came of it (findings, or why the bundle was refused)."""
    t0, cpu0 = time.monotonic(), _children_cpu_s()
    r = subprocess.run([sys.executable, "-m", "forensics", "analyze", "-f", "json", "--max-bundle-mb", "2048",
                        str(bundle)], env={**env, "PYTHONPATH": str(code)}, cwd=code, capture_output=True,
                       timeout=1200)
    took, cpu = time.monotonic() - t0, _children_cpu_s() - cpu0
    if r.returncode not in (0, 1):
        return took, cpu, f"refused (exit {r.returncode}): {r.stderr.decode(errors='replace').strip()[-300:]}"
    doc = json.loads(r.stdout)
    cut = [x for x in doc["limitations"] if "pass the reader's cap" in x]
    return took, cpu, f"{len(doc['findings'])} findings" + (f"; {cut[0][-160:]}" if cut else "")


def fold_and_floor(bundle: Path) -> tuple[float, int, float]:
    """The ring collector's own time (manifest), the bytes it folded (members under ``ring/``), and
    what packing just those bytes costs the bundle writer: their SHA-256 (the manifest's member table)
    and gzip at the bundle's level 6, timed here on the same bytes. That part is the price of having
    the members' whole bytes in the bundle, whatever the fold does."""
    fold_s, data = 0.0, []
    with tarfile.open(bundle) as tar:
        for m in tar.getmembers():
            name = m.name.split("/", 1)[-1]
            f = tar.extractfile(m) if m.isfile() else None
            if f is None:
                continue
            if name == "manifest.json":
                fold_s = next(c["duration_s"] for c in json.loads(f.read())["collectors"] if c["name"] == "ring")
            elif name.startswith("ring/"):
                data.append(f.read())
    t0 = time.process_time()  # CPU: what the bundle writer's one thread spends, whatever the load
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)
    for chunk in data:
        hashlib.sha256(chunk).digest()
        for at in range(0, len(chunk), 1 << 20):
            packer.compress(chunk[at:at + (1 << 20)])
    packer.flush()
    return fold_s, sum(map(len, data)), time.process_time() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record-s", type=float, default=30.0)
    ap.add_argument("--hour-s", type=float, default=3600.0)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seed", type=Path, help="a recorded ring to build the hour from (a kept run's seed/), "
                    "instead of recording one: the same hour for two versions of the code")
    ap.add_argument("--base", type=Path, help="a worktree of the version to compare with (before)")
    ap.add_argument("--only", help="the collectors beside the ring, e.g. host (default: all): on a shared "
                    "machine the cgroup and procfs collectors' cost varies by seconds from run to run, "
                    "more than the ring's; the difference with and without the ring is the ring's either way")
    ap.add_argument("--no-analyze", action="store_true", help="do not time analyze of the hour bundles")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gffold-"))
    sleepers: list[subprocess.Popen[bytes]] = []
    try:
        lib = nvmlsim.build_library(tmp / "lib")
        sc = nvmlsim.Scenario()
        for _ in range(8):
            sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 50), (30, 90)])
        sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(64)]
        for k in range(8 * 64):
            sc.add_process(pid=sleepers[k % 64].pid, gpu=k // 64, used_memory_bytes=1 << 28,
                           sm_util=[(0, 10), (20, 40)] if k % 7 == 0 else 10, mem_util=5)
        env = nvmlsim.subprocess_env(sc.write(tmp / "sc.tsv"), lib)
        env["PYTHONPATH"] = str(ROOT)
        seed = args.seed or tmp / "seed"
        if not args.seed:
            rec = start_recorder(seed, env=env, interval_s=1.0, nvml_library=str(lib),
                                 sources=["nvml", "procfs", "cgroups", "kernel"], stderr=subprocess.DEVNULL)
            wait_for_writer(seed, rec)
            time.sleep(args.record_s)
            rec.send_signal(signal.SIGTERM)
            rec.communicate(timeout=30)
        records = list(RingReader(seed).records())
        t_lo, t_hi = min(r.t for r in records), max(r.t for r in records)
        period = max(t_hi - t_lo, 1.0) + 1.0
        copies = int(args.hour_s // period) + 1
        ring = tmp / "ring"
        now = time.time()
        w = RingWriter(ring, delta_members=DELTA_MEMBERS).open()
        started = time.monotonic()
        member_bytes = 0
        for k in range(copies):
            by = now - t_hi - (copies - 1 - k) * period - 5.0  # the last copy ends 5 s ago
            for r in records:
                if r.op == "write" and k:
                    continue  # the state once (every new segment copies it)
                data = shifted(r.data, by) if r.op == "append" else r.data
                member_bytes += len(data)
                w.append([(r.t + by, r.mono + k * period, r.member, r.op, data)])
        w.close()
        disk = sum(f.stat().st_size for f in ring.iterdir())
        span = [s for s in RingReader(ring).segments()]
        print(f"ring: {copies} copies of a {period:.0f} s recording = {copies * period / 60:.0f} min, "
              f"{member_bytes / 1e6:.0f} MB of member bytes, {disk / 1e6:.1f} MB on disk in {len(span)} segments "
              f"(written in {time.monotonic() - started:.0f} s)")
        cap_env = {**env, "GPUFORENSICS_RING": str(ring)}
        versions = [("before", args.base)] if args.base else []
        versions.append(("after" if args.base else "this", ROOT))
        runs: dict[tuple[str, bool], list[tuple[float, float]]] = {}
        for i in range(args.runs):
            for label, code in versions:
                for flag in (False, True):
                    runs.setdefault((label, flag), []).append(
                        capture(code, ring, tmp / f"{label}-{flag}-{i}", cap_env, lib, flag, args.only))
        print(f"load average {os.getloadavg()[0]:.1f} (2 cores shared: absolute figures read high; "
              f"compare the versions, measured interleaved); collectors beside the ring: {args.only or 'all'}")
        for label, _code in versions:
            without, with_ring = runs[(label, False)], runs[(label, True)]
            bundles = [next((tmp / f"{label}-{k}-0").glob("*.tgz")) for k in (False, True)]
            extra = min(w for w, _ in with_ring) - min(w for w, _ in without)
            cpu_extra = min(c for _, c in with_ring) - min(c for _, c in without)
            print(f"[{label}] capture --since 1h: {min(w for w, _ in without):.1f} s without the ring, "
                  f"{min(w for w, _ in with_ring):.1f} s with it (runs: "
                  f"{', '.join(f'{w:.1f}' for w, _ in without)} / {', '.join(f'{w:.1f}' for w, _ in with_ring)}); "
                  f"bundle {bundles[0].stat().st_size / 1e6:.1f} MB -> {bundles[1].stat().st_size / 1e6:.1f} MB")
            print(f"[{label}]   the ring adds {extra:.1f} s of wall time (target 2 s: ratio {extra / 2:.2f}x) and "
                  f"{cpu_extra:.1f} s of CPU of the capture and its children (ratio {cpu_extra / 2:.2f}x)")
            fold_s, folded, pack_s = fold_and_floor(bundles[1])
            print(f"[{label}]   the ring collector: {fold_s:.1f} s; packing its {folded / 1e6:.1f} MB of members "
                  f"(SHA-256 + gzip level 6, CPU timed alone): {pack_s:.1f} s")
        if not args.no_analyze:
            for label, code in versions:
                bundle = next((tmp / f"{label}-True-0").glob("*.tgz"))
                took, cpu, found = analyze(code, bundle, env)
                print(f"[{label}] analyze -f json of the hour bundle: {took:.1f} s wall, {cpu:.1f} s CPU: {found} "
                      "(where the bundle carries the segments, the reader rebuilds the ring members: the "
                      "decoding capture no longer does, analyze does)")
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        if os.environ.get("GF_KEEP"):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("note: not root: the cgroup and procfs figures are what an unprivileged user can read", file=sys.stderr)
    sys.exit(main())
