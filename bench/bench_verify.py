#!/usr/bin/env python3
"""Benchmark ``gpuforensics verify`` on a 50 MB bundle against ``sha256sum`` over the same bytes.

The bundle is written by the real BundleWriter. Two shapes, both 50 MiB on disk:
- ``random``: incompressible members (the worst case for bytes hashed per byte on disk);
- ``text``: compressible JSON lines like sampled evidence (about 6x more content to inflate and
  hash than bytes on disk; the file is grown to 50 MiB).
For each: verify in-process (``verify_bundle``), the CLI (``python -m forensics verify``, minus
interpreter start-up), ``sha256sum`` of the file, ``gzip -dc | sha256sum``, and the in-process floor
of any verifier that must inflate the members to hash them (``sha256(gzip.decompress(file))``).

    python3 bench/bench_verify.py        # 5 runs each
    python3 bench/bench_verify.py 9

Target (issue 2): within 2x of sha256sum. Figures, not a timed test.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from forensics.bundle.reader import open_bundle  # noqa: E402
from forensics.bundle.verify import check_integrity, verify_bundle  # noqa: E402
from forensics.bundle.writer import BundleWriter  # noqa: E402

TARGET_MIB = 50
WHEN = datetime(2026, 11, 29, 14, 5, tzinfo=UTC)


def build(out: Path, shape: str, n: int) -> Path:
    w = BundleWriter(out, f"bench-{shape}", when=WHEN + timedelta(seconds=n))
    if shape == "random":
        for i in range(50):
            w.sink.write_bytes(f"nvml/blob{i:02d}.bin", os.urandom(1 << 20))
    else:
        i = 0
        while True:  # sampled JSON lines until the compressed file reaches the target
            lines = [json.dumps({"t": 1764424800 + k * 0.5, "gpu": k % 8, "pid": 40000 + k % 997,
                                 "usedGpuMemory": (k * 7919) % (80 << 30), "sm": k % 101,
                                 "id": hashlib.sha1(str(k + i).encode()).hexdigest()})
                     for k in range(i * 20000, (i + 1) * 20000)]
            w.sink.write_text(f"nvml/samples{i:03d}.jsonl", "\n".join(lines) + "\n")
            i += 1
            if w.sink.bytes_written >= 6 * (TARGET_MIB << 20) * 0.55:
                break
    return w.finish({"collectors": []})


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def sh(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    py = sys.executable
    print(f"verify vs sha256sum, {runs} runs each (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        for n, shape in enumerate(("random", "text")):
            t0 = time.perf_counter()
            path = build(Path(tmp), shape, n)
            built = time.perf_counter() - t0
            size = path.stat().st_size
            opened = open_bundle(path)
            content = sum(opened.size(m) for m in opened.members)
            sh(["sha256sum", str(path)])  # warm the page cache
            sha = timed(lambda p=path: sh(["sha256sum", str(p)]), runs)
            # what any verifier of a gzip bundle must do at least: inflate everything and hash it
            blob = path.read_bytes()
            floor = timed(lambda blob=blob: hashlib.sha256(gzip.decompress(blob)).digest(), runs)
            zsha = timed(lambda p=path: subprocess.run(f"gzip -dc '{p}' | sha256sum", shell=True, check=True,
                                                       stdout=subprocess.DEVNULL), runs)
            start = timed(lambda: sh([py, "-c", "pass"]), runs)
            lib = timed(lambda p=path: verify_bundle(p), runs)
            cli = timed(lambda p=path: sh([py, "-m", "forensics", "verify", str(p)]), runs)
            read = timed(lambda p=path: open_bundle(p), runs)
            b = open_bundle(path)
            integ = timed(lambda b=b: check_integrity(b), runs)
            s, lv, cv = statistics.median(sha), statistics.median(lib), statistics.median(cli) - statistics.median(start)
            print(f"\n[{shape}] {size / 2**20:.1f} MiB on disk, {content / 2**20:.1f} MiB of members "
                  f"(built in {built:.1f} s)")
            print(f"  sha256sum                       {s:.3f} s  ({size / 2**20 / s:.0f} MiB/s)")
            z, f = statistics.median(zsha), statistics.median(floor)
            print(f"  gzip -dc | sha256sum (shell)    {z:.3f} s  = {z / s:.2f}x sha256sum")
            print(f"  sha256(gzip.decompress(file))   {f:.3f} s  = {f / s:.2f}x sha256sum (inflate + hash, in one buffer)")
            print(f"  verify_bundle (library)         {lv:.3f} s  = {lv / s:.2f}x sha256sum, {lv / f:.2f}x inflate+hash")
            print(f"    open_bundle (inflate, read)   {statistics.median(read):.3f} s")
            print(f"    check_integrity (digests)      {statistics.median(integ):.3f} s")
            print(f"  gpuforensics verify (CLI)       {cv:.3f} s beyond interpreter start-up "
                  f"({statistics.median(start):.3f} s) = {cv / s:.2f}x sha256sum")
            print(f"  target within 2x of sha256sum: library {lv / s:.2f}x, CLI {cv / s:.2f}x -> "
                  f"{'MET' if max(lv, cv) <= 2 * s else 'MISSED'}")


if __name__ == "__main__":
    main()
