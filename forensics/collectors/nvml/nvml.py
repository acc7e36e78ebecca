"""``nvml``: GPUs, GPU processes, per-process utilization, throttling, ECC, Xid events, accounting.

Source: NVML through nvidia-ml-py (``import pynvml``), exactly the calls ``nvidia-smi`` makes
(``nvidia-smi -q``, ``--query-gpu=...``, ``--query-compute-apps=...``, ``pmon``). The pynvml module
is a constructor argument (the seam tests use to hand in a pynvml bound to the simulated library);
the library is ``CaptureOptions.nvml_library`` (``--nvml-library``) when given, else the loader's
search for ``libnvidia-ml.so.1``. No library: ``SourceUnavailable("NVML library not found ...")``.

Members (see docs/bundle-format/nvml.md): ``nvml/devices.json``, ``nvml/processes.json``,
``nvml/accounting.json`` (snapshot); with ``--duration``: ``nvml/samples.jsonl`` (one line per GPU
per tick), ``nvml/events.jsonl`` (Xid and other critical events), ``nvml/accounting_end.json``.
Raw values are keyed by the NVML function that produced them (``nvmlDeviceGetPowerUsage``, or
``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)`` where the argument matters) with pynvml's own field names;
a value NVML did not give is recorded with *why* (``nvml_errors.MissingValue``).

Every NVML read goes through :meth:`_Session.query`. NVML can block for minutes once a GPU has
fallen off the bus, so the reads run in a worker thread that the collector stops waiting for at
its deadline: what was read is written, the call that hung is named, and NVML is not touched again.
NVML reports host PIDs whatever namespace it runs in: PIDs that are not in this ``/proc`` (or are 0)
are recorded as a PID-namespace mismatch and never handed on for attribution.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.capture.context import CollectContext, Tick
from forensics.collectors.nvml.decode import (
    decode_clocks_event_reasons,
    decode_compute_mode,
    decode_enable_state,
    decode_event_types,
    to_jsonable,
    xid_description,
)
from forensics.collectors.nvml.errors import MissingValue, missing_from, skipped_lost, timed_out
from forensics.errors import ParseError, SourcePermissionDenied, SourceTimeout, SourceUnavailable
from forensics.specs.hints import PIDS
from forensics.specs.nvml import (
    ACCOUNTING,
    ACCOUNTING_END,
    DEVICES,
    EVENTS,
    PROCESSES,
    SAMPLES,
    SPEC,
    NvmlSettings,
)

__all__ = ["COLLECTOR", "GpuProcess", "NvmlCollector", "Reading", "assess_pid_namespace"]

INVALID_PIDS = frozenset({0, 0xFFFFFFFF})
#: Event types worth waiting for (nvmlEventType*): ECC, Xid, retirement, poison, GPU unavailable.
CRITICAL_EVENTS = 0x1 | 0x2 | 0x8 | 0x400 | 0x800 | 0x1000 | 0x2000 | 0x4000 | 0x8000
_PROCESS_LISTS = (
    ("compute", "nvmlDeviceGetComputeRunningProcesses"),
    ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
    ("mps", "nvmlDeviceGetMPSComputeRunningProcesses"),
)
_SAMPLE_PROCESS_KEYS = ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId", "type", "mig_uuid")
_FALLBACK_REASONS = frozenset({"library_mismatch", "not_supported", "invalid_argument"})


@dataclass(frozen=True)
class Reading:
    """One NVML call's outcome: the value (as JSON) and its decoding, or why it is missing."""

    call: str
    value: Any = None
    decoded: Any = None
    missing: MissingValue | None = None
    raw: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.missing is None

    def as_json(self) -> dict[str, Any]:
        if self.missing is not None:
            return self.missing.as_json()
        out: dict[str, Any] = {"value": self.value}
        if self.decoded is not None:
            out["decoded"] = self.decoded
        return out


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


#: How long one NVML call may run before the GPU is taken as wedged (``--set nvml.call_timeout_s``).
DEFAULT_CALL_TIMEOUT_S: float = NvmlSettings().call_timeout_s


class _Abandoned(Exception):
    """The collector stopped waiting for NVML; the worker thread must not touch the results."""


