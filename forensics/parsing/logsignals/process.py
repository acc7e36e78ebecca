"""How a workload's process ended, and torchrun's view of the job, in its log.

* Process ends: the exception line that ends a Python ``Traceback (most recent call last):``,
  ``Killed`` (the shell reporting SIGKILL), ``terminate called after throwing an instance of``,
  ``Worker ... died, exit code: -15``.
* torchrun: ``Rendezvous complete for workers. Result:`` followed by ``  key=value`` lines
  (``group_rank``, ``group_world_size``, ``global_ranks=[..]``, ``global_world_sizes=[..]``) and
  ``failed (exitcode: -9) local_rank: 0 (pid: 484375) of binary: ...``.

A traceback's end and the rendezvous block span lines: :func:`exception_end` and
:func:`rendezvous` read them from the lines after their header (:func:`forensics.parsing.logsignals.scan.scan_log`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from forensics.parsing.logsignals.line import (
    LineContext,
    Signal,
    SignalBase,
    bounded,
    split_context,
    to_int,
)

__all__ = ["RENDEZVOUS", "TRACEBACK", "TRACEBACK_MAX_LINES", "TRIGGER_WORDS", "LauncherRendezvous", "ProcessEnd",
           "exception_end", "parse_process_end", "rendezvous"]

TRACEBACK_MAX_LINES = 400
TRIGGER_WORDS = ("Traceback (most recent", "Killed", "exitcode: ", "terminate called", "died, exit code",
                 "Rendezvous complete")


@dataclass(frozen=True, kw_only=True)
class LauncherRendezvous(Signal):
    """torchrun's ``Rendezvous complete for workers``: this node's ``group_rank`` of
    ``group_world_size``, its workers' ``global_ranks`` and the job's ``world_size``."""

    kind: ClassVar[str] = "launcher-rendezvous"
    master_addr: str | None = None
    group_rank: int | None = None
    group_world_size: int | None = None
    local_ranks: tuple[int, ...] = ()
    global_ranks: tuple[int, ...] = ()
    world_size: int | None = None


@dataclass(frozen=True, kw_only=True)
class ProcessEnd(Signal):
    """How a process ended: ``how`` exception (the last line of a Python traceback), killed
    (SIGKILL reported by the shell), terminate (an uncaught C++ exception), child-failed (a
    launcher reporting its worker's exit); ``exc_type``, ``message``, ``exit_code``, ``pid``."""

    kind: ClassVar[str] = "process-end"
    how: str
    exc_type: str | None = None
    message: str | None = None
    exit_code: int | None = None
    pid: int | None = None

_CHILD_FAILED = re.compile(r"failed \(exitcode: (-?\d{1,4})\) local_rank: (\d{1,6}) \(pid: (\d{1,10})\)")
_WORKER_DIED = re.compile(r"Worker \w{1,60} pid (\d{1,10}) died, exit code: (-?\d{1,4})")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']{1,200})'")
_KILLED = re.compile(r"^\**Killed\**\s*$|(?:^|:\s)(?:line \d{1,7}:\s+)?(\d{1,10}) Killed\s")
TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]{0,200}(?:Error|Exception|Exit|Interrupt|Failure|Failed|Fault))"
                        r"(?::\s?(.*))?$")
RENDEZVOUS = "Rendezvous complete for workers"
_KV = re.compile(r"^\s{1,8}(\w{1,40})=(.{0,2000})$")


def parse_process_end(text: str, base: SignalBase) -> list[Signal]:
    """How a process ended, as one line's message says it (a traceback needs :func:`exception_end`)."""
    out: list[Signal] = []
    if m := _CHILD_FAILED.search(text):
        out.append(ProcessEnd(how="child-failed", exit_code=int(m.group(1)), pid=int(m.group(3)),
                              t=base["t"], rank=base["rank"], local_rank=int(m.group(2))))
    elif m := _WORKER_DIED.search(text):
        out.append(ProcessEnd(how="child-failed", exit_code=int(m.group(2)), pid=int(m.group(1)),
                              **base))
    if m := _TERMINATE.search(text):
        out.append(ProcessEnd(how="terminate", exc_type=m.group(1), **base))
    if "Killed" in text and (k := _KILLED.search(text)):
        out.append(ProcessEnd(how="killed", exit_code=137, pid=to_int(k.group(1)), **base))
    return out


def exception_end(lines: list[str], start: int) -> tuple[int, LineContext, str, str | None] | None:
    """The exception line that ends the traceback whose header is ``lines[start]``: (index, its
    context, exception type, message). Chained tracebacks are followed to the last one."""
    found = None
    i = start + 1
    stop = min(len(lines), start + TRACEBACK_MAX_LINES)
    while i < stop:
        ctx = split_context(lines[i])
        text = bounded(ctx.text)
        if text.startswith((" ", "\t")) or not text.strip() or text.startswith("^"):
            i += 1
            continue
        m = _EXCEPTION.match(text)
        if m:
            found = (i, ctx, m.group(1), m.group(2))
            # a chained traceback follows after a blank line and the "During handling" sentence
            j = i + 1
            while j < stop and j <= i + 3:
                nxt = split_context(lines[j]).text
                if nxt.startswith(TRACEBACK):
                    break
                j += 1
            if j < stop and split_context(lines[j]).text.startswith(TRACEBACK):
                i = j + 1
                continue
            return found
        if text.startswith(TRACEBACK):
            i += 1
            continue
        return found
    return found


def rendezvous(lines: list[str], start: int, ctx: LineContext) -> LauncherRendezvous:
    kv: dict[str, str] = {}
    for raw in lines[start + 1:start + 16]:
        m = _KV.match(split_context(raw).text)
        if not m:
            break
        kv[m.group(1)] = m.group(2).strip()

    def ints(key: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"-?\d{1,7}", kv.get(key, ""))[:4096])

    sizes = ints("global_world_sizes")
    return LauncherRendezvous(t=ctx.t, rank=ctx.rank, local_rank=ctx.local_rank,
                              master_addr=kv.get("master_addr") or None, group_rank=to_int(kv.get("group_rank")),
                              group_world_size=to_int(kv.get("group_world_size")), local_ranks=ints("local_ranks"),
                              global_ranks=ints("global_ranks"), world_size=sizes[0] if sizes else None)
