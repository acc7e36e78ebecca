"""``capture --since 1h`` with a full hour in the ring, against the same capture without the ring.

The hour is made from a real recording: the recorder runs ``--record-s`` seconds at 1 Hz over 8
simulated GPUs x 64 processes and the host's cgroups; its records are then written again, shifted
back in time (``t`` of each record and the ``"t": ...`` of each sampled line), until the ring spans
an hour, through the recorder's own writer (change-only samples, sealed gzip segments). Then
``capture --since 1h`` runs with that ring and with ``--skip ring`` (otherwise the same), each
``--runs`` times; the best of each is compared.

    sudo python bench/bench_ring_fold.py --record-s 30
Target (issue 14): the ring adds under 2 s to the capture.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
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


def capture(ring: Path, out: Path, env: dict[str, str], lib: Path, with_ring: bool) -> float:
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "forensics", "capture", "--since", "1h", "-o", str(out), "--quiet",
           "--nvml-library", str(lib), "--ring", str(ring)] + ([] if with_ring else ["--skip", "ring"])
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"capture failed ({r.returncode}): {r.stderr[-2000:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record-s", type=float, default=30.0)
    ap.add_argument("--hour-s", type=float, default=3600.0)
    ap.add_argument("--runs", type=int, default=2)
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
        seed = tmp / "seed"
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
        with_ring, without = [], []
        for i in range(args.runs):
            without.append(capture(ring, tmp / f"without-{i}", cap_env, lib, False))
            with_ring.append(capture(ring, tmp / f"with-{i}", cap_env, lib, True))
        sizes = [sum(f.stat().st_size for f in (tmp / f"{k}-0").glob("*.tgz")) for k in ("without", "with")]
        extra = min(with_ring) - min(without)
        print(f"capture --since 1h: {min(without):.1f} s without the ring, {min(with_ring):.1f} s with it "
              f"(runs: {', '.join(f'{x:.1f}' for x in without)} / {', '.join(f'{x:.1f}' for x in with_ring)}); "
              f"bundle {sizes[0] / 1e6:.1f} MB -> {sizes[1] / 1e6:.1f} MB")
        print(f"  the ring adds {extra:.1f} s (target 2 s: ratio {extra / 2:.2f}x)")
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
