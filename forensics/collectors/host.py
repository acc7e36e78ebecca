"""Host identity and state: uname, os-release, boot time, clocks, CPUs, memory, load.

Sources: ``os.uname()``, ``/etc/os-release``, ``/proc/stat`` (``btime``), ``/proc/uptime``,
``/proc/meminfo``, ``/proc/loadavg``, ``/proc/cpuinfo`` (model name only), ``/proc/<ppid>/status``
(the capture process's own memory). Raw files are stored verbatim under ``host/proc/``; parsed
values in ``host/host.json``. How well the clock is kept, in ``host/clock.json``: ``adjtimex(2)``
with ``modes = 0`` (a read: the kernel's NTP state, maximum and estimated error; no privilege,
changes nothing), systemd-timesyncd's ``/run/systemd/timesync/synchronized`` flag and chrony's
``/var/lib/chrony/drift`` where present (no daemon is asked: no subprocess, no socket). The boot time and the clock readings let the analyzer turn kernel-log
monotonic stamps into wall-clock time.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.collect.context import CollectContext
from forensics.specs.host import CLOCK, FACTS, OS_RELEASE, SPEC, proc_copy

__all__ = ["COLLECTOR", "HostCollector"]

_VERBATIM = ("stat", "uptime", "meminfo", "loadavg", "version", "cmdline", "sys/kernel/random/boot_id")


def _read(path: str, limit: int = 1 << 20) -> tuple[bytes | None, str | None]:
    try:
        with open(path, "rb") as f:
            return f.read(limit), None
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc.strerror or exc}"


def _kv_lines(text: str, sep: str = ":") -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, s, v = line.partition(sep)
        if s:
            out[k.strip()] = v.strip()
    return out


def _os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, s, v = line.partition("=")
        if s and k and not k.startswith("#"):
            out[k.strip()] = v.strip().strip('"').strip("'")
    return out


class HostCollector:
    """``host``: who and what this machine is, and when it booted."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 10.0

    def snapshot(self, ctx: CollectContext) -> None:
        errors: dict[str, str] = {}
        raw: dict[str, str] = {}
        for rel in _VERBATIM:
            data, err = _read(f"/proc/{rel}")
            member = proc_copy(rel)
            if data is None:
                errors[f"/proc/{rel}"] = err or "unreadable"
                continue
            if rel == "cmdline":  # the kernel command line can carry secrets too
                data = ctx.redactor.text(data.decode("utf-8", "replace")).encode()
            ctx.sink.write_bytes(member, data)
            raw[rel] = data.decode("utf-8", "replace")
        osr, err = _read("/etc/os-release")
        if osr is None:
            osr, err2 = _read("/usr/lib/os-release")
            err = err2 if osr is None else None
        if osr is not None:
            ctx.sink.write_bytes(OS_RELEASE, osr)
        else:
            errors["/etc/os-release"] = err or "unreadable"

        u = os.uname()
        now_real = time.time()
        now_mono = time.clock_gettime(time.CLOCK_MONOTONIC)
        try:
            now_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        except (AttributeError, OSError):
            now_boot = None
        btime = None
        for line in raw.get("stat", "").splitlines():
            if line.startswith("btime "):
                try:
                    btime = int(line.split()[1])
                except (IndexError, ValueError):
                    pass
        meminfo = _kv_lines(raw.get("meminfo", ""))

        def kib(name: str) -> int | None:
            v = meminfo.get(name, "").split()
            return int(v[0]) * 1024 if v and v[0].isdigit() else None

        load = raw.get("loadavg", "").split()
        cpuinfo, _ = _read("/proc/cpuinfo", 1 << 22)
        models = sorted({v for k, v in (line.partition(":")[::2] for line in (cpuinfo or b"").decode("utf-8", "replace").splitlines()) if k.strip() == "model name" for v in [v.strip()]})
        parent = _kv_lines((_read(f"/proc/{os.getppid()}/status")[0] or b"").decode("utf-8", "replace"))
        facts: dict[str, Any] = {
            "hostname": u.nodename,
            "uname": {"sysname": u.sysname, "release": u.release, "version": u.version, "machine": u.machine},
            "os_release": _os_release((osr or b"").decode("utf-8", "replace")),
            "boot_time_unix": btime,
            "boot_time": iso_from_unix(btime) if btime else None,
            "clocks": {
                "realtime_unix": now_real,
                "monotonic_s": now_mono,
                "boottime_s": now_boot,
                "boot_time_from_monotonic_unix": now_real - now_mono,
                "note": "kernel log stamps are CLOCK_MONOTONIC-based: wall = boot_time_from_monotonic_unix + ts (drifts, stops in suspend)",
            },
            "cpu": {"count_online": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "models": models},
            "memory": {"total_bytes": kib("MemTotal"), "available_bytes": kib("MemAvailable"),
                       "swap_total_bytes": kib("SwapTotal"), "swap_free_bytes": kib("SwapFree")},
            "load": {"avg1": float(load[0]), "avg5": float(load[1]), "avg15": float(load[2])} if len(load) >= 3 else None,
            "uptime_s": float(raw["uptime"].split()[0]) if raw.get("uptime") else None,
            "capture_process": {
                "pid": os.getppid(),
                "vm_rss": parent.get("VmRSS"),
                "vm_hwm": parent.get("VmHWM"),
                "nice": os.getpriority(os.PRIO_PROCESS, 0),
                "uid": os.getuid(),
                "pid_namespace": _pid_namespace(),
            },
            "unreadable": errors,
        }
        ctx.sink.write_json(FACTS, facts)
        ctx.sink.write_json(CLOCK, clock_state())
        if errors:
            ctx.partial(f"{len(errors)} host files unreadable: {', '.join(sorted(errors))}")


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _Timex(ctypes.Structure):
    """``struct timex`` of <sys/timex.h> (Linux), with its trailing padding."""

    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
                ("constant", ctypes.c_long), ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
                ("time", _Timeval), ("tick", ctypes.c_long), ("ppsfreq", ctypes.c_long),
                ("jitter", ctypes.c_long), ("shift", ctypes.c_int), ("stabil", ctypes.c_long),
                ("jitcnt", ctypes.c_long), ("calcnt", ctypes.c_long), ("errcnt", ctypes.c_long),
                ("stbcnt", ctypes.c_long), ("tai", ctypes.c_int), ("_pad", ctypes.c_int * 11)]


