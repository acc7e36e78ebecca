"""Benchmark: the recorder's NVML child (gfrec-nvml), tick by tick, in this process, at 1 Hz.

Drives exactly what ``gpuforensics record`` runs in its nvml sampler child, against the simulated
``libnvidia-ml.so.1`` (tests/support/nvmlsim) with bench_recorder's machine: 8 GPUs x 64 compute
processes (SM 10 %, memory 5 %, 256 MiB each), GPU utilisation 50 % then 90 % from 30 s on.
The child's own loop (:func:`forensics.record.child.child_loop`) runs in a thread of this process
with the driver (``make_driver("nvml")``) and the sink the recorder gives it (a ``RecordSink``;
``--live``: the one that summarises each line for the live state, as with ``--trigger`` or
``--metrics-addr``); this process's main thread plays the parent: one tick command a second on the
command pipe, then it reads the answer's whole frame. A tick's CPU is the process's CPU
(``time.process_time``: every thread, the child loop's, its NVML reads thread, the parent's few
reads) from sending the command to having the frame: the driver's reads, the lines' encoding, the
sink, the frame.

Prints the median CPU per tick (and its quartiles) over ``--ticks`` ticks after a warm-up, and its
share of one core at 1 Hz against issue 14's NVML-child figure (0.46 % at the start of session 7).

``--compare TREE``: runs a second copy of this bench concurrently with ``PYTHONPATH=TREE`` (another
checkout of the package, e.g. an export of main), its ticks half an interval after this one's, so
both see the same machine load; prints both medians and the ratio of each tick pair (median and
range). ``--split``: where a tick's CPU goes: the same NVML calls bare (``--split`` times each
call kind through ctypes: the simulated library's work plus the ctypes call, none of our Python)
against the whole tick.

Run: ``python bench/bench_nvml_child.py [--ticks 60] [--interval 1] [--live] [--compare DIR] [--split]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("GF_BENCH_TREE") or str(Path(__file__).resolve().parents[1]))

from forensics.bundle.redact import Redactor  # noqa: E402
from forensics.collect.context import CaptureOptions, CollectContext  # noqa: E402
from forensics.record import child as child_mod  # noqa: E402
from forensics.record.child import RecordSink  # noqa: E402
from forensics.record.protocol import FRAME_HEAD  # noqa: E402
from forensics.record.sources import make_driver  # noqa: E402
from tests.support import nvmlsim  # noqa: E402

#: the NVML child's share of one core in bench_recorder at the start of session 7 (issue 14)
BEFORE_SHARE = 0.0046


def scenario(gpus: int, per_gpu: int) -> nvmlsim.Scenario:
    """bench_recorder's simulated machine (without its sleepers: PIDs 100000 + k)."""
    sc = nvmlsim.Scenario()
    for _ in range(gpus):
        sc.add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 50), (30, 90)])
    for k in range(gpus * per_gpu):
        sc.add_process(pid=100000 + k, gpu=k // per_gpu, used_memory_bytes=1 << 28, sm_util=10, mem_util=5)
    return sc


def _read_frame(fd: int) -> bytes:
    head = b""
    while len(head) < 8:
        got = os.read(fd, 8 - len(head))
        if not got:
            raise EOFError
        head += got
    n, size = FRAME_HEAD.unpack(head)
    want, parts = n + size, []
    while want:
        got = os.read(fd, min(want, 1 << 20))
        if not got:
            raise EOFError
        parts.append(got)
        want -= len(got)
    return head + b"".join(parts)


def run_child(lib: Path, ticks: int, interval: float, live: bool, offset: float) -> dict[str, Any]:
    """The nvml child's loop in a thread, ticked at ``interval`` from this thread; CPU per tick."""
    from forensics.record.live import summaries as live_mod

    options = CaptureOptions(interval_s=interval, timeout_s=5.0, nvml_library=str(lib),
                             extra={"nvml.call_timeout_s": str(max(1.0, min(interval, 5.0)))})
    sink = RecordSink(summarize=live_mod.summarize, summarized=live_mod.SUMMARIZED) if live else RecordSink()
    ctx = CollectContext(options, sink, Redactor(enabled=options.redact, key=None), {}, None, "nvml")
    cmd_r, cmd_w = os.pipe()
    out_r, out_w = os.pipe()
    loop = threading.Thread(target=child_mod.child_loop, args=(cmd_r, out_w, make_driver("nvml"), ctx, 5.0),
                            name="child-loop", daemon=True)
    loop.start()
    _read_frame(out_r)  # hello: the snapshot and the sampler's setup are not the steady state
    cpu: list[float] = []
    frame_bytes: list[int] = []
    warm = 3
    start = time.monotonic() + offset
    for i in range(ticks + warm):
        delay = start + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        c0 = time.process_time()
        os.write(cmd_w, (json.dumps({"tick": i, "t": time.time(), "hints": {}}, separators=(",", ":")) + "\n").encode())
        frame = _read_frame(out_r)
        c1 = time.process_time()
        if i >= warm:
            cpu.append(c1 - c0)
            frame_bytes.append(len(frame))
    os.write(cmd_w, b'{"quit": true}\n')
    _read_frame(out_r)
    loop.join(5)
    for fd in (cmd_w, out_r):
        os.close(fd)
    return {"cpu": cpu, "frame_bytes": frame_bytes}


def split(lib: Path, rounds: int) -> dict[str, float]:
    """CPU of the NVML calls one tick makes, bare (ctypes into the simulated library, the same
    calls the sampler makes: pynvml's wrappers for the device figures, fast.ListCalls for the
    lists), per call kind, in ms per tick (median of ``rounds``)."""
    import pynvml

    from forensics.collectors.nvml.fast import bind

    os.environ.setdefault("NVMLSIM_SCENARIO", "")
    pynvml.nvmlLib = None
    import ctypes

    pynvml.nvmlLib = ctypes.CDLL(str(lib))
    pynvml.nvmlInit()
    nv = pynvml
    fast = bind(nv)
    assert fast is not None
    hs = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    kinds: dict[str, Any] = {
        "device figures (7 calls/GPU, pynvml)": lambda h: (
            nv.nvmlDeviceGetUtilizationRates(h), nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2),
            nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM), nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            nv.nvmlDeviceGetCurrentClocksEventReasons(h), nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            nv.nvmlDeviceGetPowerUsage(h)),
        "process lists (3 lists/GPU, ListCalls)": lambda h: [fast.process_rows(f, h) for f in (
            "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
            "nvmlDeviceGetMPSComputeRunningProcesses")],
        "process utilisation (1/GPU, ListCalls)": lambda h: fast.process_utilization(h, int((time.time() - 1) * 1e6)),
    }
    out: dict[str, float] = {}
    for name, fn in kinds.items():
        got = []
        for _ in range(rounds):
            c0 = time.process_time()
            for h in hs:
                fn(h)
            got.append(time.process_time() - c0)
        out[name] = statistics.median(got) * 1e3
    # the ctypes call itself: a getter the simulated library answers from a field (its work ~ nothing)
    idx = ctypes.c_uint()
    get_index = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetIndex")
    ref = ctypes.byref(idx)
    got = []
    for _ in range(rounds):
        c0 = time.process_time()
        for _ in range(1000):
            get_index(hs[0], ref)
        got.append((time.process_time() - c0) / 1000)
    out["one bare ctypes call (us)"] = statistics.median(got) * 1e6
    pynvml.nvmlShutdown()
    return out


