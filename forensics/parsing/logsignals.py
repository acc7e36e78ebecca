"""Pure parsers for what a GPU workload says in its own log: each signal a typed record.

Sources (line formats as PyTorch, TensorFlow, NCCL and vLLM print them; the test fixtures in
``tests/support/log_lines.py`` quote real lines from public issues, with project and version):

* Engine and kubelet timestamps: ``GET /containers/{id}/logs?timestamps=1`` and
  ``GET /api/v1/namespaces/{ns}/pods/{name}/log?timestamps=true`` prefix each line with an
  RFC 3339 nanosecond time and one space (``2024-03-21T02:07:08.408271257Z <line>``).
* Launcher prefixes: ``[rank3]:`` (PyTorch >= 2.2 prefixes every line of a distributed rank),
  ``[default3]:`` (``torchrun --tee``: the local rank), ``(Worker pid=35)`` /
  ``(VllmWorkerProcess pid=1866)`` / ``(RayWorkerWrapper pid=1000, ip=10.0.0.2)`` (vLLM, Ray),
  and c10d's glog header ``[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607]`` (no year or zone:
  not used as a time).
* CUDA out of memory: PyTorch < 2.1 ``CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0;
  6.00 GiB total capacity; 781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved in
  total by PyTorch)`` (``cached`` before 1.4); PyTorch >= 2.1 ``Tried to allocate 22.00 MiB. GPU 0
  has a total capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this
  process has 23.60 GiB memory in use. Of the allocated memory 22.90 GiB is allocated by PyTorch,
  and 194.87 MiB is reserved by PyTorch but unallocated.`` (2.0-2.1 spell ``capacty``);
  TensorFlow ``OOM when allocating tensor with shape[16,112,112,147] and type float on
  /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc`` and its stream executor's
  ``failed to allocate 2.96G (3179741184 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY``; the
  runtime's ``CUDA error: out of memory`` and ``cudaErrorMemoryAllocation``.
* NCCL through ``ProcessGroupNCCL.cpp``: ``[Rank 0] Watchdog caught collective operation timeout:
  WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168,
  Timeout(ms)=600000) ran for 600060 milliseconds before timing out.`` (no Numel before 2.1),
  ``... timed out in blocking wait``, the watchdog's ``Exception (either an error or timeout)
  detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work:
  1579.`` (2.4: ``failure detected by watchdog at work sequence id: N PG status: last enqueued
  work: N, last completed work: N``), ``Some NCCL operations have failed or timed out``; NCCL's own
  ``host:pid:tid [cudaDev] file.cc:line NCCL WARN <text>`` and ``NCCL INFO comm 0x.. rank 36
  nranks 64 cudaDev 4 nvmlDev 4 busId 9b000 ... Init COMPLETE``; result codes ``ncclSystemError``,
  ``ncclInternalError``, ``ncclRemoteError``, ``ncclUnhandledCudaError``... and ``NCCL error in:
  <file>:<line>, unhandled system error, NCCL version 2.10.3``.
* torchrun: ``Rendezvous complete for workers. Result:`` followed by ``  key=value`` lines
  (``group_rank``, ``group_world_size``, ``global_ranks=[..]``, ``global_world_sizes=[..]``) and
  ``failed (exitcode: -9) local_rank: 0 (pid: 484375) of binary: ...``.
* CUDA faults: ``an illegal memory access was encountered``, ``uncorrectable ECC error
  encountered``, ``device-side assert triggered`` (and the kernel's ``Assertion `...` failed.``),
  ``GPU is lost``, ``no CUDA-capable device is detected``, ``Driver/library version mismatch``.
* Process ends: the exception line that ends a Python ``Traceback (most recent call last):``,
  ``Killed`` (the shell reporting SIGKILL), ``terminate called after throwing an instance of``,
  ``Worker ... died, exit code: -15``.

Bounded: a line longer than ``MAX_SCAN_CHARS`` is scanned at its head and its tail only (a
progress bar redrawn with ``\\r`` makes lines of megabytes), a traceback is followed at most
``_TRACEBACK_MAX_LINES`` lines, and :func:`scan_log` stops after ``max_signals`` records. Nothing
here raises on any text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, TypedDict

from forensics.parsing.timestamps import parse_iso_unix

__all__ = [
    "MAX_SCAN_CHARS",
    "CudaFault",
    "CudaOom",
    "LineContext",
    "LauncherRendezvous",
    "NcclAbort",
    "NcclCommInit",
    "NcclError",
    "NcclProgress",
    "NcclTimeout",
    "NcclWarn",
    "ProcessEnd",
    "Signal",
    "last_timestamp",
    "newest_lines",
    "nccl_bus_id",
    "parse_line",
    "scan_log",
    "size_bytes",
    "split_context",
]

MAX_SCAN_CHARS = 16 * 1024
_TRACEBACK_MAX_LINES = 400
_MAX_TEXT = 400  # a message kept in a record is cut here (the excerpt keeps the line's own bytes)


# ---------------------------------------------------------------- records


@dataclass(frozen=True, kw_only=True)
class Signal:
    """What every signal knows of its line: ``t`` the engine's or kubelet's timestamp (unix
    seconds, None without ``timestamps=true``), ``rank`` the global rank (``[rank3]:`` prefix or
    ``[Rank 3]`` in the message), ``local_rank`` (``[default3]:`` prefix)."""

    kind: ClassVar[str] = ""
    t: float | None = None
    rank: int | None = None
    local_rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class CudaOom(Signal):
    """A CUDA out-of-memory error. ``framework``: pytorch, tensorflow or cuda (the runtime's own
    words). ``cuda_device`` is the ordinal *as the process saw it* (after CUDA_VISIBLE_DEVICES),
    not the host's GPU index. ``reserved_bytes`` is PyTorch's total reserved (allocated plus
    reserved-but-unallocated in the >= 2.1 wording); ``process_used_bytes`` the >= 2.1 "this
    process has X memory in use"."""

    kind: ClassVar[str] = "cuda-oom"
    framework: str
    requested_bytes: int | None = None
    cuda_device: int | None = None
    total_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    free_bytes: int | None = None
    process_used_bytes: int | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None


