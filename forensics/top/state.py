"""What ``gpuforensics top`` folds: the recorder's live state, plus the figures a person looks at.

:class:`TopState` is :class:`~forensics.record.live.state.LiveState` (GPUs, GPU processes with their
owner and grant from the analysis' own joins, cgroups, events), fed the same records, whoever
sends them (top's own samplers, or the recorder's ring: forensics.top.feeds). It keeps beside it
what the recorder's triggers never needed and top shows:

- per GPU, from the ``nvml/samples.jsonl`` device lines: temperature
  (nvmlDeviceGetTemperature), power (nvmlDeviceGetPowerUsage, mW), the active clock-slowdown
  reasons (nvmlDeviceGetCurrentClocksEventReasons, decoded) and the utilisation of the last
  :data:`HISTORY` ticks (the sparkline); per GPU process its newest SM sample
  (nvmlDeviceGetProcessUtilization), which :meth:`TopState.sm_pct` holds across ticks without one;
- the PCI bus id and product name of each GPU (``nvml/devices.json``: the UUID is read from
  nvmlDeviceGetUUID there), so a kernel Xid line (which names the bus)
  counts for its GPU;
- per container, from the ``cgroup/samples.jsonl`` lines of container cgroups only (the path
  names the container: forensics.parsing.attribution), the readings the ``docker stats`` half of
  the view needs: CPU time, throttled periods, memory and its limit; :meth:`TopState.container_stats`
  gives CPU % (of one core) and throttled % between the last two readings;
- the containers Docker said died or were destroyed (``docker/events.jsonl``), with when.

The lines are parsed here once per record (a tick's device lines, the container cgroups' lines);
the rest of the fold is the recorder's.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from forensics.parsing.attribution import attribute_path
from forensics.record.live.state import LiveState
from forensics.specs import cgroups as cgroups_spec
from forensics.specs import docker as docker_spec
from forensics.specs import nvml as nvml_spec

__all__ = ["HISTORY", "SM_HOLD_S", "ContainerStats", "GpuExtra", "TopState"]

SM_HOLD_S = 10.0  # how long a process' newest SM sample stands for it (see TopState.sm_pct)
HISTORY = 60  # utilisation readings kept per GPU (the sparkline shows the newest that fit)
_CGROUP_HEAD = b'{"cgroup": "'

try:
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads


@dataclass(frozen=True)
class ContainerStats:
    """A container's cgroup figures between its last two readings (None: not read, or one reading)."""

    container_id: str
    cgroup: str
    t: float
    cpu_pct: float | None  # of one core, as docker stats counts it
    throttled_pct: float | None  # throttled periods / periods
    memory_bytes: int | None
    memory_limit_bytes: int | None  # None: no limit (or not read)


@dataclass
class GpuExtra:
    temperature_c: float | None = None
    power_w: float | None = None
    slowdown: tuple[str, ...] = ()
    history: deque[float] | None = None


def _nvml_value(nv: Any, call: str) -> Any:
    got = nv.get(call) if isinstance(nv, dict) else None
    return got.get("value") if isinstance(got, dict) else None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


class _Reading:
    __slots__ = ("cid", "limit", "memory", "periods", "t", "throttled", "usage_ns")

    def __init__(self, cid: str, t: float) -> None:
        self.cid = cid
        self.t = t
        self.usage_ns: float | None = None
        self.periods: float | None = None
        self.throttled: float | None = None
        self.memory: int | None = None
        self.limit: int | None = None


