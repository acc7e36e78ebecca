"""The recorder's live state: :class:`LiveState`, the node now, folded from the records the samplers send.

One fold with one small handler per member the samplers write (NVML devices, samples and events,
proc/<pid> identity files, Docker inspect and events, cgroup samples, the kernel window); the
handlers share the state's bounds (what is dropped when) and one flag (when the attribution must
run again). What each reader gives, and from which member: the package's docstring
(:mod:`forensics.record.live`); the records they give: :mod:`forensics.record.live.views`.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict, deque
from typing import Any

from forensics.analysis.attribution import Attribution, Grant, OwnerInfo, attribute
from forensics.parsing.attribution import attribute_path
from forensics.record.live.cgroups import CgroupFold, FreshRow, Row, psi_dict
from forensics.record.live.decode import as_bytes, as_text, loads
from forensics.record.live.events import destroyed_containers, kernel_events, nvml_xid_events
from forensics.record.live.nvml import value as nvml_value
from forensics.record.live.summaries import summarize
from forensics.record.live.views import (
    NO_GRANT,
    UNKNOWN_OWNER,
    CgroupLive,
    GpuLive,
    LiveEvent,
    ProcessLive,
)
from forensics.specs import cgroups as cgroups_spec
from forensics.specs import docker as docker_spec
from forensics.specs import kernel as kernel_spec
from forensics.specs import kubernetes as kube_spec
from forensics.specs import nvml as nvml_spec
from forensics.specs import procfs as procfs_spec

__all__ = ["LiveState"]

#: whole members the attribution reads besides Docker's and procfs': NVML's devices and processes,
#: and the Kubernetes follower's pods with their DRA claims and the node's slices
#: (forensics.collectors.kubernetes.follow_objects), so a pod granted by a claim is ``grant="dra"``
_IDENTITY_WRITES = frozenset({nvml_spec.DEVICES, nvml_spec.PROCESSES, kube_spec.PODS,
                              kube_spec.RESOURCE_CLAIMS, kube_spec.RESOURCE_SLICES})


class LiveState:
    """See the module docstring. ``max_identity_bytes`` bounds the member bytes kept for attribution."""

    max_events = 10_000  # events kept for take_events (the newest)

    def __init__(self, max_identity_bytes: int = 64 << 20, psi_some_floor: float = 20.0,
                 psi_full_floor: float = 10.0) -> None:
        self.max_identity_bytes = max_identity_bytes
        self.max_window_bytes = max(1 << 16, max_identity_bytes // 16)
        self.psi_floors = (psi_some_floor, psi_full_floor)
        # a GPU PID NVML has not listed for this long is gone: its proc/<pid>/ members are dropped
        # (the procfs sampler records a PID again once it has been gone 30 s, so one that comes
        # back is attributed again)
        self.forget_s = 60.0
        self._gpus: dict[int, GpuLive] = {}
        self._names: dict[str, str] = {}  # uuid -> product name (nvml/devices.json)
        # the last NVML tick, per GPU: (uuid, t, [PIDs, MIG UUIDs or None, used memory, SM %])
        self._nvml_gpus: dict[int, tuple[str, float, list[Any]]] = {}
        self._nvml_idents: list[tuple[int, str, list[Any], list[Any]]] = []  # per GPU: uuid, PIDs, MIG UUIDs
        # per GPU: the process lists the NVML child last sent whole, and the name it gave them
        # (forensics.record.live.nvml): its later summaries name them instead of repeating them
        self._nvml_refs: dict[int, tuple[str, list[Any]]] = {}
        self._nvml_t = 0.0  # the last NVML tick's time
        self.process_gen = 0  # bumped when the (PID, GPU) set changes
        self._values_gen = 0  # bumped per NVML record folded
        self._procs: tuple[int, list[tuple[int, int, str, str | None, float, int | None, float | None]]] = (-1, [])
        self._proc_index: tuple[int, dict[tuple[int, str, str | None], tuple[int, int]]] = (-1, {})
        self._proc_view: tuple[int, int, tuple[ProcessLive, ...]] = (-1, -1, ())
        self._cnames: dict[str, str] = {}  # container id -> name, until the next attribution
        self._nvml_tick: tuple[int | None, list[str | bytes]] = (None, [])  # the last tick's records (attribution)
        self._cgroups = CgroupFold(loads, self._cgroup_id)
        self._cgroups_view: tuple[int, tuple[CgroupLive, ...]] = (-1, ())
        # kept until the triggers take them; with no triggers (a metrics endpoint only) none
        # does, so only the newest are kept
        self._events: deque[LiveEvent] = deque(maxlen=self.max_events)
        self._identity: OrderedDict[str, bytes] = OrderedDict()
        self._identity_bytes = 0
        self._known_pids: set[int] = set()
        self._pid_seen: dict[int, float] = {}  # GPU PID -> when NVML last listed it (inf: listed now)
        # container id -> when Docker said it was destroyed: its docker/containers/<id>/ members
        # are dropped forget_s after (they are on record in the ring; nothing runs in it now)
        self._destroyed: dict[str, float] = {}
        self._dirty = False
        self._attr: Attribution | None = None
        self._grants: dict[tuple[int, str, str | None], tuple[OwnerInfo, Grant]] = {}
        self.refreshes = 0
        self.records_seen = 0

    # -- feeding -------------------------------------------------------------------------------
    def feed(self, t: float, mono: float, member: str, op: str, data: str | bytes,
             summary: list[Any] | None = None) -> None:
        """One record as the recorder received it (``data``: the member bytes, or decoded). ``summary``:
        what :func:`summarize` gave for each of its lines (the sampler child had them as objects:
        see :data:`SUMMARIZED`), so the record's JSON is not parsed again here; None: parse it. The
        per-tick members are not decoded unless they are parsed here (the cgroup lines are kept and
        parsed as bytes); the others, small, are."""
        self.records_seen += 1
        if member == nvml_spec.SAMPLES:
            self._nvml_samples(t, data if summary is not None else as_text(data), summary)
            return
        if member == cgroups_spec.SAMPLES:
            self._cgroup_samples(data if type(data) is bytes else as_bytes(data), summary)
            return
        data = as_text(data)
        if member == kernel_spec.WINDOW:
            self._kernel_window(t, data)
        elif member == nvml_spec.EVENTS:
            self._nvml_events(data)
        elif member == docker_spec.EVENTS:
            self._docker_events(t, data)
        elif member == procfs_spec.WINDOW:
            self._keep(member, data.encode("utf-8", "surrogateescape"), append=True)
        elif op == "write" and (member in _IDENTITY_WRITES or member.startswith(("docker/", procfs_spec.PREFIX))):
            if member == nvml_spec.DEVICES:
                self._device_names(data)
            self._keep(member, data.encode("utf-8", "surrogateescape"))

    def _keep(self, member: str, data: bytes, append: bool = False) -> None:
        old = self._identity.pop(member, None)
        if old is not None:
            self._identity_bytes -= len(old)
            if append:
                data = old + data
                if len(data) > self.max_window_bytes:  # proc/window.jsonl: the newest lines, whole
                    cut = data.find(b"\n", len(data) - self.max_window_bytes // 2)
                    data = data[cut + 1:] if cut >= 0 else b""
        self._identity[member] = data
        self._identity_bytes += len(data)
        while self._identity_bytes > self.max_identity_bytes and len(self._identity) > 1:
            _, dropped = self._identity.popitem(last=False)  # the oldest first
            self._identity_bytes -= len(dropped)
        self._dirty = True

    def _docker_events(self, record_t: float, data: str) -> None:
        """Note the containers Docker destroyed, whose members :meth:`_forget_gone` drops
        ``forget_s`` later (swept by the next attribution run: a new container's inspect, a new GPU PID)."""
        for cid in destroyed_containers(data):
            self._destroyed[cid] = record_t

    def _device_names(self, data: str) -> None:
        try:
            doc = json.loads(data)
        except ValueError:
            return
        for d in doc.get("devices", []) if isinstance(doc, dict) else []:
            if not isinstance(d, dict):
                continue
            nv: dict[str, Any] = d["nvml"] if isinstance(d.get("nvml"), dict) else {}
            uuid = d.get("uuid") or nvml_value(nv, "nvmlDeviceGetUUID")  # devices.json: under nvml
            if isinstance(uuid, str) and uuid:
                self._names[uuid] = str(nvml_value(nv, "nvmlDeviceGetName") or d.get("name") or "")

    def _nvml_samples(self, t: float, data: str | bytes, summary: list[Any] | None = None) -> None:
        """Keep each GPU's figures and its processes as the summary lists them (no object per
        process); the (PID, GPU) set is compared with the last tick's only when a GPU's process
        lists changed (a summary that names its GPU's last lists: forensics.record.live.nvml), and
        only a change costs more (new PIDs: the attribution runs again)."""
        resolved = None if summary is None else self._resolve(summary)
        if resolved is None:
            parsed = []
            for raw in as_text(data).splitlines():
                if not raw.strip():
                    continue
                try:
                    line = loads(raw)
                except ValueError:
                    continue
                got = summarize(nvml_spec.SAMPLES, line)
                if got is not None:
                    parsed.append(got)
            if summary is not None:  # the lists the child named and this parent had not: now known
                self._learn_refs(summary, parsed)
            summary, same = parsed, False
        else:
            summary, same = resolved
        tick: int | None = None
        nv: dict[int, tuple[str, float, list[Any]]] = {}
        for line_tick, idx, uuid, line_t, util, used, total, lost, procs, *_ in summary:
            tick = line_tick if type(line_tick) is int else tick
            if idx is None:
                continue
            lt = line_t or t
            was = self._gpus.get(idx)
            if lost and not (was and was.lost):
                self._events.append(LiveEvent("gpu-lost", lt, f"GPU {idx} ({uuid}) answered GpuIsLost",
                                              gpu=uuid, member=nvml_spec.SAMPLES))
            self._gpus[idx] = GpuLive(idx, uuid, self._names.get(uuid, ""), lt, util, used, total, lost)
            nv[idx] = (uuid, lt, procs)
        if tick is None:
            return
        last_tick, kept = self._nvml_tick
        old = self._nvml_gpus
        if last_tick == tick:  # more of the same tick
            self._nvml_tick = (tick, [*kept, data])
            self._nvml_gpus = {**self._nvml_gpus, **nv}
            same = False
        else:
            self._nvml_tick = (tick, [data])
            self._nvml_gpus = nv
        self._values_gen += 1
        prev_t, self._nvml_t = self._nvml_t, max((g[1] for g in self._nvml_gpus.values()), default=self._nvml_t)
        if same and nv.keys() == old.keys() and all(  # every GPU's lists the last tick's, by identity
                procs[0] is (last := old[idx])[2][0] and procs[1] is last[2][1] and uuid == last[0]
                for idx, (uuid, _, procs) in nv.items()):
            return
        ident = [(idx, uuid, procs[0], procs[1] or [None] * len(procs[0]))
                 for idx, (uuid, _, procs) in sorted(self._nvml_gpus.items())]
        if ident != self._nvml_idents:
            self._processes_changed(ident, prev_t)

    def _resolve(self, summary: list[Any]) -> tuple[list[Any], bool] | None:
        """A child's summaries with the process lists each names (``ref``) put back, and whether
        every one named its GPU's kept lists; None when one names lists not kept here (a
        restarted child, a record dropped): the record's lines are parsed instead."""
        refs = self._nvml_refs
        out = []
        same = True
        for entry in summary:
            if len(entry) < 10:  # a whole summary (forensics.record.live.summarize)
                out.append(entry)
                same = False
                continue
            idx, procs, ref = entry[1], entry[8], entry[9]
            if procs[0] is None:
                kept = refs.get(idx)
                if kept is None or kept[0] != ref:
                    return None
                lists = kept[1]
                out.append([*entry[:8], [lists[0], lists[1], lists[2], procs[3]]])
                continue
            if len(refs) >= 1024 and idx not in refs:
                refs.clear()
            refs[idx] = (ref, procs)
            out.append(entry)
            same = False
        return out, same

    def _learn_refs(self, summary: list[Any], parsed: list[Any]) -> None:
        """The lists a child named but this parent did not keep (see :meth:`_resolve`), from the
        record's own lines: its next summaries naming them are resolved again."""
        by_index = {got[1]: got[8] for got in parsed if got[1] is not None}
        for entry in summary:
            if len(entry) >= 10 and (procs := by_index.get(entry[1])) is not None:
                if len(self._nvml_refs) >= 1024 and entry[1] not in self._nvml_refs:
                    self._nvml_refs.clear()
                self._nvml_refs[entry[1]] = (entry[9], procs)

    def _processes_changed(self, ident: list[tuple[int, str, list[Any], list[Any]]], prev_t: float) -> None:
        self._nvml_idents = ident
        self.process_gen += 1
        now = {pid for _, _, pids, _ in ident for pid in pids}
        for pid, seen in self._pid_seen.items():
            if seen == math.inf and pid not in now:
                self._pid_seen[pid] = prev_t  # last listed at the tick before
        for pid in now:
            self._pid_seen[pid] = math.inf
        fresh = now - self._known_pids
        if fresh:
            self._known_pids |= fresh
            if len(self._known_pids) > 100_000:
                self._known_pids = now
            self._dirty = True

    def _cgroup_samples(self, data: bytes, summary: list[Any] | None = None) -> None:
        """Fold a record's cgroup lines (:mod:`forensics.record.live.cgroups`): a few lookups per
        line; a JSON parse only for a line whose counters changed, when no summary came."""
        if summary is None:
            self._cgroups.lines(data)
        else:
            self._cgroups.summaries(summary)

    @staticmethod
    def _cgroup_id(path: str) -> str | None:
        """A cgroup path's container id: the fold asks once per cgroup it keeps (and keeps the
        answer with it), so nothing here outlives the cgroups it forgets."""
        return attribute_path(path).container_id

    def _kernel_window(self, record_t: float, data: str) -> None:
        self._events.extend(kernel_events(record_t, data, self.container_name))

    def _nvml_events(self, data: str) -> None:
        self._events.extend(nvml_xid_events(data))

    def refresh(self, force: bool = False) -> bool:
        """Re-run the attribution if identities changed since the last run; True when it ran."""
        if not (self._dirty or force):
            return False
        self._forget_gone()
        members = dict(self._identity)
        if self._nvml_tick[1]:
            members[nvml_spec.SAMPLES] = b"".join(d if d.endswith(b"\n") else d + b"\n"
                                                  for d in map(as_bytes, self._nvml_tick[1]))
        self._attr = attribute(members, *self.psi_floors)
        self._grants = {}
        self._cnames = {}
        self._dirty = False
        self.refreshes += 1
        self._cgroups_view = (-1, ())  # container names may be known now
        return True

    def _forget_gone(self) -> None:
        """Drop the ``proc/<pid>/`` members of GPU PIDs NVML has not listed for ``forget_s``, and
        the ``docker/containers/<id>/`` members of containers destroyed ``forget_s`` ago: the
        attribution then reads what is on the GPUs now, not the whole history (the ring keeps that)."""
        now = max(self._nvml_t, max(self._destroyed.values(), default=0.0))
        ended = [cid for cid, t in self._destroyed.items() if t < now - self.forget_s]
        if ended:
            for cid in ended:
                del self._destroyed[cid]
                prefix = docker_spec.container_member(cid, "")
                for name in [m for m in self._identity if m.startswith(prefix)]:
                    self._identity_bytes -= len(self._identity.pop(name))
        gone = {pid for pid, t in self._pid_seen.items() if t < self._nvml_t - self.forget_s}
        if not gone:
            return
        for pid in gone:
            del self._pid_seen[pid]
            self._known_pids.discard(pid)
        prefix = procfs_spec.PREFIX
        for name in [m for m in self._identity if m.startswith(prefix) and m[len(prefix):].split("/", 1)[0].isdigit()
                     and int(m[len(prefix):].split("/", 1)[0]) in gone]:
            self._identity_bytes -= len(self._identity.pop(name))

    @property
    def dirty(self) -> bool:
        return self._dirty

    def _owner_grant(self, pid: int, uuid: str, mig: str | None) -> tuple[OwnerInfo, Grant]:
        key = (pid, uuid, mig)
        hit = self._grants.get(key)
        if hit is not None:
            return hit
        if self._attr is None:
            return UNKNOWN_OWNER, NO_GRANT
        owner = self._attr.owner(pid)
        if owner.kind == "container" and not owner.pod_name:
            ns, name = self._pod_labels(owner.container_id)
            if name:
                owner = OwnerInfo(owner.kind, owner.container_id, owner.container_name, ns, name, owner.attributed)
        hit = (owner, self._attr.grant(pid, uuid, mig))
        if len(self._grants) > 100_000:
            self._grants.clear()
        self._grants[key] = hit
        return hit

    def _pod_labels(self, cid: str) -> tuple[str, str]:
        """The kubelet's labels on a Docker container (``io.kubernetes.pod.namespace``/``name``)."""
        raw = self._identity.get(f"docker/containers/{cid}/inspect.json")
        try:
            labels = (json.loads(raw) or {}).get("Config", {}).get("Labels") or {} if raw else {}
        except (ValueError, AttributeError):
            return "", ""
        if not isinstance(labels, dict):
            return "", ""
        return str(labels.get("io.kubernetes.pod.namespace") or ""), str(labels.get("io.kubernetes.pod.name") or "")

    def container_name(self, cid: str | None) -> str:
        """A container's name as docker inspect gives it (empty when not known yet)."""
        if not cid:
            return ""
        hit = self._cnames.get(cid)
        if hit is not None:
            return hit
        if len(self._cnames) > 50_000:
            self._cnames.clear()
        self._cnames[cid] = name = self._container_name(cid)
        return name

    def container_identity(self, cid: str) -> tuple[str, str, str, str, str]:
        """A container's name, image and kubelet labels (pod namespace, pod name, container name)
        from its docker inspect (empty where not known): what survives its restarts
        (forensics.record.baselines keys a workload's baseline by them)."""
        raw = self._identity.get(f"docker/containers/{cid}/inspect.json")
        try:
            config = (json.loads(raw) or {}).get("Config") or {} if raw else {}
            labels = config.get("Labels") or {}
            image = config.get("Image") or ""
        except (ValueError, AttributeError):
            labels, image = {}, ""
        if not isinstance(labels, dict):
            labels = {}
        return (self.container_name(cid), str(image), str(labels.get("io.kubernetes.pod.namespace") or ""),
                str(labels.get("io.kubernetes.pod.name") or ""), str(labels.get("io.kubernetes.container.name") or ""))

    def _container_name(self, cid: str) -> str:
        if self._attr is not None:
            c = self._attr.model.container("live", cid)
            if c is not None:
                return c.name
        raw = self._identity.get(f"docker/containers/{cid}/inspect.json")
        try:
            name = json.loads(raw).get("Name") if raw else None
        except (ValueError, AttributeError):
            name = None
        return name.lstrip("/") if isinstance(name, str) else ""

    # -- reading -------------------------------------------------------------------------------
    def gpus(self) -> tuple[GpuLive, ...]:
        return tuple(self._gpus[i] for i in sorted(self._gpus))

    def processes(self) -> tuple[ProcessLive, ...]:
        """Every (PID, GPU) of the last NVML tick with its owner and grant (derived on demand, once
        per tick and per attribution)."""
        gen, refreshes, view = self._proc_view
        if gen == self._values_gen and refreshes == self.refreshes:
            return view
        view = tuple(ProcessLive(pid, idx, uuid, mig, t, used, sm, *self._owner_grant(pid, uuid, mig))
                     for pid, idx, uuid, mig, t, used, sm in self.process_rows())
        self._proc_view = (self._values_gen, self.refreshes, view)
        return view

    def cgroups(self) -> tuple[CgroupLive, ...]:
        """Every cgroup sampled twice or more, by path (derived on demand, once per change)."""
        self._cgroups.fold()
        gen, view = self._cgroups_view
        if gen == self._cgroups.gen:
            return view
        view = tuple(CgroupLive(path, cid, self.container_name(cid) if cid else "", t, throttled, psi_dict(psi))
                     for path, cid, t, throttled, psi in self._cgroups.rows())
        self._cgroups_view = (self._cgroups.gen, view)
        return view

    def cgroup_rows(self) -> tuple[Row, ...]:
        """:meth:`cgroups` as plain rows, ``(path, container id, t, throttled %, PSI %)`` with the
        PSI shares in :data:`PSI_KEYS` order (None where not known; ``()`` without PSI), by path."""
        return self._cgroups.rows()

    def take_cgroup_rows(self) -> tuple[list[FreshRow], float, tuple[float, float, tuple[float | None, ...]] | None]:
        """The cgroups read since the last call, each with its shares over the whole interval
        since its reading then, ``(path, container id, from, t, throttled %, PSI %)`` (what the
        triggers compare when they look, not every cgroup); the newest cgroup reading's time (the
        cgroup sampler's clock: a cgroup whose last reading is older was silent since); and the
        host's PSI shares over the interval since the last call, ``(from, t, shares)`` in
        :data:`PSI_KEYS` order (None: nothing to compare). See forensics.record.live.cgroups."""
        rows, host = self._cgroups.take_fresh()
        return rows, self._cgroups.clock, host

    def cgroup_clock(self) -> float:
        """The newest cgroup line's time, folded or not (no parse: when to look)."""
        return self._cgroups.newest

    def process_rows(self) -> list[tuple[int, int, str, str | None, float, int | None, float | None]]:
        """The last NVML tick's (PID, GPU index, GPU UUID, MIG UUID, t, used memory, SM %), as
        :meth:`processes` lists them, without their owners and grants (see :meth:`owner_grant`)."""
        gen, rows = self._procs
        if gen != self._values_gen:
            rows = []
            for idx, (uuid, t, procs) in sorted(self._nvml_gpus.items()):
                rows += [(pid, idx, uuid, mig, t, used, None if sm is None else float(sm))
                         for pid, mig, used, sm in zip(procs[0], procs[1] or [None] * len(procs[0]), procs[2],
                                                       procs[3], strict=True)]
            self._procs = (self._values_gen, rows)
        return rows

    def process_keys(self) -> list[tuple[int, int, str, str | None]]:
        """The last NVML tick's (PID, GPU index, GPU UUID, MIG UUID); they change when
        :attr:`process_gen` does."""
        return [(pid, idx, uuid, mig) for idx, uuid, pids, migs in self._nvml_idents for pid, mig in zip(pids, migs, strict=True)]

    def process_figures(self, pid: int, uuid: str, mig: str | None) -> tuple[float, int | None, float | None] | None:
        """``(t, used memory, SM %)`` of a process of the last NVML tick (None: not listed)."""
        gen, index = self._proc_index
        if gen != self.process_gen:
            index = {(pid_, uuid_, mig_): (idx, n) for idx, uuid_, pids, migs in self._nvml_idents
                     for n, (pid_, mig_) in enumerate(zip(pids, migs, strict=True))}
            self._proc_index = (self.process_gen, index)
        at = index.get((pid, uuid, mig))
        if at is None:
            return None
        _, t, procs = self._nvml_gpus[at[0]]
        sm = procs[3][at[1]]
        return t, procs[2][at[1]], None if sm is None else float(sm)

    def owner_grant(self, pid: int, uuid: str, mig: str | None) -> tuple[OwnerInfo, Grant]:
        """A GPU process's owner and grant, as :meth:`processes` gives them (cached per attribution)."""
        return self._owner_grant(pid, uuid, mig)

    def host_psi(self) -> dict[str, dict[str, float]]:
        """PSI stall share (%) of the host over the last interval (``/proc/pressure``)."""
        return self._cgroups.host_psi()

    def take_events(self) -> list[LiveEvent]:
        out = list(self._events)
        self._events.clear()
        return out


