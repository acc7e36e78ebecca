"""Killing a real ``gpuforensics capture`` and looking at what it left: processes and files.

Shared by tests/unit/capture/test_capture_orphans.py and bench/bench_capture_kill.py. A capture
runs as ``python -m forensics capture`` with the simulated NVML (tests/support/nvmlsim) so that
its nvml collector samples for real. Processes are tracked by PID *and* start time (field 22 of
``/proc/<pid>/stat``), so a PID reused after the capture's child died is not taken for it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.nvmlsim import Scenario, subprocess_env

ROOT = Path(__file__).resolve().parents[2]
BUNDLE_NAME_RE = re.compile(r"^gpuforensics-.+-\d{8}T\d{6}Z\.tgz$")


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(ppid, state, start ticks) of ``pid``, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0].decode(), fields[19].decode()


def descendants(root: int) -> dict[int, str]:
    """Every live descendant of ``root`` (any depth, whatever its process group): pid -> start ticks."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is None or st[1] in ("Z", "X"):
            continue
        children.setdefault(st[0], []).append(int(name))
        starts[int(name)] = st[2]
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out[child] = starts[child]
                todo.append(child)
    return out


def still_alive(procs: dict[int, str]) -> list[int]:
    """The PIDs of ``procs`` that still run as the same process (zombies count as gone)."""
    alive = []
    for pid, start in procs.items():
        st = _stat(pid)
        if st is not None and st[2] == start and st[1] not in ("Z", "X"):
            alive.append(pid)
    return alive


def kill_all(procs: dict[int, str]) -> None:
    """SIGKILL what is left of ``procs`` (cleanup after a failed assertion), by PID."""
    for pid in still_alive(procs):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def scenario_file(tmp: Path, gpus: int = 2) -> Path:
    """A small machine for the simulated NVML: ``gpus`` GPUs, one process (this one) on GPU 0."""
    sc = Scenario()
    for g in range(gpus):
        sc.add_gpu(gpu_util=[(0, 10 + g), (3, 90)])
    sc.add_process(pid=os.getpid(), gpu=0, used_memory_bytes=4 << 30, sm_util=[(0, 20), (3, 80)])
    return sc.write(tmp / "kill-scenario.tsv")


def start_capture(out: Path, lib: Path, scenario: Path, *args: str) -> subprocess.Popen[str]:
    """``python -m forensics capture -o OUT --nvml-library LIB ARGS...`` (stdout/stderr piped)."""
    env = subprocess_env(scenario, lib)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen(
        [sys.executable, "-m", "forensics", "capture", "-o", str(out), "--nvml-library", str(lib),
         "--quiet", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@dataclass
class KillOutcome:
    """What a SIGKILLed capture left: processes ``settle_s`` later, files under a bundle name,
    temporary files (names starting with ``.``)."""

    seen_processes: int
    alive_after: list[int]
    bundle_names: list[str]
    temporaries: list[str]


def kill_and_look(proc: subprocess.Popen[str], out: Path, settle_s: float = 2.0) -> KillOutcome:
    """SIGKILL ``proc`` (only it: its children must go by themselves), wait ``settle_s``, look."""
    kids = descendants(proc.pid)
    proc.kill()
    proc.wait(timeout=30)
    time.sleep(settle_s)
    alive = still_alive(kids)
    names = sorted(p.name for p in out.iterdir())
    outcome = KillOutcome(
        seen_processes=len(kids),
        alive_after=alive,
        bundle_names=[n for n in names if BUNDLE_NAME_RE.match(n)],
        temporaries=[n for n in names if n.startswith(".")],
    )
    kill_all(kids)
    proc.communicate(timeout=30)
    return outcome
