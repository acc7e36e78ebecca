"""``analyze`` of a bundle carrying 1 h, 6 h and 24 h of the flight recorder's history: wall, CPU and
peak RSS per length, this tree (a long history analysed in consecutive slices,
forensics.analysis.slices) against a base version (``--base``: a worktree of main) on the same
bundles, run by run interleaved (base, this, base, this).

The history is made as bench_ring_fold.py makes its hour: a recorded ring (``--seed``: a kept run's
``seed/``, 8 simulated GPUs x 64 processes, host cgroups, 1 Hz) written again, shifted back in time,
through the recorder's own writer until the ring spans each length; then ``capture --since <length>
--only host,ring`` packs it (the capture's other collectors are not what is measured). Time per
hour of history should be about constant and peak RSS flat; the base analyses a long history only
up to the reader's cap on rebuilt bytes (its limitation says where it stopped).

    .venv/bin/python bench/bench_ring_day.py --seed /tmp/gffold-XXXX/seed --hours 1,6,24 \\
        --base /work/main --keep /tmp/ringday
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forensics.record.sources import DELTA_MEMBERS  # noqa: E402
from forensics.ring import RingReader, RingWriter  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from bench_ring_fold import shifted  # noqa: E402


def build_ring(seed: Path, ring: Path, span_s: float) -> float:
    """``seed``'s records written again into a new ring at ``ring`` until it spans ``span_s``
    seconds, its last record 5 s ago; the seconds the writing took."""
    records = list(RingReader(seed).records())
    t_lo, t_hi = min(r.t for r in records), max(r.t for r in records)
    period = max(t_hi - t_lo, 1.0) + 1.0
    copies = int(span_s // period) + 1
    now = time.time()
    started = time.monotonic()
    w = RingWriter(ring, max_bytes=4 << 30, retention_s=span_s + 7200, delta_members=DELTA_MEMBERS).open()
    for k in range(copies):
        by = now - t_hi - (copies - 1 - k) * period - 5.0
        for r in records:
            if r.op == "write" and k:
                continue  # the state once (every new segment copies it)
            data = shifted(r.data, by) if r.op == "append" else r.data
            w.append([(r.t + by, r.mono + k * period, r.member, r.op, data)])
    w.close()
    return time.monotonic() - started


def capture(ring: Path, out: Path, hours: float) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "forensics", "capture", "--since", f"{hours:g}h", "-o", str(out), "--quiet",
           "--ring", str(ring), "--only", "host,ring"]
    r = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True,
                       text=True, timeout=1200)
    if r.returncode != 0:
        raise SystemExit(f"capture failed ({r.returncode}): {r.stderr[-2000:]}")
    return next(out.glob("*.tgz"))


def analyze(python: str, code: Path, bundle: Path) -> tuple[float, float, float, str]:
    """``analyze -f json`` of ``bundle`` by the version at ``code``: wall s, CPU s, peak RSS (MB) of
    that one process (``wait4``'s own figures), and what came of it."""
    out = tempfile.TemporaryFile()
    t0 = time.monotonic()
    proc = subprocess.Popen([python, "-m", "forensics", "analyze", "-f", "json", "--max-bundle-mb", "2048",
                             str(bundle)], env={**os.environ, "PYTHONPATH": str(code)}, cwd=code,
                            stdout=out, stderr=subprocess.DEVNULL)
    _, status, use = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.monotonic() - t0
    cpu = use.ru_utime + use.ru_stime
    rss_mb = use.ru_maxrss / 1024
    if proc.returncode not in (0, 1):
        return took, cpu, rss_mb, f"exit {proc.returncode}"
    out.seek(0)
    doc = json.loads(out.read())
    cut = [x for x in doc["limitations"] if "pass the reader's cap" in x]
    sliced = [x for x in doc["limitations"] if "consecutive slices" in x]
    said = f"{len(doc['findings'])} findings"
    if cut:
        said += f"; CAPPED: {cut[0][-150:]}"
    if sliced:
        said += f"; {sliced[0][:90]}..."
    return took, cpu, rss_mb, said


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=Path, required=True, help="a recorded ring (a kept bench_ring_fold run's seed/)")
    ap.add_argument("--hours", default="1,6,24", help="the lengths of history, comma-separated")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--base", type=Path, help="a worktree of the version to compare with (its .venv's python)")
    ap.add_argument("--keep", type=Path, help="a folder to build the bundles in and keep (reused when there)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="gfday-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        bundles: dict[float, Path] = {}
        for h in (float(x) for x in args.hours.split(",")):
            at = work / f"{h:g}h"
            found = list((at / "bundle").glob("*.tgz")) if at.exists() else []
            if found:
                bundles[h] = found[0]
                continue
            shutil.rmtree(at, ignore_errors=True)
            wrote = build_ring(args.seed, at / "ring", h * 3600)
            bundles[h] = capture(at / "ring", at / "bundle", h)
            shutil.rmtree(at / "ring")
            print(f"{h:g} h: ring written in {wrote:.0f} s; bundle {bundles[h].stat().st_size / 1e6:.1f} MB",
                  flush=True)
        versions = [("base", str(args.base / ".venv/bin/python"), args.base)] if args.base else []
        versions.append(("this", sys.executable, ROOT))
        for h, bundle in bundles.items():
            for i in range(args.runs):
                for label, python, code in versions:
                    took, cpu, rss, said = analyze(python, code, bundle)
                    print(f"[{label}] {h:g} h (run {i + 1}): {took:.1f} s wall ({took / h:.1f} s per hour), "
                          f"{cpu:.1f} s CPU, peak RSS {rss:.0f} MB: {said}", flush=True)
        print(f"load average {os.getloadavg()[0]:.1f} (2 cores shared: compare the versions, run interleaved)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
