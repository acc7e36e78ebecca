"""One look at the node: the typed, immutable snapshot ``gpuforensics top`` shows, and how it is built.

:func:`build_snapshot` reads a :class:`~forensics.top.state.TopState` (whoever fed it) and a
:class:`Tracker` (what was seen before and is gone now) into a :class:`Snapshot`:

- :class:`GpuRow` per GPU: utilisation, memory used/total, temperature, power, the active
  clock-slowdown reasons, the Xid count since ``top`` started (kernel Xid lines by PCI bus id, NVML
  XidCriticalError events by UUID), the utilisation history (sparkline);
- :class:`ProcessRow` per (PID, GPU) NVML lists: the user and command (``proc/<pid>/status``), the
  owner (container, pod) and grant from the analysis' joins as the recorder's live state gives them
  (:class:`~forensics.analysis.attribution.Grant`: its ``allocation_kind`` is shown as it is named,
  so a new kind of grant shows with no change here), a :attr:`ProcessRow.mark` (``none``: the owner
  holds no grant on this GPU; ``overlap``: another owner holds an exclusive grant on it too), the
  GPU memory and SM % (the newest utilisation sample NVML gave:
  :meth:`~forensics.top.state.TopState.sm_pct`), and the owner container's ``docker stats`` figures
  (:class:`~forensics.top.state.ContainerStats`);
- :class:`ExitedRow` per GPU process or container seen in the last ``keep_s`` and gone now, still
  named (the names seen while it ran);
- ``notes``: what could not be read (once, not per row).

The view (forensics.top.view) renders a snapshot and nothing else; ``--once --json`` prints
:meth:`Snapshot.to_json`.
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from forensics.specs import docker as docker_spec
from forensics.specs import procfs as procfs_spec
from forensics.top.state import ContainerStats, TopState

__all__ = ["ExitedRow", "GpuRow", "ProcessRow", "Snapshot", "Tracker", "build_snapshot", "grant_label"]

#: the grant kinds (GpuAllocation.kind) under the names an operator knows them by; a kind not
#: listed shows as it is named (a new kind of grant needs no change here)
GRANT_LABELS = {"kubernetes": "device-plugin", "device-request": "docker", "env": "env", "cdi": "cdi",
                "privileged": "privileged", "dra": "dra"}


@dataclass(frozen=True)
class GpuRow:
    index: int
    uuid: str
    name: str
    util_pct: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: float | None
    power_w: float | None
    slowdown: tuple[str, ...]
    xids: int
    history: tuple[float, ...]
    lost: bool


@dataclass(frozen=True)
class ProcessRow:
    pid: int
    gpu_index: int
    gpu_uuid: str
    mig_uuid: str | None
    user: str
    command: str
    owner_kind: str  # container | pod | process
    container_id: str
    container_name: str
    pod_namespace: str
    pod_name: str
    grant: str  # the operator's name for the grant (see grant_label); "none" without one
    grant_kind: str  # Grant.allocation_kind, as the grant model names it
    grant_scope: str  # Grant.grant: explicit | shared | blanket | none
    grant_detail: str
    mark: str  # "none" (no grant on this GPU), "overlap" (another owner's exclusive grant too) or ""
    used_memory_bytes: int | None
    sm_pct: float | None
    cpu_pct: float | None  # the owner container's, over the last cgroup interval
    throttled_pct: float | None
    memory_bytes: int | None
    memory_limit_bytes: int | None
    cgroup: str
    evidence: tuple[str, ...]  # the members the attribution read

    @property
    def owner(self) -> str:
        """namespace/pod for a pod's process, else the container's name, or "-" (a host process)."""
        if self.pod_name:
            return f"{self.pod_namespace}/{self.pod_name}" if self.pod_namespace else self.pod_name
        if self.container_name:
            return self.container_name
        return self.container_id[:12] if self.container_id else "-"


@dataclass(frozen=True)
class ExitedRow:
    kind: str  # process | container
    name: str  # the container (or pod) it ran in, as named while it ran
    container_id: str
    pid: int | None
    gpu_index: int | None
    command: str
    last_seen: float
    gone_at: float


@dataclass(frozen=True)
class Snapshot:
    t: float
    source: str  # "sampled by top" or "recorder ring <dir>"
    gpus: tuple[GpuRow, ...]
    processes: tuple[ProcessRow, ...]
    exited: tuple[ExitedRow, ...]
    notes: tuple[str, ...] = ()
    containers: int = 0  # containers with a cgroup reading

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for p, row in zip(out["processes"], self.processes, strict=True):
            p["owner"] = row.owner
        return out


def grant_label(allocated: bool, kind: str) -> str:
    if not allocated:
        return "none"
    return GRANT_LABELS.get(kind, kind or "?")


@dataclass
class _Seen:
    name: str
    container_id: str
    pid: int | None
    gpu_index: int | None
    command: str
    last_seen: float


@dataclass
class Tracker:
    """What ``top`` saw, to list what is gone: GPU processes (PID, GPU) and containers, each kept
    named for ``keep_s`` after it was last seen."""

    keep_s: float = 300.0
    processes: dict[tuple[int, int], _Seen] = field(default_factory=dict)
    containers: dict[str, _Seen] = field(default_factory=dict)
    exited: dict[tuple[str, str], ExitedRow] = field(default_factory=dict)
    xids: dict[str, int] = field(default_factory=dict)  # GPU UUID or bus id -> Xids since start
    # (PID, container id) -> (user, command, cgroup path, evidence), read from the identity members
    # once per attribution run (they change only with identities, which run it again)
    identities: dict[tuple[int, str], tuple[str, str, str, tuple[str, ...]]] = field(default_factory=dict)
    identities_gen: int = -1

    def identity(self, state: TopState, pid: int, cid: str) -> tuple[str, str, str, tuple[str, ...]]:
        if self.identities_gen != state.refreshes or len(self.identities) > 100_000:
            self.identities, self.identities_gen = {}, state.refreshes
        hit = self.identities.get((pid, cid))
        if hit is None:
            hit = self.identities[(pid, cid)] = (_user(state, pid), _command(state, pid), _cgroup_path(state, pid),
                                                 _evidence(state, pid, cid))
        return hit

    def observe(self, state: TopState, now: float) -> None:
        """Look at the state now: what is listed is seen; what was seen and is not listed any more
        (a GPU process NVML stopped listing; a container Docker said died, or whose cgroup stopped
        being read) is exited."""
        state.refresh()
        for ev in state.take_events():
            if ev.kind == "xid" and ev.gpu:
                self.xids[ev.gpu.lower()] = self.xids.get(ev.gpu.lower(), 0) + 1
        listed: set[tuple[int, int]] = set()
        for p in state.processes():
            owner, _ = state.owner_grant(p.pid, p.gpu_uuid, p.mig_uuid)
            key = (p.pid, p.gpu_index)
            listed.add(key)
            name = _owner_name(owner.pod_namespace, owner.pod_name, owner.container_name, owner.container_id)
            self.processes[key] = _Seen(name, owner.container_id, p.pid, p.gpu_index,
                                        self.identity(state, p.pid, owner.container_id)[1], p.t)
            if owner.container_id and owner.container_id not in state.ended:
                self._container(owner.container_id, name, p.t)
        readings = state.container_stats()
        for cid, stats in readings.items():
            if cid not in state.ended:
                self._container(cid, state.container_name(cid), stats.t)
        for key, seen in list(self.processes.items()):
            if key not in listed:
                del self.processes[key]
                self.exited[("process", f"{key[0]}/{key[1]}")] = ExitedRow(
                    "process", seen.name, seen.container_id, seen.pid, seen.gpu_index, seen.command, seen.last_seen, now)
        # a container whose cgroup was not read for this long, by the cgroup sampler's own clock
        # (a quiet cgroup is read every 10 s), is gone even where Docker's events did not say so
        clock = max((r.t for r in readings.values()), default=0.0)
        stale = clock - 30.0
        for cid, seen in list(self.containers.items()):
            ended = state.ended.get(cid)
            if ended is not None or (seen.last_seen < stale and cid in readings):
                del self.containers[cid]
                name = seen.name or state.container_name(cid) or state.event_names.get(cid, "")
                self.exited[("container", cid)] = ExitedRow("container", name, cid, None, None, "",
                                                            seen.last_seen, ended if ended is not None else now)
        for cid, when in state.ended.items():  # died before top saw its cgroup (the ring's past)
            if ("container", cid) not in self.exited and cid not in self.containers and when >= now - self.keep_s:
                name = state.container_name(cid) or state.event_names.get(cid, "")
                self.exited[("container", cid)] = ExitedRow("container", name, cid, None, None, "", when, when)
        for gone, row in list(self.exited.items()):
            if row.gone_at < now - self.keep_s or (gone[0] == "container" and gone[1] in self.containers):
                del self.exited[gone]

    def _container(self, cid: str, name: str, t: float) -> None:
        old = self.containers.get(cid)
        self.containers[cid] = _Seen(name or (old.name if old else ""), cid, None, None, "", t)
        self.exited.pop(("container", cid), None)


def _owner_name(ns: str, pod: str, cname: str, cid: str) -> str:
    if pod:
        return f"{ns}/{pod}" if ns else pod
    return cname or cid[:12]


def _status_field(state: TopState, pid: int, key: bytes) -> str:
    raw = state.identity(procfs_spec.pid_member(pid, "status")) or b""
    for line in raw.splitlines():
        if line.startswith(key):
            return line[len(key):].strip().decode("utf-8", "replace")
    return ""


def _command(state: TopState, pid: int) -> str:
    return _status_field(state, pid, b"Name:")


_USERS: dict[int, str] = {}


def _user(state: TopState, pid: int) -> str:
    uid_text = _status_field(state, pid, b"Uid:").split()
    if not uid_text or not uid_text[0].isdigit():
        return ""
    uid = int(uid_text[0])
    if uid not in _USERS:
        try:
            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _USERS[uid] = str(uid)
    return _USERS[uid]


def _cgroup_path(state: TopState, pid: int) -> str:
    raw = state.identity(procfs_spec.pid_member(pid, "cgroup")) or b""
    lines = [ln.split(b":", 2) for ln in raw.splitlines() if ln.count(b":") >= 2]
    unified = [p[2] for p in lines if p[0] == b"0" and p[1] == b""]
    memory = [p[2] for p in lines if b"memory" in p[1].split(b",")]
    path = (unified or memory or [b""])[0]
    return path.decode("utf-8", "replace")


def _evidence(state: TopState, pid: int, cid: str) -> tuple[str, ...]:
    members = [procfs_spec.pid_member(pid, name) for name in ("cgroup", "status", "environ")]
    if cid:
        members.append(docker_spec.container_member(cid, "inspect.json"))
    return tuple(m for m in members if state.identity(m) is not None)


def build_snapshot(state: TopState, tracker: Tracker, source: str, now: float | None = None,
                   notes: tuple[str, ...] = ()) -> Snapshot:
    """The snapshot of ``state`` now (see the module docstring); ``tracker`` is told what it sees."""
    now = time.time() if now is None else now
    tracker.observe(state, now)
    stats: dict[str, ContainerStats] = state.container_stats()
    gpus = []
    for g in state.gpus():
        ex = state.extra.get(g.index)
        bus = state.bus_ids.get(g.uuid, "")
        xids = tracker.xids.get(g.uuid.lower(), 0) + (tracker.xids.get(bus, 0) if bus else 0)
        if bus and bus.startswith("0000") and not xids:  # the kernel names the bus without the domain's leading zeros
            xids = tracker.xids.get(bus[4:], 0)
        gpus.append(GpuRow(g.index, g.uuid, g.name or state.gpu_names.get(g.uuid, ""), g.util_pct, g.memory_used_bytes, g.memory_total_bytes,
                           ex.temperature_c if ex else None, ex.power_w if ex else None,
                           ex.slowdown if ex else (), xids,
                           tuple(ex.history) if ex and ex.history is not None else (), g.lost))
    raw = [(p, *state.owner_grant(p.pid, p.gpu_uuid, p.mig_uuid)) for p in state.processes()]
    # an exclusive grant of a GPU held by two owners at once: each overlaps the other's
    exclusive: dict[str, set[str]] = {}
    for p, owner, grant in raw:
        if grant.allocated and grant.grant == "explicit" and owner.kind != "process":
            exclusive.setdefault(p.gpu_uuid, set()).add(owner.container_id or f"{owner.pod_namespace}/{owner.pod_name}")
    procs = []
    for p, owner, grant in raw:
        who = owner.container_id or f"{owner.pod_namespace}/{owner.pod_name}"
        if not grant.allocated and grant.allocation_kind != "unknown" and (grant.unallocated or owner.kind != "process"):
            mark = "none"
        elif grant.allocated and grant.grant == "explicit" and len(exclusive.get(p.gpu_uuid, ())) > 1 and who in exclusive[p.gpu_uuid]:
            mark = "overlap"
        else:
            mark = ""
        st = stats.get(owner.container_id) if owner.container_id else None
        cname = owner.container_name or (state.container_name(owner.container_id) if owner.container_id else "")
        if grant.allocated or mark:
            label = grant_label(grant.allocated, grant.allocation_kind)
        else:  # a host process, or one not attributed yet: no container grant to speak of
            label = "-" if owner.kind == "process" and grant.detail != "not attributed yet" else "?"
        user, command, cgroup, evidence = tracker.identity(state, p.pid, owner.container_id)
        procs.append(ProcessRow(
            p.pid, p.gpu_index, p.gpu_uuid, p.mig_uuid, user, command, owner.kind,
            owner.container_id, cname, owner.pod_namespace, owner.pod_name,
            label, grant.allocation_kind, grant.grant, grant.detail, mark,
            p.used_memory_bytes, state.sm_pct(p.pid, p.gpu_index, p.t, p.sm_util_pct),
            st.cpu_pct if st else None, st.throttled_pct if st else None,
            st.memory_bytes if st else None, st.memory_limit_bytes if st else None,
            st.cgroup if st else cgroup, evidence))
    exited = tuple(sorted(tracker.exited.values(), key=lambda r: -r.gone_at))
    all_notes = list(notes)
    if os.geteuid() != 0:
        unread = sum(1 for p in procs if procfs_spec.pid_member(p.pid, "environ") not in p.evidence)
        if unread:
            all_notes.append(f"not root: the environment of {unread} GPU processes cannot be read: GRANT does not "
                             "see their NVIDIA_VISIBLE_DEVICES (run as root to judge them)")
    return Snapshot(now, source, tuple(gpus), tuple(procs), exited, tuple(all_notes), len(stats))
