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
  runtime's ``CUDA error: out of memory`` and ``cudaErrorMemoryAllocation``. PyTorch >= 2.3 names the
  memory of CUDA graphs' private pools: ``Of the allocated memory 22.90 GiB is allocated by PyTorch,
  with 20.00 GiB allocated in private pools (e.g., CUDA Graphs), and 194.87 MiB is reserved by
  PyTorch but unallocated.`` (pytorch/pytorch#124673), and >= 2.1 the other processes on the GPU
  (``Process 1823 has 59.02 GiB memory in use.``); ROCm builds say ``HIP out of memory`` and
  ``(e.g., HIP Graphs)`` in the same message.
* JAX/XLA: ``RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 bytes.``
  (``Resource exhausted:`` before 2021, ``Out of memory allocating N bytes.``), XLA's BFC allocator
  ``Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.25TiB (rounded to 1374521760000)``
  (unless it says ``The caller indicates that this is not a failure``) and its CUDA async allocator
  ``gpu_async_1 cuMemAllocAsync failed to allocate 1225195446464 bytes``. ``memory_kind`` is
  ``device`` only where the line names a GPU (``GPU_0_bfc``, ``from device``, a GPU allocator); a
  line that names the host (``on host``, pinned host memory) is no GPU out-of-memory at all.
* CUDA faults: ``an illegal memory access was encountered``, ``uncorrectable ECC error
  encountered``, ``device-side assert triggered`` (and the kernel's ``Assertion `...` failed.``),
  ``unspecified launch failure`` (the CUDA face of Xid 13/31/43), ``an illegal instruction was
  encountered``, ``misaligned address``, ``GPU is lost``, ``no CUDA-capable device is detected``,
  ``Driver/library version mismatch``; the numeric code where printed (``Cuda failure 700 '...'``,
  ``cuda runtime error (38)``, ``CUDA_ERROR_ILLEGAL_ADDRESS``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from forensics.parsing.logsignals.line import Signal, SignalBase, cut_text, to_int

__all__ = ["TRIGGER_WORDS", "CudaFault", "CudaOom", "parse_faults", "parse_oom", "size_bytes"]

# The fragments a line worth parsing holds: one ``str.find`` pass each over a whole log, so the fewest
# that catch every form (a fragment shared by several: ``ut of memory`` for ``out of``/``Out of
# memory``, ``cudaError``/``CUDA_ERROR_`` for the runtime's and the driver API's names, ``driver `` for
# "CUDA driver version is insufficient" and "The NVIDIA driver on your system is too old"; a fragment
# of a few letters is slower to find than a longer word, so a short one serves only several forms)
TRIGGER_WORDS = (
    "ut of memory", "OOM when allocating", "cudaError", "CUDA_ERROR_", "illegal memory access",
    "illegal instruction", "ECC error", "device-side assert", "Assertion `", "GPU is lost", "CUDA-capable",
    "No CUDA GPUs", "version mismatch", "driver ", "unspecified launch failure", "misaligned address",
    "RESOURCE_EXHAUSTED",
)


@dataclass(frozen=True, kw_only=True)
class CudaOom(Signal):
    """A CUDA out-of-memory error. ``framework``: pytorch, tensorflow, xla (JAX and XLA's
    allocators) or cuda (the runtime's own words). ``cuda_device`` is the ordinal *as the process saw it* (after CUDA_VISIBLE_DEVICES),
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
    private_pool_bytes: int | None = None  # PyTorch >= 2.3: of allocated_bytes, in CUDA graphs' private pools
    other_processes: tuple[tuple[int, int], ...] = ()  # PyTorch >= 2.1: (pid, bytes) of the GPU's other processes
    memory_kind: str | None = None  # "device" where the line names the GPU's memory (XLA); None: not said


@dataclass(frozen=True, kw_only=True)
class CudaFault(Signal):
    """A CUDA fault: ``fault`` one of illegal-memory-access, ecc-uncorrectable,
    device-side-assert, launch-failure, illegal-instruction, misaligned-address, gpu-lost, no-device,
    driver-mismatch; ``code`` the numeric CUDA error when
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
_OOM_NEW = re.compile(r"(?:CUDA|HIP) out of memory\. Tried to allocate (" + _SIZE + r")\. GPU (\d{1,4}) has a total "
                      r"capac(?:i)?ty of (" + _SIZE + r") of which (" + _SIZE + r") is free\.")
_OOM_PROC = re.compile(r"this process has (" + _SIZE + r") memory in use")
_OOM_ALLOC_NEW = re.compile(r"Of the allocated memory (" + _SIZE + r") is allocated by PyTorch,(?: with ("
                            + _SIZE + r") allocated in private pools \(e\.g\., (?:CUDA|HIP) Graphs\),)? and ("
                            + _SIZE + r") is reserved by PyTorch but unallocated")
_OOM_OTHER = re.compile(r"Process (\d{1,10}) has (" + _SIZE + r") memory in use")
_XLA_OOM = re.compile(r"(?:RESOURCE_EXHAUSTED|Resource exhausted): Out of memory (?:while trying to allocate|allocating) "
                      r"(\d{1,20}) bytes")
_XLA_BFC = re.compile(r"Allocator \((GPU|gpu)_(\d{1,4})_bfc\) ran out of memory trying to allocate (" + _SIZE
                      + r")(?: \(rounded to (\d{1,20})\))?")
_XLA_ASYNC = re.compile(r"gpu_async_(\d{1,4}) cuMemAllocAsync failed to allocate (\d{1,20}) bytes")
_XLA_REQUEST = re.compile(r"Failed to allocate request for (" + _SIZE + r") \((\d{1,20})B\) on device ordinal (\d{1,4})")
_UNIFIED = re.compile(r"failed to alloc (\d{1,20}) bytes unified memory")
_HOST = re.compile(r"\b(?:on|from) host\b|pinned host|host memory|\(host\)|_host_bfc|cpu_bfc|Allocator \(cpu")
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
    ("launch-failure", re.compile(r"unspecified launch failure|CUDA_ERROR_LAUNCH_FAILED|cudaErrorLaunchFailure")),
    ("illegal-instruction", re.compile(r"an illegal instruction was encountered|CUDA_ERROR_ILLEGAL_INSTRUCTION")),
    ("misaligned-address", re.compile(r"misaligned address|CUDA_ERROR_MISALIGNED_ADDRESS")),
)
_CUDA_CODE = re.compile(r"cuda runtime error \((\d{1,4})\)|error=(\d{1,4})\b|\(code #(\d{1,4})|Error (\d{1,4}): "
                        r"|(?:[Cc]uda|CUDA) failure (\d{1,4})\b|CUDA error (\d{1,4})\b|CUDA error no\.=(\d{1,4})")
# the CUDA driver API's names and codes, where a line prints the name only
_CUDA_NAMED = {"CUDA_ERROR_ILLEGAL_ADDRESS": 700, "CUDA_ERROR_LAUNCH_FAILED": 719, "CUDA_ERROR_ECC_UNCORRECTABLE": 214,
               "CUDA_ERROR_ILLEGAL_INSTRUCTION": 715, "CUDA_ERROR_MISALIGNED_ADDRESS": 716, "CUDA_ERROR_NO_DEVICE": 100}
_ASSERTION = re.compile(r"Assertion `(.{0,300})` failed")
_PCI = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")


def _xla_oom(text: str, base: SignalBase) -> CudaOom | None:
    """JAX/XLA's out-of-memory lines; None for the host's memory or a retry XLA says is no failure."""
    if _HOST.search(text) or "not a failure" in text:
        return None
    if m := _XLA_BFC.search(text):
        rounded = to_int(m.group(4))
        return CudaOom(framework="xla", requested_bytes=rounded if rounded is not None else size_bytes(m.group(3)),
                       cuda_device=int(m.group(2)), memory_kind="device", **base)
    if m := _XLA_ASYNC.search(text):
        return CudaOom(framework="xla", requested_bytes=int(m.group(2)), cuda_device=int(m.group(1)),
                       memory_kind="device", **base)
    if m := _XLA_REQUEST.search(text):
        return CudaOom(framework="xla", requested_bytes=int(m.group(2)), cuda_device=int(m.group(3)),
                       memory_kind="device", **base)
    if m := _XLA_OOM.search(text):
        return CudaOom(framework="xla", requested_bytes=int(m.group(1)), **base)
    return None


def parse_oom(text: str, base: SignalBase) -> CudaOom | None:
    m = _OOM_NEW.search(text)
    if m:
        alloc = _OOM_ALLOC_NEW.search(text, m.end())
        proc = _OOM_PROC.search(text, m.end())
        allocated = size_bytes(alloc.group(1)) if alloc else None
        pools = size_bytes(alloc.group(2)) if alloc and alloc.group(2) else None
        unalloc = size_bytes(alloc.group(3)) if alloc else None
        others = tuple((int(pid), b) for pid, size in _OOM_OTHER.findall(text, m.end())[:64]
                       if (b := size_bytes(size)) is not None)
        return CudaOom(framework="pytorch", requested_bytes=size_bytes(m.group(1)), cuda_device=int(m.group(2)),
                       total_bytes=size_bytes(m.group(3)), free_bytes=size_bytes(m.group(4)),
                       allocated_bytes=allocated, private_pool_bytes=pools, other_processes=others,
                       reserved_bytes=None if allocated is None or unalloc is None else allocated + unalloc,
                       process_used_bytes=size_bytes(proc.group(1)) if proc else None, memory_kind="device",
                       **base)
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
        return CudaOom(framework="tensorflow", requested_bytes=int(m.group(2)), memory_kind="device", **base)
    if m := _UNIFIED.search(text):  # managed memory: the GPU's or the host's, the line does not say
        return CudaOom(framework="tensorflow", requested_bytes=int(m.group(1)), **base)
    if "on host: CUDA_ERROR_OUT_OF_MEMORY" in text:
        return None  # pinned host memory, not the GPU's
    if ("XHAUSTED" in text or "xhausted" in text or "ran out of memory" in text or "cuMemAllocAsync" in text) and (
            xla := _xla_oom(text, base)) is not None:
        return xla
    if _HOST.search(text):
        return None
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
        if code is None and "CUDA_ERROR_" in text:
            code = next((n for name, n in _CUDA_NAMED.items() if name in text), None)
        pci = _PCI.search(text) if fault == "gpu-lost" else None
        assertion = _ASSERTION.search(text) if fault == "device-side-assert" else None
        out.append(CudaFault(fault=fault, code=code, pci_bus_id=pci.group(1) if pci else None,
                             detail=cut_text(assertion.group(1)) if assertion else None, **base))
    return out
