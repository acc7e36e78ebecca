#!/usr/bin/env python3
"""Benchmark ``gpuforensics capture --only host`` through the real CLI (``python -m forensics``).

Prints the wall time beyond interpreter start-up (baseline: ``python -c pass`` in the same loop),
a breakdown (importing the CLI, capture itself) and peak RSS (from ``wait4``, the capture process
and the collector processes it forked, whichever was largest).

    python3 bench/bench_capture_host.py          # 15 runs of each
    python3 bench/bench_capture_host.py 30       # other run count
    python3 bench/bench_capture_host.py --cold   # keep PYTHONDONTWRITEBYTECODE (sources compiled each run)

Targets (issue 2): under 0.5 s wall beyond interpreter start-up and under 60 MB RSS. Figures,
not a timed test.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

TARGET_WALL_S = 0.5
TARGET_RSS_MB = 60.0


ENV = dict(os.environ)


def run(argv: list[str], cwd: Path) -> tuple[float, float, bytes]:
    """(wall seconds, peak RSS MiB, stdout) of one process; RSS from wait4 (children included)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}")
    return wall, ru.ru_maxrss / 1024, out


def summary(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f}  min {min(xs):.3f}  max {max(xs):.3f}"


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 15
    py = sys.executable
    base_wall, base_rss = [], []
    imp_wall = []
    cap_wall, cap_rss = [], []
    manifests = []
    cold = "--cold" in sys.argv
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as tmp:
        root = Path(tmp)
        if not cold:  # as installed: bytecode cached (kept in the temp dir, not in the repo)
            ENV.pop("PYTHONDONTWRITEBYTECODE", None)
            ENV["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
            (root / "warm").mkdir()
            run([py, "-m", "forensics", "capture", "--only", "host", "--quiet", "-o", str(root / "warm")], root)
        for i in range(n):
            w, r, _ = run([py, "-c", "pass"], root)
            base_wall.append(w)
            base_rss.append(r)
            w, _, _ = run([py, "-c", "import forensics.cli"], root)
            imp_wall.append(w)
            out = root / f"run{i}"  # one directory per run: two captures in one second share a name
            out.mkdir()
            w, r, stdout = run([py, "-m", "forensics", "capture", "--only", "host", "--quiet", "-o", str(out)], root)
            cap_wall.append(w)
            cap_rss.append(r)
            bundle = Path(stdout.decode().strip())
            with tarfile.open(bundle) as tar:
                f = tar.extractfile(f"{bundle.name[:-4]}/manifest.json")
                assert f is not None
                manifests.append(json.load(f))

    beyond = [c - b for c, b in zip(cap_wall, base_wall, strict=True)]
    host_s = [next(c["duration_s"] for c in m["collectors"] if c["name"] == "host") for m in manifests]
    elapsed = [m["capture"]["elapsed_s"] for m in manifests]
    self_rss = [m["capture"]["resource_use"]["max_rss_kib_self"] / 1024 for m in manifests]
    kid_rss = [m["capture"]["resource_use"]["max_rss_kib_children"] / 1024 for m in manifests]

    print(f"gpuforensics capture --only host, {n} runs (python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"{'no bytecode cache: every module compiled at start' if cold else 'bytecode cached, as installed'})")
    print(f"  python -c pass               wall s  {summary(base_wall)}   RSS {statistics.median(base_rss):.1f} MiB")
    print(f"  python -c 'import forensics.cli' s   {summary(imp_wall)}")
    print(f"  capture (whole process)      wall s  {summary(cap_wall)}")
    print(f"  capture beyond interpreter   wall s  {summary(beyond)}")
    print(f"    of which importing the CLI      s  {statistics.median(imp_wall) - statistics.median(base_wall):.3f}")
    print(f"    run_capture (manifest elapsed)  s  {statistics.median(elapsed):.3f}")
    print(f"    host collector (in its child)   s  {statistics.median(host_s):.3f}")
    print(f"  peak RSS (wait4, incl. children) MiB {summary(cap_rss)}")
    print(f"    capture process (manifest)   MiB  {statistics.median(self_rss):.1f}   collector child {statistics.median(kid_rss):.1f}")
    wall, rss = statistics.median(beyond), statistics.median(cap_rss)
    print(f"target wall beyond start-up < {TARGET_WALL_S} s: {wall:.3f} s = {wall / TARGET_WALL_S:.2f}x of target "
          f"-> {'MET' if wall < TARGET_WALL_S else 'MISSED'}")
    print(f"target peak RSS < {TARGET_RSS_MB:.0f} MB: {rss:.1f} MiB = {rss / TARGET_RSS_MB:.2f}x of target "
          f"-> {'MET' if rss < TARGET_RSS_MB else 'MISSED'}")


if __name__ == "__main__":
    main()