@dataclass(frozen=True, kw_only=True)
class NcclTimeout(Signal):
    """ProcessGroupNCCL's watchdog (or a blocking wait) timed a collective out: ``seq`` is its
    ``SeqNum`` in ``process_group``; ``elapsed_ms`` None for ``timed out in blocking wait``."""

    kind: ClassVar[str] = "nccl-timeout"
    seq: int
    op_type: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    elapsed_ms: int | None = None
    process_group: str | None = None
    blocking_wait: bool = False


@dataclass(frozen=True, kw_only=True)
class NcclProgress(Signal):
    """The watchdog's view of one process group when it gave up: the work that failed, the last
    enqueued and the last completed sequence numbers."""

    kind: ClassVar[str] = "nccl-progress"
    failed_seq: int | None
    last_enqueued_seq: int | None
    last_completed_seq: int | None
    process_group: str | None = None


@dataclass(frozen=True, kw_only=True)
class NcclAbort(Signal):
    """``Some NCCL operations have failed or timed out``: the rank takes its process down."""

    kind: ClassVar[str] = "nccl-abort"


@dataclass(frozen=True, kw_only=True)
class NcclWarn(Signal):
    """``NCCL WARN``: ``call`` the failing call (``ibv_reg_mr_iova2``, ``socketStartConnect``,
    ``cuda``...), ``error`` its error text, ``errno`` when that text is a C library strerror."""

    kind: ClassVar[str] = "nccl-warn"
    message: str
    host: str | None = None
    pid: int | None = None
    cuda_device: int | None = None
    source: str | None = None
    call: str | None = None
    error: str | None = None
    errno: int | None = None


@dataclass(frozen=True, kw_only=True)
class NcclError(Signal):
    """An NCCL result code (``ncclSystemError``...), the NCCL version and the ``Last error``."""

    kind: ClassVar[str] = "nccl-error"
    code: str
    nccl_version: str | None = None
    detail: str | None = None


@dataclass(frozen=True, kw_only=True)
class NcclCommInit(Signal):
    """NCCL INFO's communicator line: rank ``rank`` of ``nranks`` on CUDA device ``cuda_device``
    (NVML index ``nvml_device``), PCI ``bus_id`` (normalized ``0000:9b:00.0``)."""

    kind: ClassVar[str] = "nccl-comm"
    nranks: int
    cuda_device: int | None = None
    nvml_device: int | None = None
    bus_id: str | None = None
    comm_id: str | None = None
    host: str | None = None
    pid: int | None = None


@dataclass(frozen=True, kw_only=True)
class LauncherRendezvous(Signal):
    """torchrun's ``Rendezvous complete for workers``: this node's ``group_rank`` of
    ``group_world_size``, its workers' ``global_ranks`` and the job's ``world_size``."""

    kind: ClassVar[str] = "launcher-rendezvous"
    master_addr: str | None = None
    group_rank: int | None = None
    group_world_size: int | None = None
    local_ranks: tuple[int, ...] = ()
    global_ranks: tuple[int, ...] = ()
    world_size: int | None = None


