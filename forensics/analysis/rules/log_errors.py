"""Which of a workload's log signals is an error ``workload-cuda-error`` reports, and its words.

A CUDA out-of-memory error, a CUDA fault, an NCCL asynchronous error (the watchdog found an NCCL or
CUDA error on a collective: not a timeout), and a worker's death as its launcher reports it (vLLM
V1's ``Worker proc VllmWorker-N died unexpectedly``): each is one error kind. A worker's death is
linked to the CUDA error the same workload's same log and rank logged before it (:func:`error_before`).
"""

from __future__ import annotations

from forensics.analysis.events import LogSignal
from forensics.parsing.logsignals.cuda import CudaFault, CudaOom
from forensics.parsing.logsignals.line import Signal
from forensics.parsing.logsignals.nccl import NcclAsyncError
from forensics.parsing.logsignals.process import ProcessEnd

__all__ = ["APPLICATION", "FAULT_WORDS", "error_before", "error_of"]

# faults the application itself causes (a bug, a full GPU): medium; the rest say the GPU or its
# driver failed under the workload: high
APPLICATION = frozenset({"out-of-memory", "device-side-assert", "nccl-async-error"})
FAULT_WORDS = {
    "out-of-memory": "CUDA out-of-memory error",
    "illegal-memory-access": "CUDA illegal memory access",
    "ecc-uncorrectable": "uncorrectable ECC error",
    "device-side-assert": "CUDA device-side assert",
    "gpu-lost": "GPU is lost",
    "no-device": "no CUDA-capable device",
    "driver-mismatch": "CUDA driver/library version mismatch",
    "launch-failure": "CUDA unspecified launch failure",
    "illegal-instruction": "CUDA illegal instruction",
    "misaligned-address": "CUDA misaligned address",
    "nccl-async-error": "NCCL asynchronous error",
    "worker-died": "worker death",
}


def error_of(sig: Signal) -> str | None:
    """The error kind a signal is (``FAULT_WORDS``' keys), None when it is no error of this kind."""
    if isinstance(sig, CudaOom):
        return "out-of-memory"
    if isinstance(sig, CudaFault):
        return sig.fault
    if isinstance(sig, NcclAsyncError):
        return "nccl-async-error"
    if isinstance(sig, ProcessEnd) and sig.worker is not None:
        return "worker-died"
    return None


def error_before(death: LogSignal, groups: dict[tuple[str, tuple[str, str, str], str], list[LogSignal]],
                 node: str, writer: tuple[str, str, str]) -> tuple[str, float] | None:
    """The CUDA error the same workload's same log and rank logged before a worker's death (vLLM's
    worker of rank N prints its OOM or fault with ``(VllmWorker rank=N pid=..)``): (error, time).

    ``writer`` is the death's writer (the key of the container or pod whose log it is; ``groups``
    are keyed by it): a log of the same name is not the same workload's (a StatefulSet's pod
    recreated between two captures writes ``kubernetes/logs/ns/trainer-0/...`` again), and two
    lines without a rank match on rank, so only the writer says they are one workload's."""
    sig = death.signal
    found: tuple[str, float] | None = None
    for (n, who, error), sigs in groups.items():
        if n != node or who != writer or error in ("worker-died", "nccl-async-error"):
            continue
        for s in sigs:
            t = s.signal.t
            if (s.evidence.member == death.evidence.member and s.signal.rank == sig.rank and t is not None
                    and sig.t is not None and t <= sig.t and (found is None or t > found[1])):
                found = (error, t)
    return found
