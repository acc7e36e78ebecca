"""The sampler's direct list calls (forensics.collectors.nvml.fast) and its line encoder
(forensics.collectors.nvml.encode) record what pynvml's wrappers and dumps_json record: collectors
sample the same simulated machine at the same moments, one through pynvml's wrappers, one through
the direct calls, one into a sink that takes the encoder's bytes, and their nvml/samples.jsonl are
the same bytes, MIG devices, every process kind, unavailable memory, injected errors, a
FunctionNotFound fallback and a lost GPU included."""

from __future__ import annotations

import ctypes
import json
import math
import time
from pathlib import Path

import pytest

from forensics.bundle.sink import EvidenceSink, dumps_json
from forensics.collect.context import Tick
from forensics.collectors.nvml import fast
from forensics.collectors.nvml.nvml import NvmlCollector
from forensics.specs.nvml import SAMPLES
from tests.support.nvmlsim import Scenario, activate
from tests.support.nvmlsim import fixtures as nvf

sim_lib = nvf.sim_lib
nvml_clean = nvf.nvml_clean
pytestmark = [pytest.mark.usefixtures("nvml_clean")]

GiB = 1 << 30


def machine(epoch: float) -> Scenario:
    sc = Scenario(epoch=epoch, util_period_s=1.0)
    sc.add_gpu(gpu_util=[(-10, 30), (2, 70)])
    sc.add_gpu(mig=True)
    sc.add_mig(gpu=1, slot=0, gpu_instance_id=1, compute_instance_id=0)
    sc.add_mig(gpu=1, slot=2, gpu_instance_id=2, compute_instance_id=0)
    sc.add_gpu()
    sc.add_gpu()
    for i in range(40):  # GPU 0: every kind, one without a memory figure, one appearing, one exiting
        sc.add_process(pid=10_000 + i, gpu=0, kind=("compute", "graphics", "mps")[i % 3],
                       used_memory_bytes=None if i == 7 else [(-10, (i + 1) << 20), (1.2, (i + 2) << 20)],
                       sm_util=[(-30, i % 100), (1.5, (i * 7) % 100)], mem_util=i % 50, enc_util=i % 3,
                       start_s=2.0 if i == 11 else None, end_s=3.0 if i == 12 else None)
    sc.add_process(pid=20_001, gpu=1, mig=0, used_memory_bytes=2 * GiB, sm_util=55)
    sc.add_process(pid=20_002, gpu=1, mig=2, kind="graphics", used_memory_bytes=3 * GiB, sm_util=15)
    sc.add_process(pid=20_003, gpu=2, used_memory_bytes=GiB, sm_util=90)
    sc.add_process(pid=20_004, gpu=3, used_memory_bytes=GiB)
    # GPU 2: its compute list unsupported for a while, its utilisation refused; GPU 3: the library
    # answers FunctionNotFound for the v3 compute list (pynvml's wrapper: a library mismatch, then v2)
    sc.inject("nvmlDeviceGetComputeRunningProcesses", "NotSupported", gpu=2, from_s=1.0, to_s=2.0)
    sc.inject("nvmlDeviceGetProcessUtilization", "NoPermission", gpu=2, from_s=2.0, to_s=3.0)
    sc.inject("nvmlDeviceGetComputeRunningProcesses_v3", "FunctionNotFound", gpu=3)
    sc.inject("nvmlDeviceGetProcessUtilization", "FunctionNotFound", gpu=3, from_s=3.0)  # not a mismatch here
    sc.lose_gpu(gpu=2, at_s=3.0)
    return sc


