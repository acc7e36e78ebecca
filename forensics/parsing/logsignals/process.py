"""How a workload's process ended, and torchrun's view of the job, in its log.

* Process ends: the exception line that ends a Python ``Traceback (most recent call last):``,
  ``Killed`` (the shell reporting SIGKILL), ``terminate called after throwing an instance of``,
  ``Worker ... died, exit code: -15``.
* torchrun: ``Rendezvous complete for workers. Result:`` followed by ``  key=value`` lines
  (``group_rank``, ``group_world_size``, ``global_ranks=[..]``, ``global_world_sizes=[..]``) and
  ``failed (exitcode: -9) local_rank: 0 (pid: 484375) of binary: ...``; ``ChildFailedError``'s
  ``Root Cause (first observed failure):`` block (``[0]:`` then ``  host      : node-1``,
  ``  rank      : 3 (local_rank: 3)``, ``  exitcode  : -9 (pid: 62498)``,
  ``  traceback : Signal 9 (SIGKILL) received by PID 62498``).
* vLLM V1: ``Worker proc VllmWorker-2 died unexpectedly, shutting down executor.`` (the worker of
  rank 2: vLLM names them ``VllmWorker-{rank}``); V0's ``Worker VllmWorkerProcess pid 1866 died,
  exit code: -15``.
* DeepSpeed's launcher: ``[launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py',
  '--local_rank=7'] exits with return code = -11`` (a negative code is the signal that ended it).
* ``Killed`` glued to the end of a progress bar the shell's report landed on (``... 2.83s/it]Killed``),
  and zsh's job report ``[1]    26478 killed     python test.py``.

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

__all__ = ["RENDEZVOUS", "ROOT_CAUSE", "TRACEBACK", "TRACEBACK_MAX_LINES", "TRIGGER_WORDS", "LauncherRendezvous",
           "ProcessEnd", "exception_end", "parse_process_end", "rendezvous", "root_cause"]

TRACEBACK_MAX_LINES = 400
# ``illed`` for the shell's Killed and zsh's killed
TRIGGER_WORDS = ("Traceback (most recent", "illed", "(exitcode: ", "exits with return", "terminate called",
                 "died, exit code", "died unexpectedly", "Rendezvous complete", "Root Cause (first")
ROOT_CAUSE = "Root Cause (first observed failure)"
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
            11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}


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
    launcher reporting its worker's exit); ``exc_type``, ``message``, ``exit_code``, ``pid``;
    ``signal`` the signal that ended it when the line says so (a negative exit code, ``Signal 9
    (SIGKILL)``), ``worker`` the launcher's name for it (``VllmWorker-2``), ``host`` the node
    torchrun names."""

    kind: ClassVar[str] = "process-end"
    how: str
    exc_type: str | None = None
    message: str | None = None
    exit_code: int | None = None
    pid: int | None = None
    signal: str | None = None
    worker: str | None = None
    host: str | None = None


def _signal_of(exit_code: int | None) -> str | None:
    """The signal a launcher's negative exit code names (-9: SIGKILL); None otherwise."""
    if exit_code is None or exit_code >= 0:
        return None
    return _SIGNALS.get(-exit_code, f"signal {-exit_code}")

_CHILD_FAILED = re.compile(r"failed \(exitcode: (-?\d{1,4})\) local_rank: (\d{1,6}) \(pid: (\d{1,10})\)")
_WORKER_DIED = re.compile(r"Worker \w{1,60} pid (\d{1,10}) died, exit code: (-?\d{1,4})")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']{1,200})'")
_KILLED = re.compile(r"^\**Killed\**\s*$|(?:^|:\s)(?:line \d{1,7}:\s+)?(\d{1,10}) Killed\s|(?:\]|/s|\r)Killed\s*$")
_ZSH_KILLED = re.compile(r"\[\d{1,4}\]\s{1,8}(\d{1,10}) killed {2,}\S")  # zsh's job report
_VLLM_DIED = re.compile(r"Worker proc (\S{1,80}?) died unexpectedly")
_VLLM_RANK = re.compile(r"^VllmWorker-(\d{1,6})$")
_DS_EXIT = re.compile(r"\] (\[.{0,2000}?\]) exits with return code = (-?\d{1,4})")
_DS_LOCAL_RANK = re.compile(r"--local_rank=(\d{1,6})")
_RC_KV = re.compile(r"^\s{1,8}(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.{0,400})$")
_RC_RANK = re.compile(r"^(-?\d{1,7})(?: \(local_rank: (\d{1,6})\))?")
_RC_EXIT = re.compile(r"^(-?\d{1,4})(?: \(pid: (\d{1,10})\))?")
_RC_SIGNAL = re.compile(r"Signal (\d{1,3}) \((SIG[A-Z]{2,8})\)")
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
                              signal=_signal_of(int(m.group(1))), t=base["t"], rank=base["rank"],
                              local_rank=int(m.group(2))))
    elif m := _WORKER_DIED.search(text):
        out.append(ProcessEnd(how="child-failed", exit_code=int(m.group(2)), pid=int(m.group(1)),
                              signal=_signal_of(int(m.group(2))), **base))
    elif m := _VLLM_DIED.search(text):
        r = _VLLM_RANK.match(m.group(1))
        out.append(ProcessEnd(how="child-failed", worker=m.group(1), t=base["t"],
                              rank=int(r.group(1)) if r else base["rank"], local_rank=base["local_rank"]))
    elif m := _DS_EXIT.search(text):
        code = int(m.group(2))
        lr = _DS_LOCAL_RANK.search(m.group(1))
        out.append(ProcessEnd(how="child-failed", exit_code=code, signal=_signal_of(code), t=base["t"],
                              rank=base["rank"], local_rank=int(lr.group(1)) if lr else base["local_rank"]))
    if m := _TERMINATE.search(text):
        out.append(ProcessEnd(how="terminate", exc_type=m.group(1), **base))
    if "Killed" in text and (k := _KILLED.search(text)):
        out.append(ProcessEnd(how="killed", exit_code=137, pid=to_int(k.group(1)), signal="SIGKILL", **base))
    elif " killed  " in text and (z := _ZSH_KILLED.search(text)):
        out.append(ProcessEnd(how="killed", exit_code=137, pid=int(z.group(1)), signal="SIGKILL", **base))
    return out


def root_cause(lines: list[str], start: int, ctx: LineContext) -> ProcessEnd | None:
    """torchrun's ``Root Cause (first observed failure):`` block whose header is ``lines[start]``:
    the failed rank, its node, exit code, pid and signal; None when the block holds no entry."""
    kv: dict[str, str] = {}
    for raw in lines[start + 1:start + 16]:
        text = split_context(raw).text
        if text.strip().startswith("[") and text.strip().endswith("]:"):
            if kv:
                break
            continue
        m = _RC_KV.match(text)
        if not m:
            if kv:
                break
            continue
        kv[m.group(1)] = m.group(2).strip()
    if not kv:
        return None
    rank = _RC_RANK.match(kv.get("rank", ""))
    code = _RC_EXIT.match(kv.get("exitcode", ""))
    exit_code = to_int(code.group(1)) if code else None
    sig = _RC_SIGNAL.search(kv.get("traceback", ""))
    return ProcessEnd(how="child-failed", exit_code=exit_code, pid=to_int(code.group(2)) if code else None,
                      signal=sig.group(2) if sig else _signal_of(exit_code), host=kv.get("host") or None,
                      t=ctx.t, rank=to_int(rank.group(1)) if rank else None,
                      local_rank=to_int(rank.group(2)) if rank and rank.group(2) else None)


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
