"""What is read from NVML per GPU and per process (one function per group of calls, each
through :class:`~forensics.collectors.nvml.session.Session`), and the PID-namespace check of the
PIDs NVML reports."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.collectors.nvml.decode import (
    decode_clocks_event_reasons,
    decode_compute_mode,
    decode_enable_state,
    decode_event_types,
    decode_recovery_action,
)
from forensics.collectors.nvml.errors import missing_from
from forensics.collectors.nvml.session import Reading, Session
from forensics.errors import ParseError

__all__ = ["PROCESS_LISTS", "GpuHandle", "GpuProcess", "accounting_doc", "assess_pid_namespace", "bind_call",
           "gpu_process", "handle_key", "instance_id", "proc_identity", "pynvml_version", "read_accounting",
           "read_device", "read_fields", "read_health", "read_mig_devices", "read_processes"]

INVALID_PIDS = frozenset({0, 0xFFFFFFFF})
PROCESS_LISTS = (
    ("compute", "nvmlDeviceGetComputeRunningProcesses"),
    ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
    ("mps", "nvmlDeviceGetMPSComputeRunningProcesses"),
)
_FALLBACK_REASONS = frozenset({"library_mismatch", "not_supported", "invalid_argument"})
#: nvmlValueType_t -> the nvmlValue_t member that holds the value
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
_PCIE_LINK = ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
              "nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
              "nvmlDeviceGetMaxPcieLinkWidth")
_NVLINK_COUNTERS = ("NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY", "NVML_NVLINK_ERROR_DL_CRC_FLIT",
                    "NVML_NVLINK_ERROR_DL_CRC_DATA")
#: Links read per GPU at most (NVML_NVLINK_MAX_LINKS is 18 up to Hopper; Blackwell has 18 too).
MAX_NVLINKS = 18


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML lists on a GPU (derived; the raw lists are in processes.json)."""

    pid: int
    gpu_index: int
    gpu_uuid: str | None
    mig_uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    type: str
    used_memory_bytes: int | None
    pid_valid: bool
    in_proc: bool
    comm: str | None
    proc_start_ticks: int | None


# -- PIDs ---------------------------------------------------------------------------------------
def proc_identity(pid: int, proc_root: str = "/proc") -> tuple[bool, str | None, int | None]:
    """(exists in /proc, comm, start time in clock ticks) from ``/proc/<pid>/comm`` and ``stat``."""
    if pid in INVALID_PIDS:
        return False, None, None
    base = f"{proc_root}/{pid}"
    try:
        with open(f"{base}/stat", "rb") as f:
            stat = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return os.path.exists(base), None, None
    comm = stat[stat.find("(") + 1: stat.rfind(")")] if "(" in stat else None
    start: int | None = None
    rest = stat[stat.rfind(")") + 2:].split()
    if len(rest) > 19 and rest[19].isdigit():
        start = int(rest[19])  # field 22 of proc_pid_stat(5)
    return True, comm, start


def assess_pid_namespace(pids: list[int], in_proc: dict[int, bool]) -> dict[str, Any]:
    """Whether NVML's PIDs (always host PIDs) can be used in this PID namespace.

    ``host``: every PID is in /proc. ``mismatch``: a PID is 0/4294967295 (a struct-version or
    namespace problem) or none is in /proc: capture runs in a PID namespace other than the host's,
    so no PID is handed on. ``partial``: some are missing (exited since NVML listed them, or a
    mismatch): only those present are handed on. ``no_processes``: nothing to judge.
    """
    unique = sorted(set(pids))
    invalid = [p for p in unique if p in INVALID_PIDS]
    valid = [p for p in unique if p not in INVALID_PIDS]
    missing = [p for p in valid if not in_proc.get(p, False)]
    present = [p for p in valid if in_proc.get(p, False)]
    if not unique:
        status = "no_processes"
    elif invalid or (valid and not present):
        status = "mismatch"
    elif missing:
        status = "partial"
    else:
        status = "host"
    reason = {
        "no_processes": "NVML listed no GPU processes",
        "host": "every PID NVML reported exists in this /proc",
        "partial": "some PIDs NVML reported are not in this /proc (exited, or another PID namespace)",
        "mismatch": "PIDs NVML reported are invalid or absent from this /proc: capture is not in the "
                    "host PID namespace (NVML always reports host PIDs); they are not attributed",
    }[status]
    usable = [] if status == "mismatch" else present
    return {"status": status, "reason": reason, "invalid_pids": invalid, "missing_pids": missing,
            "attributable_pids": usable, "own_pid_namespace": _own_pid_ns()}


