"""Pure parsers for cgroup interface files (v1 and v2) and PSI pressure files.

Sources (kernel docs ``Documentation/admin-guide/cgroup-v2.rst`` and ``cgroup-v1/*.rst``):

* v2 ``cpu.stat`` (usage_usec, user_usec, system_usec, nr_periods, nr_throttled, throttled_usec,
  nr_bursts, burst_usec), ``cpu.max`` (``QUOTA PERIOD``, ``max`` = unlimited), ``cpu.weight``,
  ``memory.current|max|high|peak``, ``memory.events[.local]``, ``memory.stat``,
  ``pids.current|max``;
* v1 ``cpu.stat`` (nr_periods, nr_throttled, throttled_time in ns, nr_bursts, burst_time in ns),
  ``cpu.cfs_quota_us`` (-1 = unlimited), ``cpu.cfs_period_us``, ``cpuacct.usage`` (ns),
  ``memory.usage_in_bytes|limit_in_bytes|max_usage_in_bytes|failcnt``, ``memory.oom_control``;
* block IO: v2 ``io.stat`` (``MAJ:MIN rbytes= wbytes= rios= wios= dbytes= dios=``), ``io.max``
  (``MAJ:MIN rbps= wbps= riops= wiops=``, ``max`` = unlimited); v1 ``blkio.throttle.io_service_bytes``
  and ``blkio.throttle.io_serviced`` (``MAJ:MIN Read|Write|Sync|Async|Discard|Total N``, then
  ``Total N``; the CFQ/BFQ ``blkio[.bfq].io_service_bytes`` read the same),
  ``blkio.throttle.read_bps_device``/``write_bps_device`` (``MAJ:MIN N``);
* PSI: ``cpu.pressure``, ``memory.pressure``, ``io.pressure`` and ``/proc/pressure/*``:
  ``some avg10=.. avg60=.. avg300=.. total=<usec>`` then ``full ...``.

Every function takes the text as read and raises only :class:`forensics.errors.ParseError`.
CPU times are normalised to nanoseconds (``*_ns``) so v1 and v2 compare directly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from forensics.errors import ParseError

__all__ = [
    "MEMORY_STAT_KEYS",
    "UNLIMITED_V1_THRESHOLD_BYTES",
    "file_values",
    "CgroupMount",
    "cgroup_layout",
    "parse_cgroup_mounts",
    "CpuMax",
    "Pressure",
    "PressureLine",
    "parse_cpu_max",
    "parse_cpu_stat",
    "parse_flat_keyed",
    "parse_blkio_limits",
    "parse_blkio_stat",
    "parse_int",
    "parse_io_max",
    "parse_io_stat",
    "parse_limit",
    "parse_memory_events",
    "parse_oom_control",
    "parse_pressure",
    "parse_v1_limit_bytes",
    "parse_v1_quota_usec",
    "pressure_totals",
    "pressure_values",
    "select",
]

# cgroup v1 reports "no limit" as PAGE_COUNTER_MAX * PAGE_SIZE (9223372036854771712 on x86-64);
# anything this large is treated as unlimited.
UNLIMITED_V1_THRESHOLD_BYTES = 2**62

_MAX_LINES = 10_000  # a keyed file longer than this is not a cgroup file


def _text(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    return text


def _to_int(token: str, what: str) -> int:
    if token.isdigit() and token.isascii() and len(token) <= 40:  # the common case, fast
        return int(token)
    if not token or len(token) > 40:
        raise ParseError(f"{what}: not an integer: {token[:40]!r}")
    body = token[1:] if token[0] in "+-" else token
    if not body.isascii() or not body.isdigit():
        raise ParseError(f"{what}: not an integer: {token[:40]!r}")
    return int(token)


def parse_int(text: str, what: str = "cgroup file") -> int:
    """A file holding one integer (``memory.current``, ``pids.current``, ``cpuacct.usage``...)."""
    return _to_int(_text(text, what).strip(), what)


def parse_limit(text: str, what: str = "cgroup limit") -> int | None:
    """A v2 limit (``memory.max``, ``memory.high``, ``pids.max``): ``max`` -> None (unlimited)."""
    value = _text(text, what).strip()
    if value == "max":
        return None
    return _to_int(value, what)


def parse_v1_limit_bytes(text: str, what: str = "memory.limit_in_bytes") -> int | None:
    """A v1 byte limit; the kernel's "no limit" sentinel (>= 2**62) -> None."""
    value = parse_int(text, what)
    return None if value >= UNLIMITED_V1_THRESHOLD_BYTES else value