@dataclass(frozen=True, kw_only=True)
class CudaFault(Signal):
    """A CUDA fault: ``fault`` one of illegal-memory-access, ecc-uncorrectable,
    device-side-assert, gpu-lost, no-device, driver-mismatch; ``code`` the numeric CUDA error when
    printed; ``pci_bus_id`` when named (GPU is lost); ``detail`` the assertion or message."""

    kind: ClassVar[str] = "cuda-fault"
    fault: str
    code: int | None = None
    pci_bus_id: str | None = None
    detail: str | None = None


@dataclass(frozen=True, kw_only=True)
class ProcessEnd(Signal):
    """How a process ended: ``how`` exception (the last line of a Python traceback), killed
    (SIGKILL reported by the shell), terminate (an uncaught C++ exception), child-failed (a
    launcher reporting its worker's exit); ``exc_type``, ``message``, ``exit_code``, ``pid``."""

    kind: ClassVar[str] = "process-end"
    how: str
    exc_type: str | None = None
    message: str | None = None
    exit_code: int | None = None
    pid: int | None = None


# ---------------------------------------------------------------- helpers

_UNITS = {"b": 1, "bytes": 1, "byte": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
          "tib": 1 << 40, "pib": 1 << 50, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
          "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
_SIZE = r"\d+(?:\.\d+)?\s?(?:[KMGTP]i?B|bytes?|B|[KMGT])"


def size_bytes(text: str) -> int | None:
    """``"2.26 GiB"``, ``"0 bytes"``, ``"17.79G"`` -> bytes (binary units, as PyTorch and
    TensorFlow print them); None when not a size."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s?([A-Za-z]+)\s*", text)
    if not m:
        return None
    unit = _UNITS.get(m.group(2).lower())
    if unit is None:
        return None
    return int(round(float(m.group(1)) * unit))


def nccl_bus_id(value: str) -> str | None:
    """NCCL's ``busId`` (the PCI id's hex digits as one number: ``9b000``, ``1a000``) ->
    ``0000:9b:00.0``; None when not hex."""
    if not value or len(value) > 16 or not re.fullmatch(r"[0-9a-fA-F]+", value):
        return None
    s = value.lower().zfill(9)
    return f"{s[:-5][-8:].zfill(4)}:{s[-5:-3]}:{s[-3:-1]}.{s[-1]}"


_STRERROR = {os.strerror(n): n for n in range(1, 134)}

_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8,
                "float64": 8, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int": 4,
                "int64": 8, "bool": 1, "complex64": 8, "complex128": 16}


def _int(text: str | None) -> int | None:
    if text is None or len(text) > 20:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "..."


# ---------------------------------------------------------------- line context

_TS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)) ")
_PREFIXES = re.compile(
    r"\[(?P<what>rank|default)(?P<n>\d{1,6})\]:\s?"                      # [rank3]: / [default3]:
    r"|(?:[\w./-]{1,40} )?\((?P<proc>[A-Za-z_][\w.]{0,60} pid=\d{1,10}(?:, ip=[\w.:]{1,60})?)\)(?:\s|$)"
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]\s]{1,80}\] "
)


@dataclass(frozen=True)
class LineContext:
    """What a line's prefixes said, and the message after them."""

    t: float | None
    rank: int | None
    local_rank: int | None
    process: str | None
    text: str


def split_context(line: str) -> LineContext:
    """Strip the timestamp and launcher prefixes of one line (see the module docstring)."""
    t = None
    pos = 0
    m = _TS.match(line)
    if m:
        t = parse_iso_unix(m.group(1))
        pos = m.end()
    rank = local = None
    proc = None
    for _ in range(4):
        p = _PREFIXES.match(line, pos)
        if not p:
            break
        if p.group("what") == "rank":
            rank = int(p.group("n"))
        elif p.group("what") == "default":
            local = int(p.group("n"))
        elif p.group("proc"):
            proc = p.group("proc")
        pos = p.end()
    text = line[pos:]
    return LineContext(t, rank, local, proc, text.rstrip("\r\n"))


def _bounded(text: str) -> str:
    """The part of a line that is scanned: all of it, or its head and tail when very long."""
    if len(text) <= MAX_SCAN_CHARS:
        return text
    half = MAX_SCAN_CHARS // 2
    return text[:half] + "\n" + text[-half:]