class EncodedSink(EvidenceSink):
    """A sink that takes lines with their bytes made (as the recorder's may): it writes the bytes it
    is given, and keeps what dumps_json makes of the same objects to compare."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.given: list[bytes] = []
        self.expected: list[bytes] = []

    def append_encoded_jsonl(self, member: str, obj: dict[str, object], data: bytes) -> None:
        self.given.append(data)
        self.expected.append((dumps_json(obj, indent=None) + "\n").encode("utf-8", "surrogateescape"))
        self.append_bytes(member, data)


def test_direct_list_calls_record_the_same_bytes_as_pynvml(sim_lib: Path, tmp_path: Path) -> None:
    epoch = math.floor(time.time()) + 1.0
    activate(machine(epoch).write(tmp_path / "scenario.tsv"))
    wrappers, direct, encoded = NvmlCollector(), NvmlCollector(), NvmlCollector()
    wrappers.direct_list_calls = False
    collectors = (wrappers, direct, encoded)
    for c in collectors:
        c.event_wait_ms = 0
    ctxs = [nvf.make_ctx(tmp_path / name, sim_lib, duration_s=10, interval_s=1.0)
            for name in ("wrappers", "direct", "encoded")]
    sink = ctxs[2].sink = EncodedSink(tmp_path / "encoded")
    ticks = 5
    for i in range(ticks):  # mid-period ticks: all read the same utilisation samples
        time.sleep(max(0.0, epoch + i + 0.4 - time.time()))
        tick = Tick(i, time.time())
        for c, ctx in zip(collectors, ctxs, strict=True):
            c.sample(ctx, tick)
    assert wrappers._sampler is not None and wrappers._sampler.fast is None
    assert direct._sampler is not None and direct._sampler.fast is not None
    for c, ctx in zip(collectors, ctxs, strict=True):
        c.end_sampling(ctx)
    ref = (tmp_path / "wrappers" / SAMPLES).read_bytes()
    assert (tmp_path / "direct" / SAMPLES).read_bytes() == ref
    assert (tmp_path / "encoded" / SAMPLES).read_bytes() == ref
    assert len(sink.given) == 4 * ticks  # every device line came with its bytes made
    assert sink.given == sink.expected
    # and the run saw what it was built to show
    text = ref.decode()
    for needle in ('"usedGpuMemory": null', '"type": "graphics"', '"type": "mps"', '"mig_uuid": "MIG-',
                   'NVMLError_NotSupported', 'NVMLError_NoPermission', 'NVMLLibraryMismatchError', 'NVMLError_FunctionNotFound',
                   'nvmlDeviceGetComputeRunningProcesses_v2', 'NVMLError_GpuIsLost', '"smUtil": 90'):
        assert needle in text, needle


def test_bind_refuses_a_module_it_does_not_know() -> None:
    class NotPynvml:
        pass

    assert fast.bind(NotPynvml()) is None

    class Other(ctypes.Structure):  # a layout the unpacker was not written for
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("extra", ctypes.c_uint)]

    assert fast._layout(Other, ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId")) is None


def test_a_process_list_is_one_library_call_while_the_kept_buffer_holds_it(sim_lib: Path, tmp_path: Path) -> None:
    """pynvml asks for a list's count, then for its entries: two driver calls a list a tick. The
    direct calls ask for the entries at once into the buffer kept from the tick before, and fall
    back to the count-then-entries protocol only when the list outgrew it."""
    epoch = math.floor(time.time()) + 1.0
    sc = Scenario(epoch=epoch, util_period_s=1.0)
    sc.add_gpu()
    for i in range(20):
        sc.add_process(pid=30_000 + i, gpu=0, used_memory_bytes=GiB, sm_util=10)
    for i in range(40):  # from 1 s on: 60 processes, past the buffer the first ticks sized (45)
        sc.add_process(pid=31_000 + i, gpu=0, used_memory_bytes=GiB, sm_util=10, start_s=1.0)
    activate(sc.write(tmp_path / "scenario.tsv"))
    c = NvmlCollector()
    c.event_wait_ms = 0
    ctx = nvf.make_ctx(tmp_path / "stage", sim_lib, duration_s=10, interval_s=1.0)
    calls: list[tuple[str, bool]] = []
    per_tick: list[dict[tuple[str, bool], int]] = []
    for i in range(4):
        time.sleep(max(0.0, epoch + i * 0.5 + 0.2 - time.time()))
        c.sample(ctx, Tick(i, time.time()))
        if i == 0:  # the sampler exists now: count the calls into the library from here on
            lists = c._sampler.fast  # type: ignore[union-attr]
            assert lists is not None
            for name in fast.PROCESS_SYMBOLS:
                def counted(handle: object, count: object, infos: object, name: str = name,
                            fn: object = lists._fn[name]) -> int:
                    calls.append((name, infos is not None))
                    return fn(handle, count, infos)  # type: ignore[operator, no-any-return]
                lists._fn[name] = counted
            continue
        got: dict[tuple[str, bool], int] = {}
        for call in calls:
            got[call] = got.get(call, 0) + 1
        per_tick.append(got)
        calls.clear()
    c.end_sampling(ctx)
    compute = "nvmlDeviceGetComputeRunningProcesses"
    steady = {(name, True): 1 for name in fast.PROCESS_SYMBOLS}  # one call each, into the kept buffer
    assert per_tick[0] == steady  # 20 processes: the buffer sized at tick 0 (2 * 20 + 5) holds them
    assert per_tick[1] == {**steady, (compute, True): 2}  # 60 do not: asked again with room for 125
    assert per_tick[2] == steady
    counts = [json.loads(line)["nvml"]["nvmlDeviceGetComputeRunningProcesses_v3"]["count"]
              for line in (tmp_path / "stage" / SAMPLES).read_text().splitlines()]
    assert counts == [20, 20, 60, 60]