def parse_v1_quota_usec(text: str, what: str = "cpu.cfs_quota_us") -> int | None:
    """v1 ``cpu.cfs_quota_us``: -1 -> None (unlimited)."""
    value = parse_int(text, what)
    return None if value < 0 else value


def parse_flat_keyed(text: str, what: str = "cgroup file") -> dict[str, int]:
    """A flat-keyed file: ``key value`` per line (cpu.stat, memory.events, memory.stat...)."""
    body = _text(text, what)
    parts = body.split()
    count = len(parts) // 2
    if (len(parts) % 2 == 0 and count <= _MAX_LINES and body.isascii()
            and len(body.splitlines()) == count):
        # Fast path: one "key value" pair per line, all values plain digits.
        numbers = parts[1::2]
        if all(n.isdigit() and len(n) <= 40 for n in numbers):
            return dict(zip(parts[0::2], map(int, numbers), strict=True))
    values: dict[str, int] = {}
    for number, line in enumerate(body.splitlines(), 1):
        if number > _MAX_LINES:
            raise ParseError(f"{what}: more than {_MAX_LINES} lines")
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ParseError(f"{what} line {number}: expected 'key value': {line[:80]!r}")
        key, raw = parts
        values[key] = _to_int(raw, f"{what} line {number}")
    return values


_IO_LINES = 4096  # devices per io file: far more than any host has


def _device(token: str, what: str, number: int) -> str:
    major, sep, minor = token.partition(":")
    if not sep or not major.isdigit() or not minor.isdigit() or not token.isascii():
        raise ParseError(f"{what} line {number}: expected MAJ:MIN, got {token[:40]!r}")
    return token


def _io_lines(text: str, what: str) -> list[tuple[int, list[str]]]:
    lines = [(n, line.split()) for n, line in enumerate(_text(text, what).splitlines(), 1) if line.strip()]
    if len(lines) > _IO_LINES:
        raise ParseError(f"{what}: more than {_IO_LINES} lines")
    return lines


def parse_io_stat(text: str, what: str = "io.stat") -> dict[str, dict[str, int]]:
    """v2 ``io.stat``: ``{"MAJ:MIN": {"rbytes": N, "wbytes": N, "rios": N, "wios": N, ...}}``
    (every ``key=value`` of the line; newer kernels add ``dbytes``/``dios`` and, with
    ``io.latency``/``io.cost``, more)."""
    out: dict[str, dict[str, int]] = {}
    for number, fields in _io_lines(text, what):
        device = _device(fields[0], what, number)
        values: dict[str, int] = {}
        for pair in fields[1:]:
            key, sep, raw = pair.partition("=")
            if not sep or not key:
                raise ParseError(f"{what} line {number}: expected key=value, got {pair[:40]!r}")
            if raw.replace(".", "", 1).isdigit() and "." in raw:
                continue  # io.latency's avg_lat=/win= style decimals are not counters
            values[key] = _to_int(raw, f"{what} line {number}")
        out[device] = values
    return out


def parse_io_max(text: str, what: str = "io.max") -> dict[str, dict[str, int | None]]:
    """v2 ``io.max``: ``{"MAJ:MIN": {"rbps": N|None, "wbps": .., "riops": .., "wiops": ..}}``,
    None = ``max`` (unlimited); a device without limits has no line."""
    out: dict[str, dict[str, int | None]] = {}
    for number, fields in _io_lines(text, what):
        device = _device(fields[0], what, number)
        limits: dict[str, int | None] = {}
        for pair in fields[1:]:
            key, sep, raw = pair.partition("=")
            if key not in ("rbps", "wbps", "riops", "wiops") or not sep:
                raise ParseError(f"{what} line {number}: unexpected {pair[:40]!r}")
            limits[key] = None if raw == "max" else _to_int(raw, f"{what} line {number}")
        out[device] = limits
    return out


_BLKIO_OPS = {"Read": "read", "Write": "write", "Sync": "sync", "Async": "async",
              "Discard": "discard", "Total": "total"}


