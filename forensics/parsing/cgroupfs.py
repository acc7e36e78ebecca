"""Pure parsers for the cpu, memory and pids files of a cgroup (v1 and v2).

Sources (kernel docs ``Documentation/admin-guide/cgroup-v2.rst`` and ``cgroup-v1/*.rst``):

* v2 ``cpu.stat`` (usage_usec, user_usec, system_usec, nr_periods, nr_throttled, throttled_usec,
  nr_bursts, burst_usec), ``cpu.max`` (``QUOTA PERIOD``, ``max`` = unlimited), ``cpu.weight``,
  ``memory.current|max|high|peak``, ``memory.events[.local]``, ``memory.stat``,
  ``pids.current|max``;
* v1 ``cpu.stat`` (nr_periods, nr_throttled, throttled_time in ns, nr_bursts, burst_time in ns),
  ``cpu.cfs_quota_us`` (-1 = unlimited), ``cpu.cfs_period_us``, ``cpuacct.usage`` (ns),
  ``memory.usage_in_bytes|limit_in_bytes|max_usage_in_bytes|failcnt``, ``memory.oom_control``.

Beside it: block IO files in :mod:`forensics.parsing.cgroup_io`, PSI files in
:mod:`forensics.parsing.pressure`, cgroup mounts in :mod:`forensics.parsing.cgroup_mounts`, and
the file -> values table in :mod:`forensics.parsing.cgroup_files`; they share :func:`text_of` and
:func:`to_int` from here.

Every function takes the text as read and raises only :class:`forensics.errors.ParseError`.
CPU times are normalised to nanoseconds (``*_ns``) so v1 and v2 compare directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forensics.errors import ParseError

__all__ = [
    "MEMORY_STAT_KEYS",
    "UNLIMITED_V1_THRESHOLD_BYTES",
    "CpuMax",
    "parse_cpu_max",
    "parse_cpu_stat",
    "parse_flat_keyed",
    "parse_int",
    "parse_limit",
    "parse_memory_events",
    "parse_oom_control",
    "parse_v1_limit_bytes",
    "parse_v1_quota_usec",
    "select",
    "text_of",
    "to_int",
]

# cgroup v1 reports "no limit" as PAGE_COUNTER_MAX * PAGE_SIZE (9223372036854771712 on x86-64);
# anything this large is treated as unlimited.
UNLIMITED_V1_THRESHOLD_BYTES = 2**62

_MAX_LINES = 10_000  # a keyed file longer than this is not a cgroup file


def text_of(text: object, what: str) -> str:
    """``text`` itself when it is a str; ParseError naming ``what`` otherwise."""
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text, got {type(text).__name__}")
    return text


def to_int(token: str, what: str) -> int:
    """A decimal integer token (optional sign, at most 40 digits); ParseError otherwise."""
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
    return to_int(text_of(text, what).strip(), what)


def parse_limit(text: str, what: str = "cgroup limit") -> int | None:
    """A v2 limit (``memory.max``, ``memory.high``, ``pids.max``): ``max`` -> None (unlimited)."""
    value = text_of(text, what).strip()
    if value == "max":
        return None
    return to_int(value, what)


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
    body = text_of(text, what)
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
        values[key] = to_int(raw, f"{what} line {number}")
    return values


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
    parts = text_of(text, "cpu.max").split()
    if len(parts) not in (1, 2):
        raise ParseError(f"cpu.max: expected 'QUOTA PERIOD': {text[:80]!r}")
    quota = None if parts[0] == "max" else to_int(parts[0], "cpu.max quota")
    period = to_int(parts[1], "cpu.max period") if len(parts) == 2 else 100000
    return CpuMax(quota, period)


def select(values: Mapping[str, int], keys: tuple[str, ...]) -> dict[str, int]:
    """The subset of ``values`` named in ``keys`` (e.g. selected ``memory.stat`` entries)."""
    return {k: values[k] for k in keys if k in values}


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