class _Session:
    """One NVML session. ``query`` is the only way values are read; results are stored under a
    lock that the collector takes over when it stops waiting, so a late worker cannot change them."""

    def __init__(self, nv: Any, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> None:
        self.nv = nv
        self.call_timeout_s = call_timeout_s
        self.lock = threading.Lock()
        self.current: str | None = None
        self.current_since = 0.0
        self.abandoned = False
        self.hung: str | None = None
        self.lost: dict[str, str] = {}
        self.calls = 0

    def query(self, call: str, fn: Callable[[], Any], *, device: str | None = None,
              decode: Callable[[Any], Any] | None = None) -> Reading:
        if device is not None and device in self.lost:
            return Reading(call, missing=skipped_lost(self.lost[device]))
        with self.lock:
            if self.abandoned:
                raise _Abandoned
            self.current = call if device is None else f"{call} on {device}"
            self.current_since = time.monotonic()
            self.calls += 1
        try:
            raw = fn()
        except Exception as exc:  # noqa: BLE001 - every failure becomes evidence
            miss = missing_from(exc, self.nv)
            if miss.reason == "gpu_is_lost" and device is not None:
                self.lost.setdefault(device, call)
            reading = Reading(call, missing=miss)
        else:
            value = to_jsonable(raw)
            decoded = None
            if decode is not None:
                try:
                    decoded = decode(value)
                except (ParseError, TypeError, ValueError, IndexError, KeyError) as exc:
                    decoded = {"undecodable": f"{type(exc).__name__}: {exc}"}
            reading = Reading(call, value=value, decoded=decoded, raw=raw)
        with self.lock:
            self.current = None
            if self.abandoned:
                raise _Abandoned
        return reading

    def put(self, target: dict[str, Any], key: str, value: Any) -> None:
        with self.lock:
            if self.abandoned:
                raise _Abandoned
            target[key] = value.as_json() if isinstance(value, Reading) else value

    def add(self, target: list[Any], item: Any) -> None:
        with self.lock:
            if self.abandoned:
                raise _Abandoned
            target.append(item)

    def record(self, target: dict[str, Any], call: str, fn: Callable[[], Any], *,
               device: str | None = None, decode: Callable[[Any], Any] | None = None) -> Reading:
        """``query`` and store the result under ``call`` in ``target``."""
        reading = self.query(call, fn, device=device, decode=decode)
        self.put(target, call, reading)
        return reading

    def run_guarded(self, work: Callable[[], None], budget_s: float) -> str | None:
        """Run ``work`` in a daemon thread for at most ``budget_s``; None when it finished, else
        the NVML call it is stuck in (the session is then abandoned for good)."""
        errors: list[BaseException] = []

        def target() -> None:
            try:
                work()
            except _Abandoned:
                pass
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)

        worker = threading.Thread(target=target, name="nvml-reads", daemon=True)
        worker.start()
        # Stop waiting at the budget, or as soon as one call has hung for call_timeout_s: NVML
        # answers in milliseconds, and a call that hangs (a GPU fallen off the bus, Xid 79/45)
        # would hang the next one too, so waiting out the whole deadline only delays the
        # collectors after this one.
        end = time.monotonic() + max(budget_s, 0.0)
        while worker.is_alive():
            now = time.monotonic()
            if now >= end:
                break
            with self.lock:
                stalled = self.current is not None and now - self.current_since > self.call_timeout_s
            if stalled:
                break
            worker.join(min(0.05, end - now))
        if worker.is_alive():
            with self.lock:
                self.abandoned = True
                self.hung = self.current or "NVML"
            return self.hung
        if errors:
            raise errors[0]
        return None


# -- PIDs ---------------------------------------------------------------------------------------
def _proc_identity(pid: int, proc_root: str = "/proc") -> tuple[bool, str | None, int | None]:
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


def _handle_key(handle: Any) -> int | None:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


# -- device reads -------------------------------------------------------------------------------
@dataclass
class _Gpu:
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