def parse_blkio_stat(text: str, what: str = "blkio.throttle.io_service_bytes") -> dict[str, dict[str, int]]:
    """v1 ``blkio.throttle.io_service_bytes``/``io_serviced`` (and the CFQ/BFQ files of the same
    shape): ``{"MAJ:MIN": {"read": N, "write": N, "sync": .., "async": .., "discard": .., "total": ..}}``;
    the closing ``Total N`` line (all devices) is left out."""
    out: dict[str, dict[str, int]] = {}
    for number, fields in _io_lines(text, what):
        if len(fields) == 2 and fields[0] == "Total":
            _to_int(fields[1], f"{what} line {number}")
            continue
        if len(fields) != 3 or fields[1] not in _BLKIO_OPS:
            raise ParseError(f"{what} line {number}: expected 'MAJ:MIN Op N': {' '.join(fields)[:80]!r}")
        device = _device(fields[0], what, number)
        out.setdefault(device, {})[_BLKIO_OPS[fields[1]]] = _to_int(fields[2], f"{what} line {number}")
    return out


def parse_blkio_limits(text: str, what: str = "blkio.throttle.read_bps_device") -> dict[str, int]:
    """v1 ``blkio.throttle.{read,write}_{bps,iops}_device``: ``{"MAJ:MIN": N}`` (no line: no limit)."""
    out: dict[str, int] = {}
    for number, fields in _io_lines(text, what):
        if len(fields) != 2:
            raise ParseError(f"{what} line {number}: expected 'MAJ:MIN N'")
        out[_device(fields[0], what, number)] = _to_int(fields[1], f"{what} line {number}")
    return out


@dataclass(frozen=True)
class CpuMax:
    """v2 ``cpu.max``: quota per period in microseconds; ``quota_usec`` None = unlimited."""

    quota_usec: int | None
    period_usec: int

    @property
    def cpus(self) -> float | None:
        """The limit in CPUs (quota / period), None when unlimited."""
        if self.quota_usec is None or self.period_usec <= 0:
            return None
        return self.quota_usec / self.period_usec


def parse_cpu_max(text: str) -> CpuMax:
    """``cpu.max``: ``max 100000`` or ``50000 100000``."""
    parts = _text(text, "cpu.max").split()
    if len(parts) not in (1, 2):
        raise ParseError(f"cpu.max: expected 'QUOTA PERIOD': {text[:80]!r}")
    quota = None if parts[0] == "max" else _to_int(parts[0], "cpu.max quota")
    period = _to_int(parts[1], "cpu.max period") if len(parts) == 2 else 100000
    return CpuMax(quota, period)


@dataclass(frozen=True)
class PressureLine:
    """One PSI line: share of wall time stalled (percent) over 10/60/300 s, total in usec."""

    avg10_pct: float
    avg60_pct: float
    avg300_pct: float
    total_usec: int


@dataclass(frozen=True)
class Pressure:
    """A PSI file: ``some`` always, ``full`` absent for host cpu on old kernels."""

    some: PressureLine
    full: PressureLine | None


_PRESSURE_KEYS = ("avg10=", "avg60=", "avg300=", "total=")


def pressure_values(text: str, what: str = "pressure") -> dict[str, dict[str, float | int]]:
    """A PSI file as plain dicts: ``{"some": {"avg10_pct", "avg60_pct", "avg300_pct",
    "total_usec"}, "full": {...}}`` (``full`` absent when the file has none). Fast and strict:
    the kernel's fixed ``avg10= avg60= avg300= total=`` order is required."""
    body = _text(text, what)
    result: dict[str, dict[str, float | int]] = {}
    for number, line in enumerate(body.split("\n"), 1):
        if number > 4:
            raise ParseError(f"{what}: too many lines")
        fields = line.split()
        if not fields:
            continue
        kind = fields[0]
        if kind not in ("some", "full") or kind in result:
            raise ParseError(f"{what} line {number}: expected 'some' or 'full': {line[:80]!r}")
        if len(fields) != 5 or not all(
            f.startswith(k) for f, k in zip(fields[1:], _PRESSURE_KEYS, strict=True)
        ):
            raise ParseError(f"{what} line {number}: expected avg10= avg60= avg300= total=: "
                             f"{line[:80]!r}")
        try:
            a10, a60, a300 = float(fields[1][6:]), float(fields[2][6:]), float(fields[3][7:])
        except ValueError:
            raise ParseError(f"{what} line {number}: bad average: {line[:80]!r}") from None
        if not (0.0 <= a10 <= 100.0 and 0.0 <= a60 <= 100.0 and 0.0 <= a300 <= 100.0):
            raise ParseError(f"{what} line {number}: average out of range: {line[:80]!r}")
        result[kind] = {"avg10_pct": a10, "avg60_pct": a60, "avg300_pct": a300,
                        "total_usec": _to_int(fields[4][6:], f"{what} total")}
    if "some" not in result:
        raise ParseError(f"{what}: no 'some' line")
    return result