class TopState(LiveState):
    """See the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.extra: dict[int, GpuExtra] = {}
        self.bus_ids: dict[str, str] = {}  # GPU UUID -> PCI bus id (lower case)
        self.gpu_names: dict[str, str] = {}  # GPU UUID -> product name (nvmlDeviceGetName)
        self._cid_of: dict[str, str | None] = {}  # cgroup path -> container id
        # container id -> (the newest reading, the one before)
        self._readings: dict[str, tuple[_Reading, _Reading | None]] = {}
        self._paths: dict[str, str] = {}  # container id -> its cgroup path
        self.ended: dict[str, float] = {}  # container id -> when Docker said it died/was destroyed
        self.started: dict[str, float] = {}  # container id -> when Docker said it started
        self.event_names: dict[str, str] = {}  # container id -> its name in Docker's events
        # (PID, GPU index) -> (t, SM %) of its newest utilisation sample (see sm_pct)
        self._sm: dict[tuple[int, int], tuple[float, float]] = {}

    def feed(self, t: float, mono: float, member: str, op: str, data: str | bytes,
             summary: list[Any] | None = None) -> None:
        if member == nvml_spec.SAMPLES:
            self._gpu_lines(data)
        elif member == cgroups_spec.SAMPLES:
            self._cgroup_lines(data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))
        elif member == docker_spec.EVENTS:
            self._container_events(t, data)
        elif member == nvml_spec.DEVICES and op == "write":
            self._bus_ids(data)
        super().feed(t, mono, member, op, data, summary)

    # -- GPUs --------------------------------------------------------------------------------
    def _gpu_lines(self, data: str | bytes) -> None:
        for raw in (data.splitlines() if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape").splitlines()):
            if b'"kind": "device"' not in raw:
                continue
            try:
                line = _loads(raw)
            except ValueError:
                continue
            idx = line.get("gpu_index") if isinstance(line, dict) else None
            if not isinstance(idx, int):
                continue
            nv = line.get("nvml") or {}
            ex = self.extra.setdefault(idx, GpuExtra(history=deque(maxlen=HISTORY)))
            ex.temperature_c = _number(_nvml_value(nv, "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"))
            power = _number(_nvml_value(nv, "nvmlDeviceGetPowerUsage"))
            ex.power_w = None if power is None else power / 1000.0
            reasons = (nv.get("nvmlDeviceGetCurrentClocksEventReasons") or {}) if isinstance(nv, dict) else {}
            decoded = reasons.get("decoded") if isinstance(reasons, dict) else None
            # GpuIdle is no slowdown: the clocks are low because nothing runs
            ex.slowdown = tuple(str(r) for r in decoded if r != "GpuIdle") if isinstance(decoded, list) else ()
            util = _nvml_value(nv, "nvmlDeviceGetUtilizationRates")
            gpu = _number(util.get("gpu")) if isinstance(util, dict) else None
            if gpu is not None and ex.history is not None:
                ex.history.append(gpu)
            t = _number(line.get("t")) or 0.0
            samples = _nvml_value(nv, "nvmlDeviceGetProcessUtilization")
            newest: dict[int, tuple[float, float]] = {}
            for smp in samples if isinstance(samples, list) else ():
                if isinstance(smp, dict) and isinstance(smp.get("pid"), int) and _number(smp.get("smUtil")) is not None:
                    stamp = _number(smp.get("timeStamp")) or 0.0
                    if smp["pid"] not in newest or stamp >= newest[smp["pid"]][0]:
                        newest[smp["pid"]] = (stamp, float(smp["smUtil"]))
            if len(self._sm) > 100_000:
                self._sm.clear()
            for pid, (_, sm) in newest.items():
                self._sm[(pid, idx)] = (t, sm)

    def sm_pct(self, pid: int, gpu: int, t: float, value: float | None) -> float | None:
        """A GPU process's SM %: ``value`` (the last tick's, as the live state gives it), else its
        newest utilisation sample within :data:`SM_HOLD_S` of ``t``. NVML returns the samples since
        the last call, so a tick that falls between two of the driver's samples has none for a
        process that is still busy: the newest one stands for it, not "unknown"."""
        if value is not None:
            return value
        held = self._sm.get((pid, gpu))
        return held[1] if held is not None and t - held[0] <= SM_HOLD_S else None

    def _bus_ids(self, data: str | bytes) -> None:
        try:
            doc = _loads(data)
        except ValueError:
            return
        for d in doc.get("devices", []) if isinstance(doc, dict) else []:
            if not isinstance(d, dict):
                continue
            nv = d.get("nvml") or {}
            uuid = d.get("uuid") or _nvml_value(nv, "nvmlDeviceGetUUID")
            if not isinstance(uuid, str):
                continue
            pci = _nvml_value(nv, "nvmlDeviceGetPciInfo_v3")
            bus = d.get("pci_bus_id") or (pci.get("busId") if isinstance(pci, dict) else None)
            if isinstance(bus, str) and bus:
                self.bus_ids[uuid] = bus.lower()
            name = d.get("name") or _nvml_value(nv, "nvmlDeviceGetName")
            if isinstance(name, str) and name:
                self.gpu_names[uuid] = name

    # -- containers --------------------------------------------------------------------------
    def _cid(self, path: str) -> str | None:
        hit = self._cid_of.get(path, "")
        if hit != "":
            return hit
        if len(self._cid_of) > 50_000:
            self._cid_of.clear()
        cid = self._cid_of[path] = attribute_path(path).container_id
        return cid

    def _cgroup_lines(self, data: bytes) -> None:
        """Parse only the lines of container cgroups (the path, read without a parse, names one)."""
        for raw in data.splitlines():
            if not raw.startswith(_CGROUP_HEAD):
                continue
            end = raw.find(b'"', len(_CGROUP_HEAD))
            if end < 0:
                continue
            cid = self._cid(raw[len(_CGROUP_HEAD):end].decode("utf-8", "surrogateescape"))
            if cid is None:
                continue
            try:
                line = _loads(raw)
            except ValueError:
                continue
            values, t = line.get("values"), _number(line.get("t"))
            if not isinstance(values, dict) or t is None:
                continue
            self._reading(cid, str(line.get("cgroup")), t, values)

    def _reading(self, cid: str, path: str, t: float, values: dict[str, Any]) -> None:
        prev = self._readings.get(cid)
        r = _Reading(cid, t)
        if prev is not None:  # a quiet cgroup's line carries only what changed: keep the rest
            old = prev[0]
            r.usage_ns, r.periods, r.throttled, r.memory, r.limit = (old.usage_ns, old.periods, old.throttled,
                                                                     old.memory, old.limit)
        cpu, mem = values.get("cpu"), values.get("memory")
        if isinstance(cpu, dict):
            usage = _number(cpu.get("usage_ns"))
            r.usage_ns = usage if usage is not None else r.usage_ns
            r.periods = _number(cpu.get("nr_periods")) if "nr_periods" in cpu else r.periods
            r.throttled = _number(cpu.get("nr_throttled")) if "nr_throttled" in cpu else r.throttled
        if isinstance(mem, dict):
            cur = mem.get("current_bytes")
            r.memory = cur if isinstance(cur, int) else r.memory
            if "limit_bytes" in mem:
                lim = mem.get("limit_bytes")
                r.limit = lim if isinstance(lim, int) and lim < (1 << 62) else None
        if len(self._readings) > 20_000 and cid not in self._readings:
            self._readings.clear()
        self._paths[cid] = path
        self._readings[cid] = (r, prev[0] if prev is not None else None)

    def container_stats(self) -> dict[str, ContainerStats]:
        """Each container's figures between its last two cgroup readings. The recorder's cgroup
        sampler writes no line for a cgroup whose CPU usage counter did not move since its last
        line (``cgroups.idle_full_s`` activity gating): where the sampler has read a later tick
        (its clock, the newest cgroup line, is past this cgroup's), the container used no CPU since,
        and was not throttled."""
        out = {}
        clock = self.cgroup_clock()
        for cid, (cur, before) in self._readings.items():
            cpu = throttled = None
            if clock > cur.t:
                cpu = throttled = 0.0
            elif before is not None and cur.t > before.t:
                if cur.usage_ns is not None and before.usage_ns is not None:
                    cpu = max(0.0, 100.0 * (cur.usage_ns - before.usage_ns) / 1e9 / (cur.t - before.t))
                if None not in (cur.periods, cur.throttled, before.periods, before.throttled):
                    dp = cur.periods - before.periods  # type: ignore[operator]
                    dt = cur.throttled - before.throttled  # type: ignore[operator]
                    throttled = 100.0 * dt / dp if dp > 0 else 0.0
            out[cid] = ContainerStats(cid, self._paths.get(cid, ""), cur.t, cpu, throttled, cur.memory, cur.limit)
        return out

    def _container_events(self, t: float, data: str | bytes) -> None:
        text = data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")
        for raw in text.splitlines():
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(ev, dict) or ev.get("Type") != "container":
                continue
            actor = ev.get("Actor")
            cid = actor.get("ID") if isinstance(actor, dict) else None
            action = str(ev.get("Action") or ev.get("status") or "").split(":", 1)[0]
            if not isinstance(cid, str) or not cid:
                continue
            when = _number(ev.get("time")) or t
            attrs = actor.get("Attributes") if isinstance(actor, dict) else None
            if isinstance(attrs, dict) and isinstance(attrs.get("name"), str):
                self.event_names[cid] = attrs["name"]
            if action in ("die", "destroy"):
                self.ended.setdefault(cid, when)
            elif action == "start":
                self.started[cid] = when
                self.ended.pop(cid, None)
        if len(self.ended) > 10_000:
            self.ended = dict(sorted(self.ended.items(), key=lambda kv: kv[1])[-5_000:])
        if len(self.event_names) > 20_000:
            self.event_names.clear()

    # -- identity, for the view ----------------------------------------------------------------
    def identity(self, member: str) -> bytes | None:
        """A ``proc/<pid>/`` or ``docker/`` member as the samplers last wrote it (None: not kept)."""
        return self._identity.get(member)
