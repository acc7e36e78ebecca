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

Every NVML read goes through :meth:`Session.query`. NVML can block for minutes once a GPU has
fallen off the bus, so the reads run in a worker thread that the collector stops waiting for at
its deadline: what was read is written, the call that hung is named, and NVML is not touched again.
The wait for one call is ``nvml.call_timeout_s``, shrunk to fit the deadline the runner gives the
collector (the moment it would kill it), so the collector always stops waiting first. The
snapshot saves ``nvml/devices.json`` after each GPU it has read (``complete: false`` until the
end), so even a collector killed from outside keeps every device read before the hang.
NVML reports host PIDs whatever namespace it runs in: PIDs that are not in this ``/proc`` (or are 0)
are recorded as a PID-namespace mismatch and never handed on for attribution.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import asdict
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.collect.context import CollectContext, Tick
from forensics.collectors.nvml.errors import missing_from, timed_out
from forensics.collectors.nvml.reads import (
    GpuHandle,
    GpuProcess,
    accounting_doc,
    assess_pid_namespace,
    bind_call,
    gpu_process,
    proc_identity,
    pynvml_version,
    read_accounting,
    read_device,
    read_processes,
)
from forensics.collectors.nvml.sampler import Sampler
from forensics.collectors.nvml.session import Abandoned, Reading, Session
from forensics.errors import SourcePermissionDenied, SourceTimeout, SourceUnavailable
from forensics.specs.hints import GPU_PIDS, PIDS
from forensics.specs.nvml import (
    ACCOUNTING,
    DEVICES,
    PROCESSES,
    SPEC,
)

__all__ = ["COLLECTOR", "GpuProcess", "NvmlCollector", "Reading", "assess_pid_namespace"]