def _own_pid_ns() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def handle_key(handle: Any) -> int | None:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


# -- device reads -------------------------------------------------------------------------------
@dataclass
class GpuHandle:
    """A GPU handle and its MIG devices within one session."""

    index: int
    key: str
    handle: Any = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    mig: list[tuple[int, Any, str | None]] = field(default_factory=list)  # (slot, handle, uuid)


def _mig_pair(v: Any) -> dict[str, str]:
    return {"current": decode_enable_state(int(v[0])), "pending": decode_enable_state(int(v[1]))}


def _remapped(v: Any) -> dict[str, int]:
    return {"corrRows": int(v[0]), "uncRows": int(v[1]), "isPending": int(v[2]), "failureOccurred": int(v[3])}


def _ecc_pair(v: Any) -> dict[str, str]:
    return _mig_pair(v)


def bind_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
    return lambda: fn(*args, **kwargs)


def pynvml_version(nv: Any) -> str | None:
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:  # noqa: BLE001
        return getattr(nv, "__version__", None)


def read_device(s: Session, gpu: GpuHandle, rec: dict[str, Any]) -> None:
    """The per-GPU snapshot (``nvidia-smi -q``): identity, modes, memory, clocks, thermals, ECC."""
    nv, d, out = s.nv, gpu.key, rec["nvml"]
    h = s.query("nvmlDeviceGetHandleByIndex_v2", bind_call(nv.nvmlDeviceGetHandleByIndex, gpu.index), device=d)
    if not h.ok:
        s.put(out, h.call, h)
        return
    gpu.handle = hd = h.raw
    uuid = s.record(out, "nvmlDeviceGetUUID", bind_call(nv.nvmlDeviceGetUUID, hd), device=d)
    gpu.uuid = uuid.value if uuid.ok else None
    s.record(out, "nvmlDeviceGetName", bind_call(nv.nvmlDeviceGetName, hd), device=d)
    s.record(out, "nvmlDeviceGetSerial", bind_call(nv.nvmlDeviceGetSerial, hd), device=d)
    s.record(out, "nvmlDeviceGetVbiosVersion", bind_call(nv.nvmlDeviceGetVbiosVersion, hd), device=d)
    pci = s.record(out, "nvmlDeviceGetPciInfo_v3", bind_call(nv.nvmlDeviceGetPciInfo_v3, hd), device=d)
    if pci.ok:
        gpu.pci_bus_id = str(pci.value.get("busId") or "") or None
    # N of /dev/nvidiaN (``nvidia-smi -q`` "Minor Number"): which device file is this GPU's
    s.record(out, "nvmlDeviceGetMinorNumber", bind_call(nv.nvmlDeviceGetMinorNumber, hd), device=d)
    s.record(out, "nvmlDeviceGetPersistenceMode", bind_call(nv.nvmlDeviceGetPersistenceMode, hd), device=d,
             decode=decode_enable_state)
    s.record(out, "nvmlDeviceGetComputeMode", bind_call(nv.nvmlDeviceGetComputeMode, hd), device=d,
             decode=decode_compute_mode)
    mig = s.record(out, "nvmlDeviceGetMigMode", bind_call(nv.nvmlDeviceGetMigMode, hd), device=d, decode=_mig_pair)
    read_memory(s, hd, d, out)
    s.record(out, "nvmlDeviceGetUtilizationRates", bind_call(nv.nvmlDeviceGetUtilizationRates, hd), device=d)
    for clock in ("NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM", "NVML_CLOCK_MEM"):
        s.record(out, f"nvmlDeviceGetClockInfo({clock})",
                 bind_call(nv.nvmlDeviceGetClockInfo, hd, getattr(nv, clock)), device=d)
    read_clock_reasons(s, hd, d, out)
    sup = s.query("nvmlDeviceGetSupportedClocksEventReasons",
                  bind_call(nv.nvmlDeviceGetSupportedClocksEventReasons, hd), device=d,
                  decode=decode_clocks_event_reasons)
    s.put(out, sup.call, sup)
    s.record(out, "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
             bind_call(nv.nvmlDeviceGetTemperature, hd, nv.NVML_TEMPERATURE_GPU), device=d)
    for thr in ("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN",
                "NVML_TEMPERATURE_THRESHOLD_GPU_MAX", "NVML_TEMPERATURE_THRESHOLD_MEM_MAX"):
        s.record(out, f"nvmlDeviceGetTemperatureThreshold({thr})",
                 bind_call(nv.nvmlDeviceGetTemperatureThreshold, hd, getattr(nv, thr)), device=d)
    s.record(out, "nvmlDeviceGetPowerUsage", bind_call(nv.nvmlDeviceGetPowerUsage, hd), device=d)
    s.record(out, "nvmlDeviceGetEnforcedPowerLimit", bind_call(nv.nvmlDeviceGetEnforcedPowerLimit, hd), device=d)
    s.record(out, "nvmlDeviceGetEccMode", bind_call(nv.nvmlDeviceGetEccMode, hd), device=d, decode=_ecc_pair)
    read_health(s, gpu, out)
    s.record(out, "nvmlDeviceGetAccountingMode", bind_call(nv.nvmlDeviceGetAccountingMode, hd), device=d,
             decode=decode_enable_state)
    s.record(out, "nvmlDeviceGetSupportedEventTypes", bind_call(nv.nvmlDeviceGetSupportedEventTypes, hd),
             device=d, decode=decode_event_types)
    if mig.ok and int(mig.value[0]) == 1:
        read_mig_devices(s, gpu, rec)


