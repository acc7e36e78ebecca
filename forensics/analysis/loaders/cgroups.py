"""cgroup counters and pressure: ``cgroup/samples.jsonl`` (one line per cgroup per tick) and the
snapshot ``cgroup/index.json`` (cgroups collector), values parsed from ``cpu.stat``,
``memory.current``/``memory.usage_in_bytes``, ``memory.max``, ``memory.events`` and PSI files.
The recorder's lines are sparse for quiet cgroups (docs/bundle-format/cgroups.md): rates come from
cumulative counters over whatever interval separates two lines, and a line's ``unchanged_until``
places the start of the interval in which the CPU counters moved.

Each cgroup path is re-attributed with :func:`forensics.parsing.attribution.attribute_path`.
"""

from __future__ import annotations

from typing import Any

from forensics.analysis.events import OomKill
from forensics.analysis.findings import EvidenceRef, LineRef
from forensics.analysis.loaders.common import Loader, as_float, as_int, dig, parse_time
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Model
from forensics.analysis.samples import CpuSample, IoSample, MemorySample, PsiSample
from forensics.analysis.source import Source
from forensics.errors import ParseError
from forensics.parsing.attribution import attribute_path
from forensics.specs import cgroups as cgroup_spec

__all__ = ["LOADER", "load_cgroups"]

_CPU_QUOTE: tuple[tuple[str | int, ...], ...] = (
    ("values", "cpu", "nr_periods"), ("values", "cpu", "nr_throttled"), ("values", "cpu", "throttled_ns"))
_UNCHANGED_QUOTE: tuple[tuple[str | int, ...], ...] = (("unchanged_until",), *_CPU_QUOTE)
_IO_QUOTE: tuple[tuple[str | int, ...], ...] = (("values", "io"),)
_IO_QUOTE_SNAPSHOT: tuple[tuple[str | int, ...], ...] = (("io",),)
_PSI_QUOTES: dict[tuple[str, ...], tuple[tuple[str | int, ...], ...]] = {}
_new = tuple.__new__
_ABSENT = object()


def _container_of(path: str, cache: dict[str, str | None]) -> str | None:
    if path not in cache:
        try:
            att = attribute_path(path)
            cache[path] = att.container_id if att.kind == "container" and not att.namespace_relative else None
        except ParseError:
            cache[path] = None
    return cache[path]


class _Cgroup:
    """One cgroup path, as the loader meets it at every tick: its container (None: not a container's),
    the PSI counters of its scope and, for ``/``, of the host's (``LoadState.psi_counters``), its
    previous memory sample (an equal reading reuses its integers: held once, not once a tick), and
    the time, CPU values and reference of its previous line (``unchanged_until``)."""

    __slots__ = ("cid", "cpu", "host_psi", "memory", "psi", "ref", "t")

    def __init__(self, out: _Sink, node: str, path: str, cache: dict[str, str | None]) -> None:
        self.cid = cid = cache[path] if path in cache else _container_of(path, cache)
        counters = out.psi_counters
        self.psi = counters.setdefault((node, cid), {}) if cid else None
        self.host_psi = counters.setdefault((node, "host"), {}) if path == "/" else None
        self.memory: MemorySample | None = None
        self.t: float | None = None
        self.cpu: Any = None
        self.ref: EvidenceRef | LineRef | None = None


class _Sink:
    """Where one cgroups pass puts its samples: the series' appends taken once (this loader runs once
    per cgroup per tick), the node's PSI reading count, the PSI floors and previous counters."""

    __slots__ = ("cpu", "full_floor", "info", "io", "memory", "psi", "psi_counters", "some_floor")

    def __init__(self, model: Model, node: str, loading: LoadState) -> None:
        self.cpu = model.series(CpuSample).append
        self.memory = model.series(MemorySample).append
        self.io = model.series(IoSample).append
        self.psi = model.series(PsiSample).append
        self.info = model.node(node)
        self.some_floor, self.full_floor = loading.psi_some_floor, loading.psi_full_floor
        self.psi_counters = loading.psi_counters


