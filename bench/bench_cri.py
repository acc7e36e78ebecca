"""Benchmark: the cri collector on a full node, 110 pods x 2 containers.

    python bench/bench_cri.py [--pods 110] [--containers 2] [--repeat 5]

Serves ``--pods`` pod sandboxes with ``--containers`` running containers each from a CRI server
in its own process (tests/support/cri_server.py: responses cloned from what a real containerd
1.6.20 answered, verbose ``info`` with the OCI runtime spec included), then runs the collector
``--repeat`` times into fresh staging directories, redaction on. Prints, per run and as medians:
the collector's wall time, the time it spent waiting on the runtime's answers (summed wall time
of each RPC), and the difference, the collector's own cost (JSON conversion, redaction, writing
members), with its ratio to the target of 1 s (< 1.00 meets it). Also the CPU time this process
used (the server runs in another process), which a loaded machine inflates less than wall time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from forensics.bundle.redact import Redactor  # noqa: E402
from forensics.bundle.sink import EvidenceSink  # noqa: E402
from forensics.collect.context import CaptureOptions, CollectContext  # noqa: E402
from forensics.collectors.cri.client import CriClient  # noqa: E402
from forensics.collectors.cri.collector import CriCollector  # noqa: E402

TARGET_S = 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=110)
    ap.add_argument("--containers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-cri-", dir="/tmp") as tmp:
        sock = Path(tmp) / "cri.sock"
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.support.cri_server", str(sock), str(args.pods),
             str(args.containers)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            if server.stdout.readline().strip() != "ready":
                print("CRI server did not start", file=sys.stderr)
                return 1
            walls, waits, owns, cpus, calls = [], [], [], [], 0
            for i in range(args.repeat):
                root = Path(tmp) / f"run{i}"
                root.mkdir()
                opts = CaptureOptions(timeout_s=60, extra={"cri.endpoint": f"unix://{sock}"})
                ctx = CollectContext(opts, EvidenceSink(root), Redactor(enabled=True),
                                     collector_name="cri")
                t0, c0 = time.perf_counter(), time.process_time()
                with CriClient(f"unix://{sock}", call_timeout_s=5.0, deadline=ctx.deadline) as client:
                    CriCollector()._collect(ctx, client)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                wait = sum(t.duration_s for t in client.timings)
                calls = len(client.timings)
                assert not ctx.partial_reasons, ctx.partial_reasons
                walls.append(wall)
                waits.append(wait)
                owns.append(wall - wait)
                cpus.append(cpu)
                print(f"run {i + 1}: wall {wall:.3f} s, waiting on the runtime {wait:.3f} s "
                      f"({calls} calls), own {wall - wait:.3f} s, CPU {cpu:.3f} s")
        finally:
            server.terminate()
            server.wait(timeout=10)
    own = statistics.median(owns)
    print(f"{args.pods} pods x {args.containers} containers, {calls} CRI calls per run")
    print(f"median: wall {statistics.median(walls):.3f} s, waiting {statistics.median(waits):.3f} s, "
          f"own {own:.3f} s, CPU {statistics.median(cpus):.3f} s")
    print(f"own time / target {TARGET_S:.1f} s = {own / TARGET_S:.2f} (< 1.00 meets the target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
