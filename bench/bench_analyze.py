#!/usr/bin/env python3
"""Benchmark ``analyze``: a synthetic 1 Hz recording of 8 GPUs and 64 containers (8 per GPU),
written with the real BundleWriter (tests/support/analysis_bundles.py), analysed for 15, 30 and
60 minutes. Each analysis runs in a fresh child process so its peak RSS is its own.

    python3 bench/bench_analyze.py            # 15, 30, 60 minutes
    python3 bench/bench_analyze.py 5 10       # other lengths (minutes)

Targets (issue 7): 60 minutes under 5 s and under 500 MB, growing linearly with the length.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.analysis_bundles import GIB, T0, BundleSpec  # noqa: E402

GPUS = 8
CONTAINERS = 64


def build(minutes: int, out: Path) -> Path:
    seconds = minutes * 60
    b = BundleSpec(host="gpu-bench", duration_s=seconds)
    cids: list[str] = []
    for g in range(GPUS):
        b.gpu(g)
    for i in range(CONTAINERS):
        g = i % GPUS
        cid = b.container(f"job-{i:02d}", env=[f"NVIDIA_VISIBLE_DEVICES={g}"], nano_cpus=2_000_000_000)
        cids.append(cid)
        b.process(10_000 + i, "python", container=cid)
    for s in range(seconds):
        t = T0 + s
        for g in range(GPUS):
            procs = {10_000 + i: ((2 + (i % 3)) * GIB, 10.0 + (s + i) % 5) for i in range(g, CONTAINERS, GPUS)}
            b.gpu_tick(g, t, 90, sum(m for m, _ in procs.values()), procs=procs)
        for i, cid in enumerate(cids):
            b.cgroup_tick(t, f"/system.slice/docker-{cid}.scope", nr_periods=10 * s, nr_throttled=s % 2,
                          throttled_usec=100 * s, memory=(4 + i % 4) * GIB,
                          psi={"cpu": (1.0, 0.5), "memory": (0.0, 0.0), "io": (0.2, 0.1)})
        b.cgroup_tick(t, "/", psi={"cpu": (2.0, None), "memory": (0.0, 0.0), "io": (0.5, 0.2)}, host_psi=True)
    return b.write(out)


# Peak RSS is VmHWM of the child's own address space (ru_maxrss would include the parent's RSS
# inherited across fork+exec).
CHILD = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from forensics.analysis import analyze_bundles
doc = analyze_bundles([sys.argv[1]])
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": hwm / 1024,
                  "findings": len(doc["findings"]), "gpus": len(doc["gpus"]), "containers": len(doc["containers"])}))
"""


# The same for the bundle reader alone (forensics.bundle.reader.open_bundle): how much of the
# peak is reading the bundle into memory, before the analyzer does anything.
READER = """
import json, sys
from forensics.bundle.reader import open_bundle
b = open_bundle(sys.argv[1])
raw = sum(len(v) for v in b.members.values())
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"reader_peak_rss_mb": hwm / 1024, "raw_mb": raw / 2**20}))
"""


def measure(bundle: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for code in (CHILD, READER):
        proc = subprocess.run([sys.executable, "-c", code, str(bundle)], capture_output=True, text=True,
                              cwd=ROOT, check=True)
        out.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def main(argv: list[str]) -> int:
    lengths = [int(a) for a in argv] or [15, 30, 60]
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpuforensics-bench-") as tmp:
        for minutes in lengths:
            out = Path(tmp) / str(minutes)
            out.mkdir()
            t = time.perf_counter()
            bundle = build(minutes, out)
            built = time.perf_counter() - t
            r = measure(bundle)
            r.update(minutes=minutes, bundle_mb=bundle.stat().st_size / 1e6, build_s=built)
            rows.append(r)
            print(f"{minutes:3d} min: analyze {r['wall_s']:.2f} s wall ({r['cpu_s']:.2f} s CPU), peak RSS {r['peak_rss_mb']:.0f} MB "
                  f"(bundle {r['bundle_mb']:.1f} MB compressed, built in {built:.1f} s; "
                  f"{r['findings']} findings, {r['gpus']} GPUs, {r['containers']} containers; "
                  f"reader alone: peak {r['reader_peak_rss_mb']:.0f} MB for {r['raw_mb']:.0f} MiB of members)", flush=True)
    if len(rows) > 1:
        a, z = rows[0], rows[-1]
        ratio_len = z["minutes"] / a["minutes"]
        print(f"growth {a['minutes']}->{z['minutes']} min (x{ratio_len:.0f} length): wall x{z['wall_s'] / a['wall_s']:.2f}, "
              f"CPU x{z['cpu_s'] / a['cpu_s']:.2f}, "
              f"RSS x{z['peak_rss_mb'] / a['peak_rss_mb']:.2f}")
    last = rows[-1]
    time_ok, rss_ok = last["wall_s"] < 5, last["peak_rss_mb"] < 500
    notes = []
    if not time_ok:
        notes.append("wall time over 5 s" + (" (CPU time under 5 s: the machine is busy)" if last["cpu_s"] < 5 else ""))
    if not rss_ok:
        notes.append(f"peak RSS over 500 MB (the bundle reader alone peaks at {last['reader_peak_rss_mb']:.0f} MB)")
    ok = time_ok and rss_ok
    print(f"target ({last['minutes']} min < 5 s and < 500 MB): {'met' if ok else 'NOT met: ' + '; '.join(notes)}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
