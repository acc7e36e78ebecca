"""The recorder's nvml child writes the nvml/samples.jsonl bytes that a fresh encoding writes.

The recorder's driver (``NvmlDriver``: the direct list calls, the line encoder's kept texts, its
buffers kept across ticks) into the recorder's ``RecordSink``, and a reference collector (pynvml's
own wrappers, every line through ``dumps_json``) sample one simulated machine at the same moments,
through states that exercise what the driver keeps from tick to tick: steady processes (kept
entries and sample texts), utilisation figures that change (new texts), a process list that grows
past the kept buffer (the size protocol again), processes that exit, a skipped tick (two samples a
process in one answer), MIG devices, every process kind, a GPU without processes, a lost GPU.
The bytes must be the same, and the PIDs the driver hands the parent each tick are the lines' own.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from forensics.bundle.redact import Redactor
from forensics.collect.context import CaptureOptions, CollectContext, Tick
from forensics.collectors.nvml.nvml import NvmlCollector
from forensics.record.child import RecordSink
from forensics.record.sources import GPU_PIDS, NvmlDriver
from forensics.specs.nvml import SAMPLES
from tests.support.nvmlsim import Scenario, activate
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib
nvml_clean = nvf.nvml_clean
pytestmark = [pytest.mark.usefixtures("nvml_clean")]

GiB = 1 << 30
#: the ticks, in seconds after the scenario's epoch (+ 0.4: mid-period); 3 is skipped
TICKS = (0, 1, 2, 4, 5, 6)


def machine(epoch: float) -> Scenario:
    sc = Scenario(epoch=epoch, util_period_s=1.0)
    sc.add_gpu(gpu_util=[(-10, 30), (2, 70)])
    sc.add_gpu(mig=True)
    sc.add_mig(gpu=1, slot=0, gpu_instance_id=1, compute_instance_id=0)
    sc.add_mig(gpu=1, slot=2, gpu_instance_id=2, compute_instance_id=0)
    sc.add_gpu()
    sc.add_gpu()
    for i in range(40):  # GPU 0: every kind, figures that change at 1.5 and 4.5 s, one exiting
        sc.add_process(pid=10_000 + i, gpu=0, kind=("compute", "graphics", "mps")[i % 3],
                       used_memory_bytes=None if i == 7 else [(-10, (i + 1) << 20), (1.2, (i + 2) << 20)],
                       sm_util=[(-30, i % 100), (1.5, (i * 7) % 100), (4.5, 3)], mem_util=[(-30, i % 50), (4.5, 9)],
                       enc_util=i % 3, dec_util=i % 5, end_s=3.0 if i == 12 else None)
    for i in range(30):  # GPU 0's compute list grows from 14 to 44 at 2 s: past the buffer it was read into
        sc.add_process(pid=11_000 + i, gpu=0, used_memory_bytes=GiB, sm_util=40 + i, start_s=2.0)
    sc.add_process(pid=20_001, gpu=1, mig=0, used_memory_bytes=2 * GiB, sm_util=55)
    sc.add_process(pid=20_002, gpu=1, mig=2, kind="graphics", used_memory_bytes=3 * GiB, sm_util=15)
    for i in range(64):  # GPU 2: 64 steady processes
        sc.add_process(pid=30_000 + i, gpu=2, used_memory_bytes=256 << 20, sm_util=10, mem_util=5)
    sc.lose_gpu(gpu=2, at_s=5.0)
    return sc  # GPU 3: no process at all


def _records(sink: RecordSink, member: str) -> bytes:
    return b"".join(rec[4] for rec in sink.take_bytes() if rec[2] == member)


def test_the_recorders_nvml_child_writes_what_a_fresh_encoding_writes(sim_lib: Path, tmp_path: Path) -> None:
    epoch = math.floor(time.time()) + 1.0
    activate(machine(epoch).write(tmp_path / "scenario.tsv"))
    reference = NvmlCollector()
    reference.direct_list_calls = False  # pynvml's wrappers, each line through dumps_json
    reference.event_wait_ms = 0
    ref_ctx = nvf.make_ctx(tmp_path / "reference", sim_lib, duration_s=30, interval_s=1.0)
    options = CaptureOptions(interval_s=1.0, timeout_s=20.0, nvml_library=str(sim_lib))
    sink = RecordSink()
    ctx = CollectContext(options, sink, Redactor(enabled=True), {}, None, "nvml")
    driver = NvmlDriver()
    driver.collector.event_wait_ms = 0
    ctx.deadline = time.monotonic() + 20
    driver.start(ctx)
    sink.take_bytes()
    written, hinted = b"", []
    for i in TICKS:
        time.sleep(max(0.0, epoch + i + 0.4 - time.time()))
        tick = Tick(i, time.time())
        ctx.deadline = time.monotonic() + 20
        driver.tick(ctx, tick)
        reference.sample(ref_ctx, tick)
        written += _records(sink, SAMPLES)
        hinted.append(ctx.published.pop(GPU_PIDS.key))
    assert driver.collector._sampler is not None and driver.collector._sampler.fast is not None
    assert reference._sampler is not None and reference._sampler.fast is None
    reference.end_sampling(ref_ctx)
    driver.collector.end_sampling(ctx)
    ref = (tmp_path / "reference" / SAMPLES).read_bytes()
    assert written == ref
    lines: list[dict[str, Any]] = [json.loads(line) for line in ref.splitlines()]
    assert len(lines) == 4 * len(TICKS)
    by_tick = [sorted({p["pid"] for line in lines if line["tick"] == i for p in line["processes"]}) for i in TICKS]
    assert hinted == by_tick
    # and the run saw what it was built to show
    text = ref.decode()
    counts = [line["nvml"]["nvmlDeviceGetComputeRunningProcesses_v3"].get("count") for line in lines
              if line["gpu_index"] == 0]
    assert counts == [14, 14, 44, 43, 43, 43]  # 30 more from 2 s; one (12) exits at 3 s
    after_skip = next(line for line in lines if line["tick"] == 4 and line["gpu_index"] == 2)
    stamps = {u["timeStamp"] for u in after_skip["nvml"]["nvmlDeviceGetProcessUtilization"]["value"]}
    assert len(stamps) == 2  # the skipped tick's period and this one's
    for needle in ('"usedGpuMemory": null', '"type": "graphics"', '"type": "mps"', '"mig_uuid": "MIG-',
                   'NVMLError_GpuIsLost', '"smUtil": 3', '"encUtil": 2', '"decUtil": 4'):
        assert needle in text, needle
