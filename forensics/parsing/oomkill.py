"""OOM-kill sequences in the kernel log (:class:`OomTracker`), from kmsg records (forensics/parsing/kmsg.py).

Source:

* OOM killer (``mm/oom_kill.c``, ``mm/memcontrol.c``): ``<comm> invoked oom-killer: gfp_mask=..,
  order=.., oom_score_adj=..``; ``memory: usage NkB, limit NkB, failcnt N``;
  ``oom-kill:constraint=..,nodemask=..,cpuset=..,mems_allowed=..,oom_memcg=..,task_memcg=..,
  task=<comm>,pid=<n>,uid=<n>``; ``Memory cgroup out of memory: Killed process <pid> (<comm>)
  total-vm:NkB, anon-rss:NkB, file-rss:NkB, shmem-rss:NkB, UID:<n> pgtables:NkB
  oom_score_adj:<n>`` (``Out of memory:`` for a host-wide OOM); kernels before 4.19 print
  ``Task in <memcg> killed as a result of limit of <memcg>`` instead of the ``oom-kill:`` line.

The tracker holds one sequence at a time, so a million-record log is read in bounded memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from forensics.parsing.kmsg import KmsgRecord

__all__ = [
    "OomKill",
    "OomTracker",
]


@dataclass(frozen=True)
class OomKill:
    """One OOM kill, assembled from the records of its sequence.

    ``scope`` is ``memcg`` (a cgroup limit was hit: ``Memory cgroup out of memory``) or
    ``global`` (the host ran out: ``Out of memory``). ``oom_memcg`` is the cgroup whose limit
    was hit, ``task_memcg`` the victim's own cgroup (both relative to the memory hierarchy root).
    Sizes are bytes (the kernel prints kB). ``seqs`` lists the kmsg sequence numbers used.
    """

    ts_usec: int
    scope: str
    pid: int
    comm: str
    invoker_comm: str | None = None
    gfp_mask: str | None = None
    order: int | None = None
    constraint: str | None = None
    oom_memcg: str | None = None
    task_memcg: str | None = None
    uid: int | None = None
    total_vm_bytes: int | None = None
    anon_rss_bytes: int | None = None
    file_rss_bytes: int | None = None
    shmem_rss_bytes: int | None = None
    pgtables_bytes: int | None = None
    oom_score_adj: int | None = None
    memcg_usage_bytes: int | None = None
    memcg_limit_bytes: int | None = None
    memcg_failcnt: int | None = None
    seqs: tuple[int, ...] = field(default_factory=tuple)


_INVOKED = re.compile(r"^(.*) invoked oom-killer: gfp_mask=([^,]*), order=(-?\d+)")
_MEMCG_USAGE = re.compile(r"^memory: usage (\d+)kB, limit (\d+)kB, failcnt (\d+)")
_TASK_IN = re.compile(r"^Task in (\S+) killed as a result of limit of (\S+)")
_OOM_KILL_TAIL = re.compile(r",task=(.*),pid=(\d+),uid=(\d+)$")
_KILLED = re.compile(
    r"^(?:(Memory cgroup out of memory|Out of memory[^:]*): )?Killed process (\d+) \((.*)\)(.*)$"
)
_KILL_PROCESS = re.compile(r"^(Memory cgroup out of memory|Out of memory[^:]*): Kill process ")
_KILLED_KV = re.compile(r"([A-Za-z_-]+):(-?\d+)(kB)?")


class OomTracker:
    """Feed records in order; :meth:`feed` returns an :class:`OomKill` when a sequence ends.

    Holds only the sequence in progress (bounded memory). A ``Killed process`` line without the
    earlier lines still yields a kill with the fields it carries.
    """

    def __init__(self) -> None:
        self._state: dict[str, object] = {}
        self._seqs: list[int] = []

    def feed(self, record: KmsgRecord) -> OomKill | None:
        """Consume one record; return the kill it completes, if any."""
        message = record.message
        if "oom" not in message and "Kill" not in message and not message.startswith(
            ("memory: usage", "Task in ")
        ):
            return None
        invoked = _INVOKED.match(message)
        if invoked:
            self._state = {"invoker_comm": invoked.group(1), "gfp_mask": invoked.group(2),
                           "order": int(invoked.group(3))}
            self._seqs = []
            self._note(record)
            return None
        usage = _MEMCG_USAGE.match(message)
        if usage:
            self._state.update(memcg_usage_bytes=int(usage.group(1)) * 1024,
                               memcg_limit_bytes=int(usage.group(2)) * 1024,
                               memcg_failcnt=int(usage.group(3)))
            self._note(record)
            return None
        task_in = _TASK_IN.match(message)
        if task_in:
            self._state.update(task_memcg=task_in.group(1), oom_memcg=task_in.group(2))
            self._note(record)
            return None
        if message.startswith("oom-kill:"):
            self._state.update(_parse_oom_kill_line(message))
            self._note(record)
            return None
        kill_process = _KILL_PROCESS.match(message)
        if kill_process:  # kernels before 4.19: "Kill process N (comm) score S or sacrifice child"
            self._state["scope"] = _scope(kill_process.group(1))
            self._note(record)
            return None
        killed = _KILLED.match(message)
        if not killed:
            return None
        self._note(record)
        values = {k.lower(): int(v) * (1024 if kb else 1)
                  for k, v, kb in _KILLED_KV.findall(killed.group(4))}
        state = self._state
        pid = int(killed.group(2))
        if state.get("task_pid") not in (None, pid):
            state = {}  # the oom-kill: line named another victim: do not mix the two
        kill = OomKill(
            ts_usec=record.ts_usec,
            scope=(_scope(killed.group(1)) if killed.group(1)
                   else _opt_str(state.get("scope")) or (
                       "memcg" if state.get("oom_memcg") or state.get("constraint") == "CONSTRAINT_MEMCG"
                       else "global")),
            pid=pid,
            comm=killed.group(3),
            invoker_comm=_opt_str(state.get("invoker_comm")),
            gfp_mask=_opt_str(state.get("gfp_mask")),
            order=_opt_int(state.get("order")),
            constraint=_opt_str(state.get("constraint")),
            oom_memcg=_opt_str(state.get("oom_memcg")),
            task_memcg=_opt_str(state.get("task_memcg")),
            uid=values.get("uid", _opt_int(state.get("uid"))),
            total_vm_bytes=values.get("total-vm"),
            anon_rss_bytes=values.get("anon-rss"),
            file_rss_bytes=values.get("file-rss"),
            shmem_rss_bytes=values.get("shmem-rss"),
            pgtables_bytes=values.get("pgtables"),
            oom_score_adj=values.get("oom_score_adj"),
            memcg_usage_bytes=_opt_int(state.get("memcg_usage_bytes")),
            memcg_limit_bytes=_opt_int(state.get("memcg_limit_bytes")),
            memcg_failcnt=_opt_int(state.get("memcg_failcnt")),
            seqs=tuple(self._seqs),
        )
        self._state = {}
        self._seqs = []
        return kill

    def _note(self, record: KmsgRecord) -> None:
        if record.seq is not None and len(self._seqs) < 16:
            self._seqs.append(record.seq)


def _scope(prefix: str) -> str:
    return "memcg" if prefix.startswith("Memory cgroup") else "global"


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _parse_oom_kill_line(message: str) -> dict[str, object]:
    body = message[len("oom-kill:"):]
    result: dict[str, object] = {}
    tail = _OOM_KILL_TAIL.search(body)
    if tail:
        result.update(task_comm=tail.group(1), task_pid=int(tail.group(2)),
                      uid=int(tail.group(3)))
        body = body[:tail.start()]
    for item in body.split(","):
        key, sep, value = item.partition("=")
        if sep and key in ("constraint", "oom_memcg", "task_memcg", "cpuset", "nodemask"):
            result[key] = value
    return result
