"""Pure parsers for ``/proc/<pid>/stat``, ``/proc/<pid>/status``, ``cmdline`` and ns links.

Sources: ``man 5 proc`` (``/proc/pid/stat`` fields 1-52; ``/proc/pid/status`` ``Key:\\tvalue``
lines; ``NSpid``/``NStgid`` list the PID in each nested PID namespace, outermost first, since
4.1), ``readlink /proc/<pid>/ns/pid`` -> ``pid:[4026531836]``.

Times in ``stat`` are clock ticks (``os.sysconf("SC_CLK_TCK")``), ``starttime`` counts ticks
since boot; :func:`start_time_unix` turns it into wall-clock seconds given the boot time.
Every function raises only :class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from forensics.errors import ParseError

__all__ = [
    "ProcStat",
    "ProcStatus",
    "parse_cmdline",
    "parse_ns_link",
    "parse_stat",
    "parse_status",
    "start_time_unix",
]

_MAX_STATUS_LINES = 500
_NS_LINK = re.compile(r"^([a-z_]+):\[(\d{1,20})\]$")


def _int(token: str, what: str) -> int:
    body = token[1:] if token[:1] == "-" else token
    if not body or len(body) > 20 or not body.isascii() or not body.isdigit():
        raise ParseError(f"{what}: not an integer: {token[:30]!r}")
    return int(token)


@dataclass(frozen=True)
class ProcStat:
    """Essentials of ``/proc/<pid>/stat`` (field numbers from ``man 5 proc``)."""

    pid: int                    # (1)
    comm: str                   # (2) without the parentheses; may hold spaces and ')'
    state: str                  # (3) R, S, D, Z, T, t, X, I...
    ppid: int                   # (4)
    pgrp: int                   # (5)
    session: int                # (6)
    utime_ticks: int            # (14)
    stime_ticks: int            # (15)
    num_threads: int            # (20)
    start_time_ticks: int       # (22) since boot
    vsize_bytes: int            # (23)
    rss_pages: int              # (24)


def parse_stat(text: str) -> ProcStat:
    """Parse ``/proc/<pid>/stat``. ``comm`` is found by the *last* ``)`` (it may contain one)."""
    if not isinstance(text, str):
        raise ParseError(f"/proc/<pid>/stat: expected text, got {type(text).__name__}")
    open_paren = text.find("(")
    close_paren = text.rfind(")")
    if open_paren < 1 or close_paren < open_paren:
        raise ParseError(f"/proc/<pid>/stat: no '(comm)': {text[:80]!r}")
    pid = _int(text[:open_paren].strip(), "stat pid")
    comm = text[open_paren + 1:close_paren]
    rest = text[close_paren + 1:].split()
    # rest[0] is field 3 (state); field N is rest[N - 3].
    if len(rest) < 22:
        raise ParseError(f"/proc/<pid>/stat: {len(rest) + 2} fields, expected at least 24")

    def field(number: int) -> int:
        return _int(rest[number - 3], f"stat field {number}")

    state = rest[0]
    if len(state) != 1 or not state.isalpha():
        raise ParseError(f"/proc/<pid>/stat: bad state {state[:10]!r}")
    return ProcStat(
        pid=pid, comm=comm, state=state, ppid=field(4), pgrp=field(5), session=field(6),
        utime_ticks=field(14), stime_ticks=field(15), num_threads=field(20),
        start_time_ticks=field(22), vsize_bytes=field(23), rss_pages=field(24),
    )


@dataclass(frozen=True)
class ProcStatus:
    """Essentials of ``/proc/<pid>/status``. Memory values are bytes (the file says kB).

    ``nspid`` is the PID as seen from each PID namespace, outermost (host) first; a process in a
    container's PID namespace has two entries, ``(host_pid, container_pid)``. Kernel threads have
    no ``Vm*`` lines (None).
    """

    name: str
    state: str
    tgid: int
    pid: int
    ppid: int
    uid_real: int | None
    threads: int | None
    nspid: tuple[int, ...]
    nstgid: tuple[int, ...]
    vm_rss_bytes: int | None
    vm_hwm_bytes: int | None
    vm_size_bytes: int | None
    rss_anon_bytes: int | None
    vm_swap_bytes: int | None

    @property
    def innermost_pid(self) -> int:
        """The PID as the process's own namespace sees it (== pid when not namespaced)."""
        return self.nspid[-1] if self.nspid else self.pid


