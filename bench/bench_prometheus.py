#!/usr/bin/env python3
"""Benchmark Prometheus history: two hours of 8 GPUs and 64 containers at a 15 s step, backfilled
into a real Prometheus on loopback (tests/support/prometheus_server.py), imported with
``gpuforensics capture --only prometheus`` and analysed with ``gpuforensics analyze -f json``.
Each command runs in its own process, timed from outside (interpreter start included).

    python3 bench/bench_prometheus.py            # 120 minutes, 8 GPUs, 64 containers
    python3 bench/bench_prometheus.py 240        # another window (minutes)

Targets (issue 16): import under 5 s, analysis under 3 s; printed as measured / target (<= 1 passes).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.prometheus_server import scenario_bench, start_prometheus, stop_prometheus  # noqa: E402

IMPORT_TARGET_S = 5.0
ANALYZE_TARGET_S = 3.0


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> int:
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    t0 = time.monotonic()
    sc = scenario_bench(minutes=minutes)
    server = start_prometheus(sc)
    setup_s = time.monotonic() - t0
    try:
        with tempfile.TemporaryDirectory() as out:
            iso = lambda t: datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
            cmd = [sys.executable, "-m", "forensics", "capture", "--only", "prometheus", "--prometheus", server.url,
                   "--node", sc.node, "--since", iso(sc.start), "--until", iso(sc.end), "-o", out, "--quiet",
                   "--set", "prometheus.step=15s"]
            t1, c1 = time.monotonic(), _child_cpu()
            cap = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
            import_s, import_cpu = time.monotonic() - t1, _child_cpu() - c1
            bundle = Path(cap.stdout.strip())
            t2, c2 = time.monotonic(), _child_cpu()
            ana = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(bundle), "-f", "json"],
                                 capture_output=True, text=True, check=True, cwd=ROOT)
            analyze_s, analyze_cpu = time.monotonic() - t2, _child_cpu() - c2
            doc = json.loads(ana.stdout)
            size = bundle.stat().st_size
    finally:
        stop_prometheus(server)
    points = sum(len(s.points) for f in sc.families for s in f.series)
    print(f"window {minutes:g} min, {len(sc.gpus)} GPUs, {len(sc.pods)} containers, {points} points backfilled "
          f"(setup {setup_s:.1f} s), bundle {size / 1e6:.1f} MB, {len(doc['findings'])} findings")
    # wall time is what the target is about; CPU time (this tool's, not Prometheus') shows what a busy machine hides
    print(f"import   {import_s:6.2f} s wall  ratio {import_s / IMPORT_TARGET_S:.2f}  "
          f"({import_cpu:.2f} s CPU, ratio {import_cpu / IMPORT_TARGET_S:.2f}; target {IMPORT_TARGET_S:g} s)")
    print(f"analyze  {analyze_s:6.2f} s wall  ratio {analyze_s / ANALYZE_TARGET_S:.2f}  "
          f"({analyze_cpu:.2f} s CPU, ratio {analyze_cpu / ANALYZE_TARGET_S:.2f}; target {ANALYZE_TARGET_S:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