# ---------------------------------------------------------------- patterns

_RANK_IN_TEXT = re.compile(r"\bRank (\d{1,6})\]")
_PG = re.compile(r"\[PG (?:ID )?(\d{1,6})")

_OOM_OLD = re.compile(r"CUDA out of memory\. Tried to allocate (" + _SIZE + r") \(GPU (\d{1,4});([^)]{0,400})\)")
_OOM_NEW = re.compile(r"CUDA out of memory\. Tried to allocate (" + _SIZE + r")\. GPU (\d{1,4}) has a total "
                      r"capac(?:i)?ty of (" + _SIZE + r") of which (" + _SIZE + r") is free\.")
_OOM_PROC = re.compile(r"this process has (" + _SIZE + r") memory in use")
_OOM_ALLOC_NEW = re.compile(r"Of the allocated memory (" + _SIZE + r") is allocated by PyTorch, and ("
                            + _SIZE + r") is reserved by PyTorch but unallocated")
_OOM_FIELD = re.compile(r"(" + _SIZE + r") (total capacity|already allocated|free|reserved in total by PyTorch"
                        r"|cached)")
_OOM_TF = re.compile(r"OOM when allocating tensor with shape\[([\d,\s]{0,200})\] and type (\w{1,20}) on "
                     r"\S{0,200}?device:GPU:(\d{1,4})")
_OOM_TF_SE = re.compile(r"failed to allocate (" + _SIZE + r") \((\d{1,20}) bytes\) from device: CUDA_ERROR_OUT_OF_MEMORY")
_OOM_GENERIC = re.compile(r"CUDA error: out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|"
                          r"CUDA out of memory")

_WORK = re.compile(r"WorkNCCL\(SeqNum=(\d{1,20}), OpType=(\w{1,40})((?:, \w{1,20}=\d{1,20})*), "
                   r"Timeout\(ms\)=(\d{1,20})\)")
_NUMEL = re.compile(r"(NumelIn|NumelOut)=(\d{1,20})")
_RAN_FOR = re.compile(r"ran for (\d{1,20}) milliseconds before timing out")
_PROGRESS = re.compile(r"(?:detected by watchdog at work|Timeout at NCCL work|watchdog at work sequence id):? "
                       r"(\d{1,20})\b.{0,80}?last enqueued (?:NCCL )?work: (-?\d{1,20}), last completed "
                       r"(?:NCCL )?work: (-?\d{1,20})")
_NCCL_HEAD = re.compile(r"(?:^|\s)([\w.-]{1,253}):(\d{1,10}):\d{1,10} \[(\d{1,4})\] (?:([\w./-]{1,200}:\d{1,6}) )?"
                        r"NCCL (WARN|INFO) ")
_CALL_FAILED = re.compile(r"Call to (\w{1,80}) failed(?: with error (.{1,200}))?")
_CUDA_FAILURE = re.compile(r"Cuda failure (?:(\d{1,6}) )?'([^']{0,200})'")
_FN_FAILED = re.compile(r"^(\w{1,80}): .{0,300}? failed : (.{1,200})$")
_CONNECT_FAILED = re.compile(r"Connect to \S{1,200} failed : (.{1,200})")
_ERROR_RC = re.compile(r"RC: (\d{1,6}), Error: (.{1,200})")
_COMM = re.compile(r"comm (0x[0-9a-f]{1,16}) rank (\d{1,7}) nranks (\d{1,7}) cudaDev (\d{1,4})"
                   r"(?: nvmlDev (\d{1,4}))? busId ([0-9a-fA-F]{1,16})(?: commId (0x[0-9a-f]{1,16}))?")
_NCCL_CODE = re.compile(r"\b(nccl(?:SystemError|InternalError|RemoteError|UnhandledCudaError|InvalidArgument"
                        r"|InvalidUsage))\b")
_NCCL_ERROR_IN = re.compile(r"NCCL [Ee]rror(?: in: \S{1,300}?:\d{1,6},| (\d)):? ([a-z][a-z ,]{2,80}?)"
                            r"(?:, NCCL version|\s*\(|$)")
_NCCL_VERSION = re.compile(r"NCCL version (\d{1,3}\.\d{1,3}\.\d{1,3})")
_LAST_ERROR = re.compile(r"Last error:\s*(.{1,400})")
_NCCL_CODE_NAMES = {"1": "ncclUnhandledCudaError", "2": "ncclSystemError", "3": "ncclInternalError",
                    "4": "ncclInvalidArgument", "5": "ncclInvalidUsage", "6": "ncclRemoteError"}