def read_health(s: Session, gpu: GpuHandle, out: dict[str, Any]) -> None:
    """The counters compared between the start and the end of the window (the snapshot and
    ``nvml/health_end.json``): ECC totals, retired pages, row remapping, the PCIe replay counter
    and link, the driver's recovery action (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) and NVLink
    state and error counters (``nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER``, ``nvidia-smi nvlink -e``)."""
    nv, d, hd = s.nv, gpu.key, gpu.handle
    for etype in ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"):
        for counter in ("NVML_VOLATILE_ECC", "NVML_AGGREGATE_ECC"):
            s.record(out, f"nvmlDeviceGetTotalEccErrors({etype},{counter})",
                     bind_call(nv.nvmlDeviceGetTotalEccErrors, hd, getattr(nv, etype), getattr(nv, counter)),
                     device=d)
    for cause in ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
                  "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"):
        r = s.record(out, f"nvmlDeviceGetRetiredPages_v2({cause})",
                     bind_call(nv.nvmlDeviceGetRetiredPages_v2, hd, getattr(nv, cause)), device=d)
        if r.missing is not None and r.missing.reason == "library_mismatch":
            s.record(out, f"nvmlDeviceGetRetiredPages({cause})",
                     bind_call(nv.nvmlDeviceGetRetiredPages, hd, getattr(nv, cause)), device=d)
    s.record(out, "nvmlDeviceGetRetiredPagesPendingStatus",
             bind_call(nv.nvmlDeviceGetRetiredPagesPendingStatus, hd), device=d, decode=decode_enable_state)
    s.record(out, "nvmlDeviceGetRemappedRows", bind_call(nv.nvmlDeviceGetRemappedRows, hd), device=d,
             decode=_remapped)
    s.record(out, "nvmlDeviceGetPcieReplayCounter", bind_call(nv.nvmlDeviceGetPcieReplayCounter, hd), device=d)
    for call in _PCIE_LINK:
        s.record(out, call, bind_call(getattr(nv, call), hd), device=d)
    fields = read_fields(s, hd, d, out, ("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", "NVML_FI_DEV_NVLINK_LINK_COUNT"),
                         {"NVML_FI_DEV_GET_GPU_RECOVERY_ACTION": decode_recovery_action})
    links = fields.get("NVML_FI_DEV_NVLINK_LINK_COUNT")
    for link in range(min(int(links), MAX_NVLINKS) if isinstance(links, int) else 0):
        state = s.record(out, f"nvmlDeviceGetNvLinkState({link})", bind_call(nv.nvmlDeviceGetNvLinkState, hd, link),
                         device=d, decode=decode_enable_state)
        if not state.ok:
            continue
        for counter in _NVLINK_COUNTERS:
            s.record(out, f"nvmlDeviceGetNvLinkErrorCounter({link},{counter})",
                     bind_call(nv.nvmlDeviceGetNvLinkErrorCounter, hd, link, getattr(nv, counter)), device=d)


