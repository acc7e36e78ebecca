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
  cgroups is planned again every ``replan_s`` when containers came or went (``/proc/*/cgroup`` read
  only where it may have changed: ``hostfs.proc.ContainerPidScan``; what is planned again stays open).
- ``kernel``: ``KernelCollector.sample`` each tick (``kernel/kmsg-window.txt`` verbatim,
  ``kernel/window.jsonl`` OOM kills and Xids), resuming where the ring's kernel records of this boot
  stop (:mod:`forensics.record.kmsg_resume`).
- ``docker``: :class:`forensics.collectors.docker.follow.DockerFollower` (events as they happen,
  inspect at first sight).
- ``kubernetes``: :class:`forensics.collectors.kubernetes.follow.KubeEventFollower` (the Events
  about this node and its pods, listed then watched, ``kubernetes/events.jsonl``), when a
  configuration is there (``record --kubeconfig``, in-cluster, ``KUBECONFIG``, ``~/.kube/config``).

:data:`DRIVERS` is the one list of what the recorder records: each driver names its source's spec
and declares, as typed :class:`~forensics.specs.base.Hint` keys, what its child hands the recorder
(``publishes``), what the recorder hands it with each tick (``reads``: what other children
published, or the recorder's own ``attribute_pids``) and what a new child is handed once, with its
first tick (``resumes``: the recorder holds the latest value, read back from the records the child
sent). The recorder routes hints by those keys, never by a source's name; :data:`SOURCE_NAMES`
(the default of ``record --sources``) follows from the drivers' specs in volatility order.
"""

from __future__ import annotations

import importlib
import operator
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from forensics.collect.context import CollectContext, Tick
from forensics.record.kmsg_resume import last_seq, resume_seq
from forensics.ring.files import boot_id
from forensics.specs import cgroups as cgroups_spec
from forensics.specs import docker as docker_spec
from forensics.specs import kernel as kernel_spec
from forensics.specs import kubernetes as kubernetes_spec
from forensics.specs import nvml as nvml_spec
from forensics.specs import procfs as procfs_spec
from forensics.specs.base import Hint, SourceSpec
from forensics.specs.hints import CGROUP_PATHS, GPU_PIDS, KMSG_LAST_SEQ

__all__ = ["ATTRIBUTE_PIDS", "DELTA_MEMBERS", "DRIVERS", "GPU_PIDS", "SOURCE_NAMES", "Driver", "Resume", "make_driver",
           "preload"]

#: modules the recorder uses beside the sources' collectors, loaded by name as capture loads
#: collectors (nothing outside capture and the recorder imports forensics.collectors)
HOSTFS_PROC = "forensics.hostfs.proc"
DOCKER_FOLLOWER = "forensics.collectors.docker.follow"
KUBE_FOLLOWER = "forensics.collectors.kubernetes.follow"
#: what the nvml collector imports lazily when it opens the library (the bindings, and
#: importlib.metadata for their version, which loads email, csv and zipfile): ~3 MB of objects that
#: the nvml child would otherwise make after the fork, in pages of its own. Preloaded only for the
#: pages: importing the bindings loads no library (nvmlInit does, in the child)
NVML_LAZY = ("pynvml", "importlib.metadata")

#: recorder-only hints, between the parent loop and its sampler children
ATTRIBUTE_PIDS = Hint("attribute_pids", int, "GPU PIDs seen for the first time (recorder -> procfs child)")


#: the per-tick members whose lines mostly repeat the line before them for the same GPU or cgroup:
#: the ring stores them change-only (forensics.ring.delta) and gives them back byte for byte
DELTA_MEMBERS = (nvml_spec.SAMPLES, cgroups_spec.SAMPLES)


def fresh_collector(spec: SourceSpec[Any]) -> Any:
    """A new instance of the source's collector (its spec names the module), in the sampler child:
    per-source state (NVML's ``lastSeenTimeStamp`` cursor, the cgroup plan) lives on it."""
    return type(importlib.import_module(spec.collector).COLLECTOR)()


_PID = operator.itemgetter("pid")
_INT = {int}


@dataclass(frozen=True)
class Resume:
    """A hint a new child is handed once, with its first tick: the latest value the recorder read
    (``read``) from the records of ``member`` the source's children sent, at first what the ring
    holds (``initial``, given the ring's directory; None: nothing). The kernel's ``kmsg_last_seq``:
    a restarted child resumes after the last record received."""

    hint: Hint[Any]
    member: str
    read: Callable[[Any], Any]
    initial: Callable[[Path], Any]


def _kmsg_resume_point(ring: Path) -> int | None:
    """Where this boot's kernel records in the ring stop (None: none there)."""
    return resume_seq(ring, boot_id())


class Driver:
    """What the recorder runs for one source, in its child; see the module docstring."""

    spec: ClassVar[SourceSpec[Any]]
    publishes: ClassVar[tuple[Hint[Any], ...]] = ()
    reads: ClassVar[tuple[Hint[Any], ...]] = ()
    resumes: ClassVar[Resume | None] = None
    #: an answer whose error says a call hung ends the child at once, restarted at the next tick
    #: without backoff (the NVML collector's per-call deadline)
    restart_when_hung: ClassVar[bool] = False
    #: modules the driver loads beside its spec's collector (imported before the fork: shared pages)
    preloads: ClassVar[tuple[str, ...]] = ()

    def start(self, ctx: CollectContext) -> None:
        """Before the first tick (in the child)."""

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Before the child exits."""


class NvmlDriver(Driver):
    spec = nvml_spec.SPEC
    publishes = (GPU_PIDS,)
    restart_when_hung = True
    preloads = NVML_LAZY

    def __init__(self) -> None:
        self.collector = fresh_collector(self.spec)
        self.pids: set[int] = set()

    def _watch(self, member: str, obj: Any) -> None:
        if member != nvml_spec.SAMPLES or not isinstance(obj, dict):
            return
        plist = obj.get("processes") or []
        if type(plist) is list and plist:  # the common line: every entry a dict with a valid PID, read in C
            try:
                pids = set(map(_PID, plist))
            except (KeyError, TypeError):
                pids = None
            if pids is not None and set(map(type, pids)) == _INT and 0 < min(pids) and max(pids) < 0xFFFFFFFF:
                self.pids |= pids
                return
        for p in plist:
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
            # this tick's PIDs only, set rather than published: ctx.publish merges into ctx.hints (which
            # would keep every PID ever seen) and dedups item by item (~0.5-1 ms a tick at 512 PIDs);
            # the set's sorted PIDs are unique already, and the answer takes ctx.published each tick
            pids = sorted(self.pids)
            ctx.hints[GPU_PIDS.key] = pids
            ctx.published[GPU_PIDS.key] = list(pids)


class ProcfsDriver(Driver):
    #: a PID attributed is not attributed again for this long (one hand-over listing it twice, or
    #: two hand-overs of one tick); after it, it is forgotten. The parent hands a PID over again only
    #: once NVML has not listed it for 30 s (its number reused by a new process), counted from when
    #: NVML last listed it, not from when this child attributed it, which can be later (a busy
    #: child): so this is well under 30 s, or a reused PID handed over again would be skipped and its
    #: process never named. What is kept grows with the GPU processes of the last ``forget_s``.
    forget_s = 10.0
    spec = procfs_spec.SPEC
    publishes = (CGROUP_PATHS,)
    reads = (ATTRIBUTE_PIDS,)

    def __init__(self) -> None:
        self.collector = fresh_collector(self.spec)
        self.done: dict[int, float] = {}  # PID -> when attributed (monotonic), oldest first

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        now = time.monotonic()
        done = self.done
        while done:
            pid, at = next(iter(done.items()))
            if now - at < self.forget_s:
                break
            del done[pid]
        wanted = ATTRIBUTE_PIDS.read(ctx)
        ctx.hints[ATTRIBUTE_PIDS.key] = []
        paths: list[str] = []
        for pid in wanted:
            if pid in done:
                continue
            done[pid] = now
            rec = self.collector.record_pid(ctx, pid, ["gpu-process-first-seen"], time.time())
            ctx.sink.append_jsonl(procfs_spec.WINDOW, rec)
            path = (rec.get("attribution") or {}).get("cgroup_path")
            if isinstance(path, str) and path.startswith("/") and path != "/":
                paths.append(path)
        if paths:
            CGROUP_PATHS.publish(ctx, paths)


class CgroupsDriver(Driver):
    replan_s = 10.0
    spec = cgroups_spec.SPEC
    reads = (CGROUP_PATHS,)
    preloads = (HOSTFS_PROC,)

    def __init__(self) -> None:
        self.collector = fresh_collector(self.spec)
        self.collector.activity_gating = True  # quiet cgroups: activity files only (cgroups.idle_full_s)
        self.planned = 0.0
        self.extra: list[str] = []
        self.known: set[str] = set()
        self.paths: list[str] = []  # the cgroups the plan was made from
        self.scan: Any = None

    def _hints(self) -> list[str]:
        if self.scan is None:  # /proc/*/cgroup read only where it may have changed (ContainerPidScan)
            self.scan = importlib.import_module(HOSTFS_PROC).ContainerPidScan(self.collector.proc_root)
        paths: list[str] = self.scan.paths()
        paths.extend(p for p in self.extra if p not in paths)
        return paths

    def _forget_gone(self) -> None:
        """A GPU process's cgroup (handed over by the procfs source) whose planned directories are
        all gone leaves the plan: GPU jobs come and go all day, and it would stay planned, one line a
        tick, for the recorder's life. (A scanned container's cgroup goes with its processes.)"""
        if not self.extra:
            return
        dirs = {t.path: {os.path.dirname(f[3]) for f in t.files} for t in self.collector._plan or ()}
        gone = {p for p in self.extra if p in dirs and not any(os.path.isdir(d) for d in dirs[p])}
        if gone:
            self.extra = [p for p in self.extra if p not in gone]
            self.known -= gone

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        fresh = [p for p in CGROUP_PATHS.read(ctx) if p not in self.known]
        ctx.hints[CGROUP_PATHS.key] = []
        if fresh:
            self.known.update(fresh)
            self.extra.extend(fresh)
        now = time.monotonic()
        if fresh or now - self.planned >= self.replan_s:
            self._forget_gone()
            paths = self._hints()
            self.planned = now
            if fresh or paths != self.paths:  # new or gone containers: plan again
                self.collector.replan(ctx)  # plan again (what is planned again stays open)
                self.paths = paths
        ctx.hints[CGROUP_PATHS.key] = self.paths
        self.collector.sample(ctx, tick)
        ctx.hints[CGROUP_PATHS.key] = []

    def stop(self) -> None:
        pass


class KernelDriver(Driver):
    spec = kernel_spec.SPEC
    resumes = Resume(KMSG_LAST_SEQ, kernel_spec.KMSG_WINDOW, last_seq, _kmsg_resume_point)

    def __init__(self) -> None:
        self.collector = fresh_collector(self.spec)

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        self.collector.sample(ctx, tick)


class DockerDriver(Driver):
    spec: ClassVar[SourceSpec[Any]] = docker_spec.SPEC
    preloads = (DOCKER_FOLLOWER,)

    def __init__(self) -> None:
        self.follower = importlib.import_module(DOCKER_FOLLOWER).DockerFollower()

    def start(self, ctx: CollectContext) -> None:
        self.follower.start(ctx)

    def tick(self, ctx: CollectContext, tick: Tick) -> None:
        self.follower.sample(ctx, tick)

    def stop(self) -> None:
        self.follower.stop()


class KubernetesDriver(DockerDriver):
    """The Kubernetes event follower: started once, its threads write as events come."""

    spec = kubernetes_spec.SPEC
    preloads = (KUBE_FOLLOWER,)

    def __init__(self) -> None:
        self.follower = importlib.import_module(KUBE_FOLLOWER).KubeEventFollower()


DRIVERS: dict[str, type[Driver]] = {d.spec.name: d for d in sorted(
    (NvmlDriver, ProcfsDriver, CgroupsDriver, KernelDriver, DockerDriver, KubernetesDriver), key=lambda d: d.spec.order)}
SOURCE_NAMES: tuple[str, ...] = tuple(DRIVERS)


def make_driver(name: str) -> Driver:
    return DRIVERS[name]()


def preload(names: Iterable[str]) -> list[str]:
    """Import, in the recorder's process, the modules the drivers of ``names`` will load, so each
    sampler child forked afterwards shares their pages instead of importing its own copy. A module
    that fails to import is left to its child, which reports it as that source's failure; returns
    the ones that failed."""
    failed = []
    for name in names:
        driver = DRIVERS.get(name)
        for module in ((driver.spec.collector, *driver.preloads) if driver is not None else ()):
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - the child meets it again and says so
                failed.append(module)
    return failed
