"""CUDA's own words in a workload's log: out of memory, and the faults that end a CUDA context.

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
* CUDA faults: ``an illegal memory access was encountered``, ``uncorrectable ECC error
  encountered``, ``device-side assert triggered`` (and the kernel's ``Assertion `...` failed.``),
  ``GPU is lost``, ``no CUDA-capable device is detected``, ``Driver/library version mismatch``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from forensics.parsing.logsignals.line import Signal, SignalBase, cut_text, to_int

__all__ = ["TRIGGER_WORDS", "CudaFault", "CudaOom", "parse_faults", "parse_oom", "size_bytes"]

TRIGGER_WORDS = (
    "out of memory", "OUT_OF_MEMORY", "OOM when allocating", "cudaErrorMemoryAllocation",
    "illegal memory access", "ILLEGAL_ADDRESS", "IllegalAddress", "ECC", "device-side assert", "Assertion `",
    "GPU is lost", "DevicesUnavailable", "CUDA-capable", "NO_DEVICE", "No CUDA GPUs", "version mismatch",
    "driver version is insufficient", "driver on your system is too old",
)


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
class CudaFault(Signal):
    """A CUDA fault: ``fault`` one of illegal-memory-access, ecc-uncorrectable,
    device-side-assert, gpu-lost, no-device, driver-mismatch; ``code`` the numeric CUDA error when
    printed; ``pci_bus_id`` when named (GPU is lost); ``detail`` the assertion or message."""

    kind: ClassVar[str] = "cuda-fault"
    fault: str
    code: int | None = None
    pci_bus_id: str | None = None
    detail: str | None = None


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

_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8,
                "float64": 8, "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int": 4,
                "int64": 8, "bool": 1, "complex64": 8, "complex128": 16}

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


def parse_oom(text: str, base: SignalBase) -> CudaOom | None:
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


def parse_faults(text: str, base: SignalBase) -> list[CudaFault]:
    out: list[CudaFault] = []
    for fault, pattern in _FAULTS:
        if not pattern.search(text):
            continue
        if fault == "device-side-assert" and "triggered" not in text and not _ASSERTION.search(text):
            continue
        c = _CUDA_CODE.search(text)
        code = to_int(next((g for g in c.groups() if g), None)) if c else None
        pci = _PCI.search(text) if fault == "gpu-lost" else None
        assertion = _ASSERTION.search(text) if fault == "device-side-assert" else None
        out.append(CudaFault(fault=fault, code=code, pci_bus_id=pci.group(1) if pci else None,
                             detail=cut_text(assertion.group(1)) if assertion else None, **base))
    return out
