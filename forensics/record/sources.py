"""What the recorder samples, source by source: capture's own collectors, driven tick by tick.

Each driver runs inside its source's child process (forensics.record.child) and writes through
``ctx.sink`` exactly the members capture's sampling writes:

- ``nvml``: ``NvmlCollector.snapshot`` once per child (``nvml/devices.json``,
  ``nvml/processes.json``: GPU identities), then ``sample`` each tick (``nvml/samples.jsonl``, with
  the per-process utilisation and its ``lastSeenTimeStamp`` cursor; ``nvml/events.jsonl``). GPU
  PIDs seen are handed to the parent (hint ``gpu_pids``). A hung call ends the tick (the
  collector's per-call deadline); the parent restarts the child, so the next tick asks again.
- ``procfs``: attribution at first sight: each GPU PID the parent has not seen recently gets its
  ``proc/<pid>/{cgroup,stat,status,cmdline,environ,ns.json}`` (redacted as capture redacts them)
  and one ``proc/window.jsonl`` line; its cgroup path is handed on (hint ``cgroup_paths``).
- ``cgroups``: ``CgroupsCollector.sample`` each tick (``cgroup/samples.jsonl``: CPU, memory, PIDs,
  PSI of every container and pod cgroup, of GPU processes' cgroups and of the host); the set of
  cgroups is planned again every ``replan_s`` (new containers).
- ``kernel``: ``KernelCollector.sample`` each tick (``kernel/kmsg-window.txt`` verbatim,
  ``kernel/window.jsonl`` OOM kills and Xids), resuming after the last sequence number in the ring.
- ``docker``: :class:`forensics.collectors.docker_follow.DockerFollower` (events as they happen,
  inspect at first sight).
"""

from __future__ import annotations

import time
from typing import Any

from forensics.capture.context import CollectContext, Tick

__all__ = ["DRIVERS", "SOURCE_NAMES", "make_driver"]

SOURCE_NAMES = ("nvml", "procfs", "cgroups", "kernel", "docker")


class _Driver:
    def start(self, ctx: CollectContext) -> None:
        """Before the first tick (in the child)."""

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Before the child exits."""


class NvmlDriver(_Driver):
    def __init__(self) -> None:
        from forensics.collectors.nvml import NvmlCollector

        self.collector = NvmlCollector()
        self.pids: set[int] = set()

    def _watch(self, member: str, obj: Any) -> None:
        if member != "nvml/samples.jsonl" or not isinstance(obj, dict):
            return
        for p in obj.get("processes") or []:
            pid = p.get("pid") if isinstance(p, dict) else None
            if type(pid) is int and 0 < pid < 0xFFFFFFFF:
                self.pids.add(pid)

    def start(self, ctx: CollectContext) -> None:
        ctx.sink.watch = self._watch  # type: ignore[attr-defined]
        self.collector.snapshot(ctx)
        ctx.published.clear()  # the snapshot's hints are for capture's later collectors

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        self.pids.clear()
        try:
            self.collector.sample(ctx, tick)
        finally:
            ctx.publish("gpu_pids", sorted(self.pids))


class ProcfsDriver(_Driver):
    def __init__(self) -> None:
        from forensics.collectors.procfs import ProcfsCollector

        self.collector = ProcfsCollector()
        self.done: set[int] = set()

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        wanted = [p for p in ctx.hint("attribute_pids") if isinstance(p, int) and p not in self.done]
        ctx.hints["attribute_pids"] = []
        paths: list[str] = []
        for pid in wanted:
            self.done.add(pid)
            rec = self.collector.record_pid(ctx, pid, ["gpu-process-first-seen"], time.time())
            ctx.sink.append_jsonl("proc/window.jsonl", rec)
            path = (rec.get("attribution") or {}).get("cgroup_path")
            if isinstance(path, str) and path.startswith("/") and path != "/":
                paths.append(path)
        if len(self.done) > 100_000:
            self.done.clear()
        if paths:
            ctx.publish("cgroup_paths", paths)


class CgroupsDriver(_Driver):
    replan_s = 10.0

    def __init__(self) -> None:
        from forensics.collectors.cgroups import CgroupsCollector

        self.collector = CgroupsCollector()
        self.planned = 0.0
        self.extra: list[str] = []
        self.known: set[str] = set()

    def _hints(self) -> list[str]:
        from forensics.collectors.procfs import attributed_paths, scan_proc_cgroups

        paths: list[str] = []
        for entry in scan_proc_cgroups(self.collector.proc_root):
            if entry.attribution.kind in ("container", "pod"):
                paths.extend(p for p in attributed_paths(entry) if p not in paths)
        paths.extend(p for p in self.extra if p not in paths)
        return paths

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        fresh = [p for p in ctx.hint("cgroup_paths") if isinstance(p, str) and p not in self.known]
        ctx.hints["cgroup_paths"] = []
        if fresh:
            self.known.update(fresh)
            self.extra.extend(fresh)
        now = time.monotonic()
        if fresh or now - self.planned >= self.replan_s:
            self.collector.end_sampling(ctx)  # forget the plan and the kept-open descriptors
            ctx.hints["cgroup_paths"] = self._hints()
            self.planned = now
        self.collector.sample(ctx, tick)
        ctx.hints["cgroup_paths"] = []

    def stop(self) -> None:
        pass


class KernelDriver(_Driver):
    def __init__(self) -> None:
        from forensics.collectors.kernel import KernelCollector

        self.collector = KernelCollector()

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        self.collector.sample(ctx, tick)


class DockerDriver(_Driver):
    def __init__(self) -> None:
        from forensics.collectors.docker_follow import DockerFollower

        self.follower = DockerFollower()

    def start(self, ctx: CollectContext) -> None:
        self.follower.start(ctx)

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        self.follower.sample(ctx, tick)

    def stop(self) -> None:
        self.follower.stop()


DRIVERS: dict[str, type[_Driver]] = {
    "nvml": NvmlDriver, "procfs": ProcfsDriver, "cgroups": CgroupsDriver,
    "kernel": KernelDriver, "docker": DockerDriver,
}


def make_driver(name: str) -> _Driver:
    return DRIVERS[name]()
