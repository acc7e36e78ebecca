"""NCCL in a workload's log: PyTorch's watchdog on its collectives and NCCL's own lines.

* NCCL through ``ProcessGroupNCCL.cpp``: ``[Rank 0] Watchdog caught collective operation timeout:
  WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168,
  Timeout(ms)=600000) ran for 600060 milliseconds before timing out.`` (no Numel before 2.1),
  ``... timed out in blocking wait``, the watchdog's ``Exception (either an error or timeout)
  detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work:
  1579.`` (2.4: ``failure detected by watchdog at work sequence id: N PG status: last enqueued
  work: N, last completed work: N``), ``Some NCCL operations have failed or timed out``.
* NCCL's own ``host:pid:tid [cudaDev] file.cc:line NCCL WARN <text>`` and ``NCCL INFO comm 0x..
  rank 36 nranks 64 cudaDev 4 nvmlDev 4 busId 9b000 ... Init COMPLETE``; result codes
  ``ncclSystemError``, ``ncclInternalError``, ``ncclRemoteError``, ``ncclUnhandledCudaError``...
  and ``NCCL error in: <file>:<line>, unhandled system error, NCCL version 2.10.3``.
* An asynchronous NCCL error the watchdog found (not a timeout): ``[Rank 0] Collective
  WorkNCCL(SeqNum=89, OpType=ALLREDUCE, NumelIn=67108864, Timeout(ms)=90000) raised the following
  async exception: NCCL error: remote process exited or there was a network error`` and the
  watchdog's ``Process group watchdog thread terminated with exception: NCCL error: ...``
  (``NCCL watchdog thread terminated with exception`` before 2.2).
* NCCL's socket calls: ``NCCL WARN Net : Call to recv from 10.1.2.3<43210> failed : Connection
  reset by peer`` (call, peer, error and its errno).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import ClassVar

from forensics.errors import ParseError
from forensics.parsing.logsignals.line import Signal, SignalBase, cut_text, to_int
from forensics.parsing.pci import normalize_pci_bus_id

__all__ = ["TRIGGER_WORDS", "NcclAbort", "NcclAsyncError", "NcclCommInit", "NcclError", "NcclProgress", "NcclTimeout",
           "NcclWarn", "nccl_bus_id", "parse_nccl"]

TRIGGER_WORDS = (  # ``nccl`` for every result code's name (ncclSystemError, ncclRemoteError...)
    "WorkNCCL", "last completed", "Some NCCL operations", "NCCL WARN", "Init COMPLETE", "nccl", "NCCL error",
    "NCCL Error",
)


@dataclass(frozen=True, kw_only=True)
class NcclAsyncError(Signal):
    """An NCCL error the watchdog found on a collective (or that ended the watchdog): not a
    timeout. ``seq``/``op_type`` the collective's when named; ``code`` the NCCL result
    (``ncclRemoteError``...), ``error`` its words, ``nccl_version`` when printed."""

    kind: ClassVar[str] = "nccl-async-error"
    error: str
    seq: int | None = None
    op_type: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    code: str | None = None
    nccl_version: str | None = None
    process_group: str | None = None


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
    """``NCCL WARN``: ``call`` the failing call (``ibv_reg_mr_iova2``, ``socketStartConnect``, ``recv``,
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
    peer: str | None = None  # the address a socket call was to or from (``10.1.2.3<43210>``)
    code: int | None = None  # a CUDA error's number (``Cuda failure 700 '...'``)


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


def nccl_bus_id(value: str) -> str | None:
    """NCCL's ``busId`` (the PCI id's hex digits as one number: ``9b000``, ``1a000``) ->
    ``0000:9b:00.0``; None when not hex."""
    if not value or len(value) > 16 or not re.fullmatch(r"[0-9a-fA-F]+", value):
        return None
    s = value.zfill(6)  # the domain is what stands before bus (2), device (2) and function (1)
    domain = s[:-5].lstrip("0") or "0"
    try:  # the one PCI form of the bundle (forensics.parsing.pci), so a rank's GPU joins its NVML GPU
        return normalize_pci_bus_id(f"{domain}:{s[-5:-3]}:{s[-3:-1]}.{s[-1]}")
    except ParseError:  # a function digit above 7, a domain over 8 digits: no PCI address
        return None


_STRERROR = {os.strerror(n): n for n in range(1, 134)}

_PG = re.compile(r"\[PG (?:ID )?(\d{1,6})")
_WORK = re.compile(r"WorkNCCL\(SeqNum=(\d{1,20}), OpType=(\w{1,40})((?:, \w{1,20}=\d{1,20})*), "
                   r"Timeout\(ms\)=(\d{1,20})\)")
_NUMEL = re.compile(r"(NumelIn|NumelOut)=(\d{1,20})")
_RAN_FOR = re.compile(r"ran for (\d{1,20}) milliseconds before timing out")
_PROGRESS = re.compile(r"(?:detected by watchdog at work|Timeout at NCCL work|watchdog at work sequence id):? "
                       r"(\d{1,20})\b.{0,80}?last enqueued (?:NCCL )?work: (-?\d{1,20}), last completed "
                       r"(?:NCCL )?work: (-?\d{1,20})")
_NCCL_HEAD = re.compile(r"(?:^|\s)([\w.-]{1,253}):(\d{1,10}):\d{1,10} \[(\d{1,4})\] (?:([\w./-]{1,200}:\d{1,6}) )?"
                        r"NCCL (WARN|INFO) ")
_CALL_FAILED = re.compile(r"Call to (\w{1,80})(?: (?:from|to) (\S{1,200}))? failed(?: with error (.{1,200})| ?: (.{1,200}))?")
_ASYNC = re.compile(r"raised the following async exception: (.{1,600})|watchdog thread terminated with exception: "
                    r"((?:NCCL|CUDA) error.{0,600})")
_CUDA_FAILURE = re.compile(r"Cuda failure (?:(\d{1,6}) )?'([^']{0,200})'")
_FN_FAILED = re.compile(r"^(\w{1,80}): .{0,300}? failed : (.{1,200})$")
_CONNECT_FAILED = re.compile(r"Connect to \S{1,200} failed : (.{1,200})")
_ERROR_RC = re.compile(r"RC: (\d{1,6}), Error: (.{1,200})")
_COMM = re.compile(r"comm (0x[0-9a-f]{1,16}) rank (\d{1,7}) nranks (\d{1,7}) cudaDev (\d{1,4})"
                   r"(?: nvmlDev (\d{1,4}))? busId ([0-9a-fA-F]{1,16})(?: commId (0x[0-9a-f]{1,16}))?")
_NCCL_CODE = re.compile(r"\b(nccl(?:SystemError|InternalError|RemoteError|UnhandledCudaError|InvalidArgument"
                        r"|InvalidUsage))\b")
_NCCL_ERROR_IN = re.compile(r"NCCL [Ee]rror(?: in: \S{1,300}?:\d{1,6},| (\d))?:? ([a-z][a-z ,]{2,80}?)"
                            r"(?:, NCCL version|\s*\(|$)")
_NCCL_VERSION = re.compile(r"NCCL version (\d{1,3}\.\d{1,3}\.\d{1,3})")
_LAST_ERROR = re.compile(r"Last error:\s*(.{1,400})")
_NCCL_CODE_NAMES = {"1": "ncclUnhandledCudaError", "2": "ncclSystemError", "3": "ncclInternalError",
                    "4": "ncclInvalidArgument", "5": "ncclInvalidUsage", "6": "ncclRemoteError"}
_NCCL_DESC = (("unhandled cuda error", "ncclUnhandledCudaError"), ("unhandled system error", "ncclSystemError"),
              ("internal error", "ncclInternalError"), ("remote process exited", "ncclRemoteError"),
              ("invalid argument", "ncclInvalidArgument"), ("invalid usage", "ncclInvalidUsage"))


def _warn(text: str, base: SignalBase) -> NcclWarn | None:
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
    peer: str | None = None
    cuda_code: int | None = None
    if m := _CALL_FAILED.search(message):
        call, peer, error = m.group(1), m.group(2), m.group(3) or m.group(4)
    elif m := _CUDA_FAILURE.search(message):
        call, error, cuda_code = "cuda", m.group(2), to_int(m.group(1))
    elif m := _ERROR_RC.search(message):
        call, error, code = None, m.group(2), to_int(m.group(1))
    elif m := _FN_FAILED.match(message):
        call, error = m.group(1), m.group(2)
    elif m := _CONNECT_FAILED.search(message):
        call, error = "connect", m.group(1)
    if error is not None:
        error = error.strip().rstrip(".")
        code = _STRERROR.get(error, code)
    return NcclWarn(message=cut_text(message), host=host, pid=pid, cuda_device=dev, source=source, call=call,
                    error=error, errno=code, peer=peer, code=cuda_code, **base)


def _error(text: str, base: SignalBase) -> NcclError | None:
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
                     detail=cut_text(detail) if detail else None, **base)


