"""``cgroups``: CPU throttling, memory limits and OOM counters, PIDs, block IO and pressure of every container
and pod cgroup (and the host root), on cgroup v1, v2 and hybrid hosts; sampled per tick.

Sources: ``/proc/self/mountinfo`` (where each hierarchy is mounted) or, with
``--set cgroups.root=DIR`` / ``GPUFORENSICS_CGROUP_ROOT=DIR`` (a capture pod with the host's tree
mounted there), the hierarchies under ``DIR`` (see :mod:`forensics.hostfs.cgroupns`, which
also resolves namespace-relative ``/../..`` paths to host paths); the cgroup interface files
under ``/sys/fs/cgroup/<path>`` (v2) and ``/sys/fs/cgroup/<controller>/<path>`` (v1):
v2 ``cpu.stat cpu.max cpu.weight memory.current memory.max memory.high memory.peak
memory.events memory.events.local memory.stat memory.oom.group pids.current pids.max cpu.pressure
memory.pressure io.pressure io.stat io.max cgroup.procs``; v1 ``cpu.stat cpu.cfs_quota_us cpu.cfs_period_us
cpu.shares cpuacct.usage cpuacct.stat memory.usage_in_bytes memory.limit_in_bytes
memory.max_usage_in_bytes memory.failcnt memory.oom_control memory.stat cgroup.procs pids.current
pids.max blkio.throttle.{io_service_bytes,io_serviced,read_bps_device,write_bps_device,
read_iops_device,write_iops_device} blkio[.bfq].{io_service_bytes,io_serviced}``; host ``/proc/pressure/{cpu,memory,io}``.

Which cgroups: ``ctx.hint("cgroup_paths")`` (from procfs and docker) plus each one's pod cgroup,
or, when no collector published any, our own scan of ``/proc/*/cgroup``; and ``/``.
Members: verbatim files ``cgroup/<hierarchy>/<path>/<file>``, ``cgroup/host/pressure/<res>``,
the derived ``cgroup/index.json`` and, when sampling, ``cgroup/samples.jsonl`` (one line per
cgroup per tick, each file read once per tick; in the recorder, a cgroup whose CPU and OOM
counters did not move gets no line that tick: :meth:`CgroupsCollector.sample`). See
docs/bundle-format/host-evidence.md and docs/bundle-format/cgroups.md.

Why this module is long: planning (which cgroups, which files on which hierarchy) and the per-tick
reader share the plan's targets, their kept descriptors and the bytes behind each one's last line;
the recorder's quiet check (one pread per activity file, compared with those bytes) and the full
read it stands in for must stay side by side, so that a gated line is the ungated reader's line
byte for byte (tests/unit/collectors/test_cgroup_quiet_check.py). Parsing is in forensics/parsing;
the quiet check's reads and comparisons, all cgroups' at once, in hostfs/probes.py.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from forensics.bundle.sink import dumps_json
from forensics.collect.context import CollectContext, Tick
from forensics.errors import ParseError, SourceUnavailable
from forensics.hostfs.cgroupns import NamespaceResolver, make_resolver
from forensics.hostfs.files import MAYBE_MORE, KeptFiles, describe_os_error, read_small
from forensics.hostfs.mounts import cgroup_dir, mountinfo_mounts, resolver_mounts
from forensics.hostfs.probes import Probe, ProbeBatch
from forensics.hostfs.proc import attributed_paths, scan_proc_cgroups
from forensics.parsing.attribution import attribute_path, relative_to
from forensics.parsing.cgroup_files import file_values as interpret
from forensics.parsing.cgroup_mounts import CgroupMount, cgroup_layout
from forensics.specs.cgroups import INDEX, SAMPLES, SPEC, cgroup_member, host_member
from forensics.specs.hints import CGROUP_PATHS

__all__ = ["COLLECTOR", "CgroupsCollector", "interpret"]  # interpret: cgroup_files.file_values

# (file, read on every tick?)
V2_FILES: tuple[tuple[str, bool], ...] = (
    ("cpu.stat", True), ("cpu.max", False), ("cpu.weight", False),
    ("memory.current", True), ("memory.max", False), ("memory.high", False),
    ("memory.peak", False), ("memory.events", True), ("memory.events.local", False),
    ("memory.stat", False), ("memory.oom.group", False), ("memory.swap.current", False),
    ("pids.current", True), ("pids.max", False),
    ("cpu.pressure", True), ("memory.pressure", True), ("io.pressure", True),
    ("io.stat", True), ("io.max", False),
    ("cgroup.procs", False),
)
V1_FILES: dict[str, tuple[tuple[str, bool], ...]] = {
    "cpu": (("cpu.stat", True), ("cpu.cfs_quota_us", False), ("cpu.cfs_period_us", False),
            ("cpu.shares", False)),
    "cpuacct": (("cpuacct.usage", True), ("cpuacct.stat", False)),
    "memory": (("memory.usage_in_bytes", True), ("memory.limit_in_bytes", False),
               ("memory.max_usage_in_bytes", False), ("memory.failcnt", True),
               ("memory.oom_control", True), ("memory.stat", False), ("cgroup.procs", False)),
    "pids": (("pids.current", True), ("pids.max", False)),
    # the throttle files count every bio the cgroup issued; the CFQ/BFQ ones (where that
    # scheduler runs) are kept verbatim for the reader
    "blkio": (("blkio.throttle.io_service_bytes", True), ("blkio.throttle.io_serviced", True),
              ("blkio.throttle.read_bps_device", False), ("blkio.throttle.write_bps_device", False),
              ("blkio.throttle.read_iops_device", False), ("blkio.throttle.write_iops_device", False),
              ("blkio.io_service_bytes", False), ("blkio.io_serviced", False),
              ("blkio.bfq.io_service_bytes", False), ("blkio.bfq.io_serviced", False)),
}
HOST_PRESSURE = ("cpu", "memory", "io")
#: read every tick by activity gating: CPU usage and throttling, and what proves an OOM kill
#: (docs/bundle-format/cgroups.md: what may move without them)
ACTIVITY_FILES = frozenset({"cpu.stat", "cpuacct.usage", "memory.events", "memory.oom_control"})
_SAFE_SEGMENT = re.compile(r"[^A-Za-z0-9._@:+=,-]")


def _merge(values: dict[str, Any], section: str, update: dict[str, Any]) -> None:
    # Files of one section never share a nested key (pressure: one resource per file), so a
    # shallow update is enough.
    target = values.get(section)
    if target is None:
        values[section] = dict(update)  # a copy: ``update`` may be a memoised parse
    else:
        target.update(update)


@dataclass(frozen=True)
class Hierarchy:
    """A mounted hierarchy we read: its member name, version and the files to read there."""

    name: str
    version: int
    mount: CgroupMount
    files: tuple[tuple[str, bool], ...]


def hierarchies(mounts: Iterable[CgroupMount]) -> list[Hierarchy]:
    """The hierarchies worth reading: v2, and v1 cpu, cpuacct, memory, pids (even co-mounted)."""
    found: list[Hierarchy] = []
    for mount in mounts:
        if mount.version == 2:
            found.append(Hierarchy("unified", 2, mount, V2_FILES))
            continue
        files: list[tuple[str, bool]] = []
        for controller in mount.controllers:
            files.extend(V1_FILES.get(controller, ()))
        if files:
            name = _SAFE_SEGMENT.sub("_", ",".join(mount.controllers))
            # a co-mounted hierarchy may list cgroup.procs twice: keep one
            unique = tuple(dict.fromkeys(files))
            found.append(Hierarchy(name, 1, mount, unique))
    return found


def member_path(path: str) -> str | None:
    """Bundle-safe form of a cgroup path (segments sanitised); None for ``..`` paths."""
    segments = [s for s in path.split("/") if s]
    if any(s in (".", "..") for s in segments):
        return None
    return "/".join(_SAFE_SEGMENT.sub("_", s) for s in segments)


def pod_ancestor(path: str) -> str | None:
    """The pod-level cgroup above a container path (``.../kubepods-...-pod<uid>.slice``)."""
    attribution = attribute_path(path)
    if attribution.kind != "container" or not attribution.pod_uid:
        return None
    segments = path.split("/")
    for index in range(len(segments) - 1, 0, -1):
        candidate = "/".join(segments[:index]) or "/"
        if candidate != path and attribute_path(candidate).kind == "pod":
            return candidate
    return None


def _json_time(value: float) -> str:
    """``dumps_json(value, indent=None)`` of a tick's time, in a fifth of its time: a finite float is
    written by json as its repr (the JSON encoder's own rule), the rest goes through dumps_json."""
    if type(value) is float and value - value == 0.0:  # finite (inf - inf and nan - nan are nan)
        return repr(value)
    return dumps_json(value, indent=None)


#: what a read through a kept descriptor asks for: a file no longer than half a page is read whole,
#: a longer answer says only that the file is long (it is read again through KeptFiles), so asking
#: for more (64 KiB, a buffer allocated and shrunk per read) would change nothing
_WHOLE_OR_MORE = MAYBE_MORE + 1

#: what the quiet check asks for beyond an activity file's last bytes: a counter that grew a few
#: digits is read whole at once, and its read serves the cgroup's line
_PROBE_SLACK = 64


def _probe(fds: list[int | None], behind: list[bytes | None]) -> Probe | None:
    """The quiet check of a gated cgroup whose line was just made of ``behind`` (its activity files'
    bytes, read through the kept descriptors ``fds``); None where one is not kept or not whole."""
    probe = []
    for fd, data in zip(fds, behind, strict=True):
        if fd is None or data is None:
            return None
        size = len(data) + _PROBE_SLACK
        if size > MAYBE_MORE:
            return None
        probe.append((fd, data, size))
    return tuple(probe)


@dataclass
class _Target:
    path: str
    member: str
    namespace_path: str | None = None  # as read, when ``path`` was resolved from it
    files: list[tuple[str, int, str, str, bool]] = field(default_factory=list)  # (hierarchy name,
    # version, file, absolute path, per tick); sampling: each per-tick file's kept descriptor once
    # read whole in one pread (None: not kept, or read through KeptFiles), the line's start
    fds: list[int | None] = field(default_factory=list)
    line_start: str = ""
    gate: tuple[int, ...] = ()  # gated: the indices of the activity files in ``files``
    unparsed: frozenset[int] = frozenset()  # read for gating only, not in the line's values
    # gated, once its last line read every activity file whole through a kept descriptor: those
    # descriptors with the bytes behind that line and the size to ask for (the quiet check's one
    # pread each, all cgroups' in one CgroupsCollector._batch keyed by the target's place in the
    # plan); None: the general path checks (a descriptor not kept, a long file, no line yet)
    probe: Probe | None = None
    quiet: list[Any] = field(default_factory=list)  # with a probe: its CgroupsCollector._quiet entry


class CgroupsCollector:
    """``cgroups``: snapshot of every container cgroup and the host root, then per-tick counters."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 30.0

    def __init__(self, mountinfo_path: str = "/proc/self/mountinfo",
                 pressure_root: str = "/proc/pressure", proc_root: str = "/proc",
                 cgroup_root: str | None = None) -> None:
        self.mountinfo_path = mountinfo_path
        self.pressure_root = pressure_root
        self.proc_root = proc_root
        # the host cgroup tree to read instead of the mountinfo mounts (None: the option
        # ``cgroups.root``, then GPUFORENSICS_CGROUP_ROOT, then mountinfo)
        self.cgroup_root = cgroup_root
        self._plan: list[_Target] | None = None
        self._files = KeptFiles()
        # per cgroup: the bytes read at the previous tick and the values JSON made from them
        self._previous: dict[str, tuple[list[bytes | None], str]] = {}
        # per file: the bytes read at the previous tick and their parse
        self._parsed: dict[str, tuple[bytes, tuple[str, dict[str, Any]] | None]] = {}
        self.activity_gating = False  # the recorder's: see sample()
        self._idle_full_s = 0.0
        self._last_tick: float | None = None
        # gated cgroup -> [monotonic time of its last line, its activity files' bytes then, wall
        # time of the last tick that found them unchanged (None: none since)]
        self._quiet: dict[str, list[Any]] = {}
        self._replanned: dict[str, list[Any]] = {}  # the last plan's files per cgroup (replan())
        self._batch = ProbeBatch()  # the quiet check of every target with a probe, by plan place

    # -- discovery ---------------------------------------------------------------------------
    def _mounts(self) -> tuple[CgroupMount, ...]:
        try:
            return mountinfo_mounts(self.mountinfo_path)
        except OSError as error:
            raise SourceUnavailable(f"{self.mountinfo_path}: {describe_os_error(error)}") from None
        except ParseError as error:
            raise SourceUnavailable(f"cannot read cgroup mounts: {error}") from None

    def _target_paths(self, ctx: CollectContext, resolver: NamespaceResolver | None
                      ) -> tuple[list[str], str, dict[str, str], list[dict[str, Any]]]:
        """Target paths (host paths where resolved), where they came from, the namespace path of
        each resolved target (and of the pod cgroup above it), and one record per resolution.

        A hinted path names no hierarchy, so a relative one is resolved against the primary
        hierarchy's namespace root (v2, else memory, cpu, pids) and the host path is then read in
        every hierarchy, as an absolute hint is."""
        paths: list[str] = ["/"]
        hinted = [p for p in CGROUP_PATHS.read(ctx) if p.startswith("/")]
        source = "hints"
        if not hinted:
            source = "scan of /proc/*/cgroup"
            for entry in scan_proc_cgroups(self.proc_root):
                if entry.attribution.kind in ("container", "pod"):
                    hinted.extend(attributed_paths(entry))
        namespace: dict[str, str] = {}
        resolutions: list[dict[str, Any]] = []
        seen: set[str] = set()
        for path in hinted:
            host: str | None = path
            if resolver is not None and member_path(path) is None:
                host, why = resolver.resolve(None, path)
                if path not in seen:
                    seen.add(path)
                    resolutions.append({"namespace_path": path, "path": host}
                                       if host is not None else
                                       {"namespace_path": path, "path": None, "error": why})
            if host is None:
                host = path  # kept as read: skipped below and reported
            elif host != path:
                namespace.setdefault(host, path)
            ancestor = pod_ancestor(host)
            if ancestor is not None and host in namespace and resolver is not None:
                root = resolver.own(resolver.primary or "").namespace_root
                if root is not None:
                    namespace.setdefault(ancestor, relative_to(root, ancestor))
            for candidate in (ancestor, host):
                if candidate is not None and candidate not in paths:
                    paths.append(candidate)
        return paths, source, namespace, resolutions

    def _build_plan(self, ctx: CollectContext) -> tuple[list[_Target], dict[str, Any]]:
        resolver = make_resolver(ctx, self.proc_root, self.cgroup_root)
        if resolver is not None:
            if resolver.error is not None:
                raise SourceUnavailable(f"cgroup root from {resolver.origin}: {resolver.error}")
            mounts = resolver_mounts(resolver)
        else:
            mounts = self._mounts()
        found = hierarchies(mounts)
        if resolver is not None and resolver.primary is not None:
            resolver.own(resolver.primary)  # recorded even when no path needs it
        paths, source, namespace, resolutions = self._target_paths(ctx, resolver)
        cap = SPEC.read_settings(ctx.options.extra).max_cgroups
        if len(paths) > cap:
            ctx.partial(f"{len(paths)} cgroups found; only the first {cap} are read")
            paths = paths[:cap]
        plan: list[_Target] = []
        skipped: list[dict[str, str]] = []
        for path in paths:
            member = member_path(path)
            if member is None:
                reason = "relative to a private cgroup namespace"
                if resolver is not None:
                    reason += "; not resolved (see cgroup_namespace.resolved)"
                skipped.append({"path": path, "reason": reason})
                continue
            target = _Target(path, member, namespace.get(path))
            for hierarchy in found:
                directory = cgroup_dir(hierarchy.mount, path)
                if directory is None or not os.path.isdir(directory):
                    continue
                for file, per_tick in hierarchy.files:
                    target.files.append((hierarchy.name, hierarchy.version, file,
                                         f"{directory}/{file}", per_tick))
            if path == "/":
                for resource in HOST_PRESSURE:
                    target.files.append(("host", 0, f"pressure/{resource}",
                                         f"{self.pressure_root}/{resource}", True))
            plan.append(target)
        unresolved = sum(1 for r in resolutions if r["path"] is None)
        if unresolved:
            ctx.partial(f"{unresolved} namespace-relative cgroup paths not resolved to host paths")
        info: dict[str, Any] = {
            "layout": cgroup_layout(mounts),
            "mounts": [{"mount_point": m.mount_point, "version": m.version,
                        "controllers": list(m.controllers), "root": m.root} for m in mounts],
            "hierarchies_read": [h.name for h in found],
            "targets_from": source,
            "hierarchies_from": resolver.origin if resolver is not None else "mountinfo",
            "skipped": skipped,
        }
        if resolver is not None:
            info["cgroup_namespace"] = {**resolver.to_json(), "resolved": resolutions}
        return plan, info

    # -- snapshot ----------------------------------------------------------------------------
    def snapshot(self, ctx: CollectContext) -> None:
        """Read every file of every target once; store verbatim files and parsed values."""
        plan, info = self._build_plan(ctx)
        cgroups: list[dict[str, Any]] = []
        denied = 0
        for target in plan:
            if ctx.remaining() < 2.0:
                ctx.partial("deadline near: later cgroups not read")
                break
            values: dict[str, Any] = {}
            files: dict[str, dict[str, str]] = {}
            for hierarchy, version, file, absolute, _ in target.files:
                key = f"{hierarchy}/{file}"
                member = host_member(file) if version == 0 else cgroup_member(hierarchy, target.member, file)
                try:
                    data = read_small(absolute)
                except OSError as error:
                    reason = describe_os_error(error)
                    denied += reason.startswith("permission denied")
                    files[key] = {"error": reason}
                    continue
                ctx.sink.write_bytes(member, data)
                files[key] = {"member": member}
                try:
                    parsed = interpret(version, file, data.decode("utf-8", "replace"))
                except ParseError as error:
                    files[key]["parse_error"] = str(error)
                    continue
                if parsed is not None:
                    _merge(values, *parsed)
            attribution = attribute_path(target.path)
            record: dict[str, Any] = {"path": target.path}
            if target.namespace_path is not None:
                record["namespace_path"] = target.namespace_path
            cgroups.append({
                **record,
                "attribution": attribution.to_json(),
                "present": any(f[0] != "host" for f in target.files) or target.path == "/",
                "files": files,
                "values": values,
            })
        if denied:
            ctx.partial(f"permission denied on {denied} cgroup files")
        info["cgroups"] = cgroups
        info["tick_files"] = sorted({f"{h}/{f}" for t in plan for h, _, f, _, tick in t.files
                                     if tick})
        ctx.sink.write_json(INDEX, info)
        ctx.note(f"{len(cgroups)} cgroups ({info['layout']} layout, targets from "
                 f"{info['targets_from']})")

    # -- sampling ----------------------------------------------------------------------------
    def _start_sampling(self, ctx: CollectContext) -> list[_Target]:
        plan, _ = self._build_plan(ctx)
        gating, kept = self.activity_gating, self._files.descriptor
        for target in plan:  # files absent now are absent for the whole window (a kept one was there)
            files = [f for f in target.files if f[4] and (kept(f[3]) is not None or os.path.exists(f[3]))]
            if any(f[0] == "unified" and f[2] == "cpu.stat" for f in files):
                # hybrid: the unified cpu.stat carries usage: cpuacct.usage is skipped, or read by
                # gating as an activity counter only (the tasks may be in either hierarchy)
                usage = frozenset(i for i, f in enumerate(files) if f[2] == "cpuacct.usage")
                files, target.unparsed = ((files, usage) if gating else
                                          ([f for i, f in enumerate(files) if i not in usage], frozenset()))
            target.files = files
            target.fds = [None] * len(files)
            target.line_start = f'{{"cgroup": {dumps_json(target.path, indent=None)}, '
            gate = tuple(i for i, f in enumerate(files) if f[2] in ACTIVITY_FILES)
            # gated where a CPU usage counter says whether its tasks ran; never the host root
            if gating and target.path != "/" and any(f[2] == "cpuacct.usage" or (f[2] == "cpu.stat" and f[1] == 2)
                                                     for f in (files[i] for i in gate)):
                target.gate = gate
        self._idle_full_s = SPEC.read_settings(ctx.options.extra).idle_full_s
        # a quiet state holds one text per activity file: kept only where the cgroup has as many now
        # (a controller enabled since, a cgroup made again with others: read in full, not compared)
        self._quiet = {t.path: self._quiet[t.path] for t in plan
                       if t.path in self._quiet and len(self._quiet[t.path][1]) == len(t.gate)}
        for target in plan:
            target.quiet = self._quiet.get(target.path, []) if target.gate else []
        # what is planned again keeps its descriptors and its previous line (same files only)
        self._files.keep_only({f[3] for t in plan for f in t.files})
        self._parsed = {f[3]: self._parsed[f[3]] for t in plan for f in t.files if f[3] in self._parsed}
        self._previous = {t.path: self._previous[t.path] for t in plan
                          if t.path in self._previous and self._replanned.get(t.path) == t.files}
        self._replanned = {}
        self._batch = ProbeBatch()  # the new plan's targets have no probe yet
        self._files.reserve(sum(len(t.files) for t in plan) + 64)
        return plan

    def sample(self, ctx: CollectContext, tick: Tick) -> None:
        """One tick: read each per-tick file of each cgroup once (kept-open descriptors, pread)
        and append one line per cgroup to ``cgroup/samples.jsonl``.

        With :attr:`activity_gating` (the recorder's), a cgroup whose :data:`ACTIVITY_FILES` read
        as for its last line, younger than ``cgroups.idle_full_s``, gets no other read and no line;
        its next line has ``"unchanged_until"``: the last tick that read them unchanged."""
        plan = self._plan
        if plan is None:
            plan = self._plan = self._start_sampling(ctx)
        now = time.monotonic()
        # read in full now if waiting for the next tick (an interval on, or as late as the last one
        # came) would put a cgroup's lines further apart than idle_full_s
        step = max(now - self._last_tick if self._last_tick is not None else 0.0, ctx.options.interval_s)
        self._last_tick = now
        bound = self._idle_full_s - 1.25 * step
        quiets = self._quiet
        lines: list[str] = []
        head = f'"t": {_json_time(tick.time_unix)}, "tick": {tick.index}, ' \
               f'"time": {dumps_json(tick.time_iso, indent=None)}, "values": '
        kept, descriptor, pread = self._files.read, self._files.descriptor, os.pread
        wall = tick.time_unix
        # the common quiet check, every probed cgroup's at once: each activity file once, asked for
        # a little more than its bytes behind the last line (a shorter answer is the whole file)
        moved = self._batch.read() if self._batch else {}
        set_probe = self._batch.set
        for position, target in enumerate(plan):  # (the common tick: one bare pread per file on a kept descriptor)
            probe, read_now, unchanged = target.probe, None, False
            if probe is not None:
                if position in moved:
                    read_now = moved[position]  # None: a read failed (the read of every file below says why)
                elif now - target.quiet[0] <= bound:  # as they were for the cgroup's last line: no other read, no line
                    target.quiet[2] = wall
                    continue
                else:  # due for its full line: what the check read (the bytes behind) serves it
                    read_now, unchanged = [p[1] for p in probe], True
            fds, files, gate = target.fds, target.files, target.gate
            datas: list[bytes | None] = [None] * len(fds)
            quiet = quiets.get(target.path) if gate else None
            if read_now is not None and probe is not None:  # what the quiet check read serves the line
                for j, data in enumerate(read_now):
                    if len(data) < probe[j][2]:
                        datas[gate[j]] = data
            elif probe is None and quiet is not None and now - quiet[0] <= bound:  # gated: the activity files first
                try:
                    for i, was in zip(gate, quiet[1], strict=True):
                        fd = fds[i]
                        if fd is None:
                            data = kept(files[i][3])
                            fds[i] = descriptor(files[i][3]) if len(data) <= MAYBE_MORE else None
                        else:
                            data = pread(fd, 65536, 0)
                        if len(data) <= MAYBE_MORE:
                            datas[i] = data  # not read again below
                        if data != was:
                            break
                    else:  # as they were for the cgroup's last line: no other read, no line
                        quiet[2] = wall
                        target.probe = _probe([fds[i] for i in gate], quiet[1])  # (after a re-plan)
                        set_probe(position, target.probe)
                        continue
                except OSError:
                    pass  # the read of every file below says why
            errors: dict[str, str] = {}
            for index, fd in enumerate(fds):
                if datas[index] is not None:
                    continue
                if fd is not None:
                    try:
                        data = pread(fd, _WHOLE_OR_MORE, 0)
                    except OSError:
                        fds[index] = None  # KeptFiles.read below says why (and closes it)
                    else:
                        if len(data) <= MAYBE_MORE:  # no longer than half a page: the whole file
                            datas[index] = data
                            continue
                        fds[index] = None
                hierarchy, _, file, absolute, _ = files[index]
                try:
                    data = kept(absolute)
                except OSError as error:
                    errors[f"{hierarchy}/{file}"] = describe_os_error(error)
                    continue
                datas[index] = data
                if len(data) <= MAYBE_MORE:
                    fds[index] = descriptor(absolute)
            start = target.line_start
            if gate:
                if quiet is not None and quiet[2] is not None:
                    start += f'"unchanged_until": {_json_time(quiet[2])}, '
                behind = [datas[i] for i in gate]
                quiets[target.path] = target.quiet = [now, behind, None]
                if not unchanged:  # (unchanged: the same descriptors and bytes, the same probe)
                    target.probe = _probe([fds[i] for i in gate], behind)
                    set_probe(position, target.probe)
            lines.append(self._line(target, datas, errors, start, head))
        if lines:
            ctx.sink.append_bytes(SAMPLES, ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))

    def _line(self, target: _Target, datas: list[bytes | None], errors: dict[str, str], start: str,
              head: str) -> str:
        """The samples line of a cgroup whose files were all read (``errors``: those that failed)."""
        unparsed = target.unparsed  # made of: not a hybrid's cpuacct.usage (read for gating only)
        made_of = datas if not unparsed else [d for i, d in enumerate(datas) if i not in unparsed]
        previous = self._previous.get(target.path)
        if not errors and previous is not None and previous[0] == made_of:
            values_json = previous[1]  # every file read now, byte-identical to last tick
        else:
            values: dict[str, Any] = {}
            for index, ((hierarchy, version, file, absolute, _), read_now) in enumerate(
                    zip(target.files, datas, strict=True)):
                if read_now is None or index in unparsed:
                    continue
                memo = self._parsed.get(absolute)
                if memo is not None and memo[0] == read_now:
                    parsed = memo[1]  # same bytes as last tick: same parse
                else:
                    try:
                        parsed = interpret(version, file, read_now.decode("utf-8", "replace"), True)
                    except ParseError as error:
                        errors[f"{hierarchy}/{file}"] = f"parse error: {error}"
                        continue
                    self._parsed[absolute] = (read_now, parsed)
                if parsed is not None:
                    _merge(values, *parsed)
            values_json = dumps_json(values, indent=None)
            if errors:  # not reused: a file that failed to parse fails again, and says so, next tick
                self._previous.pop(target.path, None)
            else:
                self._previous[target.path] = (made_of, values_json)
        if errors:
            start += f'"errors": {dumps_json(errors, indent=None)}, '
        return f"{start}{head}{values_json}}}"

    def replan(self, ctx: CollectContext) -> None:
        """The next tick plans again (the recorder's, on new or gone containers); the kept
        descriptors, parses and gating state of the cgroups planned again are kept, the others go."""
        if self._plan is not None:
            self._replanned = {t.path: t.files for t in self._plan}
        self._plan = None

    def end_sampling(self, ctx: CollectContext) -> None:
        self._files.close()  # and forget what gating knew
        self._previous.clear()
        self._parsed.clear()
        self._plan = None
        self._quiet.clear()
        self._batch.clear()
        self._last_tick = None


COLLECTOR = CgroupsCollector()