_NCCL_DESC = (("unhandled cuda error", "ncclUnhandledCudaError"), ("unhandled system error", "ncclSystemError"),
              ("internal error", "ncclInternalError"), ("remote process exited", "ncclRemoteError"),
              ("invalid argument", "ncclInvalidArgument"), ("invalid usage", "ncclInvalidUsage"))

_FAULTS = (
    ("illegal-memory-access", re.compile(r"an illegal memory access was encountered|cudaErrorIllegalAddress|"
                                         r"CUDA_ERROR_ILLEGAL_ADDRESS")),
    ("ecc-uncorrectable", re.compile(r"uncorrectable ECC error encountered|cudaErrorECCUncorrectable|"
                                     r"CUDA_ERROR_ECC_UNCORRECTABLE")),
    ("device-side-assert", re.compile(r"device-side assert triggered|Assertion `.{0,300}` failed")),
    ("gpu-lost", re.compile(r"GPU is lost|cudaErrorDevicesUnavailable")),
    ("no-device", re.compile(r"no CUDA-capable device is detected|CUDA_ERROR_NO_DEVICE|No CUDA GPUs are available")),
    ("driver-mismatch", re.compile(r"Driver/library version mismatch|CUDA driver version is insufficient for CUDA "
                                   r"runtime version|The NVIDIA driver on your system is too old")),
)
_CUDA_CODE = re.compile(r"cuda runtime error \((\d{1,4})\)|error=(\d{1,4})\b|\(code #(\d{1,4})|Error (\d{1,4}): ")
_ASSERTION = re.compile(r"Assertion `(.{0,300})` failed")
_PCI = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")

_CHILD_FAILED = re.compile(r"failed \(exitcode: (-?\d{1,4})\) local_rank: (\d{1,6}) \(pid: (\d{1,10})\)")
_WORKER_DIED = re.compile(r"Worker \w{1,60} pid (\d{1,10}) died, exit code: (-?\d{1,4})")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']{1,200})'")
_KILLED = re.compile(r"^\**Killed\**\s*$|(?:^|:\s)(?:line \d{1,7}:\s+)?(\d{1,10}) Killed\s")
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]{0,200}(?:Error|Exception|Exit|Interrupt|Failure|Failed|Fault))"
                        r"(?::\s?(.*))?$")
_RENDEZVOUS = "Rendezvous complete for workers"
_KV = re.compile(r"^\s{1,8}(\w{1,40})=(.{0,2000})$")

# The words that make a line worth parsing: found in the whole log with str.find (C speed, about
# twice a regular-expression alternation's), the patterns above then run on those lines only.
_TRIGGER_WORDS = (
    "out of memory", "OUT_OF_MEMORY", "OOM when allocating", "cudaErrorMemoryAllocation", "WorkNCCL",
    "last completed", "Some NCCL operations", "NCCL WARN", "Init COMPLETE", "ncclSystemError",
    "ncclInternalError", "ncclRemoteError", "ncclUnhandledCudaError", "ncclInvalid", "NCCL error", "NCCL Error",
    "illegal memory access", "ILLEGAL_ADDRESS", "IllegalAddress", "ECC", "device-side assert", "Assertion `",
    "GPU is lost", "DevicesUnavailable", "CUDA-capable", "NO_DEVICE", "No CUDA GPUs", "version mismatch",
    "driver version is insufficient", "driver on your system is too old", "Traceback (most recent", "Killed",
    "exitcode: ", "terminate called", "died, exit code", "Rendezvous complete",
)


def _trigger_positions(text: str) -> list[int]:
    hits: list[int] = []
    for word in _TRIGGER_WORDS:
        find = text.find
        p = find(word)
        while p >= 0:
            hits.append(p)
            p = find(word, p + 1)
    hits.sort()
    return hits


# ---------------------------------------------------------------- one line


class _Base(TypedDict):
    t: float | None
    rank: int | None
    local_rank: int | None


def _rank(ctx: LineContext, text: str) -> int | None:
    if ctx.rank is not None:
        return ctx.rank
    m = _RANK_IN_TEXT.search(text)
    return int(m.group(1)) if m else None