def _add_values(out: _Sink, node: str, cg: _Cgroup, t: float, values: dict[str, Any], ev: EvidenceRef | LineRef,
                cpu_quote: tuple[tuple[str | int, ...], ...] = _CPU_QUOTE) -> None:
    """One cgroup's values at time t: CFS counters, memory, PSI (this runs once per cgroup per tick)."""
    cid = cg.cid
    if cid:
        cpu = values.get("cpu")
        if cpu.__class__ is dict:
            periods, throttled = cpu.get("nr_periods"), cpu.get("nr_throttled")
            if periods.__class__ is int and throttled.__class__ is int:
                t_ns = cpu.get("throttled_ns")
                # tuple.__new__ straight: a NamedTuple's own __new__ is a Python call, per cgroup per tick
                out.cpu(_new(CpuSample, (node, cid, t, periods, throttled,
                                         t_ns // 1000 if t_ns.__class__ is int else None, ev, cpu_quote)))
        mem = values.get("memory")
        if mem.__class__ is dict:
            cur = mem.get("current_bytes")
            if cur.__class__ is int:
                lim = mem.get("limit_bytes")
                if lim.__class__ is not int:
                    lim = None
                last = cg.memory
                if last is not None:  # the same values: the previous sample's objects, not new ones
                    if cur == last[3]:
                        cur = last[3]
                    if lim == last[4]:
                        lim = last[4]
                cg.memory = sample = _new(MemorySample, (node, cid, t, cur, lim))
                out.memory(sample)
        psi = values.get("pressure")
        if psi.__class__ is dict and cg.psi is not None:
            _add_psi(out, cg.psi, node, cid, "pressure", psi, t, ev)
        io = values.get("io")
        if io.__class__ is dict:
            devices = io_bytes(io)
            if devices:
                out.io(IoSample(node, cid, t, devices, ev, _IO_QUOTE if ev.line else _IO_QUOTE_SNAPSHOT))
    if cg.host_psi is not None:
        psi = values.get("host_pressure")
        if psi.__class__ is dict:
            _add_psi(out, cg.host_psi, node, "host", "host_pressure", psi, t, ev)


def _add_psi(out: _Sink, counters: dict[str, list[Any]], node: str, scope: str, section: str, psi: dict[str, Any],
             t: float, ev: EvidenceRef | LineRef) -> None:
    """The PSI readings of one scope at ``t``; ``counters``: the scope's previous counter readings."""
    some_floor, full_floor = out.some_floor, out.full_floor
    readings = 0
    for resource, lines in psi.items():
        if lines.__class__ is not dict:
            continue
        some = lines.get("some_total_usec", _ABSENT)
        if some is not _ABSENT:
            # A ``cgroup/samples.jsonl`` reading: cumulative ``some_total_usec``/``full_total_usec``
            # (``<cgroup>/<resource>.pressure``, ``/proc/pressure/<resource>``). The stall share of the
            # interval since the previous tick, ``Δtotal_usec / (1e6 * Δt)``, is kept as a percentage
            # in the ``*_avg10_pct`` fields (the snapshot's avg10 is the kernel's 10 s average of the
            # same share). Inline: it runs for every resource of every cgroup at every tick; the
            # previous reading is updated in place.
            if some.__class__ is not int:
                continue
            full = lines.get("full_total_usec")
            full_total = full if full.__class__ is int else None
            prev = counters.get(resource)
            if prev is None:
                counters[resource] = [t, some, full_total]
                continue  # the first tick: no interval yet
            prev_t, prev_some, prev_full = prev
            prev[0], prev[1], prev[2] = t, some, full_total
            if t <= prev_t or some < prev_some:
                continue  # a counter reset: no interval
            dt_us = (t - prev_t) * 1e6
            some_pct = (some - prev_some) * 100.0 / dt_us
            if some_pct > 100.0:
                some_pct = 100.0
            full_pct = None
            if full_total is not None and prev_full is not None and full_total >= prev_full:
                full_pct = (full_total - prev_full) * 100.0 / dt_us
                if full_pct > 100.0:
                    full_pct = 100.0
            readings += 1
            if some_pct >= some_floor or (full_pct is not None and full_pct >= full_floor):
                quote = _PSI_QUOTES.get((section, resource, "counters"))
                if quote is None:
                    quote = _PSI_QUOTES[(section, resource, "counters")] = (
                        ("values", section, resource, "some_total_usec"), ("values", section, resource, "full_total_usec"))
                out.psi(PsiSample(node, scope, resource, t, some_pct, full_pct, ev, quote, True))
            continue
        some_line = lines.get("some")
        some = some_line.get("avg10_pct") if some_line.__class__ is dict else None
        if some.__class__ is not float and some.__class__ is not int:
            continue
        readings += 1
        full_line = lines.get("full")
        full = full_line.get("avg10_pct") if full_line.__class__ is dict else None
        if full.__class__ is not float and full.__class__ is not int:
            full = None
        # Readings below both floors (the rule's thresholds) can never matter: counted, not kept.
        if some >= some_floor or (full is not None and full >= full_floor):
            quote = _PSI_QUOTES.setdefault((section, resource), (("values", section, resource, "some"),
                                                                      ("values", section, resource, "full")))
            out.psi(PsiSample(node, scope, resource, t, float(some),
                                               float(full) if full is not None else None, ev, quote))
    if readings:
        out.info.psi_readings += readings


def io_bytes(io: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per device (bytes read, bytes written) from a cgroup's ``io`` values: v2 ``stat``
    (rbytes/wbytes) or v1 ``service_bytes`` (read/write)."""
    out: dict[str, tuple[int, int]] = {}
    for section, r, w in (("stat", "rbytes", "wbytes"), ("service_bytes", "read", "write")):
        table = io.get(section)
        if table.__class__ is not dict:
            continue
        for device, counters in table.items():
            if counters.__class__ is dict:
                rb, wb = as_int(counters.get(r)), as_int(counters.get(w))
                if rb is not None and wb is not None:
                    out[device] = (rb, wb)
    return out


def io_limits(io: dict[str, Any]) -> dict[str, dict[str, int | None]]:
    """Per device the read/write byte limits: v2 ``max`` (rbps, wbps, riops, wiops) or v1
    ``read_bps_device``/``write_bps_device``; devices without any limit left out."""
    out: dict[str, dict[str, int | None]] = {}
    v2 = io.get("max")
    if v2.__class__ is dict:
        for device, limits in v2.items():
            if limits.__class__ is dict and any(as_int(v) for v in limits.values()):
                out[device] = {k: as_int(v) for k, v in limits.items()}
    for section, key in (("read_bps_device", "rbps"), ("write_bps_device", "wbps")):
        table = io.get(section)
        if table.__class__ is dict:
            for device, value in table.items():
                if as_int(value):
                    out.setdefault(device, {})[key] = as_int(value)
    return out


def _add_unchanged_cpu(out: _Sink, node: str, cid: str | None, t: float, cpu: Any, ev: EvidenceRef | LineRef) -> None:
    """A recorder line's ``unchanged_until``: its cgroup's CPU counters were read then and were
    still the previous line's (docs/bundle-format/cgroups.md), so the previous line's CFS counters
    hold at ``t``: the interval in which the cgroup became busy starts there, not at the previous
    line (which may be ``cgroups.idle_full_s`` older). ``ev`` is the previous line's: the counters
    quoted are the ones the reading holds (the time is the next line's ``unchanged_until``)."""
    if cid and cpu.__class__ is dict:
        periods, throttled, t_ns = cpu.get("nr_periods"), cpu.get("nr_throttled"), cpu.get("throttled_ns")
        if periods.__class__ is int and throttled.__class__ is int:
            out.cpu(CpuSample(node, cid, t, periods, throttled,
                                               t_ns // 1000 if t_ns.__class__ is int else None, ev, _CPU_QUOTE))


def load_cgroups(src: Source, model: Model, node: str, loading: LoadState) -> None:
    out = _Sink(model, node, loading)
    cache: dict[str, str | None] = {}
    times: dict[float, float] = {}  # one float object per tick, shared by its cgroups' lines
    seen: dict[str, _Cgroup] = {}  # cgroup path -> what its previous lines left
    sampled = False
    for no, rec, raw in src.jsonl(cgroup_spec.SAMPLES):
        path, t, values = rec.get("cgroup"), rec.get("t"), rec.get("values")
        if t.__class__ is not float:  # (as_float, inline for the usual case: once per line)
            t = as_float(t)
        if not isinstance(path, str) or t is None or not isinstance(values, dict):
            continue
        t = times.setdefault(t, t)
        sampled = True
        ref = src.ref(cgroup_spec.SAMPLES, no, raw)
        cg = seen.get(path)
        if cg is None:
            cg = seen[path] = _Cgroup(out, node, path, cache)
        cpu = values.get("cpu")
        quiet = rec.get("unchanged_until")
        if quiet is not None:
            quiet = as_float(quiet)
            before = cg.t
            if before is not None and quiet is not None and before < quiet < t and cg.cpu != cpu:
                assert cg.ref is not None
                _add_unchanged_cpu(out, node, cg.cid, quiet, cg.cpu, cg.ref)
        cg.t, cg.cpu, cg.ref = t, cpu, ref  # this line, for the next one's unchanged_until
        # a line after quiet ticks quotes its unchanged_until too: where the interval it closes began
        _add_values(out, node, cg, t, values, ref, _CPU_QUOTE if quiet is None else _UNCHANGED_QUOTE)
    if sampled:  # the member's path in the bundle (``ring/...`` over the ring view), as its evidence names it
        used = src.ref(cgroup_spec.SAMPLES, 0, None).member
        model.node(node).members_used.setdefault("cgroups", used)
        model.node(node).members_used.setdefault("psi", used)
    index = src.json(cgroup_spec.INDEX)
    cgroups = dig(index, "cgroups")
    t_snap = model.node(node).start or parse_time(dig(src.manifest, "capture", "started")) or 0.0
    for i, entry in enumerate(cgroups if isinstance(cgroups, list) else []):
        path, values = dig(entry, "path"), dig(entry, "values")
        if not isinstance(path, str) or not isinstance(values, dict):
            continue
        cid = _container_of(path, cache)
        ev = src.ref(cgroup_spec.INDEX, 0, values, pointer=f"/cgroups/{i}/values")
        peak = as_int(dig(values, "memory", "peak_bytes"))
        if cid and peak is not None:  # memory.peak (v2) / memory.max_usage_in_bytes (v1)
            key = (node, cid)
            model.memory_peaks[key] = max(peak, model.memory_peaks.get(key, 0))
        if not sampled:
            _add_values(out, node, _Cgroup(out, node, path, cache), t_snap, values, ev)
            model.node(node).members_used.setdefault("cgroups", ev.member)
            model.node(node).members_used.setdefault("psi", ev.member)
        io = values.get("io")
        if cid and io.__class__ is dict:
            limits = io_limits(io)
            if limits:
                model.io_limits[(node, cid)] = (limits, src.ev_pointer(cgroup_spec.INDEX, f"/cgroups/{i}/values/io",
                                                                        index))
        oom_kills = as_int(dig(values, "memory", "events", "oom_kill")) or as_int(dig(values, "memory", "oom_kill"))
        if cid and oom_kills:
            for _ in range(min(oom_kills, 5)):
                model.add(OomKill(node, None, None, None, cid, None, False,
                                          as_int(dig(values, "memory", "peak_bytes")),
                                          as_int(dig(values, "memory", "limit_bytes")), path, "cgroup",
                                          (src.ev_pointer(cgroup_spec.INDEX, f"/cgroups/{i}/values/memory", index),)))
                break  # one record: the count is in the evidence


LOADER = Loader("cgroups", load_cgroups, needs=())