def pressure_totals(text: str, what: str = "pressure") -> dict[str, int]:
    """Only the stall counters of a PSI file: ``{"some_total_usec": N, "full_total_usec": M}``
    (``full`` absent when the file has none). The per-tick form: the stall share over an
    interval is the difference of two totals divided by the interval."""
    body = _text(text, what)
    fields = body.split()
    if (len(fields) == 10 and fields[0] == "some" and fields[5] == "full"
            and body.count("\n") <= 2 and fields[4][:6] == "total=" and fields[9][:6] == "total="
            and fields[1][:6] == "avg10=" and fields[6][:6] == "avg10="):
        some, full = fields[4][6:], fields[9][6:]
        if some.isdigit() and full.isdigit() and some.isascii() and full.isascii():
            return {"some_total_usec": int(some), "full_total_usec": int(full)}
    result: dict[str, int] = {}
    for number, line in enumerate(body.split("\n"), 1):
        if number > 4:
            raise ParseError(f"{what}: too many lines")
        fields = line.split()
        if not fields:
            continue
        key = f"{fields[0]}_total_usec"
        if fields[0] not in ("some", "full") or key in result or len(fields) != 5 \
                or not fields[4].startswith("total="):
            raise ParseError(f"{what} line {number}: not a PSI line: {line[:80]!r}")
        result[key] = _to_int(fields[4][6:], f"{what} total")
    if "some_total_usec" not in result:
        raise ParseError(f"{what}: no 'some' line")
    return result


def _line(values: dict[str, float | int]) -> PressureLine:
    return PressureLine(float(values["avg10_pct"]), float(values["avg60_pct"]),
                        float(values["avg300_pct"]), int(values["total_usec"]))


def parse_pressure(text: str, what: str = "pressure") -> Pressure:
    """A PSI file (``cpu.pressure``, ``/proc/pressure/memory``...)."""
    values = pressure_values(text, what)
    full = values.get("full")
    return Pressure(_line(values["some"]), _line(full) if full is not None else None)


def select(values: Mapping[str, int], keys: tuple[str, ...]) -> dict[str, int]:
    """The subset of ``values`` named in ``keys`` (e.g. selected ``memory.stat`` entries)."""
    return {k: values[k] for k in keys if k in values}


@dataclass(frozen=True)
class CgroupMount:
    """A cgroup filesystem mount from ``/proc/self/mountinfo``.

    ``version`` 1 or 2; ``controllers`` the v1 controllers bound to the hierarchy (``cpu``,
    ``cpuacct``, ``memory``, ``name=systemd``...; empty for v2); ``root`` the mount's root inside
    the hierarchy (``/`` on the host; something else inside a container).
    """

    mount_point: str
    version: int
    controllers: tuple[str, ...]
    root: str


_V1_OPTIONS_NOT_CONTROLLERS = frozenset({
    "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr", "clone_children",
    "noprefix", "cpuset_v2_mode", "favordynmods", "nsdelegate", "memory_recursiveprot",
    "memory_localevents", "memory_hugetlb_accounting", "pids_localevents",
})