def read_fields(s: Session, hd: Any, d: str, out: dict[str, Any], names: tuple[str, ...],
                decoders: dict[str, Callable[[Any], Any]] | None = None) -> dict[str, Any]:
    """``nvmlDeviceGetFieldValues`` for the ``NVML_FI_*`` fields ``names`` in one call; each is
    recorded as ``nvmlDeviceGetFieldValues(<name>)`` with its own status (NVML sets ``nvmlReturn``
    per field). Returns the values that came back, by name."""
    nv = s.nv
    ids = [int(getattr(nv, n)) for n in names]
    r = s.query("nvmlDeviceGetFieldValues", bind_call(nv.nvmlDeviceGetFieldValues, hd, ids), device=d)
    got: dict[str, Any] = {}
    for i, name in enumerate(names):
        call = f"nvmlDeviceGetFieldValues({name})"
        if not r.ok:
            s.put(out, call, Reading(call, missing=r.missing))
            continue
        fv = r.raw[i]
        rc = int(fv.nvmlReturn)
        if rc != 0:
            s.put(out, call, Reading(call, missing=missing_from(nv.NVMLError(rc), nv)))
            continue
        member = _VALUE_MEMBERS.get(int(fv.valueType))
        if member is None:
            s.put(out, call, {"value": None, "valueType": int(fv.valueType), "undecodable": "unknown value type"})
            continue
        value = getattr(fv.value, member)
        entry: dict[str, Any] = {"value": value, "timestamp_us": int(fv.timestamp)}
        decode = (decoders or {}).get(name)
        if decode is not None:
            try:
                entry["decoded"] = decode(value)
            except (ParseError, TypeError, ValueError) as exc:
                entry["decoded"] = {"undecodable": f"{type(exc).__name__}: {exc}"}
        s.put(out, call, entry)
        got[name] = value
    return got


def read_memory(s: Session, hd: Any, d: str, out: dict[str, Any]) -> Reading:
    """``nvmlDeviceGetMemoryInfo_v2`` (total, reserved, free, used); v1 where v2 is missing (<R515)."""
    nv = s.nv
    r = s.record(out, "nvmlDeviceGetMemoryInfo_v2",
                 bind_call(nv.nvmlDeviceGetMemoryInfo, hd, version=nv.nvmlMemory_v2), device=d)
    if r.missing is not None and r.missing.reason in _FALLBACK_REASONS:
        r = s.record(out, "nvmlDeviceGetMemoryInfo", bind_call(nv.nvmlDeviceGetMemoryInfo, hd), device=d)
    return r