def _async(text: str, base: SignalBase) -> NcclAsyncError | None:
    a = _ASYNC.search(text)
    if a is None:
        return None
    error = (a.group(1) or a.group(2) or "").strip()
    w = _WORK.search(text, 0, a.start())
    numel = dict(_NUMEL.findall(w.group(3))) if w else {}
    err = _error(error, base)
    pg = _PG.search(text)
    words = error.split(":", 1)[1].strip() if error.startswith(("NCCL error", "CUDA error")) else error
    return NcclAsyncError(error=cut_text(words.split(", NCCL version")[0]), seq=int(w.group(1)) if w else None,
                          op_type=w.group(2) if w else None, numel_in=to_int(numel.get("NumelIn")),
                          numel_out=to_int(numel.get("NumelOut")), timeout_ms=int(w.group(4)) if w else None,
                          code=err.code if err else None, nccl_version=err.nccl_version if err else None,
                          process_group=pg.group(1) if pg else None, **base)


def parse_nccl(text: str, base: SignalBase) -> list[Signal]:
    """Every NCCL signal of one line's message: watchdog timeout (or async error), progress,
    abort, WARN, the communicator line and a result code, in that order."""
    out: list[Signal] = []
    if "exception" in text and (asy := _async(text, base)) is not None:
        out.append(asy)
        if "Some NCCL operations have failed or timed out" in text:
            out.append(NcclAbort(**base))
        return out  # its result code and version are the async error's own
    if "WorkNCCL" in text and (w := _WORK.search(text)):
        numel = dict(_NUMEL.findall(w.group(3)))
        ran = _RAN_FOR.search(text, w.end())
        pg = _PG.search(text)
        out.append(NcclTimeout(seq=int(w.group(1)), op_type=w.group(2), numel_in=to_int(numel.get("NumelIn")),
                               numel_out=to_int(numel.get("NumelOut")), timeout_ms=int(w.group(4)),
                               elapsed_ms=int(ran.group(1)) if ran else None,
                               process_group=pg.group(1) if pg else None,
                               blocking_wait="timed out in blocking wait" in text, **base))
    if "last completed" in text and (p := _PROGRESS.search(text)):
        pg = _PG.search(text)
        out.append(NcclProgress(failed_seq=to_int(p.group(1)), last_enqueued_seq=to_int(p.group(2)),
                                last_completed_seq=to_int(p.group(3)), process_group=pg.group(1) if pg else None,
                                **base))
    if "Some NCCL operations have failed or timed out" in text:
        out.append(NcclAbort(**base))
    if "NCCL WARN" in text and (warn := _warn(text, base)):
        out.append(warn)
    if "Init COMPLETE" in text and (c := _COMM.search(text)):
        head = _NCCL_HEAD.search(text)
        cbase: SignalBase = {"t": base["t"], "rank": int(c.group(2)), "local_rank": base["local_rank"]}
        out.append(NcclCommInit(nranks=int(c.group(3)), cuda_device=int(c.group(4)),
                                nvml_device=to_int(c.group(5)), bus_id=nccl_bus_id(c.group(6)), comm_id=c.group(7),
                                host=head.group(1) if head else None, pid=int(head.group(2)) if head else None,
                                **cbase))
    if "ccl" in text or "NCCL" in text:
        if err := _error(text, base):
            out.append(err)
    return out
