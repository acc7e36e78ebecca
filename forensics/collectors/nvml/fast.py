"""The sampling tick's two list calls without pynvml's per-entry Python: the running-process lists
(``nvmlDevice{Compute,Graphics,MPSCompute}RunningProcesses_v3``) and per-process utilisation
(``nvmlDeviceGetProcessUtilization``).

pynvml builds one ``nvmlFriendlyObject`` per process through its structures' ``__getattribute__``
hook (about 5 µs a process: 2.7 ms a tick at 8 GPUs x 64 processes, most of the sampler's CPU).
:class:`ListCalls` calls the symbols pynvml's wrappers call, with the same arguments, into buffers
it keeps across ticks, and unpacks the entries with one ``struct.iter_unpack`` over the buffer's
bytes. Per-process utilisation keeps pynvml's two-call size protocol (count, then samples); a
process list is asked for at once into the kept buffer, pynvml's protocol only when that is too
small (:meth:`ListCalls.process_rows`: the same answer from the driver, one call instead of two).
Each answer is what :func:`~forensics.collectors.nvml.decode.to_jsonable` makes of pynvml's
(field names, ``usedGpuMemory`` None where NVML says "not available"); a failure raises pynvml's
own ``NVMLError`` subclass for the return code, as pynvml's wrapper would.

:func:`bind` gives None (the sampler keeps pynvml's wrappers) when the module is not pynvml as
expected (no ``_nvmlGetFunctionPointer``, a structure whose layout this module does not know) or
the library lacks a ``_v3`` symbol: that fallback, and its error classes, stay pynvml's.
"""

from __future__ import annotations

import ctypes
import operator
import struct
from typing import Any

__all__ = ["SAMPLE_FIELDS", "SAMPLE_STAMP", "ListCalls", "Samples", "bind"]

_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong: pynvml gives None
_CODES = {ctypes.c_uint: "I", ctypes.c_ulonglong: "Q", ctypes.c_int: "i", ctypes.c_longlong: "q"}
if ctypes.sizeof(ctypes.c_ulong) == 8:
    _CODES[ctypes.c_ulong] = "Q"
else:  # pragma: no cover - 32-bit longs
    _CODES[ctypes.c_ulong] = "I"
_PROCESS_FIELDS = ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId")
SAMPLE_FIELDS = ("pid", "timeStamp", "smUtil", "memUtil", "encUtil", "decUtil")
SAMPLE_STAMP = operator.itemgetter(SAMPLE_FIELDS.index("timeStamp"))  # a sample row's timestamp
#: the sampler's list calls: pynvml's unversioned name -> the symbol its wrapper calls
PROCESS_SYMBOLS = {
    "nvmlDeviceGetComputeRunningProcesses": "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses": "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses": "nvmlDeviceGetMPSComputeRunningProcesses_v3",
}


def _layout(kind: Any, names: tuple[str, ...]) -> struct.Struct | None:
    """A ``struct`` format reading ``kind``'s fields ``names`` (in that order, all of them, padding
    where ctypes puts it), or None when the structure is not laid out so."""
    fields = getattr(kind, "_fields_", None)
    if not isinstance(fields, list | tuple) or tuple(f[0] for f in fields) != names:
        return None
    fmt, pos = "=", 0
    for name, ctype, *bits in fields:
        code = _CODES.get(ctype)
        offset = getattr(kind, name).offset
        if code is None or bits or offset < pos:
            return None
        fmt += "x" * (offset - pos) + code
        pos = offset + ctypes.sizeof(ctype)
    fmt += "x" * (ctypes.sizeof(kind) - pos)
    layout = struct.Struct(fmt)
    return layout if layout.size == ctypes.sizeof(kind) else None


class Samples(list):  # type: ignore[type-arg]
    """:meth:`ListCalls.process_utilization`'s answer: a list of the samples' dicts (JSON writes it
    as any list), and ``rows``: the same samples as unpacked, ints in the structure's field order
    (:data:`SAMPLE_FIELDS`), for the line encoder (encode.py)."""

    __slots__ = ("rows",)
    rows: list[tuple[int, ...]]