class NvmlCollector:
    """``nvml``: what NVML says about every GPU and the processes on it."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 30.0
    #: how long each tick waits for events (nvmlEventSetWait timeout), in ms
    event_wait_ms = 10
    max_events_per_tick = 256
    #: sampling reads the process lists and per-process utilisation with direct ctypes calls
    #: (forensics.collectors.nvml.fast: the same calls and records as pynvml's wrappers, a fifth of
    #: the CPU); False: through pynvml's wrappers (what the equivalence test compares against)
    direct_list_calls = True

    def __init__(self, nvml_module: Any = None) -> None:
        self._nvml_module = nvml_module
        self._sampler: Sampler | None = None
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

    def open(self, ctx: CollectContext) -> Session:
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
        session = Session(nv, SPEC.read_settings(ctx.options.extra).call_timeout_s)
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

    def open_guarded(self, ctx: CollectContext) -> Session:
        """``open`` under the deadline guard: nvmlInit itself can hang on a wedged GPU."""
        box: list[Session] = []
        budget = max(ctx.remaining() - 1.0, 0.5)
        stuck = Session(None).run_guarded(lambda: box.append(self.open(ctx)), budget)
        if stuck is not None or not box:
            raise SourceTimeout(f"nvmlInit did not return within {budget:.1f} s")
        return box[0]

    @staticmethod
    def close(session: Session) -> None:
        if session.hung is None:
            try:
                session.nv.nvmlShutdown()
            except Exception:  # noqa: BLE001 - nothing left to record
                pass

    # -- snapshot -----------------------------------------------------------------------------
    def snapshot(self, ctx: CollectContext) -> None:
        """Devices, processes and accounting records, read once."""
        started = time.time()
        session = self.open_guarded(ctx)
        state = _Snapshot(session, ctx)
        state.started = started
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
                self._sampler = Sampler(self.open_guarded(ctx), ctx, direct_list_calls=self.direct_list_calls,
                                        event_wait_ms=self.event_wait_ms,
                                        max_events_per_tick=self.max_events_per_tick, close=self.close)
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
    def __init__(self, session: Session, ctx: CollectContext) -> None:
        self.s = session
        self.nv = session.nv
        self.ctx = ctx
        self.system: dict[str, Any] = {}
        self.devices: list[dict[str, Any]] = []
        self.gpus: list[GpuHandle] = []
        self.proc_devices: list[dict[str, Any]] = []
        self.processes: list[dict[str, Any]] = []
        self.accounting: list[dict[str, Any]] = []
        self.started = time.time()

    def read_all(self) -> None:
        s, nv = self.s, self.nv
        s.record(self.system, "nvmlSystemGetDriverVersion", nv.nvmlSystemGetDriverVersion)
        s.record(self.system, "nvmlSystemGetNVMLVersion", nv.nvmlSystemGetNVMLVersion)
        s.record(self.system, "nvmlSystemGetCudaDriverVersion_v2", nv.nvmlSystemGetCudaDriverVersion_v2)
        count = s.record(self.system, "nvmlDeviceGetCount_v2", nv.nvmlDeviceGetCount)
        n = int(count.value) if count.ok else 0
        for index in range(n):
            self.gpus.append(GpuHandle(index=index, key=f"GPU {index}"))
        for gpu in self.gpus:
            rec: dict[str, Any] = {"index": gpu.index, "nvml": {}, "mig_devices": []}
            s.add(self.devices, rec)
            read_device(s, gpu, rec)
            self.checkpoint()
        for gpu in self.gpus:
            prec: dict[str, Any] = {"index": gpu.index, "uuid": gpu.uuid, "nvml": {}, "mig_devices": []}
            s.add(self.proc_devices, prec)
            for proc in read_processes(s, gpu, prec):
                s.add(self.processes, proc)
            if gpu.handle is not None:
                s.record(prec["nvml"], "nvmlDeviceGetProcessUtilization",
                         bind_call(nv.nvmlDeviceGetProcessUtilization, gpu.handle, 0), device=gpu.key)
        for gpu in self.gpus:
            arec = read_accounting(s, gpu)
            if arec is not None:
                s.add(self.accounting, arec)

    def _devices_doc(self, complete: bool) -> dict[str, Any]:
        return {
            "time": iso_from_unix(self.started), "t": self.started, "complete": complete,
            "library": self.ctx.options.nvml_library or "libnvidia-ml.so.1 (dynamic loader search)",
            "pynvml_version": pynvml_version(self.nv),
            "system": self.system, "devices": self.devices,
        }

    def checkpoint(self) -> None:
        """In the reading thread: save what was read so far (``complete: false``), atomically."""
        with self.s.lock:
            if self.s.abandoned:
                raise Abandoned
            self.ctx.sink.replace_json(DEVICES, self._devices_doc(complete=False))

    def write(self, ctx: CollectContext, started: float, stuck: str | None, budget: float) -> None:
        complete = stuck is None
        if stuck is not None:
            waited = self.s.hung_for_s
            ctx.partial(f"NVML call {stuck} did not return within {waited:.1f} s "
                        f"(of a {budget:.1f} s budget); later reads skipped")
            self.devices.append({"timed_out": timed_out(stuck, waited).as_json()})
        ctx.sink.replace_json(DEVICES, self._devices_doc(complete))
        pids = [int(p["pid"]) for p in self.processes]
        identity = {pid: proc_identity(pid) for pid in set(pids)}
        in_proc = {pid: ident[0] for pid, ident in identity.items()}
        namespace = assess_pid_namespace(pids, in_proc)
        derived = [asdict(gpu_process(p, identity)) for p in self.processes]
        ctx.sink.write_json(PROCESSES, {
            "time": iso_from_unix(started), "t": started, "complete": complete,
            "devices": self.proc_devices, "processes": derived, "pid_namespace": namespace,
        })
        if self.accounting:
            ctx.sink.write_json(ACCOUNTING, accounting_doc(self.accounting, started, complete))
        if namespace["status"] in ("mismatch", "partial"):
            ctx.note(f"nvml: PID namespace {namespace['status']}: {namespace['reason']}")
        PIDS.publish(ctx, namespace["attributable_pids"])
        GPU_PIDS.publish(ctx, namespace["attributable_pids"])
        count = self.system.get("nvmlDeviceGetCount_v2", {})
        if "missing" in count:
            ctx.partial(f"nvmlDeviceGetCount_v2: {count['missing']} ({count['error']})")
        lost = sorted(set(self.s.lost))
        if lost:
            ctx.partial(f"GPU is lost: {', '.join(lost)}")


COLLECTOR = NvmlCollector()
