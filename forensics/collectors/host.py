"""Host identity and state: uname, os-release, boot time, clocks, CPUs, memory, load.

Sources: ``os.uname()``, ``/etc/os-release``, ``/proc/stat`` (``btime``), ``/proc/uptime``,
``/proc/meminfo``, ``/proc/loadavg``, ``/proc/cpuinfo`` (model name only), ``/proc/<ppid>/status``
(the capture process's own memory). Raw files are stored verbatim under ``host/proc/``; parsed
values in ``host/host.json``. The boot time and the clock readings let the analyzer turn kernel-log
monotonic stamps into wall-clock time.
"""

from __future__ import annotations

import os
import time
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.capture.context import CollectContext
from forensics.specs.host import FACTS, OS_RELEASE, SPEC, proc_copy

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
        if errors:
            ctx.partial(f"{len(errors)} host files unreadable: {', '.join(sorted(errors))}")


def _pid_namespace() -> str | None:
    """The capture's PID namespace (``pid:[4026531836]``); compare with NVML's PIDs (host PIDs)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


COLLECTOR = HostCollector()
