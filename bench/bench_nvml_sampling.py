"""Benchmark: one nvml sampling tick over 8 simulated GPUs with 64 GPU processes each.

Builds the simulated ``libnvidia-ml.so.1`` (tests/support/nvmlsim), writes a scenario with 8 GPUs
and 64 processes per GPU (512 in all, each with per-process utilization), and runs, paced at 1 Hz
in this process:

- the nvml collector's ``sample()`` (capture's sampling: a real CollectContext writing
  nvml/samples.jsonl to a temporary directory);
- the recorder's nvml child tick (``NvmlDriver.tick`` into a ``RecordSink`` that encodes each line
  and takes the live state's summary of it, as ``gpuforensics record``'s gfrec-nvml does), CPU per
  tick split into the collector's reads and the sink's encoding and summaries.

Prints CPU per tick (process CPU: the collector, pynvml and the simulated library together) and its
share of one core at 1 Hz against issue 14's recorder budget (0.5 % of a core for the whole
recorder; the NVML child's share of it: 0.2 %, about 2 ms a tick), and the ratio against a
baseline: the same pynvml calls a tick makes, with no recording, decoding or writing.

The simulated library answers from memory; a real driver spends its own (ioctl) time too, so on
a GPU host the absolute numbers differ (scripts/device-check reports a real capture's CPU use).

Run: ``python bench/bench_nvml_sampling.py [--gpus 8] [--procs-per-gpu 64] [--ticks 15]`` (ticks at 1 Hz)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pynvml  # noqa: E402

from forensics.bundle.redact import Redactor  # noqa: E402
from forensics.bundle.sink import EvidenceSink  # noqa: E402
from forensics.collect.context import CaptureOptions, CollectContext, Tick  # noqa: E402
from forensics.collectors.nvml.nvml import NvmlCollector  # noqa: E402
from forensics.record.child import RecordSink  # noqa: E402
from forensics.record.live import summaries as live  # noqa: E402
from forensics.record.sources import NvmlDriver  # noqa: E402
from tests.support.nvmlsim import Scenario, activate, build_library  # noqa: E402


def scenario(gpus: int, per_gpu: int) -> Scenario:
    sc = Scenario(util_period_s=1.0)
    for _ in range(gpus):
        sc.add_gpu(gpu_util=[(0, 50), (30, 90)], accounting=True)
    pid = 100_000
    for g in range(gpus):
        for _ in range(per_gpu):
            pid += 1
            sc.add_process(pid=pid, gpu=g, used_memory_bytes=512 << 20, sm_util=[(-30, 10), (5, 40)], mem_util=5)
    return sc


def baseline_tick(handles: list, last_seen: dict[int, int]) -> None:
    """The calls one tick makes, bare."""
    nv = pynvml
    for i, h in enumerate(handles):
        nv.nvmlDeviceGetUtilizationRates(h)
        nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
        nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        nv.nvmlDeviceGetCurrentClocksEventReasons(h)
        nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        nv.nvmlDeviceGetPowerUsage(h)
        nv.nvmlDeviceGetComputeRunningProcesses(h)
        nv.nvmlDeviceGetGraphicsRunningProcesses(h)
        nv.nvmlDeviceGetMPSComputeRunningProcesses(h)
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(h, last_seen.get(i, 0))
            last_seen[i] = max((s.timeStamp for s in samples), default=last_seen.get(i, 0))
        except nv.NVMLError_NotFound:
            pass


#: issue 14's recorder budget (share of one core) and the NVML child's part of it
RECORDER_TARGET = 0.005
NVML_SHARE_TARGET = 0.002


class PlainRecordSink(RecordSink):
    """RecordSink without ``append_encoded_jsonl``: the sampler then encodes every line with
    dumps_json (the comparison the encoded figure is measured against)."""

    append_encoded_jsonl = None  # type: ignore[assignment]


def recorder_child_ticks(lib: Path, ticks: int, interval: float,
                         encoded: bool) -> tuple[float, float, float, bytes]:
    """CPU per tick of the recorder's nvml child (NvmlDriver into a RecordSink that summarises for
    the live state; ``encoded``: one that takes the sampler's encoded lines): (whole tick, the
    sink's encoding + summaries, per-tick KiB of member bytes, the last tick's bytes)."""
    opts = CaptureOptions(duration_s=ticks, interval_s=interval, nvml_library=str(lib), timeout_s=600)
    kind = RecordSink if encoded else PlainRecordSink
    sink = kind(summarize=live.Summarizer(), summarized=live.SUMMARIZED)  # the child's, as recorder.py gives it
    ctx = CollectContext(opts, sink, Redactor(), {}, time.monotonic() + 3600, "nvml")
    driver = NvmlDriver()
    driver.collector.event_wait_ms = 0
    driver.start(ctx)
    driver.tick(ctx, Tick(0, time.time()))
    sink.take_bytes()
    in_sink = [0.0]

    def timed(method: Any) -> Any:
        def call(*args: Any) -> None:
            c0 = time.process_time()
            method(*args)
            in_sink[0] += time.process_time() - c0
        return call

    sink.append_jsonl = timed(sink.append_jsonl)  # type: ignore[method-assign]
    if encoded:
        sink.append_encoded_jsonl = timed(sink.append_encoded_jsonl)  # type: ignore[attr-defined]
    cpu, size, last = 0.0, 0, b""
    start = time.monotonic()
    for i in range(1, ticks + 1):
        delay = start + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        cpu0 = time.process_time()
        driver.tick(ctx, Tick(i, time.time()))
        cpu += time.process_time() - cpu0
        last = b"".join(rec[4] for rec in sink.take_bytes())
        size += len(last)
    driver.collector.end_sampling(ctx)
    return cpu / ticks, in_sink[0] / ticks, size / ticks / 1024, last


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs-per-gpu", type=int, default=64)
    ap.add_argument("--ticks", type=int, default=15)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-nvml-") as tmp:
        lib = build_library(Path(tmp) / "lib")
        activate(scenario(args.gpus, args.procs_per_gpu).write(Path(tmp) / "scenario.tsv"))
        root = Path(tmp) / "stage"
        opts = CaptureOptions(duration_s=args.ticks, interval_s=1.0, nvml_library=str(lib), timeout_s=600)
        ctx = CollectContext(opts, EvidenceSink(root), Redactor(), {}, time.monotonic() + 3600, "nvml")
        collector = NvmlCollector()
        collector.event_wait_ms = 0  # measure CPU, not the (sleeping) event wait

        collector.sample(ctx, Tick(0, time.time()))  # warm-up: init, handles, event registration
        cpu, wall = 0.0, 0.0
        start = time.monotonic()
        for i in range(1, args.ticks + 1):  # paced at 1 Hz, as capture runs it
            delay = start + i * args.interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            collector.sample(ctx, Tick(i, time.time()))
            cpu += time.process_time() - cpu0
            wall += time.perf_counter() - wall0
        cpu /= args.ticks
        wall /= args.ticks
        collector.end_sampling(ctx)
        lines = (root / "nvml" / "samples.jsonl").read_text().count("\n")
        size = (root / "nvml" / "samples.jsonl").stat().st_size

        children = {encoded: recorder_child_ticks(lib, args.ticks, args.interval, encoded) for encoded in (False, True)}

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        last: dict[int, int] = {}
        baseline_tick(handles, last)
        b_cpu0 = time.process_time()
        for _ in range(args.ticks):
            last.clear()  # as many utilization samples as a 1 Hz tick sees
            for i in range(len(handles)):
                last[i] = int((time.time() - 1.0) * 1e6)
            baseline_tick(handles, last)
        b_cpu = (time.process_time() - b_cpu0) / args.ticks
        pynvml.nvmlShutdown()

    procs = args.gpus * args.procs_per_gpu
    hz = 1 / args.interval
    print(f"nvml sampling tick: {args.gpus} GPUs, {procs} processes, {args.ticks} ticks "
          f"(python {sys.version.split()[0]}, pid {os.getpid()}, load {os.getloadavg()[0]:.2f})")
    print(f"  collector: wall {wall * 1e3:.2f} ms/tick, CPU {cpu * 1e3:.2f} ms/tick")
    print(f"  CPU share at {hz:g} Hz: {cpu * hz * 100:.2f}% of one core (target < 1%)")
    print(f"  baseline (bare pynvml calls): CPU {b_cpu * 1e3:.2f} ms/tick; collector/baseline = {cpu / b_cpu:.2f}x")
    print(f"  output: {lines} lines, {size / (args.ticks + 1) / 1024:.1f} KiB per tick")
    for encoded, (rec_cpu, rec_sink, rec_kib, _) in children.items():
        share = rec_cpu * hz
        how = "sink taking encoded lines" if encoded else "sink encoding each line"
        print(f"  recorder nvml child tick ({how}): CPU {rec_cpu * 1e3:.2f} ms/tick (reads "
              f"{(rec_cpu - rec_sink) * 1e3:.2f} ms, sink + live summaries {rec_sink * 1e3:.2f} ms), {rec_kib:.1f} KiB/tick")
        print(f"    share at {hz:g} Hz: {share * 100:.3f}% of one core; ratio to the NVML child's "
              f"{NVML_SHARE_TARGET * 100:g}% {share / NVML_SHARE_TARGET:.2f}x, to the recorder's whole "
              f"{RECORDER_TARGET * 100:g}% {share / RECORDER_TARGET:.2f}x")
    return 0 if cpu * hz < 0.01 else 1

if __name__ == "__main__":
    sys.exit(main())