def _oom(text: str, base: _Base) -> CudaOom | None:
    m = _OOM_NEW.search(text)
    if m:
        alloc = _OOM_ALLOC_NEW.search(text, m.end())
        proc = _OOM_PROC.search(text, m.end())
        allocated = size_bytes(alloc.group(1)) if alloc else None
        unalloc = size_bytes(alloc.group(2)) if alloc else None
        return CudaOom(framework="pytorch", requested_bytes=size_bytes(m.group(1)), cuda_device=int(m.group(2)),
                       total_bytes=size_bytes(m.group(3)), free_bytes=size_bytes(m.group(4)),
                       allocated_bytes=allocated,
                       reserved_bytes=None if allocated is None or unalloc is None else allocated + unalloc,
                       process_used_bytes=size_bytes(proc.group(1)) if proc else None, **base)
    m = _OOM_OLD.search(text)
    if m:
        fields = {f: size_bytes(v) for v, f in _OOM_FIELD.findall(m.group(3))}
        return CudaOom(framework="pytorch", requested_bytes=size_bytes(m.group(1)), cuda_device=int(m.group(2)),
                       total_bytes=fields.get("total capacity"), allocated_bytes=fields.get("already allocated"),
                       free_bytes=fields.get("free"),
                       reserved_bytes=fields.get("reserved in total by PyTorch", fields.get("cached")),
                       **base)
    m = _OOM_TF.search(text)
    if m:
        shape = tuple(int(d) for d in m.group(1).replace(" ", "").split(",") if d.isdigit() and len(d) < 12)
        elem = _DTYPE_BYTES.get(m.group(2).lower())
        requested = None
        if elem is not None and shape:
            requested = elem
            for d in shape:
                requested *= d
        return CudaOom(framework="tensorflow", requested_bytes=requested, cuda_device=int(m.group(3)),
                       shape=shape, dtype=m.group(2), **base)
    m = _OOM_TF_SE.search(text)
    if m:
        return CudaOom(framework="tensorflow", requested_bytes=int(m.group(2)), **base)
    if "on host: CUDA_ERROR_OUT_OF_MEMORY" in text:
        return None  # pinned host memory, not the GPU's
    if _OOM_GENERIC.search(text):
        return CudaOom(framework="pytorch" if "CUDA out of memory" in text else "cuda", **base)
    return None


def _nccl_warn(text: str, base: _Base) -> NcclWarn | None:
    head = _NCCL_HEAD.search(text)
    if head and head.group(5) == "WARN":
        message = text[head.end():]
        host, pid, dev, source = head.group(1), int(head.group(2)), int(head.group(3)), head.group(4)
    else:
        i = text.find("NCCL WARN ")
        if i < 0:
            return None
        message, host, pid, dev, source = text[i + 10:], None, None, None, None
    message = message.strip()
    call = error = None
    code: int | None = None
    if m := _CALL_FAILED.search(message):
        call, error = m.group(1), m.group(2)
    elif m := _CUDA_FAILURE.search(message):
        call, error = "cuda", m.group(2)
    elif m := _ERROR_RC.search(message):
        call, error, code = None, m.group(2), _int(m.group(1))
    elif m := _FN_FAILED.match(message):
        call, error = m.group(1), m.group(2)
    elif m := _CONNECT_FAILED.search(message):
        call, error = "connect", m.group(1)
    if error is not None:
        error = error.strip().rstrip(".")
        code = _STRERROR.get(error, code)
    return NcclWarn(message=_cut(message), host=host, pid=pid, cuda_device=dev, source=source, call=call,
                    error=error, errno=code, **base)


def _nccl_error(text: str, base: _Base) -> NcclError | None:
    m = _NCCL_CODE.search(text)
    code = m.group(1) if m else None
    if code is None and (e := _NCCL_ERROR_IN.search(text)):
        if e.group(1):
            code = _NCCL_CODE_NAMES.get(e.group(1))
        if code is None:
            desc = e.group(2)
            code = next((name for words, name in _NCCL_DESC if desc.startswith(words)), None)
    if code is None:
        return None
    v = _NCCL_VERSION.search(text)
    last = _LAST_ERROR.search(text)
    detail = last.group(1).strip() if last else None
    if detail is None and m:
        rest = text[m.end():].lstrip(": ").strip()
        detail = rest or None
    return NcclError(code=code, nccl_version=v.group(1) if v else None,
                     detail=_cut(detail) if detail else None, **base)


def _faults(text: str, base: _Base) -> list[CudaFault]:
    out: list[CudaFault] = []
    for fault, pattern in _FAULTS:
        if not pattern.search(text):
            continue
        if fault == "device-side-assert" and "triggered" not in text and not _ASSERTION.search(text):
            continue
        c = _CUDA_CODE.search(text)
        code = _int(next((g for g in c.groups() if g), None)) if c else None
        pci = _PCI.search(text) if fault == "gpu-lost" else None
        assertion = _ASSERTION.search(text) if fault == "device-side-assert" else None
        out.append(CudaFault(fault=fault, code=code, pci_bus_id=pci.group(1) if pci else None,
                             detail=_cut(assertion.group(1)) if assertion else None, **base))
    return out