class ListCalls:
    """The list calls of one pynvml module bound to one library (see the module docstring)."""

    def __init__(self, nv: Any, functions: dict[str, Any], process_layout: struct.Struct,
                 sample_layout: struct.Struct) -> None:
        self.nv = nv
        self._fn = functions
        self._proc = process_layout
        self._sample = sample_layout
        self._proc_type: Any = nv.c_nvmlProcessInfo_v3_t
        self._sample_type: Any = nv.c_nvmlProcessUtilizationSample_t
        self._buffers: dict[Any, Any] = {}  # entry type -> the largest array made so far
        self._count = ctypes.c_uint(0)
        self._count_ref = ctypes.byref(self._count)
        self._insufficient = int(nv.NVML_ERROR_INSUFFICIENT_SIZE)
        self._function_not_found = int(nv.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _buffer(self, kind: Any, n: int) -> Any:
        buf = self._buffers.get(kind)
        if buf is None or len(buf) < n:
            buf = self._buffers[kind] = (kind * max(n, 8))()
        return buf

    def _error(self, func: str, ret: int) -> Any:
        """What pynvml raises for return code ``ret`` of ``func``: its unversioned process-list
        wrappers turn FunctionNotFound into ``NVMLLibraryMismatchError`` (``throwOnVersionMismatch``)."""
        nv = self.nv
        if ret == self._function_not_found and func in PROCESS_SYMBOLS:
            return nv.NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib version. "
                "Either use matching pyNVML and NVML lib versions or use a versioned function such as "
                f"{func}_v2")
        return nv.NVMLError(ret)

    def _filled(self, asked: int, strict: bool) -> int:
        """Entries the library says it wrote. More than it was given room for: pynvml's process
        lists index past their array (IndexError), its utilisation call slices (what fits)."""
        n = self._count.value
        if n > asked:
            if strict:
                raise IndexError("invalid index")
            return asked
        return n

    def process_rows(self, func: str, handle: Any) -> list[tuple[int, int | None, int, int]]:
        """``pynvml.<func>(handle)`` (``func`` a key of :data:`PROCESS_SYMBOLS`) as rows
        ``(pid, usedGpuMemory, gpuInstanceId, computeInstanceId)``: pynvml's objects' fields
        (``usedGpuMemory`` None where NVML says "not available").

        One call where pynvml makes two: pynvml asks for the count first (no array), then for the
        entries with room for ``count * 2 + 5``; this asks for the entries at once, in the array
        kept from the calls before (room for at least 8, or for the most a list has needed). NVML
        fills an array that is big enough and says how many it wrote (``NVML_SUCCESS``, 0 for an
        empty list), or answers ``NVML_ERROR_INSUFFICIENT_SIZE`` with the count it needs: then the
        entries are asked for again as pynvml asks, with room for ``count * 2 + 5``. Either way
        the answer is the list as the driver holds it at that call (pynvml's second call's answer
        is too), so the rows are the same; a steady GPU's list costs one driver call a tick, not two."""
        fn, count = self._fn[func], self._count
        buf = self._buffer(self._proc_type, 0)
        count.value = asked = len(buf)
        ret = fn(handle, self._count_ref, buf)
        if ret == self._insufficient:
            count.value = asked = count.value * 2 + 5  # as pynvml: room for processes started since
            buf = self._buffer(self._proc_type, asked)
            ret = fn(handle, self._count_ref, buf)
        if ret != 0:
            raise self._error(func, ret)
        n = self._filled(asked, True)
        if n == 0:
            return []
        return [(pid, None if used == _NOT_AVAILABLE else used, gi, ci)
                for pid, used, gi, ci in self._proc.iter_unpack(ctypes.string_at(buf, n * self._proc.size))]

    def process_utilization(self, handle: Any, last_seen: int) -> Samples:
        """``pynvml.nvmlDeviceGetProcessUtilization(handle, last_seen)`` as to_jsonable makes it
        (with the unpacked rows kept: :class:`Samples`)."""
        fn, count = self._fn["nvmlDeviceGetProcessUtilization"], self._count
        stamp = ctypes.c_ulonglong(last_seen)
        count.value = 0
        ret = fn(handle, None, self._count_ref, stamp)
        if ret != self._insufficient:
            raise self._error("nvmlDeviceGetProcessUtilization", ret)  # pynvml raises even NVML_SUCCESS here
        asked = count.value
        buf = self._buffer(self._sample_type, asked)
        ret = fn(handle, buf, self._count_ref, stamp)
        if ret != 0:
            raise self._error("nvmlDeviceGetProcessUtilization", ret)
        n = self._filled(asked, False)
        rows = list(self._sample.iter_unpack(ctypes.string_at(buf, n * self._sample.size)))
        out = Samples([{"pid": pid, "timeStamp": ts, "smUtil": sm, "memUtil": mem, "encUtil": enc, "decUtil": dec}
                       for pid, ts, sm, mem, enc, dec in rows])
        out.rows = rows
        return out


def bind(nv: Any) -> ListCalls | None:
    """:class:`ListCalls` for pynvml module ``nv`` (initialised), or None (see the module docstring)."""
    get = getattr(nv, "_nvmlGetFunctionPointer", None)
    proc_type = getattr(nv, "c_nvmlProcessInfo_v3_t", None)
    sample_type = getattr(nv, "c_nvmlProcessUtilizationSample_t", None)
    if get is None or proc_type is None or sample_type is None:
        return None
    proc = _layout(proc_type, _PROCESS_FIELDS)
    sample = _layout(sample_type, SAMPLE_FIELDS)
    if proc is None or sample is None:
        return None
    functions: dict[str, Any] = {}
    try:
        for name, symbol in PROCESS_SYMBOLS.items():
            functions[name] = get(symbol)
        functions["nvmlDeviceGetProcessUtilization"] = get("nvmlDeviceGetProcessUtilization")
    except Exception:  # noqa: BLE001 - a symbol missing: pynvml's wrappers (and their errors) then
        return None
    return ListCalls(nv, functions, proc, sample)