def _kb(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    parts = value.split()
    if len(parts) != 2 or parts[1] != "kB":
        raise ParseError(f"status {what}: expected 'N kB': {value[:40]!r}")
    return _int(parts[0], f"status {what}") * 1024


def _ints(value: str | None, what: str) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(_int(t, f"status {what}") for t in value.split())


def parse_status(text: str) -> ProcStatus:
    """Parse ``/proc/<pid>/status`` (``Key:<tab>value`` lines)."""
    if not isinstance(text, str):
        raise ParseError(f"/proc/<pid>/status: expected text, got {type(text).__name__}")
    fields: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if number > _MAX_STATUS_LINES:
            raise ParseError("/proc/<pid>/status: too many lines")
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ParseError(f"/proc/<pid>/status line {number}: no ':': {line[:80]!r}")
        fields[key] = value.strip()
    for required in ("Name", "State", "Tgid", "Pid", "PPid"):
        if required not in fields:
            raise ParseError(f"/proc/<pid>/status: missing {required}")
    uid = _ints(fields.get("Uid"), "Uid")
    threads = fields.get("Threads")
    state = fields["State"].split(" ", 1)[0]
    if len(state) != 1:
        raise ParseError(f"/proc/<pid>/status: bad State {fields['State'][:20]!r}")
    return ProcStatus(
        name=fields["Name"],
        state=state,
        tgid=_int(fields["Tgid"], "status Tgid"),
        pid=_int(fields["Pid"], "status Pid"),
        ppid=_int(fields["PPid"], "status PPid"),
        uid_real=uid[0] if uid else None,
        threads=_int(threads, "status Threads") if threads is not None else None,
        nspid=_ints(fields.get("NSpid"), "NSpid"),
        nstgid=_ints(fields.get("NStgid"), "NStgid"),
        vm_rss_bytes=_kb(fields.get("VmRSS"), "VmRSS"),
        vm_hwm_bytes=_kb(fields.get("VmHWM"), "VmHWM"),
        vm_size_bytes=_kb(fields.get("VmSize"), "VmSize"),
        rss_anon_bytes=_kb(fields.get("RssAnon"), "RssAnon"),
        vm_swap_bytes=_kb(fields.get("VmSwap"), "VmSwap"),
    )


def parse_cmdline(data: bytes) -> list[str]:
    """``/proc/<pid>/cmdline``: NUL-separated argv (a trailing NUL ends the last argument).

    Bytes that are not UTF-8 are kept as surrogate escapes so nothing is lost. Kernel threads
    have an empty cmdline (-> ``[]``).
    """
    if not isinstance(data, bytes | bytearray):
        raise ParseError(f"/proc/<pid>/cmdline: expected bytes, got {type(data).__name__}")
    if not data:
        return []
    body = bytes(data[:-1]) if data.endswith(b"\0") else bytes(data)
    return [part.decode("utf-8", "surrogateescape") for part in body.split(b"\0")]


def parse_ns_link(target: str) -> tuple[str, int]:
    """A namespace link target (``pid:[4026531836]``) -> ``("pid", 4026531836)``."""
    if not isinstance(target, str):
        raise ParseError(f"namespace link: expected text, got {type(target).__name__}")
    found = _NS_LINK.match(target.strip())
    if not found:
        raise ParseError(f"namespace link: expected 'type:[inode]': {target[:60]!r}")
    return found.group(1), int(found.group(2))


def start_time_unix(start_time_ticks: int, clock_ticks_per_s: int, boot_time_unix: float) -> float:
    """Wall-clock start of a process: boot time + starttime / SC_CLK_TCK."""
    if clock_ticks_per_s <= 0:
        raise ParseError(f"clock ticks per second must be positive, got {clock_ticks_per_s}")
    return boot_time_unix + start_time_ticks / clock_ticks_per_s
