"""``gpuforensics top``'s own cost, refreshing a 160x48 terminal (tmux) every 2 s at 8 simulated GPUs x
64 processes each (``--gpus``, ``--processes``), beside nvitop's cost on the same simulated library
when nvitop is installed (``--nvitop PATH``; it loads libnvidia-ml.so.1 through LD_LIBRARY_PATH as
pynvml does, so the simulator stands in for the driver for both).

Measured from /proc/<pid>/stat: the CPU time of each program's whole process tree (top's sampler
children included) over ``--seconds`` after ``--warmup``, as a share of one core:

- ``top (own samplers)``: no recorder on the node, top samples with the recorder's code at nice 10;
- ``top (recorder ring)``: a recorder runs (1 s interval; its own cost is the recorder's bench's),
  top follows its ring and calls no NVML;
- ``nvitop``: ``nvitop --interval 2`` (its default), the baseline run in the same script.

Of the GPU processes, ``--real`` are real sleeping processes (their /proc is read, attributed);
the rest are PIDs with no process behind them, as NVML lists a process in another PID namespace.

    python bench/bench_top.py --seconds 30 --nvitop /tmp/nvitop-venv/bin/nvitop

Target (issue 33): under 2 % of one core at 8 GPUs x 64 processes.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import nvmlsim  # noqa: E402
from tests.support.record_support import start_recorder, wait_for_writer  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")
BUDGET_PCT = 2.0


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds of ``root`` and every descendant alive now, plus what their reaped children
    used (cutime/cstime), by process name (top's sampler children are ``gfrec-<source>``)."""
    kids = _children()
    todo: list[int] = [root]
    out: dict[str, float] = {}
    while todo:
        pid = todo.pop()
        try:
            head, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
            f = rest.split()
            name = head.split("(", 1)[1]
            out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / TCK
        except (OSError, IndexError):
            continue
        todo.extend(kids.get(pid, []))
    return out


class Pane:
    def __init__(self, tmp: Path, name: str, env: dict[str, str], argv: list[str]) -> None:
        self.socket = tmp / f"{name}.sock"
        script = tmp / f"{name}.sh"
        script.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()) + "exec " + shlex.join(argv) + "\n")
        self.tmux("new-session", "-d", "-s", name, "-x", "160", "-y", "48", f"sh {shlex.quote(str(script))}")
        self.tmux("set-option", "-t", name, "window-size", "manual")
        self.tmux("resize-window", "-t", name, "-x", "160", "-y", "48")
        self.name = name
        self.pid = int(self.tmux("display", "-p", "-t", name, "#{pane_pid}").strip())

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True, timeout=30)


def measure(pane: Pane, warmup: float, seconds: float, ready: str) -> tuple[float, str]:
    deadline = time.monotonic() + 120
    while ready not in pane.screen() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(warmup)
    c0, t0 = tree_cpu(pane.pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = tree_cpu(pane.pid), time.monotonic()
    parts = {n: 100.0 * (c1.get(n, 0.0) - c0.get(n, 0.0)) / (t1 - t0) for n in c1}
    print(f"  {pane.name}: " + ", ".join(f"{n} {p:.2f} %" for n, p in sorted(parts.items(), key=lambda kv: -kv[1])))
    return sum(parts.values()), pane.screen()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--processes", type=int, default=64, help="GPU processes per GPU (default 64)")
    ap.add_argument("--real", type=int, default=64, help="of them, real sleeping processes (default 64)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--nvitop", default=shutil.which("nvitop"), help="nvitop to compare with (default: on PATH)")
    ap.add_argument("--show", action="store_true", help="print each program's screen at the end of its run")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        print("bench_top: tmux is needed (scripts/test installs it)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="gfbench-top-"))
    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.real)]
    panes: list[Pane] = []
    rec = None
    results: list[tuple[str, float]] = []
    try:
        lib = nvmlsim.build_library(tmp / "lib")
        sc = nvmlsim.Scenario()
        for _ in range(args.gpus):
            sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 50), (30, 90)])
        for k in range(args.gpus * args.processes):
            pid = sleepers[k].pid if k < len(sleepers) else 100000 + k
            sc.add_process(pid=pid, gpu=k // args.processes, used_memory_bytes=1 << 28, sm_util=10, mem_util=5)
        env = nvmlsim.subprocess_env(sc.write(tmp / "sc.tsv"), lib)
        env.update({"PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "LANG": "C.UTF-8"})
        top = [sys.executable, "-m", "forensics", "top", "--interval", str(args.interval), "--nvml-library", str(lib)]
        n = args.gpus * args.processes
        print(f"bench_top: {args.gpus} GPUs x {args.processes} processes ({args.real} real), a 160x48 tmux pane, "
              f"{args.seconds:.0f} s after {args.warmup:.0f} s warm-up, refresh every {args.interval:g} s")

        pane = Pane(tmp, "own", env, [*top, "--ring", str(tmp / "no-ring")])
        panes.append(pane)
        pct, screen = measure(pane, args.warmup, args.seconds, f"{n} GPU processes")
        results.append(("top (own samplers)", pct))
        if args.show:
            print(screen)
        pane.close()

        ring = tmp / "ring"
        rec = start_recorder(ring, env=env, interval_s=1.0, nvml_library=str(lib),
                             sources=["nvml", "procfs", "cgroups", "kernel"], stderr=subprocess.DEVNULL)
        wait_for_writer(ring, rec)
        pane = Pane(tmp, "ring", env, [*top, "--ring", str(ring)])
        panes.append(pane)
        pct, screen = measure(pane, args.warmup, args.seconds, f"{n} GPU processes")
        results.append(("top (recorder ring)", pct))
        if args.show:
            print(screen)
        pane.close()
        rec.terminate()
        rec.communicate(timeout=30)
        rec = None

        if args.nvitop:
            pane = Pane(tmp, "nvitop", env, [args.nvitop, "--interval", str(args.interval)])
            panes.append(pane)
            pct, screen = measure(pane, args.warmup, args.seconds, "NVITOP")
            ok = "550.54.15" in screen  # the simulated driver's version: nvitop reads the simulator
            results.append(("nvitop" if ok else "nvitop (did not show the simulated GPUs)", pct))
            if args.show or not ok:
                print(screen)
            pane.close()
        else:
            print("bench_top: nvitop not found (pip install nvitop, then --nvitop PATH): no baseline")
        base = next((p for name, p in results if name == "nvitop"), None)
        for name, pct in results:
            ratio = f"  {pct / base:.2f}x nvitop" if base else ""
            verdict = "" if name.startswith("nvitop") else ("  within" if pct < BUDGET_PCT else "  OVER") + \
                f" the {BUDGET_PCT:g} % budget"
            print(f"  {name:<24} {pct:6.2f} % of one core{ratio}{verdict}")
        return 0
    finally:
        for p in panes:
            p.close()
        if rec is not None:
            rec.kill()
            rec.communicate(timeout=10)
        for s in sleepers:
            s.kill()
            s.wait()
        if not os.environ.get("GF_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