def read_clock_reasons(s: Session, hd: Any, d: str, out: dict[str, Any]) -> Reading:
    """``nvmlDeviceGetCurrentClocksEventReasons``; the old ``...ThrottleReasons`` on older drivers."""
    nv = s.nv
    r = s.record(out, "nvmlDeviceGetCurrentClocksEventReasons",
                 bind_call(nv.nvmlDeviceGetCurrentClocksEventReasons, hd), device=d,
                 decode=decode_clocks_event_reasons)
    if r.missing is not None and r.missing.reason == "library_mismatch":
        r = s.record(out, "nvmlDeviceGetCurrentClocksThrottleReasons",
                     bind_call(nv.nvmlDeviceGetCurrentClocksThrottleReasons, hd), device=d,
                     decode=decode_clocks_event_reasons)
    return r


def read_mig_devices(s: Session, gpu: GpuHandle, rec: dict[str, Any] | None) -> None:
    """MIG devices of a GPU in MIG mode (``nvidia-smi -L`` lists their ``MIG-...`` UUIDs)."""
    nv, d = s.nv, gpu.key
    out = rec["nvml"] if rec is not None else {}
    count = s.record(out, "nvmlDeviceGetMaxMigDeviceCount", bind_call(nv.nvmlDeviceGetMaxMigDeviceCount, gpu.handle),
                     device=d)
    if not count.ok:
        return
    gpu.mig = []
    for slot in range(int(count.value)):
        h = s.query(f"nvmlDeviceGetMigDeviceHandleByIndex({slot})",
                    bind_call(nv.nvmlDeviceGetMigDeviceHandleByIndex, gpu.handle, slot), device=d)
        if h.missing is not None:
            if h.missing.reason != "not_found" and rec is not None:  # NotFound: an empty slot
                s.put(out, h.call, h)
            continue
        mig: dict[str, Any] = {"slot": slot, "nvml": {}}
        mo = mig["nvml"]
        uuid = s.record(mo, "nvmlDeviceGetUUID", bind_call(nv.nvmlDeviceGetUUID, h.raw), device=d)
        gpu.mig.append((slot, h.raw, uuid.value if uuid.ok else None))
        if rec is None:
            continue
        s.record(mo, "nvmlDeviceGetName", bind_call(nv.nvmlDeviceGetName, h.raw), device=d)
        s.record(mo, "nvmlDeviceGetGpuInstanceId", bind_call(nv.nvmlDeviceGetGpuInstanceId, h.raw), device=d)
        s.record(mo, "nvmlDeviceGetComputeInstanceId", bind_call(nv.nvmlDeviceGetComputeInstanceId, h.raw), device=d)
        read_memory(s, h.raw, d, mo)
        s.add(rec["mig_devices"], mig)


def _process_list(s: Session, hd: Any, d: str, out: dict[str, Any], kind: str, func: str,
                  brief: bool = False) -> list[dict[str, Any]]:
    """``func`` (pynvml calls the ``_v3`` symbol); the ``_v2`` symbol where the library lacks v3.

    ``brief`` (sampling): a successful list is recorded as its ``count`` only, since the line's
    ``processes`` holds the same entries with the same NVML field names."""
    nv = s.nv
    r = s.query(f"{func}_v3", bind_call(getattr(nv, func), hd), device=d)
    if r.missing is not None and r.missing.reason == "library_mismatch":
        s.put(out, r.call, r)
        r = s.query(f"{func}_v2", bind_call(getattr(nv, f"{func}_v2"), hd), device=d)
    s.put(out, r.call, {"count": len(r.value)} if brief and r.ok else r)
    if not r.ok:
        return []
    return [dict(p, type=kind) for p in r.value]


def read_processes(s: Session, gpu: GpuHandle, prec: dict[str, Any], brief: bool = False) -> list[dict[str, Any]]:
    """Compute, graphics and MPS processes on the GPU and on each MIG device
    (``nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid``)."""
    if gpu.handle is None:
        return []
    found: list[dict[str, Any]] = []
    on_mig: set[tuple[int, str]] = set()
    for slot, mh, muuid in gpu.mig:
        mrec: dict[str, Any] = {"slot": slot, "uuid": muuid, "nvml": {}}
        s.add(prec["mig_devices"], mrec)
        for kind, func in PROCESS_LISTS:
            for p in _process_list(s, mh, gpu.key, mrec["nvml"], kind, func, brief):
                on_mig.add((int(p["pid"]), kind))
                found.append(dict(p, gpu_index=gpu.index, gpu_uuid=gpu.uuid, mig_uuid=muuid))
    for kind, func in PROCESS_LISTS:
        for p in _process_list(s, gpu.handle, gpu.key, prec["nvml"], kind, func, brief):
            if (int(p["pid"]), kind) not in on_mig:
                found.append(dict(p, gpu_index=gpu.index, gpu_uuid=gpu.uuid, mig_uuid=None))
    return found