class NvmlCollector:
    """``nvml``: what NVML says about every GPU and the processes on it."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 30.0
    #: how long each tick waits for events (nvmlEventSetWait timeout), in ms
    event_wait_ms = 10
    max_events_per_tick = 256

    def __init__(self, nvml_module: Any = None) -> None:
        self._nvml_module = nvml_module
        self._sampler: _Sampler | None = None
        self._sampling_failed: str | None = None

    # -- library ------------------------------------------------------------------------------
    def _module(self) -> Any:
        if self._nvml_module is not None:
            return self._nvml_module
        try:
            import pynvml
        except ImportError as exc:
            raise SourceUnavailable(
                "NVML library not found: the nvidia-ml-py package (module pynvml) is not installed"
            ) from exc
        return pynvml

    def open(self, ctx: CollectContext) -> _Session:
        """Load the library (``--nvml-library`` or the default search) and ``nvmlInit``."""
        nv = self._module()
        path = ctx.options.nvml_library
        if path:
            if not os.path.isfile(path):
                raise SourceUnavailable(f"NVML library not found at {path} (--nvml-library)")
            try:
                lib = ctypes.CDLL(path)
            except OSError as exc:
                raise SourceUnavailable(f"NVML library not found: cannot load {path}: {exc}") from exc
            with nv.libLoadLock:
                if nv.nvmlLib is not None and getattr(nv.nvmlLib, "_name", None) != lib._name:
                    nv._nvmlGetFunctionPointer_cache.clear()
                nv.nvmlLib = lib
        session = _Session(nv, SPEC.read_settings(ctx.options.extra).call_timeout_s)
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            miss = missing_from(exc, nv)
            if miss.reason == "library_not_found":
                raise SourceUnavailable(
                    "NVML library not found (libnvidia-ml.so.1 is not on the loader's path: no NVIDIA "
                    "driver here, or pass --nvml-library PATH)") from exc
            if miss.reason == "no_permission":
                raise SourcePermissionDenied(f"permission denied: nvmlInit: {miss.message}") from exc
            raise SourceUnavailable(f"nvmlInit failed: {miss.error}: {miss.message}") from exc
        except nv.NVMLLibraryMismatchError as exc:
            raise SourceUnavailable(f"nvmlInit failed: NVMLLibraryMismatchError: {exc}") from exc
        return session

    def _open_guarded(self, ctx: CollectContext) -> _Session:
        """``open`` under the deadline guard: nvmlInit itself can hang on a wedged GPU."""
        box: list[_Session] = []
        budget = max(ctx.remaining() - 1.0, 0.5)
        stuck = _Session(None).run_guarded(lambda: box.append(self.open(ctx)), budget)
        if stuck is not None or not box:
            raise SourceTimeout(f"nvmlInit did not return within {budget:.1f} s")
        return box[0]

    @staticmethod
    def close(session: _Session) -> None:
        if session.hung is None:
            try:
                session.nv.nvmlShutdown()
            except Exception:  # noqa: BLE001 - nothing left to record
                pass

    # -- snapshot -----------------------------------------------------------------------------
    def snapshot(self, ctx: CollectContext) -> None:
        """Devices, processes and accounting records, read once."""
        started = time.time()
        session = self._open_guarded(ctx)
        state = _Snapshot(session, ctx)
        budget = max(ctx.remaining() - 1.0, 0.5)
        stuck = session.run_guarded(state.read_all, budget)
        state.write(ctx, started, stuck, budget)
        self.close(session)

    # -- sampling -----------------------------------------------------------------------------
    def sample(self, ctx: CollectContext, tick: Tick) -> None:
        """Append one line per GPU to nvml/samples.jsonl, and any events to nvml/events.jsonl."""
        if self._sampling_failed is not None:
            return
        if self._sampler is None:
            try:
                self._sampler = _Sampler(self, ctx)
            except SourceTimeout as exc:
                self._sampling_failed = str(exc)
                raise
        self._sampler.tick(ctx, tick)

    def end_sampling(self, ctx: CollectContext) -> None:
        """Accounting records again (processes that exited during the window), then shut down."""
        if self._sampler is not None:
            self._sampler.finish(ctx)
            self._sampler = None


# -- the snapshot -------------------------------------------------------------------------------
class _Snapshot:
    def __init__(self, session: _Session, ctx: CollectContext) -> None:
        self.s = session
        self.nv = session.nv
        self.ctx = ctx
        self.system: dict[str, Any] = {}
        self.devices: list[dict[str, Any]] = []
        self.gpus: list[_Gpu] = []
        self.proc_devices: list[dict[str, Any]] = []
        self.processes: list[dict[str, Any]] = []
        self.accounting: list[dict[str, Any]] = []

    def read_all(self) -> None:
        s, nv = self.s, self.nv
        s.record(self.system, "nvmlSystemGetDriverVersion", nv.nvmlSystemGetDriverVersion)
        s.record(self.system, "nvmlSystemGetNVMLVersion", nv.nvmlSystemGetNVMLVersion)
        s.record(self.system, "nvmlSystemGetCudaDriverVersion_v2", nv.nvmlSystemGetCudaDriverVersion_v2)
        count = s.record(self.system, "nvmlDeviceGetCount_v2", nv.nvmlDeviceGetCount)
        n = int(count.value) if count.ok else 0
        for index in range(n):
            self.gpus.append(_Gpu(index=index, key=f"GPU {index}"))
        for gpu in self.gpus:
            rec: dict[str, Any] = {"index": gpu.index, "nvml": {}, "mig_devices": []}
            s.add(self.devices, rec)
            read_device(s, gpu, rec)
        for gpu in self.gpus:
            prec: dict[str, Any] = {"index": gpu.index, "uuid": gpu.uuid, "nvml": {}, "mig_devices": []}
            s.add(self.proc_devices, prec)
            for proc in read_processes(s, gpu, prec):
                s.add(self.processes, proc)
            if gpu.handle is not None:
                s.record(prec["nvml"], "nvmlDeviceGetProcessUtilization",
                         _bind(nv.nvmlDeviceGetProcessUtilization, gpu.handle, 0), device=gpu.key)
        for gpu in self.gpus:
            arec = read_accounting(s, gpu)
            if arec is not None:
                s.add(self.accounting, arec)

    def write(self, ctx: CollectContext, started: float, stuck: str | None, budget: float) -> None:
        nv = self.nv
        lib = ctx.options.nvml_library or "libnvidia-ml.so.1 (dynamic loader search)"
        complete = stuck is None
        if stuck is not None:
            ctx.partial(f"NVML call {stuck} did not return within {budget:.1f} s; later reads skipped")
            self.devices.append({"timed_out": timed_out(stuck, budget).as_json()})
        ctx.sink.write_json(DEVICES, {
            "time": iso_from_unix(started), "t": started, "complete": complete,
            "library": lib, "pynvml_version": _pynvml_version(nv),
            "system": self.system, "devices": self.devices,
        })
        pids = [int(p["pid"]) for p in self.processes]
        identity = {pid: _proc_identity(pid) for pid in set(pids)}
        in_proc = {pid: ident[0] for pid, ident in identity.items()}
        namespace = assess_pid_namespace(pids, in_proc)
        derived = [asdict(_gpu_process(p, identity)) for p in self.processes]
        ctx.sink.write_json(PROCESSES, {
            "time": iso_from_unix(started), "t": started, "complete": complete,
            "devices": self.proc_devices, "processes": derived, "pid_namespace": namespace,
        })
        if self.accounting:
            ctx.sink.write_json(ACCOUNTING, _accounting_doc(self.accounting, started, complete))
        if namespace["status"] in ("mismatch", "partial"):
            ctx.note(f"nvml: PID namespace {namespace['status']}: {namespace['reason']}")
        PIDS.publish(ctx, namespace["attributable_pids"])
        count = self.system.get("nvmlDeviceGetCount_v2", {})
        if "missing" in count:
            ctx.partial(f"nvmlDeviceGetCount_v2: {count['missing']} ({count['error']})")
        lost = sorted(set(self.s.lost))
        if lost:
            ctx.partial(f"GPU is lost: {', '.join(lost)}")


def _bind(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
    return lambda: fn(*args, **kwargs)


def _pynvml_version(nv: Any) -> str | None:
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:  # noqa: BLE001
        return getattr(nv, "__version__", None)


def read_device(s: _Session, gpu: _Gpu, rec: dict[str, Any]) -> None:
    """The per-GPU snapshot (``nvidia-smi -q``): identity, modes, memory, clocks, thermals, ECC."""
    nv, d, out = s.nv, gpu.key, rec["nvml"]
    h = s.query("nvmlDeviceGetHandleByIndex_v2", _bind(nv.nvmlDeviceGetHandleByIndex, gpu.index), device=d)
    if not h.ok:
        s.put(out, h.call, h)
        return
    gpu.handle = hd = h.raw
    uuid = s.record(out, "nvmlDeviceGetUUID", _bind(nv.nvmlDeviceGetUUID, hd), device=d)
    gpu.uuid = uuid.value if uuid.ok else None
    s.record(out, "nvmlDeviceGetName", _bind(nv.nvmlDeviceGetName, hd), device=d)
    s.record(out, "nvmlDeviceGetSerial", _bind(nv.nvmlDeviceGetSerial, hd), device=d)
    pci = s.record(out, "nvmlDeviceGetPciInfo_v3", _bind(nv.nvmlDeviceGetPciInfo_v3, hd), device=d)
    if pci.ok:
        gpu.pci_bus_id = str(pci.value.get("busId") or "") or None
    s.record(out, "nvmlDeviceGetPersistenceMode", _bind(nv.nvmlDeviceGetPersistenceMode, hd), device=d,
             decode=decode_enable_state)
    s.record(out, "nvmlDeviceGetComputeMode", _bind(nv.nvmlDeviceGetComputeMode, hd), device=d,
             decode=decode_compute_mode)
    mig = s.record(out, "nvmlDeviceGetMigMode", _bind(nv.nvmlDeviceGetMigMode, hd), device=d, decode=_mig_pair)
    read_memory(s, hd, d, out)
    s.record(out, "nvmlDeviceGetUtilizationRates", _bind(nv.nvmlDeviceGetUtilizationRates, hd), device=d)
    for clock in ("NVML_CLOCK_GRAPHICS", "NVML_CLOCK_SM", "NVML_CLOCK_MEM"):
        s.record(out, f"nvmlDeviceGetClockInfo({clock})",
                 _bind(nv.nvmlDeviceGetClockInfo, hd, getattr(nv, clock)), device=d)
    read_clock_reasons(s, hd, d, out)
    sup = s.query("nvmlDeviceGetSupportedClocksEventReasons",
                  _bind(nv.nvmlDeviceGetSupportedClocksEventReasons, hd), device=d,
                  decode=decode_clocks_event_reasons)
    s.put(out, sup.call, sup)
    s.record(out, "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
             _bind(nv.nvmlDeviceGetTemperature, hd, nv.NVML_TEMPERATURE_GPU), device=d)
    for thr in ("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN",
                "NVML_TEMPERATURE_THRESHOLD_GPU_MAX", "NVML_TEMPERATURE_THRESHOLD_MEM_MAX"):
        s.record(out, f"nvmlDeviceGetTemperatureThreshold({thr})",
                 _bind(nv.nvmlDeviceGetTemperatureThreshold, hd, getattr(nv, thr)), device=d)
    s.record(out, "nvmlDeviceGetPowerUsage", _bind(nv.nvmlDeviceGetPowerUsage, hd), device=d)
    s.record(out, "nvmlDeviceGetEnforcedPowerLimit", _bind(nv.nvmlDeviceGetEnforcedPowerLimit, hd), device=d)
    s.record(out, "nvmlDeviceGetEccMode", _bind(nv.nvmlDeviceGetEccMode, hd), device=d, decode=_ecc_pair)
    for etype in ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"):
        for counter in ("NVML_VOLATILE_ECC", "NVML_AGGREGATE_ECC"):
            s.record(out, f"nvmlDeviceGetTotalEccErrors({etype},{counter})",
                     _bind(nv.nvmlDeviceGetTotalEccErrors, hd, getattr(nv, etype), getattr(nv, counter)),
                     device=d)
    for cause in ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
                  "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"):
        r = s.record(out, f"nvmlDeviceGetRetiredPages_v2({cause})",
                     _bind(nv.nvmlDeviceGetRetiredPages_v2, hd, getattr(nv, cause)), device=d)
        if r.missing is not None and r.missing.reason == "library_mismatch":
            s.record(out, f"nvmlDeviceGetRetiredPages({cause})",
                     _bind(nv.nvmlDeviceGetRetiredPages, hd, getattr(nv, cause)), device=d)
    s.record(out, "nvmlDeviceGetRetiredPagesPendingStatus",
             _bind(nv.nvmlDeviceGetRetiredPagesPendingStatus, hd), device=d, decode=decode_enable_state)
    s.record(out, "nvmlDeviceGetRemappedRows", _bind(nv.nvmlDeviceGetRemappedRows, hd), device=d,
             decode=_remapped)
    s.record(out, "nvmlDeviceGetPcieReplayCounter", _bind(nv.nvmlDeviceGetPcieReplayCounter, hd), device=d)
    s.record(out, "nvmlDeviceGetAccountingMode", _bind(nv.nvmlDeviceGetAccountingMode, hd), device=d,
             decode=decode_enable_state)
    s.record(out, "nvmlDeviceGetSupportedEventTypes", _bind(nv.nvmlDeviceGetSupportedEventTypes, hd),
             device=d, decode=decode_event_types)
    if mig.ok and int(mig.value[0]) == 1:
        read_mig_devices(s, gpu, rec)


def read_memory(s: _Session, hd: Any, d: str, out: dict[str, Any]) -> Reading:
    """``nvmlDeviceGetMemoryInfo_v2`` (total, reserved, free, used); v1 where v2 is missing (<R515)."""
    nv = s.nv
    r = s.record(out, "nvmlDeviceGetMemoryInfo_v2",
                 _bind(nv.nvmlDeviceGetMemoryInfo, hd, version=nv.nvmlMemory_v2), device=d)
    if r.missing is not None and r.missing.reason in _FALLBACK_REASONS:
        r = s.record(out, "nvmlDeviceGetMemoryInfo", _bind(nv.nvmlDeviceGetMemoryInfo, hd), device=d)
    return r


def read_clock_reasons(s: _Session, hd: Any, d: str, out: dict[str, Any]) -> Reading:
    """``nvmlDeviceGetCurrentClocksEventReasons``; the old ``...ThrottleReasons`` on older drivers."""
    nv = s.nv
    r = s.record(out, "nvmlDeviceGetCurrentClocksEventReasons",
                 _bind(nv.nvmlDeviceGetCurrentClocksEventReasons, hd), device=d,
                 decode=decode_clocks_event_reasons)
    if r.missing is not None and r.missing.reason == "library_mismatch":
        r = s.record(out, "nvmlDeviceGetCurrentClocksThrottleReasons",
                     _bind(nv.nvmlDeviceGetCurrentClocksThrottleReasons, hd), device=d,
                     decode=decode_clocks_event_reasons)
    return r


def read_mig_devices(s: _Session, gpu: _Gpu, rec: dict[str, Any] | None) -> None:
    """MIG devices of a GPU in MIG mode (``nvidia-smi -L`` lists their ``MIG-...`` UUIDs)."""
    nv, d = s.nv, gpu.key
    out = rec["nvml"] if rec is not None else {}
    count = s.record(out, "nvmlDeviceGetMaxMigDeviceCount", _bind(nv.nvmlDeviceGetMaxMigDeviceCount, gpu.handle),
                     device=d)
    if not count.ok:
        return
    gpu.mig = []
    for slot in range(int(count.value)):
        h = s.query(f"nvmlDeviceGetMigDeviceHandleByIndex({slot})",
                    _bind(nv.nvmlDeviceGetMigDeviceHandleByIndex, gpu.handle, slot), device=d)
        if h.missing is not None:
            if h.missing.reason != "not_found" and rec is not None:  # NotFound: an empty slot
                s.put(out, h.call, h)
            continue
        mig: dict[str, Any] = {"slot": slot, "nvml": {}}
        mo = mig["nvml"]
        uuid = s.record(mo, "nvmlDeviceGetUUID", _bind(nv.nvmlDeviceGetUUID, h.raw), device=d)
        gpu.mig.append((slot, h.raw, uuid.value if uuid.ok else None))
        if rec is None:
            continue
        s.record(mo, "nvmlDeviceGetName", _bind(nv.nvmlDeviceGetName, h.raw), device=d)
        s.record(mo, "nvmlDeviceGetGpuInstanceId", _bind(nv.nvmlDeviceGetGpuInstanceId, h.raw), device=d)
        s.record(mo, "nvmlDeviceGetComputeInstanceId", _bind(nv.nvmlDeviceGetComputeInstanceId, h.raw), device=d)
        read_memory(s, h.raw, d, mo)
        s.add(rec["mig_devices"], mig)


def _process_list(s: _Session, hd: Any, d: str, out: dict[str, Any], kind: str, func: str,
                  brief: bool = False) -> list[dict[str, Any]]:
    """``func`` (pynvml calls the ``_v3`` symbol); the ``_v2`` symbol where the library lacks v3.

    ``brief`` (sampling): a successful list is recorded as its ``count`` only, since the line's
    ``processes`` holds the same entries with the same NVML field names."""
    nv = s.nv
    r = s.query(f"{func}_v3", _bind(getattr(nv, func), hd), device=d)
    if r.missing is not None and r.missing.reason == "library_mismatch":
        s.put(out, r.call, r)
        r = s.query(f"{func}_v2", _bind(getattr(nv, f"{func}_v2"), hd), device=d)
    s.put(out, r.call, {"count": len(r.value)} if brief and r.ok else r)
    if not r.ok:
        return []
    return [dict(p, type=kind) for p in r.value]


def read_processes(s: _Session, gpu: _Gpu, prec: dict[str, Any], brief: bool = False) -> list[dict[str, Any]]:
    """Compute, graphics and MPS processes on the GPU and on each MIG device
    (``nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid``)."""
    if gpu.handle is None:
        return []
    found: list[dict[str, Any]] = []
    on_mig: set[tuple[int, str]] = set()
    for slot, mh, muuid in gpu.mig:
        mrec: dict[str, Any] = {"slot": slot, "uuid": muuid, "nvml": {}}
        s.add(prec["mig_devices"], mrec)
        for kind, func in _PROCESS_LISTS:
            for p in _process_list(s, mh, gpu.key, mrec["nvml"], kind, func, brief):
                on_mig.add((int(p["pid"]), kind))
                found.append(dict(p, gpu_index=gpu.index, gpu_uuid=gpu.uuid, mig_uuid=muuid))
    for kind, func in _PROCESS_LISTS:
        for p in _process_list(s, gpu.handle, gpu.key, prec["nvml"], kind, func, brief):
            if (int(p["pid"]), kind) not in on_mig:
                found.append(dict(p, gpu_index=gpu.index, gpu_uuid=gpu.uuid, mig_uuid=None))
    return found


def _instance(v: Any) -> int | None:
    return None if v is None or int(v) == 0xFFFFFFFF else int(v)


def _gpu_process(p: dict[str, Any], identity: dict[int, tuple[bool, str | None, int | None]]) -> GpuProcess:
    pid = int(p["pid"])
    in_proc, comm, start = identity.get(pid, (False, None, None))
    used = p.get("usedGpuMemory")
    return GpuProcess(
        pid=pid, gpu_index=int(p["gpu_index"]), gpu_uuid=p.get("gpu_uuid"), mig_uuid=p.get("mig_uuid"),
        gpu_instance_id=_instance(p.get("gpuInstanceId")), compute_instance_id=_instance(p.get("computeInstanceId")),
        type=str(p["type"]), used_memory_bytes=None if used is None else int(used),
        pid_valid=pid not in INVALID_PIDS, in_proc=in_proc, comm=comm, proc_start_ticks=start,
    )


def read_accounting(s: _Session, gpu: _Gpu) -> dict[str, Any] | None:
    """``nvmlDeviceGetAccountingPids`` / ``...Stats`` (``nvidia-smi --query-accounted-apps``): every
    process the driver accounted on this GPU, exited ones included, keyed by (pid, startTime)."""
    if gpu.handle is None:
        return None
    nv, d = s.nv, gpu.key
    rec: dict[str, Any] = {"index": gpu.index, "uuid": gpu.uuid, "nvml": {}, "stats": []}
    mode = s.record(rec["nvml"], "nvmlDeviceGetAccountingMode", _bind(nv.nvmlDeviceGetAccountingMode, gpu.handle),
                    device=d, decode=decode_enable_state)
    if not mode.ok or int(mode.value) != 1:
        return rec
    pids = s.record(rec["nvml"], "nvmlDeviceGetAccountingPids", _bind(nv.nvmlDeviceGetAccountingPids, gpu.handle),
                    device=d)
    if not pids.ok:
        return rec
    for pid in sorted(set(int(p) for p in pids.value)):
        st = s.query("nvmlDeviceGetAccountingStats", _bind(nv.nvmlDeviceGetAccountingStats, gpu.handle, pid), device=d)
        entry = {"pid": pid, "nvmlDeviceGetAccountingStats": st.as_json()}
        s.add(rec["stats"], entry)
    return rec


def _accounting_doc(devices: list[dict[str, Any]], started: float, complete: bool) -> dict[str, Any]:
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


# -- sampling -----------------------------------------------------------------------------------
class _Sampler:
    """State kept across ticks in the sampling child: handles, lastSeenTimeStamp, the event set."""

    def __init__(self, collector: NvmlCollector, ctx: CollectContext) -> None:
        self.collector = collector
        self.gpus: list[_Gpu] = []
        self.last_seen: dict[int, int] = {}
        self.event_set: Any = None
        self.handles: dict[int, tuple[int, str | None, str | None]] = {}
        self.registration: list[dict[str, Any]] = []
        self.noted_hang = False
        self.noted_lost: set[str] = set()
        self.memory_v1: set[int] = set()
        self.s = collector._open_guarded(ctx)
        stuck = self.s.run_guarded(self._setup, max(ctx.remaining() - 1.0, 0.5))
        for line in self.registration:
            ctx.sink.append_jsonl(EVENTS, line)
        if stuck is not None:
            raise SourceTimeout(f"{stuck} did not return while setting up sampling")

    def _setup(self) -> None:
        s, nv = self.s, self.s.nv
        count = s.query("nvmlDeviceGetCount_v2", nv.nvmlDeviceGetCount)
        n = int(count.value) if count.ok else 0
        self.gpus = [_Gpu(index=i, key=f"GPU {i}") for i in range(n)]
        es = s.query("nvmlEventSetCreate", nv.nvmlEventSetCreate)
        self.event_set = es.raw if es.ok else None
        if not es.ok:
            s.add(self.registration, {"kind": "registration", "t": time.time(), "nvml": {es.call: es.as_json()}})
        for gpu in self.gpus:
            self._open_gpu(gpu)

    def _open_gpu(self, gpu: _Gpu) -> Reading:
        s, nv = self.s, self.s.nv
        h = s.query("nvmlDeviceGetHandleByIndex_v2", _bind(nv.nvmlDeviceGetHandleByIndex, gpu.index), device=gpu.key)
        if not h.ok:
            return h
        gpu.handle = h.raw
        uuid = s.query("nvmlDeviceGetUUID", _bind(nv.nvmlDeviceGetUUID, gpu.handle), device=gpu.key)
        gpu.uuid = uuid.value if uuid.ok else None
        key = _handle_key(gpu.handle)
        if key is not None:
            self.handles[key] = (gpu.index, gpu.uuid, None)
        mig = s.query("nvmlDeviceGetMigMode", _bind(nv.nvmlDeviceGetMigMode, gpu.handle), device=gpu.key)
        if mig.ok and int(mig.value[0]) == 1:
            read_mig_devices(s, gpu, None)
            for _slot, mh, muuid in gpu.mig:
                mkey = _handle_key(mh)
                if mkey is not None:
                    self.handles[mkey] = (gpu.index, gpu.uuid, muuid)
        if self.event_set is not None:
            reg: dict[str, Any] = {"kind": "registration", "t": time.time(), "gpu_index": gpu.index,
                                   "uuid": gpu.uuid, "nvml": {}}
            sup = s.record(reg["nvml"], "nvmlDeviceGetSupportedEventTypes",
                           _bind(nv.nvmlDeviceGetSupportedEventTypes, gpu.handle), device=gpu.key,
                           decode=decode_event_types)
            if sup.ok:
                mask = int(sup.value) & CRITICAL_EVENTS
                reg["mask"] = mask
                reg["mask_decoded"] = decode_event_types(mask)
                s.record(reg["nvml"], "nvmlDeviceRegisterEvents",
                         _bind(nv.nvmlDeviceRegisterEvents, gpu.handle, mask, self.event_set), device=gpu.key)
            s.add(self.registration, reg)
        return h

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        if self.s.hung is not None:
            if not self.noted_hang:
                self.noted_hang = True
                ctx.note(f"nvml: sampling stopped: {self.s.hung} hung")
            return
        lines: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        interval = max(ctx.options.interval_s, 0.05)
        budget = max(min(ctx.remaining() - 0.5, max(5.0, 2 * interval)), 0.1)
        self.s.lost.clear()  # every tick asks every GPU again (a pass caches, ticks do not)
        stuck = self.s.run_guarded(lambda: self._read_tick(tick, lines, events), budget)
        for line in lines:
            ctx.sink.append_jsonl(SAMPLES, line)
        for ev in events:
            ctx.sink.append_jsonl(EVENTS, ev)
        for device, call in sorted(self.s.lost.items()):
            if device not in self.noted_lost:
                self.noted_lost.add(device)
                ctx.note(f"nvml: {device} lost at tick {tick.index} ({call} answered GpuIsLost)")
        if stuck is not None:
            ctx.sink.append_jsonl(SAMPLES, {
                "kind": "timeout", "tick": tick.index, "t": tick.time_unix, "time": tick.time_iso,
                **timed_out(stuck, budget).as_json()})
            raise SourceTimeout(f"{stuck} did not return within {budget:.1f} s; sampling stopped")

    def _read_tick(self, tick: Tick, lines: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        s, nv = self.s, self.s.nv
        for gpu in self.gpus:
            line: dict[str, Any] = {"kind": "device", "tick": tick.index, "t": tick.time_unix,
                                    "time": tick.time_iso, "gpu_index": gpu.index, "uuid": gpu.uuid,
                                    "nvml": {}, "processes": []}
            if gpu.handle is None:
                h = self._open_gpu(gpu)
                line["uuid"] = gpu.uuid
                if not h.ok:
                    s.put(line["nvml"], h.call, h)
                    s.add(lines, line)
                    continue
            hd, d, out = gpu.handle, gpu.key, line["nvml"]
            s.record(out, "nvmlDeviceGetUtilizationRates", _bind(nv.nvmlDeviceGetUtilizationRates, hd), device=d)
            if gpu.index in self.memory_v1:
                s.record(out, "nvmlDeviceGetMemoryInfo", _bind(nv.nvmlDeviceGetMemoryInfo, hd), device=d)
            elif read_memory(s, hd, d, out).call == "nvmlDeviceGetMemoryInfo":
                self.memory_v1.add(gpu.index)
            s.record(out, "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
                     _bind(nv.nvmlDeviceGetClockInfo, hd, nv.NVML_CLOCK_SM), device=d)
            s.record(out, "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
                     _bind(nv.nvmlDeviceGetClockInfo, hd, nv.NVML_CLOCK_MEM), device=d)
            read_clock_reasons(s, hd, d, out)
            s.record(out, "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
                     _bind(nv.nvmlDeviceGetTemperature, hd, nv.NVML_TEMPERATURE_GPU), device=d)
            s.record(out, "nvmlDeviceGetPowerUsage", _bind(nv.nvmlDeviceGetPowerUsage, hd), device=d)
            prec: dict[str, Any] = {"nvml": out, "mig_devices": []}
            s.put(line, "processes", [{k: p[k] for k in _SAMPLE_PROCESS_KEYS}
                                      for p in read_processes(s, gpu, prec, brief=True)])
            if prec["mig_devices"]:
                s.put(line, "mig_devices", prec["mig_devices"])
            last = self.last_seen.get(gpu.index, 0)
            util = s.query("nvmlDeviceGetProcessUtilization",
                           _bind(nv.nvmlDeviceGetProcessUtilization, hd, last), device=d)
            entry = util.as_json()
            entry["lastSeenTimeStamp"] = last
            if util.ok:
                newest = max((int(x["timeStamp"]) for x in util.value), default=last)
                self.last_seen[gpu.index] = max(last, newest)
            s.put(out, "nvmlDeviceGetProcessUtilization", entry)
            s.add(lines, line)
        self._drain_events(tick, events)

    def _drain_events(self, tick: Tick, events: list[dict[str, Any]]) -> None:
        """``nvmlEventSetWait_v2`` with a short timeout until it answers Timeout (nothing queued)."""
        if self.event_set is None:
            return
        s, nv = self.s, self.s.nv
        for _ in range(self.collector.max_events_per_tick):
            r = s.query("nvmlEventSetWait_v2",
                        _bind(nv.nvmlEventSetWait_v2, self.event_set, self.collector.event_wait_ms))
            now = time.time()
            if r.missing is not None:
                if r.missing.reason != "timed_out":
                    s.add(events, {"kind": "error", "tick": tick.index, "t": now, "time": iso_from_unix(now),
                                   "nvml": {r.call: r.as_json()}})
                return
            data = r.raw
            etype = int(data.eventType)
            edata = int(data.eventData)
            gpu_index, uuid, mig_uuid = self.handles.get(_handle_key(data.device) or -1, (None, None, None))
            ev: dict[str, Any] = {
                "kind": "event", "tick": tick.index, "t": now, "time": iso_from_unix(now),
                "gpu_index": gpu_index, "uuid": uuid, "mig_uuid": mig_uuid,
                "eventType": etype, "eventType_decoded": decode_event_types(etype), "eventData": edata,
                "gpuInstanceId": _instance(data.gpuInstanceId),
                "computeInstanceId": _instance(data.computeInstanceId),
            }
            if etype & 0x8:
                ev["xid"] = edata
                ev["xid_description"] = xid_description(edata)
            s.add(events, ev)

    def finish(self, ctx: CollectContext) -> None:
        if self.s.hung is not None:
            return
        started = time.time()
        acc: list[dict[str, Any]] = []

        def work() -> None:
            for gpu in self.gpus:
                rec = read_accounting(self.s, gpu)
                if rec is not None:
                    self.s.add(acc, rec)
            if self.event_set is not None:
                self.s.query("nvmlEventSetFree", _bind(self.s.nv.nvmlEventSetFree, self.event_set))

        stuck = self.s.run_guarded(work, max(ctx.remaining() - 0.5, 0.1))
        if acc:
            ctx.sink.write_json(ACCOUNTING_END, _accounting_doc(acc, started, stuck is None))
        if stuck is None:
            self.collector.close(self.s)


COLLECTOR = NvmlCollector()
