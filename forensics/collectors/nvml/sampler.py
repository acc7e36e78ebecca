"""Sampling NVML per tick (``nvml/samples.jsonl``, ``nvml/events.jsonl``): state kept across ticks
in the sampling child."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.collect.context import CollectContext, Tick
from forensics.collectors.nvml.decode import (
    decode_event_types,
    xid_description,
)
from forensics.collectors.nvml.encode import LineEncoder
from forensics.collectors.nvml.errors import timed_out
from forensics.collectors.nvml.fast import SAMPLE_STAMP, ListCalls, Samples
from forensics.collectors.nvml.fast import bind as bind_list_calls
from forensics.collectors.nvml.reads import (
    PROCESS_LISTS,
    GpuHandle,
    accounting_doc,
    bind_call,
    handle_key,
    instance_id,
    read_accounting,
    read_clock_reasons,
    read_health,
    read_memory,
    read_mig_devices,
    read_processes,
)
from forensics.collectors.nvml.session import Reading, Session
from forensics.errors import SourceTimeout
from forensics.specs.nvml import (
    ACCOUNTING_END,
    EVENTS,
    HEALTH_END,
    SAMPLES,
)

__all__ = ["CRITICAL_EVENTS", "Sampler"]

#: Event types worth waiting for (nvmlEventType*): ECC, Xid, retirement, poison, GPU unavailable.
CRITICAL_EVENTS = 0x1 | 0x2 | 0x8 | 0x400 | 0x800 | 0x1000 | 0x2000 | 0x4000 | 0x8000
_SAMPLE_PROCESS_KEYS = ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId", "type", "mig_uuid")


# -- sampling -----------------------------------------------------------------------------------
class Sampler:
    """State kept across ticks in the sampling child: handles, lastSeenTimeStamp, the event set.

    Given the collector's session (opened, ``nvmlInit`` done), the collector's sampling settings
    and how to close the session: it knows nothing else of the collector."""

    def __init__(self, session: Session, ctx: CollectContext, *, direct_list_calls: bool, event_wait_ms: int,
                 max_events_per_tick: int, close: Callable[[Session], None]) -> None:
        self.direct_list_calls = direct_list_calls
        self.event_wait_ms = event_wait_ms
        self.max_events_per_tick = max_events_per_tick
        self.close = close
        self.gpus: list[GpuHandle] = []
        self.last_seen: dict[int, int] = {}
        self.event_set: Any = None
        self.handles: dict[int, tuple[int, str | None, str | None]] = {}
        self.registration: list[dict[str, Any]] = []
        self.noted_hang = False
        self.noted_lost: set[str] = set()
        self.memory_v1: set[int] = set()
        self.fast: ListCalls | None = None  # the list calls without pynvml's per-entry objects
        self.encoder = LineEncoder()  # the process entries, kept with their JSON (the fast path)
        self.session = session
        stuck = self.session.run_guarded(self._setup, max(ctx.remaining() - 1.0, 0.5))
        for line in self.registration:
            ctx.sink.append_jsonl(EVENTS, line)
        if stuck is not None:
            raise SourceTimeout(f"{stuck} did not return while setting up sampling")

    def _setup(self) -> None:
        s, nv = self.session, self.session.nv
        count = s.query("nvmlDeviceGetCount_v2", nv.nvmlDeviceGetCount)
        n = int(count.value) if count.ok else 0
        self.gpus = [GpuHandle(index=i, key=f"GPU {i}") for i in range(n)]
        self.fast = bind_list_calls(nv) if self.direct_list_calls else None
        es = s.query("nvmlEventSetCreate", nv.nvmlEventSetCreate)
        self.event_set = es.raw if es.ok else None
        if not es.ok:
            s.add(self.registration, {"kind": "registration", "t": time.time(), "nvml": {es.call: es.as_json()}})
        for gpu in self.gpus:
            self._open_gpu(gpu)

    def _open_gpu(self, gpu: GpuHandle) -> Reading:
        s, nv = self.session, self.session.nv
        h = s.query("nvmlDeviceGetHandleByIndex_v2", bind_call(nv.nvmlDeviceGetHandleByIndex, gpu.index), device=gpu.key)
        if not h.ok:
            return h
        gpu.handle = h.raw
        uuid = s.query("nvmlDeviceGetUUID", bind_call(nv.nvmlDeviceGetUUID, gpu.handle), device=gpu.key)
        gpu.uuid = uuid.value if uuid.ok else None
        key = handle_key(gpu.handle)
        if key is not None:
            self.handles[key] = (gpu.index, gpu.uuid, None)
        mig = s.query("nvmlDeviceGetMigMode", bind_call(nv.nvmlDeviceGetMigMode, gpu.handle), device=gpu.key)
        if mig.ok and int(mig.value[0]) == 1:
            read_mig_devices(s, gpu, None)
            for _slot, mh, muuid in gpu.mig:
                mkey = handle_key(mh)
                if mkey is not None:
                    self.handles[mkey] = (gpu.index, gpu.uuid, muuid)
        if self.event_set is not None:
            reg: dict[str, Any] = {"kind": "registration", "t": time.time(), "gpu_index": gpu.index,
                                   "uuid": gpu.uuid, "nvml": {}}
            sup = s.record(reg["nvml"], "nvmlDeviceGetSupportedEventTypes",
                           bind_call(nv.nvmlDeviceGetSupportedEventTypes, gpu.handle), device=gpu.key,
                           decode=decode_event_types)
            if sup.ok:
                mask = int(sup.value) & CRITICAL_EVENTS
                reg["mask"] = mask
                reg["mask_decoded"] = decode_event_types(mask)
                s.record(reg["nvml"], "nvmlDeviceRegisterEvents",
                         bind_call(nv.nvmlDeviceRegisterEvents, gpu.handle, mask, self.event_set), device=gpu.key)
            s.add(self.registration, reg)
        return h

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        if self.session.hung is not None:
            if not self.noted_hang:
                self.noted_hang = True
                ctx.note(f"nvml: sampling stopped: {self.session.hung} hung")
            return
        lines: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        interval = max(ctx.options.interval_s, 0.05)
        budget = max(min(ctx.remaining() - 0.5, max(5.0, 2 * interval)), 0.1)
        self.session.lost.clear()  # every tick asks every GPU again (a pass caches, ticks do not)
        stuck = self.session.run_guarded(lambda: self._read_tick(tick, lines, events), budget)
        # a sink that takes a line with its bytes made (the recorder's RecordSink, capture's EvidenceSink) gets them from
        # the encoder (encode.py: the same bytes, a fifth of the CPU); any other encodes them itself
        encoded: Any = None
        if stuck is None and self.fast is not None:
            self.encoder.end_reads()  # every tick: the encoder keeps this tick's entries only
            encoded = getattr(ctx.sink, "append_encoded_jsonl", None)
        for line in lines:
            data = None if encoded is None else self.encoder.encode(line)
            if data is None:
                ctx.sink.append_jsonl(SAMPLES, line)
            else:
                encoded(SAMPLES, line, data)
        for ev in events:
            ctx.sink.append_jsonl(EVENTS, ev)
        for device, call in sorted(self.session.lost.items()):
            if device not in self.noted_lost:
                self.noted_lost.add(device)
                ctx.note(f"nvml: {device} lost at tick {tick.index} ({call} answered GpuIsLost)")
        if stuck is not None:
            waited = self.session.hung_for_s
            ctx.sink.append_jsonl(SAMPLES, {
                "kind": "timeout", "tick": tick.index, "t": tick.time_unix, "time": tick.time_iso,
                **timed_out(stuck, waited).as_json()})
            raise SourceTimeout(f"{stuck} did not return within {waited:.1f} s; sampling stopped")

    def _read_tick(self, tick: Tick, lines: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        s, nv = self.session, self.session.nv
        iso = tick.time_iso  # (computed at each reading)
        for gpu in self.gpus:
            line: dict[str, Any] = {"kind": "device", "tick": tick.index, "t": tick.time_unix,
                                    "time": iso, "gpu_index": gpu.index, "uuid": gpu.uuid,
                                    "nvml": {}, "processes": []}
            if gpu.handle is None:
                h = self._open_gpu(gpu)
                line["uuid"] = gpu.uuid
                if not h.ok:
                    s.put(line["nvml"], h.call, h)
                    s.add(lines, line)
                    continue
            hd, d, out = gpu.handle, gpu.key, line["nvml"]
            s.record(out, "nvmlDeviceGetUtilizationRates", bind_call(nv.nvmlDeviceGetUtilizationRates, hd), device=d)
            if gpu.index in self.memory_v1:
                s.record(out, "nvmlDeviceGetMemoryInfo", bind_call(nv.nvmlDeviceGetMemoryInfo, hd), device=d)
            elif read_memory(s, hd, d, out).call == "nvmlDeviceGetMemoryInfo":
                self.memory_v1.add(gpu.index)
            s.record(out, "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
                     bind_call(nv.nvmlDeviceGetClockInfo, hd, nv.NVML_CLOCK_SM), device=d)
            s.record(out, "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
                     bind_call(nv.nvmlDeviceGetClockInfo, hd, nv.NVML_CLOCK_MEM), device=d)
            read_clock_reasons(s, hd, d, out)
            s.record(out, "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
                     bind_call(nv.nvmlDeviceGetTemperature, hd, nv.NVML_TEMPERATURE_GPU), device=d)
            s.record(out, "nvmlDeviceGetPowerUsage", bind_call(nv.nvmlDeviceGetPowerUsage, hd), device=d)
            prec: dict[str, Any] = {"nvml": out, "mig_devices": []}
            if self.fast is not None:
                s.put(line, "processes", self._processes(gpu, prec, self.fast))
            else:
                s.put(line, "processes", [{k: p[k] for k in _SAMPLE_PROCESS_KEYS}
                                          for p in read_processes(s, gpu, prec, brief=True)])
            if prec["mig_devices"]:
                s.put(line, "mig_devices", prec["mig_devices"])
            last = self.last_seen.get(gpu.index, 0)
            if self.fast is not None:
                util = s.query("nvmlDeviceGetProcessUtilization",
                               bind_call(self.fast.process_utilization, hd, last), device=d, jsonable=True)
            else:
                util = s.query("nvmlDeviceGetProcessUtilization",
                               bind_call(nv.nvmlDeviceGetProcessUtilization, hd, last), device=d)
            entry = util.as_json()
            entry["lastSeenTimeStamp"] = last
            if util.ok:
                value = util.value
                if type(value) is Samples:  # the direct call's answer: its rows' timestamps, ints already
                    newest = max(map(SAMPLE_STAMP, value.rows), default=last)
                else:
                    newest = max((int(x["timeStamp"]) for x in value), default=last)
                self.last_seen[gpu.index] = max(last, newest)
            s.put(out, "nvmlDeviceGetProcessUtilization", entry)
            s.add(lines, line)
        self._drain_events(tick, events)

    def _processes(self, gpu: GpuHandle, prec: dict[str, Any], fast: ListCalls) -> list[dict[str, Any]]:
        """:func:`read_processes` (``brief``) and the line's entries of it, the ``_v3`` lists read
        by ``fast``: the same calls, the same recorded ``nvml`` entries, the same line entries."""
        s, d, entries = self.session, gpu.key, self.encoder.entries
        found: list[dict[str, Any]] = []
        on_mig: set[tuple[int, str]] = set()
        for slot, mh, muuid in gpu.mig:
            mrec: dict[str, Any] = {"slot": slot, "uuid": muuid, "nvml": {}}
            s.add(prec["mig_devices"], mrec)
            for kind, func in PROCESS_LISTS:
                rows = self._process_rows(fast, mh, d, mrec["nvml"], kind, func)
                on_mig.update((int(row[0]), kind) for row in rows)
                found += entries((gpu.index, slot, muuid, kind), rows, kind, muuid)
        for kind, func in PROCESS_LISTS:
            made = entries((gpu.index, None, None, kind), self._process_rows(fast, gpu.handle, d, prec["nvml"], kind, func),
                           kind, None)
            found += [e for e in made if (int(e["pid"]), kind) not in on_mig] if on_mig else made
        return found

    def _process_rows(self, fast: ListCalls, hd: Any, d: str, out: dict[str, Any], kind: str,
                      func: str) -> list[tuple[int, int | None, int, int]]:
        """``_process_list`` (``brief``) with the ``_v3`` call read by ``fast``; its ``_v2``
        fallback (a library that answers FunctionNotFound) stays pynvml's."""
        s = self.session
        r = s.query(f"{func}_v3", bind_call(fast.process_rows, func, hd), device=d, jsonable=True)
        if r.missing is not None and r.missing.reason == "library_mismatch":
            s.put(out, r.call, r)
            old = s.query(f"{func}_v2", bind_call(getattr(s.nv, f"{func}_v2"), hd), device=d)
            s.put(out, old.call, {"count": len(old.value)} if old.ok else old)
            return [(p["pid"], p["usedGpuMemory"], p["gpuInstanceId"], p["computeInstanceId"])
                    for p in old.value] if old.ok else []
        s.put(out, r.call, {"count": len(r.value)} if r.ok else r)
        return r.value if r.ok else []

    def _drain_events(self, tick: Tick, events: list[dict[str, Any]]) -> None:
        """``nvmlEventSetWait_v2`` with a short timeout until it answers Timeout (nothing queued)."""
        if self.event_set is None:
            return
        s, nv = self.session, self.session.nv
        for _ in range(self.max_events_per_tick):
            r = s.query("nvmlEventSetWait_v2",
                        bind_call(nv.nvmlEventSetWait_v2, self.event_set, self.event_wait_ms))
            now = time.time()
            if r.missing is not None:
                if r.missing.reason != "timed_out":
                    s.add(events, {"kind": "error", "tick": tick.index, "t": now, "time": iso_from_unix(now),
                                   "nvml": {r.call: r.as_json()}})
                return
            data = r.raw
            etype = int(data.eventType)
            edata = int(data.eventData)
            gpu_index, uuid, mig_uuid = self.handles.get(handle_key(data.device) or -1, (None, None, None))
            ev: dict[str, Any] = {
                "kind": "event", "tick": tick.index, "t": now, "time": iso_from_unix(now),
                "gpu_index": gpu_index, "uuid": uuid, "mig_uuid": mig_uuid,
                "eventType": etype, "eventType_decoded": decode_event_types(etype), "eventData": edata,
                "gpuInstanceId": instance_id(data.gpuInstanceId),
                "computeInstanceId": instance_id(data.computeInstanceId),
            }
            if etype & 0x8:
                ev["xid"] = edata
                ev["xid_description"] = xid_description(edata)
            s.add(events, ev)

    def finish(self, ctx: CollectContext) -> None:
        if self.session.hung is not None:
            return
        started = time.time()
        acc: list[dict[str, Any]] = []
        health: list[dict[str, Any]] = []

        def work() -> None:
            for gpu in self.gpus:
                if gpu.handle is not None:
                    rec: dict[str, Any] = {"index": gpu.index, "uuid": gpu.uuid, "nvml": {}}
                    self.session.add(health, rec)
                    read_health(self.session, gpu, rec["nvml"])
            for gpu in self.gpus:
                arec = read_accounting(self.session, gpu)
                if arec is not None:
                    self.session.add(acc, arec)
            if self.event_set is not None:
                self.session.query("nvmlEventSetFree", bind_call(self.session.nv.nvmlEventSetFree, self.event_set))

        stuck = self.session.run_guarded(work, max(ctx.remaining() - 0.5, 0.1))
        if health:
            ctx.sink.write_json(HEALTH_END, {"time": iso_from_unix(started), "t": started, "complete": stuck is None,
                                             "devices": health})
        if acc:
            ctx.sink.write_json(ACCOUNTING_END, accounting_doc(acc, started, stuck is None))
        if stuck is None:
            self.close(self.session)


