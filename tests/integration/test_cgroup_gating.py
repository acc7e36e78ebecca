"""The recorder's activity gating of cgroup sampling, with real cgroups (v1 cpu, cpuacct, memory,
pids, Docker-shaped ``docker-<id>.scope`` paths made here and removed afterwards) and two real
recorders side by side: one gated (``cgroups.idle_full_s=3``), one reading every file every tick.
A sleeping container's lines come at most every 3 s; a container that wakes up, runs under a CPU
quota and sleeps again gets a line the very tick its CPU counter moved; a removed cgroup is read
at once; and both rings, folded by capture and analysed, find the same CPU throttling at the
same times."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from forensics.analysis import analyze_bundles
from forensics.specs import cgroups as cgroups_spec
from tests.support.env import is_root, need
from tests.support.polling import wait_for
from tests.support.record_support import members, record_lines, start_recorder, wait_for_writer
from tests.support.v1_cgroups import HIERARCHIES, V1, enter_command, make_dirs, remove_dirs

pytestmark = [pytest.mark.root, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
INTERVAL_S = 0.5
IDLE_FULL_S = 3.0
BUSY_S = 4.0
# wakes on a line from stdin, spins for BUSY_S under its quota (printing when it began and
# ended), then blocks on stdin again: no CPU at all while it waits
_WAKER = (f"import sys, time\nsys.stdin.readline()\nt0 = time.time()\nwhile time.time() < t0 + {BUSY_S}: pass\n"
          "print(t0, time.time(), flush=True)\nsys.stdin.readline()\n")


@dataclass
class Containers:
    tag: str
    idle: str  # cgroup path of the sleeping container
    waker: str  # cgroup path of the one woken by the test
    sleeper: subprocess.Popen[bytes]
    proc: subprocess.Popen[str]


@pytest.fixture
def containers() -> Iterator[Containers]:
    need(is_root(), "root (creates cgroups)")
    need(all((V1 / h / "cgroup.procs").exists() for h in HIERARCHIES) and (V1 / "cpu/cpu.cfs_quota_us").exists(),
         "cgroup v1 cpu, cpuacct, memory and pids hierarchies at /sys/fs/cgroup")
    tag = f"gpuforensics-gate-{os.getpid()}-{secrets.token_hex(3)}"
    idle, waker = (f"/{tag}/docker-{secrets.token_hex(32)}.scope" for _ in range(2))
    procs: list[subprocess.Popen[Any]] = []
    try:
        for path in (idle, waker):
            make_dirs(path)
        (V1 / "cpu" / waker.lstrip("/") / "cpu.cfs_period_us").write_text("100000")
        (V1 / "cpu" / waker.lstrip("/") / "cpu.cfs_quota_us").write_text("10000")  # 0.1 CPU
        procs.append(subprocess.Popen(["sh", "-c", f"{enter_command(idle)}; exec sleep 600"]))
        procs.append(subprocess.Popen(["sh", "-c", f'{enter_command(waker)}; exec "{sys.executable}" -c "{_WAKER}"'],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        yield Containers(tag, idle, waker, procs[0], procs[1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        for path in (idle, waker):
            remove_dirs(path)
        for h in HIERARCHIES:
            try:
                (V1 / h / tag).rmdir()
            except OSError:
                pass
        assert not any((V1 / h / tag).exists() for h in HIERARCHIES)


def _lines(ring: Path, path: str) -> list[dict[str, Any]]:
    return [line for r in members(ring, cgroups_spec.SAMPLES) for line in record_lines(r) if line["cgroup"] == path]


def _throttling(ring: Path, out: Path, container_id: str) -> dict[str, Any]:
    """The cpu-throttling finding of ``container_id`` in the analysis of a capture of the ring."""
    out.mkdir()
    cap = subprocess.run([sys.executable, "-m", "forensics", "capture", "--since", "10m", "--only", "ring",
                          "--ring", str(ring), "-o", str(out), "--quiet"],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert cap.returncode == 0, cap.stderr[-3000:]
    (bundle,) = out.glob("*.tgz")
    doc = analyze_bundles([bundle])
    found = [f for f in doc["findings"] if f["kind"] == "cpu-throttling" and container_id in json.dumps(f["subjects"])]
    assert len(found) == 1, [(f["kind"], f["summary"]) for f in doc["findings"]]
    return found[0]


def _unix(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_quiet_cgroups_are_sparse_and_analysis_finds_the_same_throttling(containers: Containers,
                                                                         tmp_path: Path) -> None:
    gated, full = tmp_path / "gated", tmp_path / "full"
    recorders = [start_recorder(ring, interval_s=INTERVAL_S, sources=["cgroups"], extra={"cgroups.idle_full_s": bound})
                 for ring, bound in ((gated, str(IDLE_FULL_S)), (full, str(INTERVAL_S)))]
    try:
        for ring, rec in zip((gated, full), recorders, strict=True):
            wait_for_writer(ring, rec)
        # both containers quiet for a while: the gated ring holds their lines only every few seconds
        wait_for(lambda: sum("unchanged_until" in line for line in _lines(gated, containers.waker)) >= 2,
                 timeout=60.0, interval=0.5)
        # woken a second after one of its quiet lines: the tick before it wakes is a quiet one, and
        # its last line is at least a second older than the throttling
        seen = len(_lines(gated, containers.waker))
        wait_for(lambda: len(_lines(gated, containers.waker)) > seen, timeout=30.0, interval=0.1)
        time.sleep(1.0)
        assert containers.proc.stdin is not None and containers.proc.stdout is not None
        containers.proc.stdin.write("go\n")
        containers.proc.stdin.flush()
        busy_from, busy_to = map(float, containers.proc.stdout.readline().split())
        time.sleep(2.0)
        containers.sleeper.kill()  # the idle container goes away
        containers.sleeper.wait(timeout=10)
        remove_dirs(containers.idle)
        removed = time.time()
        wait_for(lambda: any("errors" in line for line in _lines(gated, containers.idle)), timeout=30.0)
    finally:
        for rec in recorders:
            rec.send_signal(signal.SIGTERM)
            _out, err = rec.communicate(timeout=30)
            assert rec.returncode == 0, err[-3000:]

    idle = [line for line in _lines(gated, containers.idle) if line["t"] < removed]
    idle_full = [line for line in _lines(full, containers.idle) if line["t"] < removed]
    assert len(idle) * 3 <= len(idle_full), (len(idle), len(idle_full))
    # at most idle_full_s apart, counted in the ticks the recorder made (the host root has a line
    # every tick; a loaded machine may miss one)
    ticks = [x["t"] for x in _lines(gated, "/")]
    gaps = [sum(a["t"] < t <= b["t"] for t in ticks) for a, b in zip(idle, idle[1:], strict=False)]
    assert gaps and max(gaps) <= IDLE_FULL_S / INTERVAL_S, ([(x["tick"], x["t"]) for x in idle], ticks[:30])
    assert all("unchanged_until" in line for line in idle[1:]), [(x["tick"], x["t"], x.get("unchanged_until")) for x in idle]
    gone = next(line for line in _lines(gated, containers.idle) if "errors" in line)
    assert gone["t"] - removed <= 2 * INTERVAL_S + 1.0  # not held back for the next full read
    assert any(e.startswith(("removed", "absent")) for e in gone["errors"].values()), gone["errors"]

    # the waker: quiet lines, then one the very tick its CPU counter moved, then one per tick
    waker = _lines(gated, containers.waker)
    woke = next(line for line in waker if line["t"] > busy_from)
    before = waker[waker.index(woke) - 1]
    assert woke["t"] - busy_from <= INTERVAL_S + 0.5, (woke["t"], busy_from)
    assert woke["values"]["cpu"]["usage_ns"] > before["values"]["cpu"]["usage_ns"]
    assert before["t"] + 1.0 <= busy_from, (before["t"], busy_from)
    assert before["t"] < woke["unchanged_until"] <= busy_from  # quiet until the tick before
    during = [line["t"] for line in waker if busy_from <= line["t"] <= busy_to]
    assert len(during) >= BUSY_S / INTERVAL_S / 2, during  # every tick (a loaded machine misses some)
    assert len(waker) < len(_lines(full, containers.waker))

    # the same throttling, the same times, from the sparse ring and from the full one
    cid = containers.waker.rsplit("docker-", 1)[1].split(".", 1)[0]
    a, b = _throttling(gated, tmp_path / "a", cid), _throttling(full, tmp_path / "b", cid)
    for f in (a, b):
        start, end = _unix(f["start"]), _unix(f["end"])
        # from the tick before the first that saw it run (the gated ring's line before that is a
        # second or more older: its "unchanged_until" places the start)
        assert busy_from - INTERVAL_S - 0.25 <= start <= busy_from + 0.25, (f["start"], busy_from)
        assert busy_to - 0.5 <= end <= busy_to + INTERVAL_S + 0.5, (f["end"], busy_to)
    assert abs(_unix(a["start"]) - _unix(b["start"])) <= INTERVAL_S + 0.25
    assert abs(_unix(a["end"]) - _unix(b["end"])) <= INTERVAL_S + 0.25
    ratio = {k: dict(f["metrics"])["throttled_ratio"] if isinstance(f["metrics"], list) else f["metrics"]["throttled_ratio"]
             for k, f in (("a", a), ("b", b))}
    assert ratio["a"] >= 0.5 and ratio["b"] >= 0.5, ratio
