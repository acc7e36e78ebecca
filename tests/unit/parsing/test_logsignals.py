"""Log signals of GPU workloads: each real line (tests/support/log_lines.py) gives its typed record."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.parsing.logsignals.cuda import CudaFault, CudaOom, size_bytes
from forensics.parsing.logsignals.line import Signal, last_timestamp, split_context
from forensics.parsing.logsignals.nccl import (
    NcclAbort,
    NcclAsyncError,
    NcclCommInit,
    NcclError,
    NcclProgress,
    NcclTimeout,
    NcclWarn,
    nccl_bus_id,
)
from forensics.parsing.logsignals.process import LauncherRendezvous, ProcessEnd
from forensics.parsing.logsignals.scan import parse_line, scan_log
from tests.support import log_lines as L

GiB, MiB = 1 << 30, 1 << 20


def signals(q: L.Quoted | str, tmp: Path | None = None) -> list[tuple[int, Signal]]:
    """The fixture written as a log file (as a container would leave it), then scanned."""
    text = q if isinstance(q, str) else q.text + "\n"
    if tmp is not None:
        path = tmp / "log.txt"
        path.write_text(text, encoding="utf-8")
        text = path.read_text(encoding="utf-8")
    return list(scan_log(text))


def only(q: L.Quoted | str, cls: type[Signal]) -> list[Signal]:
    return [s for _, s in signals(q) if isinstance(s, cls)]


class TestCudaOom:
    def test_pytorch_2_2_wording(self, tmp_path: Path) -> None:
        ((_, oom),) = signals(L.TORCH_OOM_NEW, tmp_path)
        assert isinstance(oom, CudaOom)
        assert (oom.framework, oom.cuda_device) == ("pytorch", 0)
        assert oom.requested_bytes == 22 * MiB
        assert oom.total_bytes == round(23.65 * GiB) and oom.free_bytes == round(11.06 * MiB)
        assert oom.process_used_bytes == round(23.60 * GiB)
        assert oom.allocated_bytes == round(22.90 * GiB)
        assert oom.reserved_bytes == round(22.90 * GiB) + round(194.87 * MiB)

    def test_pytorch_2_1_capacty_typo(self) -> None:
        (oom,) = only(L.TORCH_OOM_CAPACTY, CudaOom)
        assert isinstance(oom, CudaOom)
        assert oom.requested_bytes == round(55.57 * GiB) and oom.total_bytes == 12 * GiB
        assert oom.process_used_bytes is None and oom.free_bytes == round(9.02 * GiB)

    def test_pytorch_1_x_parenthesis(self) -> None:
        (oom,) = only(L.TORCH_OOM_OLD, CudaOom)
        assert isinstance(oom, CudaOom)
        assert (oom.requested_bytes, oom.cuda_device, oom.total_bytes) == (round(2.26 * GiB), 0, 6 * GiB)
        assert (oom.allocated_bytes, oom.free_bytes, oom.reserved_bytes) == (
            round(781.59 * MiB), round(3.03 * GiB), round(1.24 * GiB))

    def test_pytorch_1_0_cached(self) -> None:
        (oom,) = only(L.TORCH_OOM_CACHED, CudaOom)
        assert isinstance(oom, CudaOom)
        assert oom.reserved_bytes == round(4.68 * MiB) and oom.allocated_bytes == round(8.57 * MiB)

    def test_tensorflow_tensor_shape_gives_bytes_and_gpu(self) -> None:
        (oom,) = only(L.TF_OOM_TENSOR, CudaOom)
        assert isinstance(oom, CudaOom)
        assert (oom.framework, oom.cuda_device, oom.shape, oom.dtype) == (
            "tensorflow", 1, (128, 128, 109, 109), "float")
        assert oom.requested_bytes == 128 * 128 * 109 * 109 * 4

    def test_tensorflow_stream_executor_exact_bytes(self) -> None:
        (oom,) = only(L.TF_OOM_STREAM_EXECUTOR, CudaOom)
        assert isinstance(oom, CudaOom) and oom.requested_bytes == 33554432

    def test_pinned_host_memory_is_not_a_gpu_oom(self) -> None:
        assert only(L.TF_OOM_HOST, CudaOom) == []

    def test_runtime_words(self) -> None:
        (oom,) = only(L.CUDA_ERROR_OOM, CudaOom)
        assert isinstance(oom, CudaOom) and oom.framework == "cuda" and oom.requested_bytes is None
        (oom2,) = only("cupy.cuda.runtime.CUDARuntimeError: cudaErrorMemoryAllocation: out of memory", CudaOom)
        assert isinstance(oom2, CudaOom) and oom2.framework == "cuda"


class TestNccl:
    def test_watchdog_timeout_and_progress(self) -> None:
        (timeout, progress) = [s for _, s in signals(L.NCCL_WATCHDOG)]
        assert isinstance(timeout, NcclTimeout) and isinstance(progress, NcclProgress)
        assert (timeout.rank, timeout.seq, timeout.op_type, timeout.numel_in, timeout.numel_out) == (
            7, 80078, "BROADCAST", 5056, 5056)
        assert (timeout.timeout_ms, timeout.elapsed_ms, timeout.blocking_wait) == (600000, 600026, False)
        assert (progress.rank, progress.process_group, progress.failed_seq, progress.last_enqueued_seq,
                progress.last_completed_seq) == (7, "0", 80078, 80078, 80077)

    def test_old_watchdog_without_numel(self) -> None:
        (t,) = only(L.NCCL_WATCHDOG_OLD, NcclTimeout)
        assert isinstance(t, NcclTimeout)
        assert (t.rank, t.seq, t.op_type, t.numel_in, t.timeout_ms, t.elapsed_ms) == (
            0, 96120, "ALLREDUCE", None, 1800000, 25624887)

    def test_pytorch_2_6_progress_and_abort(self) -> None:
        found = [s for _, s in signals(L.NCCL_WATCHDOG_26)]
        progress, abort = found
        assert isinstance(progress, NcclProgress) and isinstance(abort, NcclAbort)
        assert (progress.rank, progress.failed_seq, progress.last_completed_seq) == (5, 120049, 120048)
        assert abort.rank == 3

    def test_an_async_error_on_a_collective_is_no_timeout(self) -> None:
        """ProcessGroupNCCL's ``checkAndSetException``: ``LOG(ERROR) << logPrefix() << "Collective " << *this
        << " raised the following async exception: " << ...`` (pytorch/pytorch
        torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp), the WorkNCCL printed as its ``operator<<``
        does and the NCCL error as ``NCCL error: remote process exited or there was a network error``
        (the real lines of this family are in tests/support/recent_lines.py)."""
        line = ("[rank0]:[E ProcessGroupNCCL.cpp:542] [Rank 0] Collective WorkNCCL(SeqNum=89, OpType=ALLREDUCE, "
                "NumelIn=67108864, NumelOut=67108864, Timeout(ms)=90000) raised the following async exception: NCCL "
                "error: remote process exited or there was a network error, NCCL version 2.20.5")
        sigs = parse_line(line)
        assert not [s for s in sigs if isinstance(s, NcclTimeout)], sigs
        (a,) = [s for s in sigs if isinstance(s, NcclAsyncError)]
        assert isinstance(a, NcclAsyncError)
        assert (a.seq, a.op_type, a.numel_in, a.timeout_ms, a.rank) == (89, "ALLREDUCE", 67108864, 90000, 0)
        assert (a.code, a.nccl_version, a.error) == ("ncclRemoteError", "2.20.5",
                                                     "remote process exited or there was a network error")

    def test_blocking_wait(self) -> None:
        (t,) = only(L.NCCL_BLOCKING_WAIT, NcclTimeout)
        assert isinstance(t, NcclTimeout) and t.blocking_wait and t.elapsed_ms is None and t.seq == 2521

    @pytest.mark.parametrize(("q", "host", "dev", "call", "error", "errno"), [
        (L.NCCL_WARN_SOCKET, "n122-246-085", 5, "socketStartConnect", "Software caused connection abort", 103),
        (L.NCCL_WARN_IBV, None, None, "ibv_reg_mr_iova2", "Cannot allocate memory", 12),
        (L.NCCL_WARN_CUDA, "ins-7df6eojsifuykig9", 0, "cuda", "out of memory", None),
        (L.NCCL_WARN_OFI, "ip-10-0-87-143", 5, None, "Cannot allocate memory", 12),
        (L.NCCL_WARN_CONNECT, None, None, "connect", "Connection refused", 111),
    ])
    def test_warn_call_and_errno(self, q: L.Quoted, host: str | None, dev: int | None, call: str | None,
                                 error: str, errno: int | None) -> None:
        (w,) = only(q, NcclWarn)
        assert isinstance(w, NcclWarn)
        assert (w.host, w.cuda_device, w.call, w.error, w.errno) == (host, dev, call, error, errno)

    @pytest.mark.parametrize(("q", "code", "version"), [
        (L.NCCL_SYSTEM_ERROR, "ncclSystemError", "2.10.3"),
        (L.NCCL_REMOTE_ERROR, "ncclRemoteError", "2.14.3"),
        (L.NCCL_INTERNAL_VLLM, "ncclInternalError", None),
        (L.NCCL_UNHANDLED_CUDA, "ncclUnhandledCudaError", None),
    ])
    def test_result_codes(self, q: L.Quoted, code: str, version: str | None) -> None:
        (e,) = only(q, NcclError)
        assert isinstance(e, NcclError) and (e.code, e.nccl_version) == (code, version)

    def test_remote_error_keeps_last_error_and_the_other_signals_of_the_line(self) -> None:
        kinds = [s.kind for _, s in signals(L.NCCL_REMOTE_ERROR)]
        assert kinds == ["nccl-abort", "nccl-error", "process-end"]
        (e,) = only(L.NCCL_REMOTE_ERROR, NcclError)
        assert isinstance(e, NcclError) and e.detail is not None and e.detail.startswith("NET/IB : Got completion")

    def test_comm_init_maps_rank_to_pci_bus_id(self) -> None:
        (c,) = only(L.NCCL_COMM_INIT, NcclCommInit)
        assert isinstance(c, NcclCommInit)
        assert (c.rank, c.nranks, c.cuda_device, c.nvml_device, c.bus_id, c.host, c.pid) == (
            36, 64, 4, 4, "0000:9b:00.0", "hostname-test", 984)
        (old,) = only(L.NCCL_COMM_INIT_OLD, NcclCommInit)
        assert isinstance(old, NcclCommInit) and (old.rank, old.bus_id, old.nvml_device) == (
            15, "0000:e7:00.0", None)


class TestLauncherAndEnds:
    def test_torchrun_rendezvous_block(self) -> None:
        (r,) = only(L.TORCHRUN_RENDEZVOUS, LauncherRendezvous)
        assert isinstance(r, LauncherRendezvous)
        assert (r.master_addr, r.group_rank, r.group_world_size, r.global_ranks, r.world_size) == (
            "tristanr-arch2", 0, 2, (0,), 2)

    def test_torchrun_child_failed(self) -> None:
        (e,) = only(L.TORCHRUN_CHILD_FAILED, ProcessEnd)
        assert isinstance(e, ProcessEnd) and (e.how, e.exit_code, e.local_rank, e.pid) == (
            "child-failed", -9, 0, 62498)

    def test_vllm_worker_died(self) -> None:
        (e,) = only(L.VLLM_WORKER_DIED, ProcessEnd)
        assert isinstance(e, ProcessEnd) and (e.how, e.exit_code) == ("child-failed", -15)

    def test_killed_by_the_shell(self) -> None:
        (e,) = only(L.KILLED_SHELL, ProcessEnd)
        assert isinstance(e, ProcessEnd) and (e.how, e.exit_code, e.pid) == ("killed", 137, 7364)
        (bare,) = only(L.KILLED_BARE, ProcessEnd)
        assert isinstance(bare, ProcessEnd) and bare.how == "killed"

    def test_a_message_mentioning_killed_is_not_a_kill(self) -> None:
        ends = only(L.TRACEBACK_DATALOADER, ProcessEnd)
        assert [(e.how, e.exc_type) for e in ends if isinstance(e, ProcessEnd)] == [("exception", "RuntimeError")]

    def test_traceback_last_line_with_its_line_number(self) -> None:
        found = signals(L.DEVICE_ASSERT)
        end = next((n, s) for n, s in found if isinstance(s, ProcessEnd))
        assert end[0] == 7
        assert isinstance(end[1], ProcessEnd) and end[1].message == "CUDA error: device-side assert triggered"

    def test_chained_traceback_ends_at_the_last_exception(self) -> None:
        text = ("Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 'x'\n\n"
                "During handling of the above exception, another exception occurred:\n\n"
                "Traceback (most recent call last):\n  File \"a.py\", line 3, in <module>\n"
                "RuntimeError: CUDA error: an illegal memory access was encountered\n")
        ends = [(n, s) for n, s in signals(text) if isinstance(s, ProcessEnd)]
        assert [(n, s.exc_type) for n, s in ends if isinstance(s, ProcessEnd)] == [(9, "RuntimeError")]

    def test_terminate_after_watchdog(self) -> None:
        kinds = [s.kind for _, s in signals(L.TERMINATE)]
        assert kinds == ["nccl-timeout", "process-end"]


class TestCudaFaults:
    @pytest.mark.parametrize(("q", "fault", "code", "pci"), [
        (L.ILLEGAL_ADDRESS, "illegal-memory-access", None, None),
        (L.ECC_VLLM, "ecc-uncorrectable", None, None),
        (L.ECC_TF, "ecc-uncorrectable", 214, None),  # CUDA_ERROR_ECC_UNCORRECTABLE is 214
        (L.GPU_LOST, "gpu-lost", None, "0000:02:00.0"),
        (L.NO_DEVICE, "no-device", 38, None),
        (L.DRIVER_MISMATCH, "driver-mismatch", None, None),
    ])
    def test_fault(self, q: L.Quoted, fault: str, code: int | None, pci: str | None) -> None:
        faults = only(q, CudaFault)
        assert faults and all(isinstance(f, CudaFault) for f in faults)
        f = faults[0]
        assert isinstance(f, CudaFault) and (f.fault, f.code, f.pci_bus_id) == (fault, code, pci)

    def test_device_side_assert_keeps_the_assertion(self) -> None:
        first = only(L.DEVICE_ASSERT, CudaFault)[0]
        assert isinstance(first, CudaFault) and first.detail == "t >= 0 && t < n_classes"


class TestPrefixesAndTime:
    def test_engine_timestamp_and_rank_prefix(self) -> None:
        line = "2026-11-29T14:03:07.123456789Z " + L.NCCL_WATCHDOG.text.splitlines()[0]
        (t,) = parse_line(line)
        assert isinstance(t, NcclTimeout) and t.rank == 7
        assert t.t == pytest.approx(1795960987.123456, abs=1e-3)

    def test_torchrun_tee_prefix_is_the_local_rank(self) -> None:
        ctx = split_context("[default3]:RuntimeError: CUDA error: out of memory")
        assert (ctx.local_rank, ctx.rank, ctx.text) == (3, None, "RuntimeError: CUDA error: out of memory")

    def test_vllm_worker_prefix_before_a_traceback(self) -> None:
        text = ("(Worker pid=35) ERROR 03-13 08:47:26 [multiproc_executor.py:800] Traceback (most recent call last):\n"
                "(Worker pid=35) ERROR 03-13 08:47:26 [multiproc_executor.py:800]   File \"x.py\", line 771, in main\n"
                "(Worker pid=35) ERROR 03-13 08:47:26 [multiproc_executor.py:800] torch.OutOfMemoryError: CUDA out "
                "of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 512.00 MiB "
                "is free.\n")
        found = signals(text)
        assert [(n, s.kind) for n, s in found] == [(3, "process-end"), (3, "cuda-oom")]
        end = found[0][1]
        assert isinstance(end, ProcessEnd) and end.exc_type == "torch.OutOfMemoryError"

    def test_last_timestamp_of_a_log_still_being_written(self) -> None:
        text = ("2026-11-29T14:03:05.000000001Z step 10\n2026-11-29T14:03:06.5Z step 11\n"
                "2026-11-29T14:03:07.25Z step 1")  # no newline yet: the writer is mid-line
        assert last_timestamp(text) == (3, pytest.approx(1795960987.25, abs=1e-3))
        assert last_timestamp("no time here\n") is None

    def test_partial_last_line_is_parsed(self) -> None:
        text = "2026-11-29T14:03:07Z x\n2026-11-29T14:03:08Z RuntimeError: CUDA error: out of mem"
        assert only(text, CudaOom) == []
        assert len(only(text + "ory", CudaOom)) == 1

    def test_nccl_bus_id(self) -> None:
        assert nccl_bus_id("9b000") == "0000:9b:00.0"
        assert nccl_bus_id("11a000") == "0001:1a:00.0"
        assert nccl_bus_id("zz") is None
        # the same GPU however NCCL pads it, and a VMD domain above ffff as the kernel and NVML name it
        assert nccl_bus_id("00000000009b000") == "0000:9b:00.0"
        assert nccl_bus_id("100003b000") == "10000:3b:00.0"
        assert nccl_bus_id("9b00f") is None  # function 15: no PCI address

    def test_sizes(self) -> None:
        assert size_bytes("0 bytes") == 0 and size_bytes("1024.00 KiB") == 1 << 20
        assert size_bytes("17.79G") == round(17.79 * GiB) and size_bytes("12 parsecs") is None


class TestBounded:
    def test_signal_at_the_end_of_a_10_mb_progress_bar_line(self) -> None:
        line = "\r 1%|          | 10/1752 [00:29<1:22:01,  2.83s/it]" * 200_000
        line += "[rank5]:[E602 11:17:52.185053341 ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught collective " \
                "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) " \
                "ran for 600061 milliseconds before timing out."
        assert len(line) > 10_000_000
        tracemalloc.start()  # a regex gone quadratic on 10 MB takes hours: pytest's --timeout ends it
        (t,) = only(line + "\n", NcclTimeout)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert isinstance(t, NcclTimeout) and t.rank == 5 and t.seq == 7
        assert peak < 8 * len(line)  # copies of the line, never per-character structures

    def test_max_signals(self) -> None:
        text = "Killed\n" * 50
        assert len(list(scan_log(text, max_signals=7))) == 7

    def test_traceback_without_end_is_bounded(self) -> None:
        text = "Traceback (most recent call last):\n" + "  File \"x\", line 1\n" * 10_000
        assert [s for _, s in scan_log(text) if isinstance(s, ProcessEnd)] == []

    @settings(max_examples=300, deadline=None)
    @given(st.text(max_size=2000))
    def test_any_text_never_raises(self, text: str) -> None:
        for n, s in scan_log(text):
            assert n >= 1 and isinstance(s, Signal)
        parse_line(text)
        last_timestamp(text)

    @settings(max_examples=200, deadline=None)
    @given(st.binary(max_size=4000))
    def test_binary_never_raises(self, data: bytes) -> None:
        text = data.decode("utf-8", "replace")
        list(scan_log(text))
        list(scan_log(data.decode("latin-1")))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.sampled_from([q.text for q in L.ALL]), max_size=6),
           st.lists(st.text(max_size=80), max_size=6))
    def test_real_lines_among_garbage_keep_their_line_numbers(self, real: list[str], junk: list[str]) -> None:
        parts = [r.replace("\r", " ") for r in real] + [j.replace("\n", " ").replace("\r", " ") for j in junk]
        text = "\n".join(parts)
        lines = text.split("\n")
        for n, s in scan_log(text):
            assert 1 <= n <= len(lines)
            assert isinstance(s, Signal)

    def test_every_fixture_gives_a_signal_and_names_its_source(self) -> None:
        for q in L.ALL:
            assert "#" in q.source and q.version
            if q is not L.TF_OOM_HOST:
                assert signals(q), q.source