def _unescape_mount(text: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_cgroup_mounts(mountinfo: str) -> tuple[CgroupMount, ...]:
    """The cgroup and cgroup2 mounts in ``/proc/self/mountinfo`` text (``man 5 proc``: fields
    ``id parent major:minor root mount_point options [optional...] - fstype source super_options``).
    Lines of other filesystems are ignored; a malformed line raises ParseError."""
    mounts: list[CgroupMount] = []
    for number, line in enumerate(_text(mountinfo, "mountinfo").splitlines(), 1):
        if number > 100_000:
            raise ParseError("mountinfo: too many lines")
        if not line.strip():
            continue
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        rest = tail.split()
        if not sep or len(fields) < 6 or len(rest) < 2:
            raise ParseError(f"mountinfo line {number}: malformed: {line[:80]!r}")
        fstype = rest[0]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        super_options = rest[2].split(",") if len(rest) > 2 else []
        controllers: tuple[str, ...] = ()
        if fstype == "cgroup":
            controllers = tuple(o for o in super_options if o not in _V1_OPTIONS_NOT_CONTROLLERS
                                and not o.startswith("release_agent="))
        mounts.append(CgroupMount(_unescape_mount(fields[4]), 2 if fstype == "cgroup2" else 1,
                                  controllers, _unescape_mount(fields[3])))
    return tuple(mounts)


def cgroup_layout(mounts: tuple[CgroupMount, ...]) -> str:
    """``v2`` (unified only), ``v1`` (legacy only), ``hybrid`` (both) or ``none``."""
    versions = {m.version for m in mounts}
    if versions == {2}:
        return "v2"
    if versions == {1}:
        return "v1"
    return "hybrid" if versions else "none"


# ---------------------------------------------------------------- one file -> normalised values
# Used by the cgroups collector for cgroup/index.json and cgroup/samples.jsonl, and by the
# analyzer to re-derive those values from the verbatim members.

_HOST_PRESSURE = ("cpu", "memory", "io")

MEMORY_STAT_KEYS = (
    # v2
    "anon", "file", "kernel", "shmem", "sock", "file_mapped", "file_dirty", "pgfault",
    "pgmajfault", "workingset_refault_anon", "workingset_refault_file", "oom_kill",
    # v1
    "cache", "rss", "rss_huge", "mapped_file", "swap", "total_cache", "total_rss",
    "total_shmem", "hierarchical_memory_limit",
)


_CPU_STAT_V2 = (("usage_usec", "usage_ns", 1000), ("user_usec", "user_ns", 1000),
                ("system_usec", "system_ns", 1000), ("nr_periods", "nr_periods", 1),
                ("nr_throttled", "nr_throttled", 1), ("throttled_usec", "throttled_ns", 1000),
                ("nr_bursts", "nr_bursts", 1), ("burst_usec", "burst_ns", 1000))
_CPU_STAT_V1 = (("nr_periods", "nr_periods", 1), ("nr_throttled", "nr_throttled", 1),
                ("throttled_time", "throttled_ns", 1), ("nr_bursts", "nr_bursts", 1),
                ("burst_time", "burst_ns", 1))


_EVENT_KEYS = ("low", "high", "max", "oom", "oom_kill")


def parse_memory_events(text: str, what: str = "memory.events") -> dict[str, int | None]:
    """v2 ``memory.events`` / ``memory.events.local``: low, high, max, oom, oom_kill and
    ``oom_group_kill`` (5.17+; None before)."""
    raw = parse_flat_keyed(text, what)
    for key in _EVENT_KEYS:
        if key not in raw:
            raise ParseError(f"{what}: missing {key}")
    values: dict[str, int | None] = {key: raw[key] for key in _EVENT_KEYS}
    values["oom_group_kill"] = raw.get("oom_group_kill")
    return values


def parse_oom_control(text: str) -> dict[str, Any]:
    """v1 ``memory.oom_control``: oom_kill_disable, under_oom and ``oom_kill`` (kills in this
    memcg, 4.13+; None before)."""
    raw = parse_flat_keyed(text, "memory.oom_control")
    if "oom_kill_disable" not in raw or "under_oom" not in raw:
        raise ParseError("memory.oom_control: missing oom_kill_disable or under_oom")
    return {"oom_kill_disable": bool(raw["oom_kill_disable"]),
            "under_oom": bool(raw["under_oom"]), "oom_kill": raw.get("oom_kill")}


def parse_cpu_stat(text: str, version: int) -> dict[str, Any]:
    """``cpu.stat`` with times in ns: v2 (``*_usec`` times 1000) or v1 (``throttled_time`` in ns)
    as ``nr_periods``, ``nr_throttled``, ``throttled_ns``, ``nr_bursts``, ``burst_ns`` and (v2)
    ``usage_ns``/``user_ns``/``system_ns``, plus ``stat_version``; a v2 cgroup without the cpu
    controller (the root) gives its usage only. Built straight from the flat-keyed values: this
    runs for every cgroup on every tick."""
    raw = parse_flat_keyed(text, "cpu.stat")
    if version == 2 and "nr_periods" not in raw:
        if "usage_usec" not in raw:
            raise ParseError("cpu.stat (v2): missing usage_usec")
        return {new: raw[old] * scale for old, new, scale in _CPU_STAT_V2[:3] if old in raw}
    table = _CPU_STAT_V2 if version == 2 else _CPU_STAT_V1
    for required in table[-5:-2] if version == 2 else table[:3]:
        if required[0] not in raw:
            raise ParseError(f"cpu.stat (v{version}): missing {required[0]}")
    values = {new: raw[old] * scale for old, new, scale in table if old in raw}
    values["stat_version"] = version
    return values


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
