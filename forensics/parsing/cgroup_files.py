"""One cgroup (or host PSI) file -> its normalised values.

Used by the cgroups collector for ``cgroup/index.json`` and ``cgroup/samples.jsonl``, and by the
analyzer to re-derive those values from the verbatim members. The table maps
``(version, file)`` to the section the values go in and the pure parser that reads them
(forensics.parsing.cgroupfs, .cgroup_io, .pressure).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forensics.errors import ParseError
from forensics.parsing.cgroup_io import (
    parse_blkio_limits,
    parse_blkio_stat,
    parse_io_max,
    parse_io_stat,
)
from forensics.parsing.cgroupfs import (
    MEMORY_STAT_KEYS,
    parse_cpu_max,
    parse_cpu_stat,
    parse_flat_keyed,
    parse_int,
    parse_limit,
    parse_memory_events,
    parse_oom_control,
    parse_v1_limit_bytes,
    parse_v1_quota_usec,
    select,
)
from forensics.parsing.pressure import pressure_totals, pressure_values

__all__ = ["file_values"]

_HOST_PRESSURE = ("cpu", "memory", "io")

_pressure = pressure_values


# file name -> (section, function(text) -> dict merged into that section)
_Interpreter = Callable[[str], dict[str, Any]]
_FILE_VALUES: dict[tuple[int, str], tuple[str, _Interpreter]] = {
    (2, "cpu.stat"): ("cpu", lambda t: parse_cpu_stat(t, 2)),
    (1, "cpu.stat"): ("cpu", lambda t: parse_cpu_stat(t, 1)),
    (2, "cpu.max"): ("cpu", lambda t: vars(parse_cpu_max(t))),
    (1, "cpu.cfs_quota_us"): ("cpu", lambda t: {"quota_usec": parse_v1_quota_usec(t)}),
    (1, "cpu.cfs_period_us"): ("cpu", lambda t: {"period_usec": parse_int(t)}),
    (2, "cpu.weight"): ("cpu", lambda t: {"weight": parse_int(t)}),
    (1, "cpu.shares"): ("cpu", lambda t: {"shares": parse_int(t)}),
    (1, "cpuacct.usage"): ("cpu", lambda t: {"usage_ns": parse_int(t)}),
    (2, "memory.current"): ("memory", lambda t: {"current_bytes": parse_int(t)}),
    (1, "memory.usage_in_bytes"): ("memory", lambda t: {"current_bytes": parse_int(t)}),
    (2, "memory.max"): ("memory", lambda t: {"limit_bytes": parse_limit(t)}),
    (1, "memory.limit_in_bytes"): ("memory",
                                   lambda t: {"limit_bytes": parse_v1_limit_bytes(t)}),
    (2, "memory.high"): ("memory", lambda t: {"high_bytes": parse_limit(t)}),
    (2, "memory.peak"): ("memory", lambda t: {"peak_bytes": parse_int(t)}),
    (1, "memory.max_usage_in_bytes"): ("memory", lambda t: {"peak_bytes": parse_int(t)}),
    (2, "memory.swap.current"): ("memory", lambda t: {"swap_bytes": parse_int(t)}),
    (2, "memory.events"): ("memory", lambda t: {"events": parse_memory_events(t, "memory.events")}),
    (2, "memory.events.local"): ("memory", lambda t: {
        "events_local": parse_memory_events(t, "memory.events.local")}),
    (1, "memory.failcnt"): ("memory", lambda t: {"failcnt": parse_int(t)}),
    (1, "memory.oom_control"): ("memory", parse_oom_control),
    (2, "memory.oom.group"): ("memory", lambda t: {"oom_group": bool(parse_int(t))}),
    (2, "memory.stat"): ("memory", lambda t: {"stat": select(
        parse_flat_keyed(t, "memory.stat"), MEMORY_STAT_KEYS)}),
    (2, "pids.current"): ("pids", lambda t: {"current": parse_int(t)}),
    (2, "pids.max"): ("pids", lambda t: {"max": parse_limit(t)}),
    (2, "cgroup.procs"): ("procs", lambda t: {"count": len(t.split())}),
    (2, "io.stat"): ("io", lambda t: {"stat": parse_io_stat(t)}),
    (2, "io.max"): ("io", lambda t: {"max": parse_io_max(t)}),
    (1, "blkio.throttle.io_service_bytes"): ("io", lambda t: {"service_bytes": parse_blkio_stat(t)}),
    (1, "blkio.throttle.io_serviced"): ("io", lambda t: {"serviced": parse_blkio_stat(
        t, "blkio.throttle.io_serviced")}),
    (1, "blkio.throttle.read_bps_device"): ("io", lambda t: {"read_bps_device": parse_blkio_limits(t)}),
    (1, "blkio.throttle.write_bps_device"): ("io", lambda t: {"write_bps_device": parse_blkio_limits(
        t, "blkio.throttle.write_bps_device")}),
    (2, "cpu.pressure"): ("pressure", lambda t: {"cpu": _pressure(t)}),
    (2, "memory.pressure"): ("pressure", lambda t: {"memory": _pressure(t)}),
    (2, "io.pressure"): ("pressure", lambda t: {"io": _pressure(t)}),
}
# v1 files that read the same in both versions
for _name in ("memory.stat", "pids.current", "pids.max", "cgroup.procs", "cpuacct.stat"):
    if (2, _name) in _FILE_VALUES:
        _FILE_VALUES[(1, _name)] = _FILE_VALUES[(2, _name)]


def _host_pressure(resource: str) -> _Interpreter:
    return lambda text: {resource: _pressure(text)}


for _res in _HOST_PRESSURE:
    _FILE_VALUES[(0, f"pressure/{_res}")] = ("host_pressure", _host_pressure(_res))


# Per tick, PSI files contribute their stall counters only (the averages are in the snapshot).
_TICK_FILE_VALUES = dict(_FILE_VALUES)
for _res in ("cpu", "memory", "io"):
    _TICK_FILE_VALUES[(2, f"{_res}.pressure")] = (
        "pressure", lambda t, r=_res: {r: pressure_totals(t)})  # type: ignore[misc]
    _TICK_FILE_VALUES[(0, f"pressure/{_res}")] = (
        "host_pressure", lambda t, r=_res: {r: pressure_totals(t)})  # type: ignore[misc]


def file_values(version: int, file: str, text: str,
              tick: bool = False) -> tuple[str, dict[str, Any]] | None:
    """Parse one cgroup file into ``(section, values)`` for index.json (``tick=False``) and
    samples.jsonl (``tick=True``: PSI files give ``some_total_usec``/``full_total_usec`` only).

    ``version`` is 1 or 2 for cgroup files, 0 for host ``pressure/<resource>``. None for a file
    that is stored verbatim only. Raises ParseError on bad content.
    """
    entry = (_TICK_FILE_VALUES if tick else _FILE_VALUES).get((version, file))
    if entry is None:
        return None
    section, function = entry
    try:
        return section, function(text)
    except (ValueError, TypeError, KeyError) as error:  # defensive: parsers raise ParseError
        raise ParseError(f"{file}: {error}") from None