_TIME_STATES = {0: "TIME_OK", 1: "TIME_INS", 2: "TIME_DEL", 3: "TIME_OOP", 4: "TIME_WAIT", 5: "TIME_ERROR"}
_STA_BITS = {0x1: "PLL", 0x2: "PPSFREQ", 0x4: "PPSTIME", 0x8: "FLL", 0x10: "INS", 0x20: "DEL",
             0x40: "UNSYNC", 0x80: "FREQHOLD", 0x100: "PPSSIGNAL", 0x200: "PPSJITTER", 0x400: "PPSWANDER",
             0x800: "PPSERROR", 0x1000: "CLOCKERR", 0x2000: "NANO", 0x4000: "MODE", 0x8000: "CLK"}
_STA_UNSYNC, _STA_NANO = 0x40, 0x2000


def adjtimex_state() -> dict[str, Any]:
    """``adjtimex(2)`` with ``modes = 0``: read the kernel's clock discipline, change nothing.

    ``synchronised``: the call did not return ``TIME_ERROR`` and ``STA_UNSYNC`` is clear (an NTP
    daemon is disciplining the clock); ``maxerror_us`` then bounds this clock's distance to UTC."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        tx = _Timex()
        tx.modes = 0
        rc = int(libc.adjtimex(ctypes.byref(tx)))
    except (OSError, AttributeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if rc < 0:
        err = ctypes.get_errno()
        return {"error": f"adjtimex: {os.strerror(err)}"}
    nano = bool(tx.status & _STA_NANO)
    return {
        "state": _TIME_STATES.get(rc, str(rc)),
        "status": tx.status,
        "status_flags": [name for bit, name in _STA_BITS.items() if tx.status & bit],
        "synchronised": rc != 5 and not tx.status & _STA_UNSYNC,
        "offset_us": tx.offset / 1000 if nano else float(tx.offset),
        "freq_ppm": round(tx.freq / 65536, 3),
        "maxerror_us": tx.maxerror,
        "esterror_us": tx.esterror,
        "tai_offset_s": tx.tai,
        "read_unix": time.time(),
    }


def clock_state() -> dict[str, Any]:
    """``host/clock.json``: adjtimex, timesyncd's flag file and chrony's drift file (read-only)."""
    flag = "/run/systemd/timesync/synchronized"
    try:
        timesyncd: dict[str, Any] = {"synchronized_flag": True, "flag_mtime": iso_from_unix(os.stat(flag).st_mtime)}
    except OSError:
        timesyncd = {"synchronized_flag": False}
    timesyncd["present"] = os.path.isdir("/run/systemd/timesync") or os.path.isdir("/var/lib/systemd/timesync")
    drift, _ = _read("/var/lib/chrony/drift", 4096)
    chrony = {"present": os.path.isdir("/run/chrony") or os.path.isdir("/var/lib/chrony"),
              "drift_file": drift.decode("utf-8", "replace").strip() if drift is not None else None}
    return {"adjtimex": adjtimex_state(), "timesyncd": timesyncd, "chrony": chrony}


def _pid_namespace() -> str | None:
    """The capture's PID namespace (``pid:[4026531836]``); compare with NVML's PIDs (host PIDs)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


COLLECTOR = HostCollector()