def instance_id(v: Any) -> int | None:
    return None if v is None or int(v) == 0xFFFFFFFF else int(v)


def gpu_process(p: dict[str, Any], identity: dict[int, tuple[bool, str | None, int | None]]) -> GpuProcess:
    pid = int(p["pid"])
    in_proc, comm, start = identity.get(pid, (False, None, None))
    used = p.get("usedGpuMemory")
    return GpuProcess(
        pid=pid, gpu_index=int(p["gpu_index"]), gpu_uuid=p.get("gpu_uuid"), mig_uuid=p.get("mig_uuid"),
        gpu_instance_id=instance_id(p.get("gpuInstanceId")), compute_instance_id=instance_id(p.get("computeInstanceId")),
        type=str(p["type"]), used_memory_bytes=None if used is None else int(used),
        pid_valid=pid not in INVALID_PIDS, in_proc=in_proc, comm=comm, proc_start_ticks=start,
    )


def read_accounting(s: Session, gpu: GpuHandle) -> dict[str, Any] | None:
    """``nvmlDeviceGetAccountingPids`` / ``...Stats`` (``nvidia-smi --query-accounted-apps``): every
    process the driver accounted on this GPU, exited ones included, keyed by (pid, startTime)."""
    if gpu.handle is None:
        return None
    nv, d = s.nv, gpu.key
    rec: dict[str, Any] = {"index": gpu.index, "uuid": gpu.uuid, "nvml": {}, "stats": []}
    mode = s.record(rec["nvml"], "nvmlDeviceGetAccountingMode", bind_call(nv.nvmlDeviceGetAccountingMode, gpu.handle),
                    device=d, decode=decode_enable_state)
    if not mode.ok or int(mode.value) != 1:
        return rec
    pids = s.record(rec["nvml"], "nvmlDeviceGetAccountingPids", bind_call(nv.nvmlDeviceGetAccountingPids, gpu.handle),
                    device=d)
    if not pids.ok:
        return rec
    for pid in sorted(set(int(p) for p in pids.value)):
        st = s.query("nvmlDeviceGetAccountingStats", bind_call(nv.nvmlDeviceGetAccountingStats, gpu.handle, pid), device=d)
        entry = {"pid": pid, "nvmlDeviceGetAccountingStats": st.as_json()}
        s.add(rec["stats"], entry)
    return rec


def accounting_doc(devices: list[dict[str, Any]], started: float, complete: bool) -> dict[str, Any]:
    records: dict[str, dict[str, Any]] = {}
    for dev in devices:
        for entry in dev.get("stats", []):
            st = entry["nvmlDeviceGetAccountingStats"]
            if "value" not in st:
                continue
            v = st["value"]
            start_us = int(v.get("startTime") or 0)
            key = f"{dev['index']}:{entry['pid']}:{start_us}"
            records[key] = {
                "key": key, "pid": entry["pid"], "gpu_index": dev["index"], "gpu_uuid": dev.get("uuid"),
                "start_time_us": start_us, "start_time": iso_from_unix(start_us / 1e6) if start_us else None,
                "gpu_util_percent": v.get("gpuUtilization"), "mem_util_percent": v.get("memoryUtilization"),
                "max_memory_bytes": v.get("maxMemoryUsage"), "time_ms": v.get("time"),
                "is_running": bool(v.get("isRunning")),
            }
    return {"time": iso_from_unix(started), "t": started, "complete": complete, "devices": devices,
            "records": [records[k] for k in sorted(records)]}