def _parse_text(ctx: LineContext, text: str) -> list[Signal]:
    """Every single-line signal in ``text`` (a line's message after its prefixes)."""
    base: _Base = {"t": ctx.t, "rank": _rank(ctx, text), "local_rank": ctx.local_rank}
    out: list[Signal] = []
    if oom := _oom(text, base):
        out.append(oom)
    if "WorkNCCL" in text and (w := _WORK.search(text)):
        numel = dict(_NUMEL.findall(w.group(3)))
        ran = _RAN_FOR.search(text, w.end())
        pg = _PG.search(text)
        out.append(NcclTimeout(seq=int(w.group(1)), op_type=w.group(2), numel_in=_int(numel.get("NumelIn")),
                               numel_out=_int(numel.get("NumelOut")), timeout_ms=int(w.group(4)),
                               elapsed_ms=int(ran.group(1)) if ran else None,
                               process_group=pg.group(1) if pg else None,
                               blocking_wait="timed out in blocking wait" in text, **base))
    if "last completed" in text and (p := _PROGRESS.search(text)):
        pg = _PG.search(text)
        out.append(NcclProgress(failed_seq=_int(p.group(1)), last_enqueued_seq=_int(p.group(2)),
                                last_completed_seq=_int(p.group(3)), process_group=pg.group(1) if pg else None,
                                **base))
    if "Some NCCL operations have failed or timed out" in text:
        out.append(NcclAbort(**base))
    if "NCCL WARN" in text and (warn := _nccl_warn(text, base)):
        out.append(warn)
    if "Init COMPLETE" in text and (c := _COMM.search(text)):
        head = _NCCL_HEAD.search(text)
        cbase: _Base = {"t": ctx.t, "rank": int(c.group(2)), "local_rank": ctx.local_rank}
        out.append(NcclCommInit(nranks=int(c.group(3)), cuda_device=int(c.group(4)),
                                nvml_device=_int(c.group(5)), bus_id=nccl_bus_id(c.group(6)), comm_id=c.group(7),
                                host=head.group(1) if head else None, pid=int(head.group(2)) if head else None,
                                **cbase))
    if "ccl" in text or "NCCL" in text:
        if err := _nccl_error(text, base):
            out.append(err)
    out.extend(_faults(text, base))
    if m := _CHILD_FAILED.search(text):
        out.append(ProcessEnd(how="child-failed", exit_code=int(m.group(1)), pid=int(m.group(3)),
                              t=ctx.t, rank=base["rank"], local_rank=int(m.group(2))))
    elif m := _WORKER_DIED.search(text):
        out.append(ProcessEnd(how="child-failed", exit_code=int(m.group(2)), pid=int(m.group(1)),
                              **base))
    if m := _TERMINATE.search(text):
        out.append(ProcessEnd(how="terminate", exc_type=m.group(1), **base))
    if "Killed" in text and (k := _KILLED.search(text)):
        out.append(ProcessEnd(how="killed", exit_code=137, pid=_int(k.group(1)), **base))
    return out


def parse_line(line: str) -> list[Signal]:
    """Every signal one log line holds (no state: a traceback's end needs :func:`scan_log`)."""
    if not isinstance(line, str):
        return []
    ctx = split_context(line)
    return _parse_text(ctx, _bounded(ctx.text))


# ---------------------------------------------------------------- a whole log


def _exception_end(lines: list[str], start: int) -> tuple[int, LineContext, str, str | None] | None:
    """The exception line that ends the traceback whose header is ``lines[start]``: (index, its
    context, exception type, message). Chained tracebacks are followed to the last one."""
    found = None
    i = start + 1
    stop = min(len(lines), start + _TRACEBACK_MAX_LINES)
    while i < stop:
        ctx = split_context(lines[i])
        text = _bounded(ctx.text)
        if text.startswith((" ", "\t")) or not text.strip() or text.startswith("^"):
            i += 1
            continue
        m = _EXCEPTION.match(text)
        if m:
            found = (i, ctx, m.group(1), m.group(2))
            # a chained traceback follows after a blank line and the "During handling" sentence
            j = i + 1
            while j < stop and j <= i + 3:
                nxt = split_context(lines[j]).text
                if nxt.startswith(_TRACEBACK):
                    break
                j += 1
            if j < stop and split_context(lines[j]).text.startswith(_TRACEBACK):
                i = j + 1
                continue
            return found
        if text.startswith(_TRACEBACK):
            i += 1
            continue
        return found
    return found