def _stats(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"median {statistics.median(xs) * 1e3:.2f} ms (quartiles {q[0] * 1e3:.2f}-{q[2] * 1e3:.2f})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs-per-gpu", type=int, default=64)
    ap.add_argument("--ticks", type=int, default=60)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--live", action="store_true", help="the sink summarises each line (the live state is on)")
    ap.add_argument("--compare", metavar="TREE", help="run the same bench from this checkout concurrently")
    ap.add_argument("--split", action="store_true", help="also time the tick's NVML calls bare")
    ap.add_argument("--json", action="store_true", help="print the per-tick figures as one JSON object")
    ap.add_argument("--offset", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--lib", help=argparse.SUPPRESS)
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-nvml-child-") as tmp:
        lib = Path(args.lib) if args.lib else nvmlsim.build_library(Path(tmp) / "lib")
        path = Path(args.scenario) if args.scenario else scenario(args.gpus, args.procs_per_gpu).write(
            Path(tmp) / "scenario.tsv")
        nvmlsim.activate(path)
        other = None
        if args.compare:
            env = {**os.environ, "PYTHONPATH": args.compare, "GF_BENCH_TREE": args.compare}
            argv = [sys.executable, __file__, "--json", "--ticks", str(args.ticks), "--interval", str(args.interval),
                    "--offset", str(args.interval / 2), "--lib", str(lib), "--scenario", str(path)]
            other = subprocess.Popen(argv + (["--live"] if args.live else []), env=env, stdout=subprocess.PIPE,
                                     cwd=args.compare)
        got = run_child(lib, args.ticks, args.interval, args.live, args.offset)
        theirs = None
        if other is not None:
            out, _ = other.communicate(timeout=args.ticks * args.interval + 120)
            theirs = json.loads(out)
        bare = split(lib, 20) if args.split else None

    if args.json:
        print(json.dumps(got))
        return 0
    cpu = got["cpu"]
    hz = 1 / args.interval
    med = statistics.median(cpu)
    print(f"nvml child tick: {args.gpus} GPUs x {args.procs_per_gpu} processes, {len(cpu)} ticks at {hz:g} Hz"
          f"{', live summaries' if args.live else ''} (load {os.getloadavg()[0]:.2f})")
    print(f"  this tree: CPU {_stats(cpu)}, frame {statistics.median(got['frame_bytes']) / 1024:.1f} KiB")
    print(f"  share of one core: {med * hz * 100:.3f} % (session 7 start, bench_recorder: {BEFORE_SHARE * 100:.2f} %)")
    if theirs is not None:
        ratios = [a / b for a, b in zip(cpu, theirs["cpu"], strict=False) if b > 0]
        q = statistics.quantiles(ratios, n=4)
        print(f"  {args.compare}: CPU {_stats(theirs['cpu'])}")
        print(f"  this / that, tick by tick: median {statistics.median(ratios):.2f} "
              f"(quartiles {q[0]:.2f}-{q[2]:.2f}, range {min(ratios):.2f}-{max(ratios):.2f})")
    if bare is not None:
        total = sum(v for k, v in bare.items() if "us" not in k)
        print(f"  the tick's NVML calls bare (simulated library + ctypes): {total:.2f} ms/tick of {med * 1e3:.2f}")
        for k, v in bare.items():
            print(f"    {k}: {v:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
