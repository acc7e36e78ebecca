#!/usr/bin/env python3
"""Benchmark ``gpuforensics sanitize`` against ``gpuforensics verify`` of the same bundle.

Two bundles: the largest sample bundle (``sample_bundles/``, by size on disk), and that bundle
grown to about 40 MiB of content (its NVML, cgroup and kernel members repeated, as a one-hour
recording would hold them; the names and addresses in them repeated too), written by the real
BundleWriter. For each: ``sanitize_bundles`` (read, integrity check, learn the names, rewrite
every member, write the copy) and ``verify_bundle`` (read and hash every member), in process,
median of N runs; the ratio sanitize / verify, and sanitize's throughput in MiB of content per s.

    python3 bench/bench_sanitize.py        # 3 runs each
    python3 bench/bench_sanitize.py 5

Figures, not a timed test. A copy must be made rarely (once per bundle handed outside), so the
target is a bound on the ratio, not parity: sanitize reads the bundle twice as often as verify
(once to learn, once to rewrite, unless held), runs one regular expression over every byte, and
writes and compresses a new bundle.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from forensics.bundle.reader import open_bundle  # noqa: E402
from forensics.bundle.sanitize import sanitize_bundles  # noqa: E402
from forensics.bundle.verify import verify_bundle  # noqa: E402
from forensics.bundle.writer import BundleWriter  # noqa: E402

GROWN_MIB = 40
_GROW = ("nvml/samples.jsonl", "cgroup/samples.jsonl", "kernel/kmsg.txt", "docker/events.jsonl")


def grown(sample: Path, out: Path) -> Path:
    b = open_bundle(sample)
    size = sum(len(d) for d in b.members.values())
    repeat = max(1, (GROWN_MIB << 20) // max(1, sum(len(b.members.get(m, b"")) for m in _GROW)))
    host = str(b.manifest["host"]["hostname"])
    w = BundleWriter(out, host)
    for name, data in sorted(b.members.items()):
        w.sink.write_bytes(name, bytes(data) * repeat if name in _GROW else bytes(data))
    fields = {k: v for k, v in b.manifest.items() if k not in ("members", "format", "format_version")}
    path = w.finish(fields)
    print(f"grown bundle: {size / 2**20:.1f} MiB of content x{repeat} for {', '.join(_GROW)}")
    return path


def timed(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(bundle: Path, runs: int, work: Path) -> None:
    content = sum(len(d) for d in open_bundle(bundle).members.values())
    n = [0]

    def sanitize() -> None:
        n[0] += 1
        out = work / f"out{n[0]}"
        sanitize_bundles([bundle], out, work / f"map{n[0]}.json")
        shutil.rmtree(out)

    t_verify = timed(lambda: verify_bundle(bundle), runs)
    t_sanitize = timed(sanitize, runs)
    print(f"{bundle.name}: {bundle.stat().st_size / 2**20:.2f} MiB on disk, {content / 2**20:.2f} MiB of content")
    print(f"  verify   {t_verify * 1000:9.1f} ms")
    print(f"  sanitize {t_sanitize * 1000:9.1f} ms   ratio sanitize/verify {t_sanitize / t_verify:5.1f}x   "
          f"{content / 2**20 / t_sanitize:6.1f} MiB/s of content")


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    samples = sorted((ROOT / "sample_bundles").glob("*.tgz"), key=lambda p: p.stat().st_size)
    largest = samples[-1]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bench(largest, runs, work)
        (work / "grown").mkdir()
        bench(grown(largest, work / "grown"), runs, work)


if __name__ == "__main__":
    main()