def _rendezvous(lines: list[str], start: int, ctx: LineContext) -> LauncherRendezvous:
    kv: dict[str, str] = {}
    for raw in lines[start + 1:start + 16]:
        m = _KV.match(split_context(raw).text)
        if not m:
            break
        kv[m.group(1)] = m.group(2).strip()

    def ints(key: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"-?\d{1,7}", kv.get(key, ""))[:4096])

    sizes = ints("global_world_sizes")
    return LauncherRendezvous(t=ctx.t, rank=ctx.rank, local_rank=ctx.local_rank,
                              master_addr=kv.get("master_addr") or None, group_rank=_int(kv.get("group_rank")),
                              group_world_size=_int(kv.get("group_world_size")), local_ranks=ints("local_ranks"),
                              global_ranks=ints("global_ranks"), world_size=sizes[0] if sizes else None)


def scan_log(text: str, *, max_signals: int = 10_000) -> Iterator[tuple[int, Signal]]:
    """Every signal of a whole log, with its 1-based line number, in line order.

    One regular-expression pass over the text finds the lines worth parsing; a traceback's end
    and torchrun's rendezvous block are read from the lines after their header. At most
    ``max_signals`` records; never raises."""
    if not isinstance(text, str) or not text:
        return
    emitted = 0
    line_no = 1
    pos = 0  # start of the line numbered line_no
    done_to = 0  # text before this offset is parsed (the rest of a line, a traceback block)
    for hit in _trigger_positions(text):
        if hit < done_to:
            continue
        start = text.rfind("\n", 0, hit) + 1
        line_no += text.count("\n", pos, start)
        pos = start
        end = text.find("\n", hit)
        end = len(text) if end < 0 else end
        done_to = end + 1
        ctx = split_context(text[start:end])
        body = _bounded(ctx.text)
        records: list[tuple[int, Signal]] = [(line_no, s) for s in _parse_text(ctx, body)]
        if body.startswith(_TRACEBACK) or _RENDEZVOUS in body:
            block = text[start:end + 1 + _TRACEBACK_MAX_LINES * 512].split("\n", _TRACEBACK_MAX_LINES)
            block = block[:_TRACEBACK_MAX_LINES]
            if not body.startswith(_TRACEBACK):
                records.append((line_no, _rendezvous(block, 0, ctx)))
            elif found := _exception_end(block, 0):
                idx, ectx, exc_type, message = found
                records.append((line_no + idx, ProcessEnd(
                    how="exception", exc_type=exc_type, message=_cut(message) if message else None, t=ectx.t,
                    rank=ectx.rank if ectx.rank is not None else ctx.rank, local_rank=ectx.local_rank)))
                # the exception line's own signals (a CUDA OOM, an NCCL error...) come with it
                records.extend((line_no + idx, s) for s in _parse_text(ectx, _bounded(ectx.text)))
                done_to = max(done_to, start + sum(len(b) + 1 for b in block[:idx + 1]))
        for rec in records:
            yield rec
            emitted += 1
            if emitted >= max_signals:
                return


def last_timestamp(text: str) -> tuple[int, float] | None:
    """The last line of a log that carries an engine or kubelet timestamp: (line number, unix
    seconds). "Stopped logging first" across ranks is read from this."""
    if not isinstance(text, str) or not text:
        return None
    end = len(text)
    seen = 0
    while end > 0 and seen < 64:
        start = text.rfind("\n", 0, end - 1) + 1 if end > 0 else 0
        line = text[start:end]
        m = _TS.match(line)
        if m:
            t = parse_iso_unix(m.group(1))
            if t is not None:
                return text.count("\n", 0, start) + 1, t
        end = start
        seen += 1
        if start == 0:
            break
    return None


def newest_lines(data: bytes, max_bytes: int) -> tuple[bytes, int]:
    """The newest whole lines of ``data`` within ``max_bytes``, and how many bytes were dropped.

    A log is cut at its start (the crash is at its end): the first line kept starts after a
    newline, so no half line begins it; a single line longer than ``max_bytes`` keeps its end."""
    if len(data) <= max_bytes:
        return data, 0
    cut = data[len(data) - max_bytes:]
    nl = cut.find(b"\n")
    if 0 <= nl < len(cut) - 1:
        cut = cut[nl + 1:]
    return cut, len(data) - len(cut)
